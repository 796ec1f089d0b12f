"""Test-only fault points, switched on by the TBT_LEARNER_TEST_HOOKS environment variable (JSON).

    {"micro_batch_sleep_s": 0.2}      sleep before every micro-batch (makes steps long enough to cancel)
    {"pause_before_commit": 2}        before step 2's checkpoint is renamed into place, write
                                      <checkpoint dir>/paused-before-commit-2 and sleep (to be killed)
    {"disk_full_saves": 2}            the first 2 checkpoint saves fail after writing their shards, as DCP
                                      reports a full volume (CheckpointException of OSError ENOSPC)

Unset in production; reading it is the only effect when unset.
"""

from __future__ import annotations

import errno
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


_failed_saves = 0


def disk_full_after_write() -> None:
    global _failed_saves
    limit = _hooks().get("disk_full_saves")
    if isinstance(limit, int) and _failed_saves < limit:
        _failed_saves += 1
        import traceback

        from torch.distributed.checkpoint.api import CheckpointException

        full = OSError(errno.ENOSPC, "No space left on device (test hook)")
        raise CheckpointException("write", {0: (full, traceback.StackSummary())})
