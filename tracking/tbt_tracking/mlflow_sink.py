"""MLflow: one run per campaign (found by its tag), params from the manifest, metrics logged once per step."""

from __future__ import annotations

import time

from mlflow.entities import Metric, Param
from mlflow.tracking import MlflowClient

from .request import Entry, MlflowTarget

CAMPAIGN_TAG = "tbt.campaign_id"
# MLflow's limits per log_batch call.
_PARAMS_PER_BATCH = 100
_METRICS_PER_BATCH = 1000


def campaign_run_id(client: MlflowClient, experiment: str, campaign_id: str, params: dict[str, str]) -> str:
    """The campaign's run: found by its tag, or created with the manifest as its params."""
    found = client.get_experiment_by_name(experiment)
    experiment_id = found.experiment_id if found else client.create_experiment(experiment)
    runs = client.search_runs([experiment_id], filter_string=f"tags.`{CAMPAIGN_TAG}` = '{campaign_id}'", max_results=1)
    if runs:
        return runs[0].info.run_id
    run = client.create_run(experiment_id, run_name=campaign_id, tags={CAMPAIGN_TAG: campaign_id})
    items = [Param(k, v) for k, v in params.items()]
    for i in range(0, len(items), _PARAMS_PER_BATCH):
        client.log_batch(run.info.run_id, params=items[i : i + _PARAMS_PER_BATCH])
    return run.info.run_id


def log_entry(target: MlflowTarget, campaign_id: str, params: dict[str, str], entry: Entry) -> dict[str, object]:
    """Logs the entry's metrics that this run does not hold at that step yet (a repeat logs nothing)."""
    client = MlflowClient(tracking_uri=target.tracking_uri)
    run_id = campaign_run_id(client, target.experiment, campaign_id, params)
    missing = [
        key
        for key in sorted(entry.metrics)
        if not any(m.step == entry.step for m in client.get_metric_history(run_id, key))
    ]
    now = int(time.time() * 1000)
    items = [Metric(key, entry.metrics[key], now, entry.step) for key in missing]
    for i in range(0, len(items), _METRICS_PER_BATCH):
        client.log_batch(run_id, metrics=items[i : i + _METRICS_PER_BATCH])
    return {"run_id": run_id, "logged": len(items), "skipped": len(entry.metrics) - len(items)}
