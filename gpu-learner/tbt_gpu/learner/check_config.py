"""Validate a learner config read as JSON on stdin; print every field with its default filled in.

The dataclasses in config.py are the only owner of the learner's fields, defaults and bounds. `tbt train`
(dry run included) calls this before it starts anything, so a value only the learner would reject is bad
input at the command line with its field named, not a learner start failure retried by Temporal.
Prints one JSON object: {"config": {...}} (exit 0) or {"error": "section.field: message"} (exit 2).
No torch import at module level: this runs on machines without it. Where torch is installed and the model folder
is here, LoRA targets are checked against the model's layers too (shapes only, from its config), and shared
prompts against its layer types.
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
import sys

from .config import LearnerConfig
from .model_family import share_prompts_refusal


def _check_lora_targets(model_path: str, targets: list[str]) -> None:
    """A target no linear layer has is bad input here, not a learner that fails to start (retried as infra)."""
    if not (pathlib.Path(model_path) / "config.json").is_file():
        return  # the model lives on the learner's machines; the learner checks it when it loads
    try:
        from ..lora_adapter import target_shapes
    except ImportError:
        return
    target_shapes(model_path, targets)


def _check_share_prompts(model_path: str) -> None:
    """Shared prompts on a model whose layers ignore a 4-D mask would train on mixed episodes: refused here."""
    config_file = pathlib.Path(model_path) / "config.json"
    if not config_file.is_file():
        return  # the learner checks it when it loads the model
    refusal = share_prompts_refusal(model_path, json.loads(config_file.read_text(encoding="utf-8")))
    if refusal:
        raise ValueError(refusal)


def main() -> int:
    try:
        cfg = LearnerConfig.from_dict(json.load(sys.stdin))
        if cfg.lora.enabled:
            _check_lora_targets(cfg.model.path, cfg.lora.targets)
        if cfg.train.share_prompts:
            _check_share_prompts(cfg.model.path)
    except (ValueError, TypeError) as err:  # json.JSONDecodeError is a ValueError
        print(json.dumps({"error": str(err)}))
        return 2
    resolved = dataclasses.asdict(cfg)
    resolved["optimizer"]["betas"] = list(cfg.optimizer.betas)
    print(json.dumps({"config": resolved}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
