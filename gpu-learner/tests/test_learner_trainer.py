"""The trainer and checkpointer in this process (a one-rank gloo world): guards, skip, checkpoints, export."""

from __future__ import annotations

import json
import pathlib

import pytest
import torch
from learner_support import make_tiny_model, max_abs_diff, random_batch, read_export, trajectory, write_config

from tbt_gpu.learner.batch import plan_rank_micro_batches
from tbt_gpu.learner.checkpoint import Checkpointer, verify
from tbt_gpu.learner.config import LearnerConfig
from tbt_gpu.learner.distributed import init_distributed
from tbt_gpu.learner.errors import NonFiniteError, StepCancelled, StepRefused
from tbt_gpu.learner.loss import token_logprobs
from tbt_gpu.learner.trainer import Trainer


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory) -> pathlib.Path:
    return make_tiny_model(tmp_path_factory.mktemp("tiny") / "model")


def build(tmp_path: pathlib.Path, model: pathlib.Path, **sections: dict) -> tuple[Trainer, Checkpointer]:
    config = write_config(tmp_path / "learner.json", model=model, checkpoint_dir=tmp_path / "ckpt", **sections)
    trainer = Trainer(init_distributed(LearnerConfig.load(config)))
    return trainer, Checkpointer(trainer)


def weights(trainer: Trainer) -> dict[str, torch.Tensor]:
    return {k: v.full_tensor().clone() for k, v in trainer.model.state_dict().items()}


def adam_state(trainer: Trainer) -> list[torch.Tensor]:
    return [t.full_tensor().clone() for s in trainer.optimizer.state.values() for t in s.values() if t.dim() > 0]


def same(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    return all(torch.equal(a[k], b[k]) for k in a)


def test_all_zero_advantage_skips_the_optimizer_step(tmp_path, tiny_model) -> None:
    trainer, _ = build(tmp_path, tiny_model)
    first = trainer.load_batch(str(random_batch(tmp_path / "b1.jsonl", seed=1)))
    trainer.train_step(1, first)  # Adam now has momentum: a zero-gradient step would still move weights
    before, moments = weights(trainer), adam_state(trainer)
    zero_path = tmp_path / "zero.jsonl"
    zero_path.write_text("\n".join(json.dumps({**json.loads(line), "advantage": 0.0})
                                   for line in (tmp_path / "b1.jsonl").read_text().splitlines()))  # fmt: skip
    result = trainer.train_step(2, trainer.load_batch(str(zero_path)))
    assert result["skipped"] is True and result["step_id"] == 2 and result["tokens"] == first.token_count
    assert trainer.state.last_step == 2 and trainer.state.ledger[2] == result
    assert same(before, weights(trainer))
    assert all(torch.equal(a, b) for a, b in zip(moments, adam_state(trainer), strict=True))
    with pytest.raises(StepRefused, match="step 2 refused: last applied step is 2, expected 3"):
        trainer.train_step(2, first)


def test_update_moves_logprobs_with_the_advantage_sign(tmp_path, tiny_model) -> None:
    trainer, _ = build(tmp_path, tiny_model)
    batch = trainer.load_batch(str(random_batch(tmp_path / "b.jsonl", seed=3)))
    before = trainer.sequence_logprobs(batch)
    result = trainer.train_step(1, batch)
    after = trainer.sequence_logprobs(batch)
    assert result["skipped"] is False and result["grad_norm"] > 0 and result["entropy"] > 0
    assert result["clip_fraction"] == 0.0  # on-policy: rho = 1 everywhere
    for traj in batch.trajectories:
        moved = after[traj.trajectory_id] - before[traj.trajectory_id]
        assert moved * traj.advantage > 0, (traj.trajectory_id, traj.advantage, moved)


def test_logits_from_the_first_scored_position_match_the_full_logits(tmp_path, tiny_model) -> None:
    trainer, _ = build(tmp_path, tiny_model)
    batch = trainer.load_batch(str(random_batch(tmp_path / "b.jsonl", seed=5, count=8)))
    micro_batches = plan_rank_micro_batches(batch, rank=0, world_size=1, token_budget=64, pad_id=0)
    assert any(mb.first_scored > 0 for mb in micro_batches)  # else nothing is narrowed and this checks nothing
    temperature = trainer.cfg.loss.temperature
    with torch.no_grad():
        for mb in micro_batches:
            full = trainer.model(input_ids=mb.input_ids, attention_mask=mb.attention_mask).logits
            full_logp, full_entropy = token_logprobs(full / temperature, mb.input_ids)
            logp, entropy = trainer._scored_logprobs(mb)
            assert logp.shape == full_logp[:, mb.first_scored :].shape
            torch.testing.assert_close(logp, full_logp[:, mb.first_scored :])
            torch.testing.assert_close(entropy, full_entropy[:, mb.first_scored :])
            assert float(mb.loss_mask[:, : mb.first_scored].sum()) == 0.0


def test_non_finite_loss_is_refused_without_a_step(tmp_path, tiny_model) -> None:
    trainer, _ = build(tmp_path, tiny_model)
    batch = trainer.load_batch(str(random_batch(tmp_path / "b.jsonl", seed=1)))
    with torch.no_grad():
        norm = trainer.model.model.norm.weight
        norm.copy_(torch.full_like(norm, float("nan")))
    before = weights(trainer)
    with pytest.raises(NonFiniteError, match="step 1 refused: non-finite loss"):
        trainer.train_step(1, batch)
    after = weights(trainer)
    assert all(torch.equal(before[k], after[k]) or torch.isnan(before[k]).all() for k in before)
    assert trainer.state.last_step == 0 and not trainer.optimizer.state


def test_cancel_stops_before_the_optimizer_step(tmp_path, tiny_model) -> None:
    trainer, _ = build(tmp_path, tiny_model)
    batch = trainer.load_batch(str(random_batch(tmp_path / "b.jsonl", seed=1)))
    before = weights(trainer)
    trainer.cancel_requested.set()
    with pytest.raises(StepCancelled, match="step 1 cancelled at micro-batch 1 of"):
        trainer.train_step(1, batch)
    assert same(before, weights(trainer)) and trainer.state.last_step == 0
    trainer.cancel_requested.clear()
    assert trainer.train_step(1, batch)["skipped"] is False


def test_checkpoint_round_trip_checksums_and_export(tmp_path, tiny_model) -> None:
    trainer, ckpt = build(tmp_path, tiny_model)
    b1 = trainer.load_batch(str(random_batch(tmp_path / "b1.jsonl", seed=1)))
    b2 = trainer.load_batch(str(random_batch(tmp_path / "b2.jsonl", seed=2)))
    trainer.train_step(1, b1)
    ckpt.save()
    trainer.train_step(2, b2)
    step2 = ckpt.save()
    manifest = verify(step2, checksums=True)
    assert manifest["hyperparameters"]["optimizer"]["lr"] == 0.01 and manifest["world_size"] == 1
    assert json.loads((step2 / "trainer_state.json").read_text())["last_step"] == 2
    at_step2, moments2 = weights(trainer), adam_state(trainer)
    exported = ckpt.export(2)
    assert max_abs_diff(read_export(exported), {k: v for k, v in at_step2.items() if k != "lm_head.weight"}) == 0.0
    assert not (exported / ".tbt-model-complete.json").exists()

    # A fresh trainer resumes weights, Adam moments and the ledger exactly.
    fresh, fresh_ckpt = build(tmp_path, tiny_model)
    assert fresh_ckpt.load_latest() == 2
    assert same(at_step2, weights(fresh))
    assert all(torch.equal(a, b) for a, b in zip(moments2, adam_state(fresh), strict=True))
    assert fresh.state.ledger.keys() == {1, 2} and fresh.state.last_step == 2

    # A corrupted newest checkpoint fails its checksum; the previous one is used instead.
    shard = next(step2.glob("*.distcp"))
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 0xFF
    shard.write_bytes(bytes(data))
    (tmp_path / "ckpt" / "step-3.tmp").mkdir()  # an unfinished save is ignored and removed
    again, again_ckpt = build(tmp_path, tiny_model)
    assert again_ckpt.load_latest() == 1
    assert again.state.last_step == 1 and not (tmp_path / "ckpt" / "step-3.tmp").exists()


def test_long_sequence_is_an_error_not_truncated(tmp_path, tiny_model) -> None:
    trainer, _ = build(tmp_path, tiny_model)
    path = tmp_path / "long.jsonl"
    path.write_text(json.dumps(trajectory("long", [5] * 49, 10, 1.0)) + "\n")
    with pytest.raises(
        ValueError, match=r"long\.jsonl:1: field 'input_ids': has 49 tokens, longer than the model context of 48"
    ):
        trainer.load_batch(str(path))


def test_activation_checkpointing_gives_the_same_update(tmp_path, tiny_model) -> None:
    plain, _ = build(tmp_path, tiny_model)
    recomputing, _ = build(tmp_path, tiny_model, fsdp={"activation_checkpointing": True})
    assert recomputing.model.is_activation_checkpointing and not plain.model.is_activation_checkpointing
    batch = plain.load_batch(str(random_batch(tmp_path / "b.jsonl", seed=5, with_old=True)))
    a, b = plain.train_step(1, batch), recomputing.train_step(1, batch)
    assert a["loss"] == pytest.approx(b["loss"], rel=1e-6) and a["grad_norm"] == pytest.approx(b["grad_norm"], rel=1e-5)
    assert max_abs_diff(weights(plain), weights(recomputing)) < 1e-6


def test_cpu_offload_needs_a_gpu(tmp_path, tiny_model) -> None:
    with pytest.raises(ValueError, match="^fsdp.cpu_offload: needs device cuda"):
        build(tmp_path, tiny_model, fsdp={"cpu_offload": True})
