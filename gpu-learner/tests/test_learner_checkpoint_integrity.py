"""Checkpoint integrity in one process: who verifies which file, manifests written before ranks were recorded,
and a rejected checkpoint that must not block the step from being saved again."""

from __future__ import annotations

import collections
import json
import pathlib

import pytest
from learner_support import build_trainer, random_batch

from tbt_gpu.learner import checkpoint
from tbt_gpu.learner.checkpoint import MANIFEST, verifier_ranks, verify


def test_verifier_ranks_put_the_big_shards_on_distinct_ranks() -> None:
    files = {f"__{r}_0.distcp": {"size": 1000 + r} for r in range(6)}
    files |= {".metadata": {"size": 10}, "trainer_state.json": {"size": 20}, "rng-rank0.pt": {"size": 5}}
    assigned = verifier_ranks(files, 4)
    assert assigned == verifier_ranks(dict(reversed(list(files.items()))), 4)  # the order of the manifest is moot
    assert assigned.keys() == files.keys() and set(assigned.values()) == {0, 1, 2, 3}
    largest = sorted(files, key=lambda n: -files[n]["size"])[:4]
    assert sorted(assigned[name] for name in largest) == [0, 1, 2, 3]
    per_rank = [sum(files[n]["size"] for n, r in assigned.items() if r == rank) for rank in range(4)]
    assert max(per_rank) <= 2 * 1005 + 20, per_rank  # no rank hashes more than two shards' worth
    assert set(verifier_ranks(files, 1).values()) == {0}


def test_manifest_records_the_writer_and_older_manifests_still_load(
    tmp_path: pathlib.Path, tiny_model, monkeypatch: pytest.MonkeyPatch
) -> None:
    trainer, ckpt = build_trainer(tmp_path, tiny_model, checkpoint={"io_threads": 3})
    trainer.train_step(1, trainer.load_batch(str(random_batch(tmp_path / "b1.jsonl", seed=1))))
    hashed: collections.Counter[str] = collections.Counter()
    real_sha256 = checkpoint._sha256
    monkeypatch.setattr(checkpoint, "_sha256", lambda path: hashed.update([path.name]) or real_sha256(path))
    folder = ckpt.save()
    monkeypatch.undo()
    manifest = json.loads((folder / MANIFEST).read_text(encoding="utf-8"))
    # Every file hashed exactly once at save (DCP reports one write result per tensor, many per file).
    assert hashed == collections.Counter(manifest["files"].keys()), hashed
    assert {meta["rank"] for meta in manifest["files"].values()} == {0}
    shards = sorted(name for name in manifest["files"] if name.endswith(".distcp"))
    assert len(shards) > 1 and all(name.startswith("__0_") for name in shards), shards  # io_threads: 3 buckets
    assert verify(folder, checksums=True, threads=2)["step"] == 1
    # A manifest from before this change (same format 1, no "rank") verifies and loads as before.
    for meta in manifest["files"].values():
        del meta["rank"]
    (folder / MANIFEST).write_text(json.dumps(manifest), encoding="utf-8")
    _, fresh = build_trainer(tmp_path, tiny_model)
    assert fresh.load_latest() == 1


def test_a_rejected_checkpoint_is_set_aside_and_the_step_saves_again(tmp_path: pathlib.Path, tiny_model) -> None:
    trainer, ckpt = build_trainer(tmp_path, tiny_model)
    b1 = trainer.load_batch(str(random_batch(tmp_path / "b1.jsonl", seed=1)))
    b2 = trainer.load_batch(str(random_batch(tmp_path / "b2.jsonl", seed=2)))
    trainer.train_step(1, b1)
    ckpt.save()
    trainer.train_step(2, b2)
    step2 = ckpt.save()
    shard = next(step2.glob("*.distcp"))
    data = bytearray(shard.read_bytes())
    data[len(data) // 3] ^= 0x01
    shard.write_bytes(bytes(data))

    again, again_ckpt = build_trainer(tmp_path, tiny_model)
    assert again_ckpt.load_latest() == 1
    assert (tmp_path / "ckpt" / "step-2.rejected").is_dir() and not step2.exists()
    assert again_ckpt.committed_steps() == [1]
    again.train_step(2, b2)
    assert again_ckpt.save() == step2 and verify(step2, checksums=True)["parent_step"] == 1
    # The rejected copy stays while its step is among the keep_last (2) kept, then goes with it.
    again.train_step(3, b1)
    again_ckpt.save()
    assert (tmp_path / "ckpt" / "step-2.rejected").is_dir()
    again.train_step(4, b2)
    again_ckpt.save()
    assert again_ckpt.committed_steps() == [3, 4] and not (tmp_path / "ckpt" / "step-2.rejected").exists()
