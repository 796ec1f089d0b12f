"""A checkpoint written by 4 gloo ranks resumes on 2 ranks with the exact AdamW state, and its integrity is
checked without one rank reading everything.

The 4-rank learner applies step 1, then continues with step 2 itself; a copy of its step-1 checkpoint is resumed
by a 2-rank learner that applies the same step 2. With lr 1e-2 and Adam's second step depending on the first
step's moments, lost or mis-sharded moments would move the weights by about lr, far outside the tolerance.
A copy of the 4-rank step 2, with one byte flipped in a file that rank 1 of the 2-rank world verifies, must be
rejected (set aside as step-2.rejected) on the strength of that rank's check alone.
"""

from __future__ import annotations

import json
import pathlib
import shutil

import pytest
from learner_support import Learner, make_tiny_model, max_abs_diff, random_batch, read_export, write_config

from tbt_gpu.learner.checkpoint import MANIFEST, verifier_ranks


def _train(learner: Learner, step: int, batch: pathlib.Path) -> dict:
    status, answer = learner.call("POST", "/train_step", {"step_id": step, "batch_ref": str(batch)}, timeout=300)
    assert status == 200 and answer["repeated"] is False, answer
    return answer


def _export(learner: Learner, step: int) -> dict:
    status, answer = learner.call("POST", "/export", {"step_id": step}, timeout=300)
    assert status == 200, answer
    return read_export(pathlib.Path(answer["path"]))


def test_four_rank_checkpoint_resumes_on_two_ranks_exactly(tmp_path: pathlib.Path) -> None:
    model = make_tiny_model(tmp_path / "model")
    b1 = random_batch(tmp_path / "b1.jsonl", seed=1, count=12)
    b2 = random_batch(tmp_path / "b2.jsonl", seed=2, count=12, with_old=True)
    four_dir, two_dir = tmp_path / "ckpt4", tmp_path / "ckpt2"
    # io_threads 2: every rank writes (and hashes) two shard files, so 8 shards are resharded onto 2 ranks.
    sections = {"train": {"micro_batch_tokens": 64}, "checkpoint": {"io_threads": 2}}
    four_cfg = write_config(tmp_path / "four.json", model=model, checkpoint_dir=four_dir, **sections)
    two_cfg = write_config(tmp_path / "two.json", model=model, checkpoint_dir=two_dir, **sections)

    four = Learner(four_cfg, four_dir, nproc=4)
    try:
        _train(four, 1, b1)
        w1 = _export(four, 1)
        shutil.copytree(four_dir / "step-1", two_dir / "step-1")
        continued = _train(four, 2, b2)
        w4 = _export(four, 2)
        shutil.copytree(four_dir / "step-2", two_dir / "step-2")
    finally:
        assert four.stop() == 0, four.output()

    manifest = json.loads((four_dir / "step-1" / MANIFEST).read_text(encoding="utf-8"))
    assert manifest["world_size"] == 4
    files = manifest["files"]
    shards = {name: meta["rank"] for name, meta in files.items() if name.endswith(".distcp")}
    assert len(shards) == 8 and all(name.startswith(f"__{rank}_") for name, rank in shards.items()), shards
    assert {files[f"rng-rank{r}.pt"]["rank"] for r in range(4)} == {0, 1, 2, 3}
    assert files[".metadata"]["rank"] == 0 and files["trainer_state.json"]["rank"] == 0

    # Corrupt (same size) the largest file that rank 1 of the 2-rank world checks: only rank 1 can notice.
    bad_manifest = json.loads((two_dir / "step-2" / MANIFEST).read_text(encoding="utf-8"))
    assigned = verifier_ranks(bad_manifest["files"], 2)
    victim = next(name for name, rank in assigned.items() if rank == 1 and name.endswith(".distcp"))
    data = bytearray((two_dir / "step-2" / victim).read_bytes())
    data[len(data) // 2] ^= 0xFF
    (two_dir / "step-2" / victim).write_bytes(bytes(data))

    two = Learner(two_cfg, two_dir, nproc=2, resume=True)
    try:
        status, health = two.call("GET", "/health")
        assert status == 200 and health["world_size"] == 2 and health["step"] == 1, health
        resumed = _train(two, 2, b2)
        w2 = _export(two, 2)
    finally:
        assert two.stop() == 0, two.output()
    log = two.output()
    assert f"{victim} fails its sha256 check" in log, log
    assert "saved by 4 ranks, this learner has 2" in log, log
    assert (two_dir / "step-2.rejected").is_dir() and (two_dir / "step-2").is_dir()
    assert json.loads((two_dir / "step-2" / MANIFEST).read_text(encoding="utf-8"))["world_size"] == 2

    for key in ("loss", "grad_norm", "tokens", "clip_fraction"):
        assert resumed["result"][key] == pytest.approx(continued["result"][key], rel=1e-5, abs=1e-7), key
    moved = max_abs_diff(w4, w1)
    assert moved > 1e-3, moved  # step 2 did move the weights (lr 1e-2)
    assert max_abs_diff(w2, w4) < 1e-5, (max_abs_diff(w2, w4), moved)
