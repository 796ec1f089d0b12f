"""The learner service over HTTP: exactly-once steps across a kill -9, idempotent repeats, refusals, cancel."""

from __future__ import annotations

import concurrent.futures
import json
import pathlib
import time

from learner_support import Learner, make_tiny_model, max_abs_diff, random_batch, read_export, write_config

from tbt_gpu.learner.config import LearnerConfig
from tbt_gpu.learner.distributed import init_distributed
from tbt_gpu.learner.trainer import Trainer


def wait_for(predicate, timeout: float = 30.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise TimeoutError(what)


def test_steps_apply_exactly_once_across_kill_and_resume(tmp_path: pathlib.Path) -> None:
    model = make_tiny_model(tmp_path / "model")
    b1 = random_batch(tmp_path / "b1.jsonl", seed=1)
    b2 = random_batch(tmp_path / "b2.jsonl", seed=2, count=8)
    bad = tmp_path / "bad.jsonl"
    lines = b1.read_text().splitlines()
    broken = json.loads(lines[1])
    broken["loss_mask"] = broken["loss_mask"][:-1]
    bad.write_text("\n".join([lines[0], json.dumps(broken), *lines[2:]]) + "\n")
    ckpt = tmp_path / "ckpt"
    config = write_config(tmp_path / "learner.json", model=model, checkpoint_dir=ckpt, train={"micro_batch_tokens": 48})
    train = lambda step, path: ("POST", "/train_step", {"step_id": step, "batch_ref": str(path)})  # noqa: E731

    hooks = {"micro_batch_sleep_s": 0.3, "pause_before_commit": 2}
    learner = Learner(config, ckpt, hooks=hooks)
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=2)
    try:
        status, first = learner.call(*train(1, b1))
        assert status == 200 and first["repeated"] is False and first["result"]["skipped"] is False, first
        manifest_mtime = (ckpt / "step-1" / "manifest.json").stat().st_mtime_ns

        # A finished step again: the stored result, nothing rewritten.
        status, again = learner.call(*train(1, b1))
        assert status == 200 and again["repeated"] is True and again["result"] == first["result"]
        assert (ckpt / "step-1" / "manifest.json").stat().st_mtime_ns == manifest_mtime

        status, refused = learner.call(*train(3, b1))
        assert status == 409 and refused == {
            "error": "step 3 refused: last applied step is 1, expected 2", "code": "out_of_order",
        }  # fmt: skip

        status, malformed = learner.call(*train(2, bad))
        assert status == 400 and malformed["code"] == "bad_batch"
        assert malformed["error"].startswith(f"{bad}:2: field 'loss_mask': must be a list as long as input_ids")

        # Cancel a running step at a micro-batch boundary: nothing is applied.
        running = pool.submit(learner.call, *train(2, b2))
        wait_for(lambda: learner.call("GET", "/health")[1]["busy"] == 2, what="step 2 running")
        # Progress moves with the micro-batches (0.3 s each here), so a stalled one is visible from outside.
        wait_for(lambda: learner.call("GET", "/health")[1]["progress"]["micro_batch"] >= 2, what="micro-batch 2")
        progress = learner.call("GET", "/health")[1]["progress"]
        assert progress["step"] == 2 and progress["phase"] == "update" and progress["of"] >= progress["micro_batch"]
        assert progress["seconds_since_change"] < 5, progress
        status, cancelling = learner.call("POST", "/cancel", {})
        assert status == 200 and cancelling["cancelling"] == 2
        status, cancelled = running.result(timeout=60)
        assert status == 409 and cancelled["code"] == "cancelled", cancelled
        status, health = learner.call("GET", "/health")
        assert health["step"] == 1 and health["busy"] is None and health["progress"]["phase"] == "idle"
        assert learner.call("POST", "/cancel", {})[1]["cancelling"] is None

        # kill -9 after step 2's optimizer step, before its checkpoint is committed.
        pool.submit(learner.call, *train(2, b2))
        wait_for(lambda: (ckpt / "paused-before-commit-2").exists(), what="pause before commit")
        learner.kill9()
    finally:
        if learner.proc.poll() is None:
            learner.kill9()
        pool.shutdown(wait=False, cancel_futures=True)
    assert (ckpt / "step-2.tmp").is_dir() and not (ckpt / "step-2").exists()

    learner = Learner(config, ckpt, resume=True)
    try:
        status, health = learner.call("GET", "/health")
        assert health["step"] == 1
        status, replay = learner.call(*train(1, b1))  # the ledger survived the crash
        assert status == 200 and replay["repeated"] is True and replay["result"] == first["result"]
        status, second = learner.call(*train(2, b2))
        assert status == 200 and second["repeated"] is False, second
        status, second_again = learner.call(*train(2, b2))
        assert second_again["repeated"] is True and second_again["result"] == second["result"]
        assert learner.call(*train(1, b1))[0] == 409
        status, export = learner.call("POST", "/export", {"step_id": 2})
        assert status == 200 and export["existing"] is False
        assert learner.call("POST", "/export", {"step_id": 2})[1]["existing"] is True
        assert learner.call("POST", "/export", {"step_id": 1})[0] == 409
        assert not (ckpt / "step-2.tmp").exists()
    finally:
        code = learner.stop()
    assert code == 0, learner.output()
    assert not (ckpt / "control.json").exists()
    assert sorted(p.name for p in ckpt.glob("step-*")) == ["step-1", "step-2"]

    # Reference: steps 1 and 2 applied once each, without any crash, in this process.
    reference = Trainer(init_distributed(LearnerConfig.load(config)))
    reference.train_step(1, reference.load_batch(str(b1)))
    expected = reference.train_step(2, reference.load_batch(str(b2)))
    for key in ("loss", "grad_norm", "tokens"):
        assert abs(expected[key] - second["result"][key]) <= 1e-6 * max(1.0, abs(expected[key])), key
    exported = read_export(pathlib.Path(export["path"]))
    ref = {k: v.full_tensor() for k, v in reference.model.state_dict().items() if k in exported}
    assert max_abs_diff(exported, ref) < 1e-6


def test_full_checkpoint_volume_saves_again_without_retraining(tmp_path: pathlib.Path) -> None:
    """Issue 40: a step whose checkpoint does not fit answers 507 disk_full and keeps its update; the retry of the
    same step id only saves (before, the learner exited and retrained the step on every retry)."""
    model = make_tiny_model(tmp_path / "model")
    b1 = random_batch(tmp_path / "b1.jsonl", seed=1)
    ckpt = tmp_path / "ckpt"
    config = write_config(tmp_path / "learner.json", model=model, checkpoint_dir=ckpt)
    train = ("POST", "/train_step", {"step_id": 1, "batch_ref": str(b1)})
    learner = Learner(config, ckpt, hooks={"disk_full_saves": 2})
    try:
        for attempt in (1, 2):
            status, full = learner.call(*train)
            assert status == 507 and full["code"] == "disk_full", (attempt, full)
            assert "it does not train it again" in full["error"]
            assert not (ckpt / "step-1.tmp").exists(), "the half-written checkpoint holds space"
            assert learner.call("GET", "/health")[1]["step"] == 1, "the applied update is kept"
            refused = learner.call("POST", "/train_step", {"step_id": 2, "batch_ref": str(b1)})
            assert refused[0] == 507, refused
        status, saved = learner.call(*train)
        assert status == 200 and saved["repeated"] is False, saved
        state = json.loads((ckpt / "step-1" / "trainer_state.json").read_text())
        assert state["trajectories_seen"] == saved["result"]["trajectories"], "step 1 was trained more than once"
        assert learner.call(*train)[1]["repeated"] is True
    finally:
        code = learner.stop()
    assert code == 0, learner.output()
