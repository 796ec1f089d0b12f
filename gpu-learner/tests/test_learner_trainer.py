"""The trainer and checkpointer in this process (a one-rank gloo world): guards, skip, checkpoints, export."""

from __future__ import annotations

import json
import pathlib
import random

import pytest
import torch
from learner_support import VOCAB, max_abs_diff, random_batch, read_export, trajectory
from learner_support import build_trainer as build
from learner_support import trainer_weights as weights

from tbt_gpu.learner.batch import plan_rank_micro_batches
from tbt_gpu.learner.checkpoint import verify
from tbt_gpu.learner.errors import StepCancelled, StepRefused
from tbt_gpu.learner.loss import token_logprobs
from tbt_gpu.learner.trainer import Trainer


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


def grouped_batch(path: pathlib.Path, *, seed: int) -> pathlib.Path:
    """GRPO-style: 3 prompts x 4 episodes, uneven suffixes, a tool result (mask 0) inside some, both advantage signs."""
    rng = random.Random(seed)
    lines = []
    for g in range(3):
        prompt = [rng.randrange(3, VOCAB) for _ in range(rng.randint(8, 20))]
        for i in range(4):
            turn = [rng.randrange(3, VOCAB) for _ in range(rng.randint(2, 9))]
            tool = [rng.randrange(3, VOCAB) for _ in range(rng.randint(0, 4))]
            second = [rng.randrange(3, VOCAB) for _ in range(rng.randint(1, 5))] if tool else []
            ids = prompt + turn + tool + second
            mask = [0] * len(prompt) + [1] * len(turn) + [0] * len(tool) + [1] * len(second)
            record = {"trajectory_id": f"g{g}-{i}", "input_ids": ids, "loss_mask": mask, "advantage": (-1) ** i * 0.8}
            lines.append(json.dumps(record))
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_shared_prompts_give_the_separate_sequences_logprobs_and_update(tmp_path, tiny_model) -> None:
    (tmp_path / "shared").mkdir()
    (tmp_path / "separate").mkdir()
    shared, _ = build(tmp_path / "shared", tiny_model)
    separate, _ = build(tmp_path / "separate", tiny_model, train={"share_prompts": False})
    batch = shared.load_batch(str(grouped_batch(tmp_path / "b.jsonl", seed=7)))
    plan = plan_rank_micro_batches(batch, rank=0, world_size=1, token_budget=64, pad_id=0)
    assert any(mb.attention_mask.dim() == 4 for mb in plan)  # prompts were shared, else this checks nothing
    # reference: each trajectory alone, all logits, no mask of ours
    temperature = shared.cfg.loss.temperature
    with torch.no_grad():
        expected = {}
        for traj in batch.trajectories:
            ids = torch.tensor([traj.input_ids])
            logp, _ = token_logprobs(shared.model(input_ids=ids).logits / temperature, ids)
            expected[traj.trajectory_id] = float((logp[0] * torch.tensor(traj.loss_mask[1:])).sum())
    got = shared.sequence_logprobs(batch)
    assert got.keys() == expected.keys()
    for key, value in expected.items():
        assert got[key] == pytest.approx(value, abs=1e-4), key
    one, two = shared.train_step(1, batch), separate.train_step(1, batch)
    for key in ("loss", "grad_norm", "entropy", "tokens"):
        assert one[key] == pytest.approx(two[key], rel=1e-4, abs=1e-6), key
    a, b = weights(shared), weights(separate)
    assert max(float((a[k] - b[k]).abs().max()) for k in a) < 1e-5


def test_non_finite_loss_skips_the_update_and_records_the_step(tmp_path, tiny_model) -> None:
    trainer, _ = build(tmp_path, tiny_model)
    batch = trainer.load_batch(str(random_batch(tmp_path / "b.jsonl", seed=1)))
    with torch.no_grad():
        norm = trainer.model.model.norm.weight
        norm.copy_(torch.full_like(norm, float("nan")))
    before = weights(trainer)
    result = trainer.train_step(1, batch)
    assert result["skipped"] is True and result["non_finite"] is True
    assert "step 1 refused: non-finite loss" in result["skip_reason"]
    assert result["micro_batches"] == 0 and result["step_id"] == 1
    json.dumps(result, allow_nan=False)  # the control endpoint refuses NaN in an answer
    after = weights(trainer)
    assert all(torch.equal(before[k], after[k]) or torch.isnan(before[k]).all() for k in before)
    assert trainer.state.last_step == 1 and trainer.state.ledger[1] is result and not trainer.optimizer.state


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
