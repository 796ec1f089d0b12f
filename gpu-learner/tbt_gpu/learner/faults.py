"""Test-only fault points, switched on by the TBT_LEARNER_TEST_HOOKS environment variable (JSON).

    {"micro_batch_sleep_s": 0.2}      sleep before every micro-batch (makes steps long enough to cancel)
    {"pause_before_commit": 2}        before step 2's checkpoint is renamed into place, write
                                      <checkpoint dir>/paused-before-commit-2 and sleep (to be killed)

Unset in production; reading it is the only effect when unset.
"""

from __future__ import annotations

import functools
import json
import os
import pathlib
import time

ENV = "TBT_LEARNER_TEST_HOOKS"


@functools.cache
def _hooks() -> dict[str, object]:
    raw = os.environ.get(ENV)
    if not raw:
        return {}
    value = json.loads(raw)
    if not isinstance(value, dict):
        raise ValueError(f"{ENV}: must be a JSON object")
    return value


def micro_batch_delay() -> None:
    seconds = _hooks().get("micro_batch_sleep_s")
    if isinstance(seconds, (int, float)) and seconds > 0:
        time.sleep(float(seconds))


def pause_before_commit(step: int, checkpoint_dir: pathlib.Path) -> None:
    if _hooks().get("pause_before_commit") == step:
        (checkpoint_dir / f"paused-before-commit-{step}").write_text(str(os.getpid()), encoding="utf-8")
        time.sleep(3600)
