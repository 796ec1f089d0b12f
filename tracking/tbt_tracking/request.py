"""The one JSON request a `python -m tbt_tracking` call reads on stdin (campaign-records/experiment-tracking.ts)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Literal


class RequestError(ValueError):
    """A malformed request: a bug in the caller, never retried."""


@dataclass(frozen=True)
class Entry:
    """What to log: one training step's metrics, or one evaluation's (at the number of steps trained)."""

    kind: Literal["step", "evaluation"]
    step: int
    metrics: dict[str, float]

    @property
    def step_metric(self) -> str:
        # W&B's x axis of this kind's metrics, and the key its logged steps are found by.
        return "train/step" if self.kind == "step" else "eval/step"


@dataclass(frozen=True)
class MlflowTarget:
    tracking_uri: str
    experiment: str


@dataclass(frozen=True)
class WandbTarget:
    project: str
    entity: str | None
    dir: str
    mode: Literal["auto", "offline", "online"]


@dataclass(frozen=True)
class Request:
    campaign_id: str
    params: dict[str, str]
    entry: Entry
    mlflow: MlflowTarget | None
    wandb: WandbTarget | None


def _need(obj: dict[str, Any], key: str, kind: type | tuple[type, ...]) -> Any:
    value = obj.get(key)
    if not isinstance(value, kind):
        raise RequestError(f"request field {key!r}: expected {kind}, got {type(value).__name__}")
    return value


def _mlflow_uri(mlflow: dict[str, Any]) -> str:
    """The configured URI, else MLFLOW_TRACKING_URI (read here, at call time), else the local default store."""
    return mlflow.get("tracking_uri") or os.environ.get("MLFLOW_TRACKING_URI") or _need(mlflow, "default_uri", str)


def parse_request(raw: dict[str, Any]) -> Request:
    entry = _need(raw, "entry", dict)
    kind = _need(entry, "kind", str)
    if kind not in ("step", "evaluation"):
        raise RequestError(f"request field 'entry.kind': {kind!r} is neither step nor evaluation")
    metrics = {str(k): float(v) for k, v in _need(entry, "metrics", dict).items() if isinstance(v, int | float)}
    mlflow = raw.get("mlflow")
    wandb = raw.get("wandb")
    return Request(
        campaign_id=_need(raw, "campaign_id", str),
        params={str(k): str(v) for k, v in _need(raw, "params", dict).items()},
        entry=Entry(kind=kind, step=int(_need(entry, "step", int)), metrics=metrics),
        mlflow=MlflowTarget(_mlflow_uri(mlflow), _need(mlflow, "experiment", str)) if mlflow else None,
        wandb=WandbTarget(
            project=_need(wandb, "project", str),
            entity=wandb.get("entity") or None,
            dir=_need(wandb, "dir", str),
            mode=_need(wandb, "mode", str),
        )
        if wandb
        else None,
    )
