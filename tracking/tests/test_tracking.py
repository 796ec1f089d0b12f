"""The sinks through the real clients: a temporary MLflow SQLite store and a W&B offline run folder.

Run with `python -m unittest discover tracking/tests` in the tracking venv (.tools/tracking-venv).
"""

from __future__ import annotations

import tempfile
import unittest
from pathlib import Path

from mlflow.tracking import MlflowClient

from tbt_tracking import mlflow_sink, wandb_sink
from tbt_tracking.request import Entry, MlflowTarget, RequestError, WandbTarget, parse_request


class SinksTest(unittest.TestCase):
    def setUp(self) -> None:
        self.tmp = tempfile.TemporaryDirectory()
        self.addCleanup(self.tmp.cleanup)
        self.dir = self.tmp.name

    def test_mlflow_logs_each_step_once_with_the_manifest_as_params(self) -> None:
        target = MlflowTarget(f"sqlite:///{Path(self.dir, 'mlflow.db')}", "exp")
        params = {"config.seed": "42"}
        for step, reward in ((1, 0.25), (2, 0.5)):
            out = mlflow_sink.log_entry(target, "camp", params, Entry("step", step, {"train/mean_reward": reward}))
            self.assertEqual(out["logged"], 1)
        again = mlflow_sink.log_entry(target, "camp", params, Entry("step", 2, {"train/mean_reward": 0.5}))
        self.assertEqual((again["logged"], again["skipped"]), (0, 1))
        client = MlflowClient(tracking_uri=target.tracking_uri)
        history = client.get_metric_history(str(again["run_id"]), "train/mean_reward")
        self.assertEqual(sorted((m.step, m.value) for m in history), [(1, 0.25), (2, 0.5)])
        self.assertEqual(client.get_run(str(again["run_id"])).data.params, params)

    def test_wandb_offline_resumes_one_run_and_skips_logged_steps(self) -> None:
        target = WandbTarget("proj", None, self.dir, "offline")
        wandb_sink.log_entry(target, "camp", {}, Entry("step", 1, {"train/loss": 1.5}))
        again = wandb_sink.log_entry(target, "camp", {}, Entry("step", 1, {"train/loss": 1.5}))
        self.assertEqual(again["logged"], 0)
        run_id = wandb_sink.campaign_run_id("camp")
        self.assertEqual(len(wandb_sink.run_log_files(self.dir, run_id)), 1)
        rows = wandb_sink.history_rows(self.dir, run_id)
        self.assertEqual([(r["train/step"], r["train/loss"]) for r in rows], [(1, 1.5)])

    def test_a_bad_request_names_its_field(self) -> None:
        with self.assertRaisesRegex(RequestError, "entry.kind"):
            parse_request({"campaign_id": "c", "params": {}, "entry": {"kind": "x", "step": 1, "metrics": {}}})


def tearDownModule() -> None:
    # Ends the W&B service here: its exit hook fails on unittest's boolean exit code (wandb 0.31).
    import wandb

    wandb.teardown()


if __name__ == "__main__":
    unittest.main()
