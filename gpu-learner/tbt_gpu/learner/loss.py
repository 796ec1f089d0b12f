"""GRPO/PPO clipped surrogate with dual clip, aggregated as a token-mean over the global batch, optionally
weighted by a truncated importance ratio against the policy that sampled the tokens."""

from __future__ import annotations

from dataclasses import astuple, dataclass

import torch
from torch.utils.checkpoint import checkpoint

from .config import LossConfig

LOG_RATIO_CLAMP = 20.0
"""|logp_new - logp_old| is clamped here before exp() so one wild token cannot overflow (as verl does)."""


@dataclass(slots=True)
class LossSums:
    """Sums over mask-1 tokens; divide by the global token count after summing over micro-batches and ranks.

    The sampler_* sums cover only the tokens whose rows carried the sampler's log-probabilities.
    """

    loss: float = 0.0
    clipped: float = 0.0
    dual_clipped: float = 0.0
    entropy: float = 0.0
    tokens: float = 0.0
    sampler_tokens: float = 0.0
    sampler_log_ratio: float = 0.0
    """log pi_learner - log pi_sampler: the mismatch between the weights that trained and those that sampled."""
    sampler_kl: float = 0.0
    """k3 estimate of KL(sampler || learner): r - 1 - log r with r = pi_learner / pi_sampler (always >= 0)."""
    is_truncated: float = 0.0
    """Tokens whose importance ratio was cut at loss.is_cap."""

    def add(self, other: LossSums) -> None:
        for name, value in zip(self.__slots__, other.as_list(), strict=True):
            setattr(self, name, getattr(self, name) + value)

    def as_list(self) -> list[float]:
        return list(astuple(self))

    @classmethod
    def from_list(cls, values: list[float]) -> LossSums:
        return cls(*values)


def sampler_mismatch(sums: LossSums) -> dict[str, float | None]:
    """Per-token means over the tokens with sampler log-probabilities (None when no row carried them)."""
    n = sums.sampler_tokens
    return {
        "sampler_log_ratio_mean": sums.sampler_log_ratio / n if n else None,
        "sampler_kl": sums.sampler_kl / n if n else None,
        "is_truncated_fraction": sums.is_truncated / n if n else None,
    }


def token_logprobs(logits: torch.Tensor, input_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(log p(input_ids[:, t+1] | <= t), entropy of that distribution), both [B, T-1] in float32."""
    return predicted_logprobs(logits[:, :-1, :], input_ids[:, 1:])


def predicted_logprobs(logits: torch.Tensor, targets: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(log p(targets) under logits, entropy of that distribution): logits [..., V] predict targets [...].

    The entropy is a metric only and carries no gradient (no entropy bonus).
    """
    logits = logits.float()
    log_norm = torch.logsumexp(logits, dim=-1)
    logp = logits.gather(-1, targets.unsqueeze(-1)).squeeze(-1) - log_norm
    with torch.no_grad():
        probs = torch.softmax(logits, dim=-1)
        entropy = log_norm - (probs * logits).sum(dim=-1)
    return logp, entropy


def chunked_logprobs(
    hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor, *, temperature: float, chunk_tokens: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """`predicted_logprobs` of `hidden @ weight.T / temperature` ([N, H] x [V, H] -> [N]), never holding more than
    `chunk_tokens` rows of logits: each chunk is recomputed in backward instead of kept (activation checkpointing),
    so peak memory is one chunk's [chunk, V] float32 logits and their gradient, whatever N is."""
    if chunk_tokens < 1:
        raise ValueError(f"chunk_tokens: must be >= 1, got {chunk_tokens}")
    logps: list[torch.Tensor] = []
    entropies: list[torch.Tensor] = []
    for start in range(0, hidden.shape[0], chunk_tokens):
        end = start + chunk_tokens
        logp, entropy = checkpoint(
            _chunk_logprobs, hidden[start:end], weight, targets[start:end], temperature, use_reentrant=False
        )
        logps.append(logp)
        entropies.append(entropy)
    if not logps:
        empty = hidden.new_zeros(0, dtype=torch.float32)
        return empty, empty
    return torch.cat(logps), torch.cat(entropies)


def _chunk_logprobs(
    hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor, temperature: float
) -> tuple[torch.Tensor, torch.Tensor]:
    return predicted_logprobs(torch.nn.functional.linear(hidden, weight) / temperature, targets)


def policy_loss(
    *,
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    has_old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    cfg: LossConfig,
    global_tokens: int,
    entropy: torch.Tensor | None = None,
    sampler_logp: torch.Tensor | None = None,
    has_sampler_logp: torch.Tensor | None = None,
) -> tuple[torch.Tensor, LossSums]:
    """Per-token `-min(rho*A, clip(rho, 1-eps_low, 1+eps_high)*A)`, dual-clipped at `c*|A|` for A < 0.

    `logp`, `old_logp`, `mask` are [B, T']; `advantages` and `has_old_logp` are [B]. Rows without old
    log-probabilities use the detached current ones (on-policy, rho = 1). The returned loss is this
    micro-batch's share of the global token-mean: sum(per-token loss * mask) / global_tokens, so summing
    it over all micro-batches and ranks gives the mean over every mask-1 token of the batch.

    `sampler_logp` [B, T'] (rows where `has_sampler_logp` [B]) are the log-probabilities of the policy that
    sampled the tokens. With `cfg.is_cap` > 0 each such token's loss is multiplied by the detached truncated
    importance ratio `min(pi_old / pi_sampler, is_cap)`, pi_old being the learner's weights before this update
    (its detached `logp`): the correction for tokens sampled by older or differently computed weights
    (truncated importance sampling). Rows without them get weight 1. The mismatch is summed either way.
    """
    if global_tokens <= 0:
        raise ValueError(f"global_tokens: must be > 0, got {global_tokens}")
    mask = mask.to(logp.dtype)
    old = torch.where(has_old_logp.unsqueeze(-1), old_logp.to(logp.dtype), logp.detach())
    log_ratio = torch.clamp(logp - old, -LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
    ratio = torch.exp(log_ratio)
    adv = advantages.to(logp.dtype).unsqueeze(-1)

    unclipped = -adv * ratio
    clipped = -adv * torch.clamp(ratio, 1.0 - cfg.eps_low, 1.0 + cfg.eps_high)
    surrogate = torch.maximum(unclipped, clipped)
    dual_bound = -adv * cfg.dual_clip_c
    dual = torch.minimum(dual_bound, surrogate)
    negative = adv < 0
    per_token = torch.where(negative, dual, surrogate)

    sampled = torch.zeros_like(mask)
    sampler_log_ratio = torch.zeros_like(logp)
    if sampler_logp is not None and has_sampler_logp is not None:
        sampled = mask * has_sampler_logp.unsqueeze(-1).to(mask.dtype)
        sampler_log_ratio = torch.clamp(
            logp.detach() - sampler_logp.to(logp.dtype), -LOG_RATIO_CLAMP, LOG_RATIO_CLAMP
        ) * (sampled > 0)
    is_ratio = torch.exp(sampler_log_ratio)
    if cfg.is_cap > 0:
        per_token = per_token * torch.clamp(is_ratio, max=cfg.is_cap)

    loss = (per_token * mask).sum() / global_tokens
    with torch.no_grad():
        sums = LossSums(
            loss=float((per_token * mask).sum()),
            clipped=float(((clipped > unclipped).to(mask.dtype) * mask).sum()),
            dual_clipped=float(((negative & (surrogate > dual_bound)).to(mask.dtype) * mask).sum()),
            entropy=float((entropy * mask).sum()) if entropy is not None else 0.0,
            tokens=float(mask.sum()),
            sampler_tokens=float(sampled.sum()),
            sampler_log_ratio=float((sampler_log_ratio * sampled).sum()),
            sampler_kl=float(((is_ratio - 1 - sampler_log_ratio) * sampled).sum()),
            is_truncated=float(((is_ratio > cfg.is_cap) * sampled).sum()) if cfg.is_cap > 0 else 0.0,
        )
    return loss, sums
