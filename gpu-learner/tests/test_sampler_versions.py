"""Partial rollouts: one trajectory's tokens sampled by several weight versions. The batch keeps each token's
version (checked as batch.py checks every per-token list), the step's metrics count the mix, and the loss's
importance ratio takes each token's own sampler log-probability, whatever version drew it."""

from __future__ import annotations

import json
import math
import pathlib

import pytest
import torch
from learner_support import trajectory

from tbt_gpu.learner.batch import BatchError, load_batch, version_mix
from tbt_gpu.learner.config import LossConfig
from tbt_gpu.learner.loss import policy_loss


def load(tmp_path: pathlib.Path, *rows: dict) -> tuple:
    path = tmp_path / "batch.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return load_batch(path, vocab_size=50, max_seq_len=16).trajectories


def row(tid: str, versions: list[int] | None) -> dict:
    # prompt of 2, a turn of 2 tokens, an observation of 1 (mask 0), a turn of 2
    record = trajectory(tid, [5, 6, 7, 8, 9, 10, 11], 2, 1.0, old=[0.0, 0.0, -0.5, -0.25, 0.0, -1.0, -0.75])
    record["loss_mask"] = [0, 0, 1, 1, 0, 1, 1]
    if versions is not None:
        record["sampler_versions"] = versions
    return record


def test_versions_load_and_the_mix_counts_trained_tokens_only(tmp_path) -> None:
    # ep-a: interrupted mid-turn by a sync (its second turn's tokens on versions 3 then 4); ep-b: all on 4.
    trajs = load(
        tmp_path,
        row("ep-a", [-1, -1, 3, 3, -1, 3, 4]),
        row("ep-b", [-1, -1, 4, 4, -1, 4, 4]),
        row("ep-c", None),
    )
    assert trajs[0].sampler_versions == (-1, -1, 3, 3, -1, 3, 4)
    assert trajs[2].sampler_versions is None
    assert version_mix(trajs) == {"3": 3, "4": 5}
    assert version_mix(trajs[2:]) is None


@pytest.mark.parametrize(
    ("versions", "message"),
    [
        ([-1, -1, 3], "must be a list as long as input_ids"),
        ([-1, -1, -1, 3, -1, 3, 3], "item 2 is -1, not a version"),
        ([-1, -1, 3, 3, -2, 3, 3], "item 4 is -2"),
        ([-1, -1, 3, 3.5, -1, 3, 3], "item 3 is 3.5"),
    ],
)
def test_bad_versions_are_refused(tmp_path, versions: list, message: str) -> None:
    with pytest.raises(BatchError, match=message) as info:
        load(tmp_path, row("ep-a", versions))
    assert info.value.field == "sampler_versions"


def test_mixed_version_ratio_uses_each_tokens_own_sampler_logprob() -> None:
    """Four trained tokens: two sampled by version 3, two (after the sync) by version 4. old_logprobs: sampler, so
    rho_t = pi_learner(t) / pi_sampler(t) with the sampler log-probability each token came with."""
    learner = [0.5, 0.6, 0.3, 0.8]
    sampler = [0.4, 0.6, 0.5, 0.2]  # tokens 0-1 from version 3, 2-3 from version 4
    advantage = 1.0
    x = torch.tensor([[math.log(p) for p in learner]], requires_grad=True)
    sampler_logp = torch.tensor([[math.log(p) for p in sampler]])
    loss, sums = policy_loss(
        logp=x,
        old_logp=sampler_logp,
        has_old_logp=torch.tensor([True]),
        advantages=torch.tensor([advantage]),
        mask=torch.ones(1, 4),
        cfg=LossConfig(eps_low=0.2, eps_high=0.2, dual_clip_c=3.0, old_logprobs="sampler"),
        global_tokens=4,
        sampler_logp=sampler_logp,
        has_sampler_logp=torch.tensor([True]),
    )
    loss.backward()
    assert x.grad is not None
    # By hand: rho = 1.25 (clipped at 1.2: no gradient), 1.0, 0.6 (A > 0 below 1-eps: unclipped), 4.0 (clipped).
    rho = [lp / sp for lp, sp in zip(learner, sampler, strict=True)]
    assert rho == pytest.approx([1.25, 1.0, 0.6, 4.0])
    per_token = [-advantage * min(r, 1.2) for r in rho]
    assert float(loss.detach()) == pytest.approx(sum(per_token) / 4, abs=1e-6)
    assert x.grad.tolist()[0] == pytest.approx([0.0, -1.0 / 4, -0.6 / 4, 0.0], abs=1e-6)
    assert sums.clipped == 2
    assert sums.sampler_log_ratio == pytest.approx(sum(math.log(r) for r in rho), abs=1e-5)


def test_mixed_version_truncated_ratio_by_hand() -> None:
    """Recompute with is_cap: each token weighted by min(pi_learner / pi_its_sampler, cap), per token."""
    learner = [0.5, 0.3, 0.8]
    sampler = [0.4, 0.5, 0.2]  # version 3, version 4, version 4
    x = torch.tensor([[math.log(p) for p in learner]], requires_grad=True)
    loss, sums = policy_loss(
        logp=x,
        old_logp=torch.zeros(1, 3),
        has_old_logp=torch.tensor([False]),
        advantages=torch.tensor([2.0]),
        mask=torch.ones(1, 3),
        cfg=LossConfig(is_cap=2.0),
        global_tokens=3,
        sampler_logp=torch.tensor([[math.log(p) for p in sampler]]),
        has_sampler_logp=torch.tensor([True]),
    )
    loss.backward()
    assert x.grad is not None
    assert x.grad.tolist()[0] == pytest.approx([-2.0 * 1.25 / 3, -2.0 * 0.6 / 3, -2.0 * 2.0 / 3], abs=1e-6)
    assert float(loss.detach()) == pytest.approx(-2.0 * (1.25 + 0.6 + 2.0) / 3, abs=1e-6)
    assert sums.is_truncated == 1
