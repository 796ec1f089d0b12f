"""A stand-in for the Gated-DeltaNet chunk kernel with the memory of flash-linear-attention's, for fake runs only.

Without flash-linear-attention installed, transformers runs Qwen3.5's linear-attention layers with its PyTorch
reference (`torch_chunk_gated_delta_rule`): a Python loop over 64-token chunks, ~10 ops each, so a 106k-token
episode is ~1,700 iterations per layer, 48 layers, forward + recompute + backward: hours of fake dispatch, and the
memory of a loop's autograd graph, not of the kernel a GPU run should use. `fla_chunk_memory` allocates what fla's
`chunk_gated_delta_rule` (fla/ops/gated_delta_rule/chunk.py) allocates, as fake tensors, and computes nothing:

- forward: cumulative gates g [B,T,H] fp32; the intra-chunk matrix A [B,T,H,64]; the l2-normalised q and k; then
  transiently w (like k), u and v_new (like v) and the chunk states h [B,T/64,H,K,V]; output o (like v). Saved for
  backward: q, k (normalised), v, g, beta, A.
- backward: w, u, h, v_new recomputed, dh like h, then dq, dk, dv, dg, dbeta.

h and dh are held in the compute dtype (bf16), as fla does by default. This is an estimate of the kernel's memory
from its source, not a measurement.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch

CHUNK = 64


def _states(k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    b, t, _, dk = k.shape
    return k.new_empty(b, (t + CHUNK - 1) // CHUNK, v.shape[2], dk, v.shape[-1])


class _FlaChunkMemory(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor, beta: torch.Tensor):
        g_cum = torch.empty_like(g, dtype=torch.float32)
        a = k.new_empty(*k.shape[:3], CHUNK)
        q_n, k_n = torch.empty_like(q), torch.empty_like(k)
        w, u, v_new, h = torch.empty_like(k_n), torch.empty_like(v), torch.empty_like(v), _states(k, v)
        o = torch.empty_like(v)
        del w, u, v_new, h
        ctx.save_for_backward(q_n, k_n, v, g_cum, beta, a)
        return o

    @staticmethod
    def backward(ctx: Any, grad_o: torch.Tensor):
        q_n, k_n, v, g_cum, beta, a = ctx.saved_tensors
        w, u, v_new, h = torch.empty_like(k_n), torch.empty_like(v), torch.empty_like(v), _states(k_n, v)
        dh = torch.empty_like(h)
        dv = torch.empty_like(v)
        dq, dk = torch.empty_like(q_n), torch.empty_like(k_n)
        dg = torch.empty_like(g_cum)
        dbeta = torch.empty_like(beta)
        del w, u, v_new, h, dh
        return dq, dk, dv, dg, dbeta


def fla_chunk_memory(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    chunk_size: int = CHUNK,
    initial_state: torch.Tensor | None = None,
    output_final_state: bool = False,
    use_qk_l2norm_in_kernel: bool = False,
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Same signature and output as transformers' `torch_chunk_gated_delta_rule` ([B,T,H,V], no final state)."""
    del chunk_size, initial_state, output_final_state, use_qk_l2norm_in_kernel, kwargs
    return _FlaChunkMemory.apply(query, key, value, g, beta), None


@contextlib.contextmanager
def fla_kernel_memory() -> Iterator[list[str]]:
    """Routes every loaded transformers model module's chunk delta rule to `fla_chunk_memory`; yields their names."""
    import sys

    patched: list[tuple[Any, Any]] = []  # Any: module attributes the type checker cannot know
    modules: list[tuple[str, Any]] = list(sys.modules.items())
    for name, module in modules:
        if name.startswith("transformers.models.") and hasattr(module, "torch_chunk_gated_delta_rule"):
            patched.append((module, module.torch_chunk_gated_delta_rule))
            module.torch_chunk_gated_delta_rule = fla_chunk_memory
    try:
        yield [m.__name__ for m, _ in patched]
    finally:
        for module, original in patched:
            module.torch_chunk_gated_delta_rule = original
