"""`python -m tbt_tracking.read_back`: what the trackers hold for a campaign, as JSON (tests and the demo check).

MLflow through its client API, W&B through its own reader of the run's local `.wandb` logs.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from . import wandb_sink


def mlflow_histories(tracking_uri: str, experiment: str, campaign_id: str) -> dict[str, Any]:
    from mlflow.tracking import MlflowClient

    from .mlflow_sink import CAMPAIGN_TAG

    client = MlflowClient(tracking_uri=tracking_uri)
    found = client.get_experiment_by_name(experiment)
    if not found:
        return {}
    runs = client.search_runs([found.experiment_id], filter_string=f"tags.`{CAMPAIGN_TAG}` = '{campaign_id}'")
    if not runs:
        return {}
    run = runs[0]
    return {
        "run_id": run.info.run_id,
        "runs": len(runs),
        "params": run.data.params,
        "metrics": {
            key: [
                [m.step, m.value] for m in sorted(client.get_metric_history(run.info.run_id, key), key=lambda m: m.step)
            ]
            for key in sorted(run.data.metrics)
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--campaign", required=True)
    parser.add_argument("--mlflow-uri")
    parser.add_argument("--mlflow-experiment", default="thinkingbox-temporal")
    parser.add_argument("--wandb-dir")
    args = parser.parse_args()
    out: dict[str, Any] = {}
    if args.mlflow_uri:
        out["mlflow"] = mlflow_histories(args.mlflow_uri, args.mlflow_experiment, args.campaign)
    if args.wandb_dir:
        run_id = wandb_sink.campaign_run_id(args.campaign)
        out["wandb"] = {
            "run_id": run_id,
            "files": len(wandb_sink.run_log_files(args.wandb_dir, run_id)),
            "history": wandb_sink.history_rows(args.wandb_dir, run_id),
        }
    print(json.dumps(out))


if __name__ == "__main__":
    main()
