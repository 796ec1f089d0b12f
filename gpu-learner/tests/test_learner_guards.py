"""Silent wrong gradients refused: shared prompts on a hybrid model, a sampler ratio across temperatures."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch
from learner_support import GPU_LEARNER, build_trainer, learner_env, make_tiny_hybrid_model
from test_learner_trainer import grouped_batch

from tbt_gpu.learner.batch import collate, prompt_rows
from tbt_gpu.learner.config import LossConfig
from tbt_gpu.learner.loss import policy_loss, predicted_logprobs, token_logprobs


@pytest.fixture(scope="module")
def hybrid_model(tmp_path_factory):
    return make_tiny_hybrid_model(tmp_path_factory.mktemp("hybrid") / "model")


def separate_logprobs(trainer, batch) -> dict[str, float]:
    """Each trajectory alone through the model, all logits: the reference no packing may change."""
    out = {}
    with torch.no_grad():
        for traj in batch.trajectories:
            ids = torch.tensor([traj.input_ids])
            logp, _ = token_logprobs(trainer.model(input_ids=ids).logits, ids)
            out[traj.trajectory_id] = float((logp[0] * torch.tensor(traj.loss_mask[1:])).sum())
    return out


def test_a_hybrid_model_trains_its_episodes_apart(tmp_path, hybrid_model) -> None:
    trainer, _ = build_trainer(tmp_path, hybrid_model)
    assert trainer.model_info.hybrid and trainer.share_prompts is False
    batch = trainer.load_batch(str(grouped_batch(tmp_path / "b.jsonl", seed=7)))
    expected = separate_logprobs(trainer, batch)
    got = trainer.sequence_logprobs(batch)
    for key, value in expected.items():
        assert got[key] == pytest.approx(value, abs=1e-4), key


def test_shared_prompts_would_mix_a_hybrid_models_episodes(tmp_path, hybrid_model) -> None:
    """Why the guard exists: the Gated-DeltaNet layers ignore the 4-D mask, so packed episodes see each other."""
    trainer, _ = build_trainer(tmp_path, hybrid_model)
    batch = trainer.load_batch(str(grouped_batch(tmp_path / "b.jsonl", seed=7)))
    expected = separate_logprobs(trainer, batch)
    rows = [r for r in prompt_rows(batch.trajectories, 10_000, share=True) if len(r.members) > 1]
    mb = collate(rows[:1], trainer.model_info.pad_id)
    with torch.no_grad():
        logits = trainer.model(input_ids=mb.input_ids, attention_mask=mb.attention_mask,
                               position_ids=mb.position_ids).logits  # fmt: skip
        scored = logits.reshape(-1, logits.shape[-1])[mb.scored.reshape(-1)]
        logp, _ = predicted_logprobs(scored[mb.gather], mb.targets)
    packed = {t: float((logp[b] * mb.loss_mask[b]).sum()) for b, t in enumerate(mb.trajectory_ids)}
    assert max(abs(packed[t] - expected[t]) for t in packed) > 1e-2


def test_shared_prompts_on_a_hybrid_model_are_refused(tmp_path, hybrid_model) -> None:
    with pytest.raises(ValueError, match="train.share_prompts: .* linear_attention layers, which ignore the 4-D mask"):
        build_trainer(tmp_path, hybrid_model, train={"share_prompts": True})


def test_is_cap_at_temperature_0_6_is_refused_against_raw_sampler_logprobs() -> None:
    with pytest.raises(ValueError, match="loss.is_cap: the sampler's raw log-probabilities are of temperature 1"):
        LossConfig(is_cap=2.0, temperature=0.6)
    with pytest.raises(ValueError, match="loss.old_logprobs: the sampler's raw"):
        LossConfig(old_logprobs="sampler", temperature=0.6)
    assert LossConfig(is_cap=2.0, temperature=0.6, sampler_logprobs="processed").is_cap == 2.0
    assert LossConfig(is_cap=2.0, temperature=1.0).sampler_logprobs == "raw"


def test_processed_sampler_logprobs_weigh_same_weights_tokens_by_one() -> None:
    """At lag 0 the sampler's weights are the learner's: the importance weight must be 1 on every token. Raw
    log-probabilities (temperature 1) against the learner's tempered ones miss that by a wide margin."""
    torch.manual_seed(0)
    logits = torch.randn(4, 12, 50) * 3
    targets = torch.randint(0, 50, (4, 12))
    tempered, _ = predicted_logprobs(logits / 0.6, targets)
    raw, _ = predicted_logprobs(logits, targets)
    common = dict(old_logp=torch.zeros(4, 12), has_old_logp=torch.zeros(4, dtype=torch.bool),
                  advantages=torch.ones(4), mask=torch.ones(4, 12), global_tokens=48,
                  has_sampler_logp=torch.ones(4, dtype=torch.bool))  # fmt: skip
    cfg = LossConfig(is_cap=2.0, temperature=0.6, sampler_logprobs="processed")
    _, same = policy_loss(logp=tempered, sampler_logp=tempered, cfg=cfg, **common)
    assert same.sampler_log_ratio == pytest.approx(0.0, abs=1e-5) and same.is_truncated == 0
    _, mismatched = policy_loss(logp=tempered, sampler_logp=raw, cfg=cfg, **common)
    assert abs(mismatched.sampler_log_ratio / 48) > 0.1 and mismatched.sampler_kl / 48 > 0.1


def test_tbt_train_refuses_shared_prompts_on_a_hybrid_model(hybrid_model) -> None:
    """check_config (what `tbt train` runs before anything starts) reads the layer types from config.json."""
    config = {"model": {"path": str(hybrid_model)}, "checkpoint": {"dir": "x"}, "train": {"share_prompts": True}}
    run = subprocess.run([sys.executable, "-m", "tbt_gpu.learner.check_config"], input=json.dumps(config),
                         capture_output=True, text=True, env=learner_env(), cwd=GPU_LEARNER, timeout=120)  # fmt: skip
    assert run.returncode == 2 and "train.share_prompts" in json.loads(run.stdout)["error"]
    config["train"] = {}
    run = subprocess.run([sys.executable, "-m", "tbt_gpu.learner.check_config"], input=json.dumps(config),
                         capture_output=True, text=True, env=learner_env(), cwd=GPU_LEARNER, timeout=120)  # fmt: skip
    assert run.returncode == 0 and json.loads(run.stdout)["config"]["train"]["share_prompts"] is None
