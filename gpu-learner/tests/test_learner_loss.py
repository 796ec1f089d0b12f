"""The surrogate against hand-computed values: both clip sides, dual clip, masking, token-mean."""

from __future__ import annotations

import math

import pytest
import torch

from tbt_gpu.learner.config import LossConfig
from tbt_gpu.learner.loss import LOG_RATIO_CLAMP, LossSums, policy_loss, token_logprobs

CFG = LossConfig(eps_low=0.2, eps_high=0.2, dual_clip_c=3.0)


def one_token(rho: float, advantage: float, cfg: LossConfig = CFG) -> tuple[float, float, float, float]:
    """(loss, d loss / d logp, clipped, dual_clipped) for a single token with ratio rho."""
    logp = torch.tensor([[math.log(rho)]], requires_grad=True)
    loss, sums = policy_loss(
        logp=logp,
        old_logp=torch.zeros(1, 1),
        has_old_logp=torch.tensor([True]),
        advantages=torch.tensor([advantage]),
        mask=torch.ones(1, 1),
        cfg=cfg,
        global_tokens=1,
    )
    loss.backward()
    return float(loss.detach()), float(logp.grad), sums.clipped, sums.dual_clipped


@pytest.mark.parametrize(
    ("rho", "adv", "loss", "grad", "clipped", "dual"),
    [
        # inside the trust region: -rho*A, gradient -rho*A
        (1.1, 2.0, -2.2, -2.2, 0, 0),
        (0.9, -1.0, 0.9, 0.9, 0, 0),
        # A > 0 above 1+eps_high: capped at (1.2)*A, no gradient
        (1.5, 1.0, -1.2, 0.0, 1, 0),
        # A > 0 below 1-eps_low: the unclipped (smaller) term wins, gradient flows
        (0.5, 1.0, -0.5, -0.5, 0, 0),
        # A < 0 below 1-eps_low: -min(-0.5, -0.8) = 0.8, no gradient
        (0.5, -1.0, 0.8, 0.0, 1, 0),
        # A < 0 above 1+eps_high but under the dual cap: rho*|A| = 1.5, gradient flows
        (1.5, -1.0, 1.5, 1.5, 0, 0),
        # dual clip: rho*|A| = 5 > c*|A| = 3 -> 3, no gradient
        (5.0, -1.0, 3.0, 0.0, 0, 1),
        (4.0, -2.0, 6.0, 0.0, 0, 1),
        # dual clip never applies to positive advantages: capped by the upper clip instead
        (5.0, 1.0, -1.2, 0.0, 1, 0),
        # zero advantage: zero loss and gradient whatever the ratio
        (3.0, 0.0, 0.0, 0.0, 0, 0),
    ],
)
def test_single_token_cases(rho: float, adv: float, loss: float, grad: float, clipped: int, dual: int) -> None:
    got_loss, got_grad, got_clipped, got_dual = one_token(rho, adv)
    assert got_loss == pytest.approx(loss, abs=1e-6)
    assert got_grad == pytest.approx(grad, abs=1e-6)
    assert (got_clipped, got_dual) == (clipped, dual)


def test_asymmetric_clip_uses_eps_high_only_above() -> None:
    dapo = LossConfig(eps_low=0.2, eps_high=0.28, dual_clip_c=3.0)
    assert one_token(1.5, 1.0, dapo)[0] == pytest.approx(-1.28)
    assert one_token(0.5, -1.0, dapo)[0] == pytest.approx(0.8)


def test_token_mean_over_the_global_count_not_per_sequence() -> None:
    # Row 0: A=+1 over 3 tokens, row 1: A=-0.5 over 1 token, on-policy (rho = 1).
    logp = torch.full((2, 3), -1.0, requires_grad=True)
    mask = torch.tensor([[1.0, 1.0, 1.0], [0.0, 1.0, 0.0]])
    args = dict(old_logp=torch.zeros(2, 3), has_old_logp=torch.tensor([False, False]), cfg=CFG, global_tokens=4)
    loss, sums = policy_loss(logp=logp, advantages=torch.tensor([1.0, -0.5]), mask=mask, **args)
    # token-mean: (-1 -1 -1 + 0.5) / 4; a per-sequence mean would give (-1 + 0.5) / 2 = -0.25
    assert float(loss.detach()) == pytest.approx(-0.625)
    assert sums.tokens == 4 and sums.loss == pytest.approx(-2.5)
    loss.backward()
    assert torch.allclose(logp.grad, torch.tensor([[-0.25, -0.25, -0.25], [0.0, 0.125, 0.0]]))

    # The same batch split in two micro-batches, each divided by the GLOBAL count, sums to the same loss.
    parts = []
    for row in (0, 1):
        part, _ = policy_loss(logp=logp[row : row + 1].detach(), advantages=torch.tensor([[1.0, -0.5][row]]),
                              mask=mask[row : row + 1], old_logp=torch.zeros(1, 3),
                              has_old_logp=torch.tensor([False]), cfg=CFG, global_tokens=4)  # fmt: skip
        parts.append(float(part))
    assert sum(parts) == pytest.approx(-0.625)


def test_masked_tokens_count_for_nothing() -> None:
    logp = torch.tensor([[-0.1, math.log(50.0)]], requires_grad=True)
    loss, sums = policy_loss(
        logp=logp, old_logp=torch.zeros(1, 2), has_old_logp=torch.tensor([True]), advantages=torch.tensor([-1.0]),
        mask=torch.tensor([[1.0, 0.0]]), cfg=CFG, global_tokens=1,
    )  # fmt: skip
    assert float(loss.detach()) == pytest.approx(math.exp(-0.1))
    assert sums.tokens == 1 and sums.dual_clipped == 0
    loss.backward()
    assert float(logp.grad[0, 1]) == 0.0


def test_missing_old_logprobs_mean_on_policy() -> None:
    # Row 0 has old logprobs (ratio e^0.5), row 1 has none (ratio 1 whatever its values say).
    logp = torch.tensor([[-1.0], [-2.0]], requires_grad=True)
    old = torch.tensor([[-1.5], [-9.0]])
    loss, sums = policy_loss(
        logp=logp, old_logp=old, has_old_logp=torch.tensor([True, False]), advantages=torch.tensor([1.0, 1.0]),
        mask=torch.ones(2, 1), cfg=CFG, global_tokens=2,
    )  # fmt: skip
    # row 0: rho = e^0.5 = 1.65 > 1.2 -> -1.2; row 1: rho = 1 -> -1
    assert float(loss.detach()) == pytest.approx((-1.2 - 1.0) / 2)
    assert sums.clipped == 1
    loss.backward()
    assert logp.grad.flatten().tolist() == pytest.approx([0.0, -0.5])


def test_log_ratio_is_clamped_before_exp() -> None:
    loss, _ = policy_loss(
        logp=torch.tensor([[0.0]]), old_logp=torch.tensor([[-1000.0]]), has_old_logp=torch.tensor([True]),
        advantages=torch.tensor([0.5]), mask=torch.ones(1, 1), cfg=LossConfig(eps_high=1e9), global_tokens=1,
    )  # fmt: skip
    assert float(loss) == pytest.approx(-0.5 * math.exp(LOG_RATIO_CLAMP), rel=1e-5)


def test_token_logprobs_and_entropy() -> None:
    torch.manual_seed(0)
    logits = torch.randn(2, 5, 7)
    ids = torch.randint(0, 7, (2, 5))
    logp, entropy = token_logprobs(logits, ids)
    expected = torch.log_softmax(logits[:, :-1], -1).gather(-1, ids[:, 1:, None]).squeeze(-1)
    assert torch.allclose(logp, expected, atol=1e-6)
    uniform_logp, uniform_entropy = token_logprobs(torch.zeros(1, 3, 7), torch.zeros(1, 3, dtype=torch.long))
    assert torch.allclose(uniform_entropy, torch.full((1, 2), math.log(7)))
    assert torch.allclose(uniform_logp, torch.full((1, 2), -math.log(7)))
    assert entropy.shape == (2, 4) and not entropy.requires_grad


def test_global_tokens_must_be_positive() -> None:
    with pytest.raises(ValueError, match="global_tokens"):
        policy_loss(logp=torch.zeros(1, 1), old_logp=torch.zeros(1, 1), has_old_logp=torch.tensor([False]),
                    advantages=torch.zeros(1), mask=torch.zeros(1, 1), cfg=CFG, global_tokens=0)  # fmt: skip


def tis_tokens(logp: list[float], sampler: list[float], advantage: float, cap: float) -> tuple[torch.Tensor, LossSums]:
    """Gradient of the recompute loss (rho = 1) over one row with sampler log-probabilities, and its sums."""
    x = torch.tensor([logp], requires_grad=True)
    loss, sums = policy_loss(
        logp=x,
        old_logp=torch.zeros(1, len(logp)),
        has_old_logp=torch.tensor([False]),
        advantages=torch.tensor([advantage]),
        mask=torch.ones(1, len(logp)),
        cfg=LossConfig(eps_low=0.2, eps_high=0.2, dual_clip_c=3.0, is_cap=cap),
        global_tokens=len(logp),
        sampler_logp=torch.tensor([sampler]),
        has_sampler_logp=torch.tensor([True]),
    )
    loss.backward()
    assert x.grad is not None
    return x.grad, sums


def test_truncated_importance_ratio_gradient_by_hand() -> None:
    # pi_learner / pi_sampler: 0.5 / 0.4 = 1.25 (kept), 0.9 / 0.1 = 9 (cut at 2), 0.2 / 0.4 = 0.5 (kept).
    learner, sampler = [0.5, 0.9, 0.2], [0.4, 0.1, 0.4]
    grad, sums = tis_tokens([math.log(p) for p in learner], [math.log(p) for p in sampler], advantage=2.0, cap=2.0)
    # loss = mean over 3 tokens of -A * w * rho, rho = exp(logp - logp.detach()): d/dlogp = -A * w / 3.
    assert grad.tolist()[0] == pytest.approx([-2.0 * 1.25 / 3, -2.0 * 2.0 / 3, -2.0 * 0.5 / 3], abs=1e-6)
    assert sums.is_truncated == 1 and sums.sampler_tokens == 3
    ratios = [lp / sp for lp, sp in zip(learner, sampler, strict=True)]
    assert sums.sampler_log_ratio == pytest.approx(sum(math.log(r) for r in ratios), abs=1e-5)
    assert sums.sampler_kl == pytest.approx(sum(r - 1 - math.log(r) for r in ratios), abs=1e-5)


def test_truncated_importance_ratio_off_still_measures_the_mismatch() -> None:
    grad, sums = tis_tokens([math.log(0.9)], [math.log(0.1)], advantage=-1.0, cap=0.0)
    assert float(grad) == pytest.approx(1.0, abs=1e-6)
    assert sums.is_truncated == 0
    assert sums.sampler_log_ratio == pytest.approx(math.log(9), abs=1e-5)


def test_rows_without_sampler_logprobs_get_weight_one() -> None:
    x = torch.tensor([[math.log(0.9)]], requires_grad=True)
    loss, sums = policy_loss(
        logp=x,
        old_logp=torch.zeros(1, 1),
        has_old_logp=torch.tensor([False]),
        advantages=torch.tensor([1.0]),
        mask=torch.ones(1, 1),
        cfg=LossConfig(is_cap=2.0),
        global_tokens=1,
        sampler_logp=torch.tensor([[math.log(0.1)]]),
        has_sampler_logp=torch.tensor([False]),
    )
    loss.backward()
    assert float(x.grad) == pytest.approx(-1.0, abs=1e-6)
    assert (sums.sampler_tokens, sums.sampler_log_ratio, sums.sampler_kl) == (0, 0, 0)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [({"is_cap": 0.5}, "0 \\(off\\) or >= 1"), ({"is_cap": 2.0, "old_logprobs": "sampler"}, "recompute")],
)
def test_is_cap_bounds(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        LossConfig(**kwargs)  # type: ignore[arg-type]
