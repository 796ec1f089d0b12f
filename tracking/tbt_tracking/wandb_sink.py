"""W&B: one run per campaign (its id derived from the campaign id), resumed by every call, each step logged once.

Offline unless a key is configured: `mode: auto` goes online only when WANDB_API_KEY is set (read by the client
at call time, never passed or logged by us). Steps already logged are found in the run's local transaction logs
(`run-<id>.wandb`, read with W&B's own reader, `wandb leet inspect --json`) and, online, in the resumed run's
summary; a repeat logs nothing.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

from .request import Entry, WandbTarget


def campaign_run_id(campaign_id: str) -> str:
    """A W&B run id (letters, digits, - and _; at most 64) that only this campaign maps to."""
    digest = hashlib.sha256(campaign_id.encode()).hexdigest()[:10]
    return f"{re.sub(r'[^A-Za-z0-9_-]', '-', campaign_id)[:50]}-{digest}"


def run_log_files(wandb_dir: str, run_id: str) -> list[Path]:
    """Every local transaction log of the run: one per resumed call (offline-run-* or run-* folders)."""
    return sorted(Path(wandb_dir, "wandb").glob(f"*run-*-{run_id}/run-{run_id}.wandb"))


def read_run_log(file: Path) -> list[dict[str, Any]]:
    """The records of one `.wandb` file as W&B's own reader prints them (one JSON object per record)."""
    wandb_cli = Path(sys.executable).parent / "wandb"
    out = subprocess.run(
        [str(wandb_cli), "leet", "inspect", str(file), "--json"],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,  # a hung reader must not hold the bookkeeping activity to its own timeout
    ).stdout
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


def history_rows(wandb_dir: str, run_id: str) -> list[dict[str, Any]]:
    """Every history row the run's local transaction logs hold, oldest first."""
    return [
        record["history"]["item"]
        for file in run_log_files(wandb_dir, run_id)
        for record in read_run_log(file)
        if record.get("type") == "history"
    ]


def _mode(target: WandbTarget) -> str:
    if target.mode != "auto":
        return target.mode
    return "online" if os.environ.get("WANDB_API_KEY") else "offline"


def log_entry(target: WandbTarget, campaign_id: str, params: dict[str, str], entry: Entry) -> dict[str, object]:
    run_id = campaign_run_id(campaign_id)
    logged = {row.get(entry.step_metric) for row in history_rows(target.dir, run_id)}
    if entry.step in logged:
        return {"run_id": run_id, "logged": 0, "skipped": len(entry.metrics)}
    import wandb  # imported here: it takes about a second and a repeat does not need it

    mode = _mode(target)
    run = wandb.init(
        project=target.project,
        entity=target.entity,
        id=run_id,
        name=campaign_id,
        resume="allow",
        dir=target.dir,
        mode=mode,  # type: ignore[arg-type]
        config=params,
        settings=wandb.Settings(silent=True, console="off", x_disable_stats=True),
    )
    try:
        # Online, a resumed run's summary holds the last value of each step metric (logs of other hosts included).
        last = run.summary.get(entry.step_metric) if mode == "online" else None
        if isinstance(last, int | float) and entry.step <= last:
            return {"run_id": run_id, "logged": 0, "skipped": len(entry.metrics)}
        run.define_metric(entry.step_metric)
        run.define_metric(f"{entry.step_metric.split('/')[0]}/*", step_metric=entry.step_metric)
        run.log({entry.step_metric: entry.step, **entry.metrics})
    finally:
        run.finish()
    return {"run_id": run_id, "logged": len(entry.metrics), "skipped": 0, "mode": mode}
