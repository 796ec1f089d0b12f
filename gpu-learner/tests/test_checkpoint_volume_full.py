"""Which failed checkpoint saves count as a full volume (HTTP 507, the campaign pauses naming the folder) and which
are ordinary failures (HTTP 500, retried)."""

from __future__ import annotations

import errno
import pathlib
import traceback

import pytest
from torch.distributed.checkpoint.api import CheckpointException

from tbt_gpu.learner import checkpoint
from tbt_gpu.learner.checkpoint import LOW_SPACE_BYTES, volume_full, volume_full_reason

# What a real ENOSPC inside DCP's torch.save looked like on this machine (the disk full in a demo run).
ZIP_WRITER = RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 704 vs 598")


def dcp_failure(*errors: BaseException) -> CheckpointException:
    return CheckpointException("write", {rank: (e, traceback.StackSummary()) for rank, e in enumerate(errors)})


@pytest.fixture
def free(monkeypatch: pytest.MonkeyPatch):
    left = {"bytes": 10 * 2**30}
    monkeypatch.setattr(checkpoint, "free_bytes", lambda folder: left["bytes"])
    return left


def test_enospc_is_full_whatever_the_space(tmp_path: pathlib.Path, free) -> None:
    err = dcp_failure(OSError(errno.ENOSPC, "No space left on device"))
    assert volume_full(err, 1, tmp_path)
    assert volume_full_reason(err, tmp_path) == "[Errno 28] No space left on device"


def test_zip_writer_error_on_an_all_but_full_volume_is_full(tmp_path: pathlib.Path, free) -> None:
    free["bytes"] = 972 * 1024
    err = dcp_failure(ZIP_WRITER)
    assert volume_full(err, 1, tmp_path)
    reason = volume_full_reason(err, tmp_path)
    assert reason.startswith("0 MiB free after the save failed: [enforce fail") and "\n" not in reason, reason


def test_zip_writer_error_with_space_left_is_an_ordinary_failure(tmp_path: pathlib.Path, free) -> None:
    free["bytes"] = LOW_SPACE_BYTES + 1
    assert not volume_full(dcp_failure(ZIP_WRITER), 1, tmp_path)
    assert not volume_full(ValueError("a bug"), 1, tmp_path)


def test_ranks_agree_through_one_all_reduce(tmp_path: pathlib.Path, free, monkeypatch: pytest.MonkeyPatch) -> None:
    """With several ranks each one's low-space flag goes through any_rank (every rank holds the same DCP failure),
    and a rank's own plain error is never judged full: the other ranks would not be in the same except clause."""
    seen: list[tuple[bool, ...]] = []
    monkeypatch.setattr(checkpoint, "any_rank", lambda *flags: (seen.append(flags), [True])[1])
    assert volume_full(dcp_failure(ZIP_WRITER, ZIP_WRITER), 8, tmp_path)
    assert seen == [(False,)], "the local flag (10 GiB free) is reduced, and another rank's low volume wins"
    free["bytes"] = 0
    assert not volume_full(OSError(errno.ENOSPC, "No space left on device"), 8, tmp_path)
    assert len(seen) == 1
