"""Log-probabilities in chunks: the same values and gradients as one full [tokens, vocabulary] projection."""

from __future__ import annotations

import pytest
import torch
from learner_support import build_trainer, max_abs_diff, random_batch, trainer_weights

from tbt_gpu.learner.loss import chunked_logprobs, predicted_logprobs


@pytest.mark.parametrize("chunk", [1, 7, 64, 10_000])
def test_chunked_logprobs_equal_the_full_projection(chunk: int) -> None:
    torch.manual_seed(0)
    hidden = torch.randn(50, 16, dtype=torch.float64, requires_grad=True)
    weight = torch.randn(97, 16, dtype=torch.float64, requires_grad=True)
    targets = torch.randint(0, 97, (50,))
    full_logp, full_entropy = predicted_logprobs(hidden @ weight.T / 0.7, targets)
    (full_logp * torch.linspace(-1, 1, 50, dtype=torch.float64)).sum().backward()
    full_grads = hidden.grad.clone(), weight.grad.clone()
    hidden.grad, weight.grad = None, None

    logp, entropy = chunked_logprobs(hidden, weight, targets, temperature=0.7, chunk_tokens=chunk)
    (logp * torch.linspace(-1, 1, 50, dtype=torch.float64)).sum().backward()
    assert logp.dtype == torch.float32  # as the full path: log-probabilities in float32
    assert torch.allclose(logp, full_logp, atol=1e-6) and torch.allclose(entropy, full_entropy, atol=1e-5)
    assert torch.allclose(hidden.grad, full_grads[0], atol=1e-5)
    assert torch.allclose(weight.grad, full_grads[1], atol=1e-5)


def test_a_step_in_small_chunks_is_the_step_in_one(tmp_path, tiny_model) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    small, _ = build_trainer(tmp_path / "a", tiny_model, train={"logprob_chunk_tokens": 3})
    whole, _ = build_trainer(tmp_path / "b", tiny_model, train={"logprob_chunk_tokens": 100_000})
    batch = small.load_batch(str(random_batch(tmp_path / "batch.jsonl", seed=5, with_old=True)))
    one, two = small.train_step(1, batch), whole.train_step(1, batch)
    for key in ("loss", "grad_norm", "entropy", "tokens"):
        assert one[key] == pytest.approx(two[key], rel=1e-5, abs=1e-7), key
    assert max_abs_diff(trainer_weights(small), trainer_weights(whole)) < 1e-6
