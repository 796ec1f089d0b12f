"""Issue 40: a step asked again says whether it was offered the batch it trained (and which one it trained)."""

from __future__ import annotations

import json
import pathlib
from types import SimpleNamespace

from learner_support import Learner, make_tiny_model, random_batch, write_config

from tbt_gpu.learner.control import offered_batch_check
from tbt_gpu.learner.trainer import TrainerState, batch_ids_sha256


def ids_of(batch: pathlib.Path) -> list[str]:
    return sorted(json.loads(line)["trajectory_id"] for line in batch.read_text().splitlines() if line.strip())


def test_repeated_step_compares_the_offered_batch_and_never_trains_again(tmp_path: pathlib.Path) -> None:
    model = make_tiny_model(tmp_path / "model")
    b1 = random_batch(tmp_path / "b1.jsonl", seed=1)
    b2 = random_batch(tmp_path / "b2.jsonl", seed=2, count=8)
    garbled = tmp_path / "garbled.jsonl"
    garbled.write_text("{not json\n")
    ckpt = tmp_path / "ckpt"
    config = write_config(tmp_path / "learner.json", model=model, checkpoint_dir=ckpt)
    train = lambda step, path: ("POST", "/train_step", {"step_id": step, "batch_ref": str(path)})  # noqa: E731

    learner = Learner(config, ckpt)
    try:
        status, first = learner.call(*train(1, b1))
        assert status == 200 and first["repeated"] is False and "batch_matches" not in first, first
        assert "batch_ids" not in first["result"], "the ids travel only in a mismatch's answer"
        manifest_mtime = (ckpt / "step-1" / "manifest.json").stat().st_mtime_ns

        status, same = learner.call(*train(1, b1))
        assert status == 200 and same["repeated"] is True and same["batch_matches"] is True, same
        assert "trained_batch_ids" not in same and same["result"] == first["result"]

        # A re-run that drew other episodes offers another batch: answered with what was trained, not trained.
        status, other = learner.call(*train(1, b2))
        assert status == 200 and other["repeated"] is True and other["batch_matches"] is False, other
        assert other["trained_batch_ids"] == ids_of(b1) and other["result"] == first["result"]

        # An offered batch that cannot be read still gets the step's answer.
        for unreadable in (tmp_path / "missing.jsonl", garbled):
            status, unknown = learner.call(*train(1, unreadable))
            assert status == 200 and unknown["repeated"] is True and unknown["batch_matches"] is None, unknown

        assert learner.call("GET", "/health")[1]["step"] == 1
        assert (ckpt / "step-1" / "manifest.json").stat().st_mtime_ns == manifest_mtime, "step 1 was saved again"
        state = json.loads((ckpt / "step-1" / "trainer_state.json").read_text())
        assert state["trajectories_seen"] == len(ids_of(b1)), "step 1 was trained more than once"
        assert state["ledger"]["1"]["batch_ids"] == ids_of(b1)

        status, second = learner.call(*train(2, b2))
        assert status == 200 and second["repeated"] is False, second
        state = json.loads((ckpt / "step-2" / "trainer_state.json").read_text())
        # Only the last step can be asked again: only its entry keeps the ids.
        assert "batch_ids" not in state["ledger"]["1"] and state["ledger"]["2"]["batch_ids"] == ids_of(b2)
    finally:
        code = learner.stop()
    assert code == 0, learner.output()


def test_retry_of_an_unsaved_step_compares_the_batch_too(tmp_path: pathlib.Path) -> None:
    """A step whose checkpoint did not fit is only saved by its retry, whatever batch the retry offers."""
    model = make_tiny_model(tmp_path / "model")
    b1 = random_batch(tmp_path / "b1.jsonl", seed=1)
    b2 = random_batch(tmp_path / "b2.jsonl", seed=2, count=8)
    ckpt = tmp_path / "ckpt"
    config = write_config(tmp_path / "learner.json", model=model, checkpoint_dir=ckpt)
    learner = Learner(config, ckpt, hooks={"disk_full_saves": 1})
    try:
        status, full = learner.call("POST", "/train_step", {"step_id": 1, "batch_ref": str(b1)})
        assert status == 507 and full["code"] == "disk_full", full
        status, saved = learner.call("POST", "/train_step", {"step_id": 1, "batch_ref": str(b2)})
        assert status == 200 and saved["repeated"] is False and saved["batch_matches"] is False, saved
        assert saved["trained_batch_ids"] == ids_of(b1)
        state = json.loads((ckpt / "step-1" / "trainer_state.json").read_text())
        assert state["trajectories_seen"] == len(ids_of(b1))
    finally:
        code = learner.stop()
    assert code == 0, learner.output()


def test_ledger_saved_before_the_ids_were_kept() -> None:
    """Older checkpoints load; their entries hold the hash only, so a mismatch comes without the trained ids."""
    state = TrainerState.from_json(
        {
            "last_step": 1,
            "ledger": {"1": {"loss": 0.5, "batch_ids_sha256": "0" * 64}},
            "trajectories_seen": 6,
            "tokens_seen": 60,
        }
    )
    assert offered_batch_check(1, state.ledger[1], lambda: _batch(["a", "b"])) == {"batch_matches": False}
    # Older still: no hash at all, nothing to compare with.
    assert offered_batch_check(1, {"loss": 0.5}, lambda: _batch(["a"])) == {"batch_matches": None}
    # Equal ids in any order match: the hash is over sorted ids.
    entry = {"batch_ids_sha256": batch_ids_sha256(_batch(["b", "a"])), "batch_ids": ["a", "b"]}
    assert offered_batch_check(1, entry, lambda: _batch(["a", "b"])) == {"batch_matches": True}
    assert offered_batch_check(1, entry, lambda: _batch(["a", "c"])) == {
        "batch_matches": False,
        "trained_batch_ids": ["a", "b"],
    }


def _batch(ids: list[str]) -> SimpleNamespace:
    """Just what the id hash reads of a batch."""
    return SimpleNamespace(trajectories=[SimpleNamespace(trajectory_id=i) for i in ids])
