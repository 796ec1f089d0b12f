"""Validate a learner config read as JSON on stdin; print every field with its default filled in.

The dataclasses in config.py are the only owner of the learner's fields, defaults and bounds. `tbt train`
(dry run included) calls this before it starts anything, so a value only the learner would reject is bad
input at the command line with its field named, not a learner start failure retried by Temporal.
Prints one JSON object: {"config": {...}} (exit 0) or {"error": "section.field: message"} (exit 2).
No torch import: this runs on machines without it.
"""

from __future__ import annotations

import dataclasses
import json
import sys

from .config import LearnerConfig


def main() -> int:
    try:
        cfg = LearnerConfig.from_dict(json.load(sys.stdin))
    except (ValueError, TypeError) as err:  # json.JSONDecodeError is a ValueError
        print(json.dumps({"error": str(err)}))
        return 2
    resolved = dataclasses.asdict(cfg)
    resolved["optimizer"]["betas"] = list(cfg.optimizer.betas)
    print(json.dumps({"config": resolved}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
