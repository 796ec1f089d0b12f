"""Per-sequence sampling over one decoding step's logits.

Logprobs follow vLLM's default ``--logprobs-mode raw_logprobs``: they are ``log_softmax`` of the model's
raw logits, before temperature, top-k and top-p. They are therefore the policy's own logprobs (what a
learner recomputes with a teacher-forced forward pass), not the probabilities the token was drawn with.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field

import torch


@dataclass(kw_only=True, slots=True)
class SamplingParams:
    temperature: float = 1.0
    """0 means greedy (argmax); otherwise logits are divided by it before top-k/top-p."""
    top_p: float = 1.0
    """Nucleus mass in (0, 1]; 1 disables it."""
    top_k: int = 0
    """Keep the k most likely tokens; 0 or -1 disables it."""
    seed: int | None = None
    """Seeds this request's own generator; None draws a fresh random seed."""

    def __post_init__(self) -> None:
        if self.temperature < 0:
            raise ValueError("temperature must be >= 0")
        if not 0 < self.top_p <= 1:
            raise ValueError("top_p must be in (0, 1]")
        if self.top_k < -1:
            raise ValueError("top_k must be -1, 0 or positive")


@dataclass(slots=True)
class SequenceSampler:
    """Holds one sequence's parameters and its private random generator."""

    params: SamplingParams
    generator: torch.Generator = field(init=False)

    def __post_init__(self) -> None:
        self.generator = torch.Generator(device="cpu")
        seed = self.params.seed if self.params.seed is not None else secrets.randbits(63)
        self.generator.manual_seed(seed & 0xFFFF_FFFF_FFFF_FFFF)

    def sample(self, logits: torch.Tensor) -> int:
        """One token id from a 1-D float32 logits row."""
        params = self.params
        if params.temperature == 0:
            return int(torch.argmax(logits))
        scaled = logits / params.temperature
        if params.top_k > 0 and params.top_k < scaled.shape[-1]:
            kth = torch.topk(scaled, params.top_k).values[-1]
            scaled = scaled.masked_fill(scaled < kth, float("-inf"))
        probs = torch.softmax(scaled, dim=-1)
        if params.top_p < 1:
            sorted_probs, order = torch.sort(probs, descending=True)
            cumulative = torch.cumsum(sorted_probs, dim=-1)
            # drop a token when the tokens strictly more likely than it already reach top_p
            drop_sorted = (cumulative - sorted_probs) >= params.top_p
            drop_sorted[0] = False
            probs = probs.masked_fill(torch.zeros_like(drop_sorted).scatter(0, order, drop_sorted), 0.0)
        return int(torch.multinomial(probs, 1, generator=self.generator))


def raw_logprobs(logits: torch.Tensor) -> torch.Tensor:
    """``log_softmax`` over the vocabulary of raw (unscaled, unfiltered) float32 logits."""
    return torch.log_softmax(logits.float(), dim=-1)
