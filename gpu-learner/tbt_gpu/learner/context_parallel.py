"""Context (sequence) parallelism: one long episode split over the P ranks of a CP group.

Each rank of a group holds a contiguous 1/P of every row's tokens (`split_sequence`, `cp_micro_batch`); everything
position-wise (embeddings, MLPs, norms, the vocabulary projection, the loss) runs on that slice alone. Only the
token mixers need the other ranks:

- softmax attention, DeepSpeed-Ulysses style (`ulysses_attention`, registered with transformers'
  `AttentionInterface`): q/k/v of the local slice [B, H, S/P, D] go through an all-to-all to [B, H/P, S, D] (all
  tokens, a 1/P of the heads), causal SDPA runs, and a second all-to-all brings [B, H, S/P, D] back. RoPE was already
  applied by the model with the slice's global position_ids, so nothing position-dependent crosses ranks.
- Gated-DeltaNet linear attention (`linear_attn` of the hybrid Qwen3.5 / Qwen3-Next models): a pre-hook all-gathers
  the layer's input along the sequence, the layer runs on the whole sequence, and a hook keeps the local slice of its
  output. Correct, but the layer's compute (projections, conv, delta rule) is replicated P times and its activations
  are full-length while it runs. A head-split variant (all-to-all after the in-projections; the conv is depthwise
  and the delta rule is per head, so both split by heads like Ulysses) would remove the replication.

Supported rows: one trajectory per row, right padding only at the end, no packed/prompt-shared rows and no custom
4D masks (the attention is plain causal over the whole row; pads at the end only influence later pads). Sliding
window layers are refused. Under `enable_context_parallel` the model ignores the 2D padding mask it is given.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from transformers import AttentionInterface, PreTrainedConfig

from .batch import Batch, MicroBatch, PromptRow, Trajectory, pack_micro_batches, prompt_rows, shard_for_ranks

ATTENTION_NAME = "tbt_cp_ulysses"
"""The attn_implementation name under which `ulysses_attention` is registered."""

SUPPORTED_LAYER_TYPES = {"full_attention", "linear_attention"}


@dataclass(frozen=True, slots=True)
class CPGroup:
    """This rank's context-parallel group: `size` consecutive global ranks; `rank` is the index within it."""

    group: Any
    rank: int
    size: int
    ranks: tuple[int, ...] = ()


# --- process groups -------------------------------------------------------------------------------------------------


def new_cp_groups(cp_size: int, ranks_per_node: int | None = None) -> CPGroup:
    """Split the default group into blocks of `cp_size` consecutive ranks; returns the block of this rank.

    Every rank must call this (dist.new_group is collective: all ranks create every group, in the same order). With
    node-major ranks a block stays within one node when `ranks_per_node` (default: LOCAL_WORLD_SIZE, if set) is a
    multiple of `cp_size`: the all-to-alls then run over NVLink, never the inter-node network.
    """
    world, me = dist.get_world_size(), dist.get_rank()
    if cp_size < 1 or world % cp_size:
        raise ValueError(f"context parallel: size {cp_size} must divide the world size {world}")
    if ranks_per_node is None and "LOCAL_WORLD_SIZE" in os.environ:
        ranks_per_node = int(os.environ["LOCAL_WORLD_SIZE"])
    if ranks_per_node is not None and ranks_per_node % cp_size:
        raise ValueError(f"context parallel: size {cp_size} must divide the {ranks_per_node} ranks of a node")
    mine: CPGroup | None = None
    for start in range(0, world, cp_size):
        ranks = tuple(range(start, start + cp_size))
        group = dist.new_group(list(ranks))
        if me in ranks:
            mine = CPGroup(group=group, rank=me - start, size=cp_size, ranks=ranks)
    assert mine is not None
    return mine


# --- autograd-aware collectives -------------------------------------------------------------------------------------


def _all_to_all(x: torch.Tensor, scatter_dim: int, gather_dim: int, group: Any, size: int) -> torch.Tensor:
    """Chunk j of `scatter_dim` goes to rank j; the chunks received from ranks 0..P-1 are joined along `gather_dim`."""
    send = torch.stack(x.chunk(size, dim=scatter_dim)).contiguous()
    recv = torch.empty_like(send)
    dist.all_to_all_single(recv, send, group=group)
    return torch.cat(recv.unbind(0), dim=gather_dim)


class _AllToAll(torch.autograd.Function):
    """The adjoint of an all-to-all is the all-to-all with the two dimensions swapped."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, scatter_dim: int, gather_dim: int, cp: CPGroup) -> torch.Tensor:
        ctx.dims, ctx.cp = (scatter_dim, gather_dim), cp
        return _all_to_all(x, scatter_dim, gather_dim, cp.group, cp.size)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        scatter_dim, gather_dim = ctx.dims
        return _all_to_all(grad, gather_dim, scatter_dim, ctx.cp.group, ctx.cp.size), None, None, None


class _GatherSequence(torch.autograd.Function):
    """All-gather along `dim`; the gradient is a reduce-scatter.

    Every rank's output slice depends on the whole gathered input, so the gradient of this rank's input slice is the
    SUM over ranks of their gradients' slice for it, not this rank's slice alone. The reduce-scatter is an
    all-to-all plus a local sum (gloo has no reduce_scatter; on NCCL it moves the same bytes).
    """

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, dim: int, cp: CPGroup) -> torch.Tensor:
        ctx.dim, ctx.cp = dim, cp
        parts = [torch.empty_like(x) for _ in range(cp.size)]
        dist.all_gather(parts, x.contiguous(), group=cp.group)
        return torch.cat(parts, dim=dim)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        cp = ctx.cp
        send = torch.stack(grad.chunk(cp.size, dim=ctx.dim)).contiguous()
        recv = torch.empty_like(send)
        dist.all_to_all_single(recv, send, group=cp.group)
        return recv.sum(0), None, None


def gather_sequence(x: torch.Tensor, cp: CPGroup, dim: int = 1) -> torch.Tensor:
    return _GatherSequence.apply(x, dim, cp)


def local_slice(x: torch.Tensor, cp: CPGroup, dim: int = 1) -> torch.Tensor:
    """This rank's contiguous 1/P of `x` along `dim` (whose length must be a multiple of P)."""
    if x.shape[dim] % cp.size:
        raise ValueError(f"context parallel: length {x.shape[dim]} is not a multiple of the CP size {cp.size}")
    return x.chunk(cp.size, dim=dim)[cp.rank]


# --- attention ------------------------------------------------------------------------------------------------------

_ACTIVE: CPGroup | None = None
"""The CP group of the model that `enable_context_parallel` switched on (one per process)."""


def ulysses_attention(
    module: nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """Causal attention of the local slice q/k/v [B, H, S/P, D] against the whole sequence; returns [B, S/P, H, D]."""
    cp = _ACTIVE
    if cp is None:
        raise RuntimeError(f"attn_implementation {ATTENTION_NAME!r} used outside enable_context_parallel()")
    if attention_mask is not None:
        raise ValueError(
            "context parallel: only plain causal rows are supported (got an explicit attention mask: "
            "packed or prompt-shared rows?)"
        )
    if getattr(module, "sliding_window", None):
        raise ValueError("context parallel: sliding-window attention layers are not supported")
    heads, kv_heads = query.shape[1], key.shape[1]
    if heads % cp.size:
        raise ValueError(
            f"context parallel: the model has {heads} attention heads, not divisible by the context-parallel "
            f"size {cp.size}; choose a CP size that divides {heads}"
        )
    if kv_heads % cp.size:
        # GQA with kv heads not divisible by P: every rank needs the kv head of each of its query heads. Repeat to
        # P kv heads when possible (one per rank: 4 -> 8 for Qwen3.5-27B at P = 8), else to one per query head.
        target = cp.size if cp.size % kv_heads == 0 else heads
        key = key.repeat_interleave(target // kv_heads, dim=1)
        value = value.repeat_interleave(target // kv_heads, dim=1)
    # Why these dims: scatter heads (1), gather sequence (2); rank r receives heads r*H/P.. of every slice in order.
    q = _AllToAll.apply(query, 1, 2, cp)
    k = _AllToAll.apply(key, 1, 2, cp)
    v = _AllToAll.apply(value, 1, 2, cp)
    if k.shape[1] != q.shape[1]:
        # kv heads split evenly too: local query head j still maps to local kv head j // (H / H_kv)
        k = k.repeat_interleave(q.shape[1] // k.shape[1], dim=1)
        v = v.repeat_interleave(q.shape[1] // v.shape[1], dim=1)
    out = torch.nn.functional.scaled_dot_product_attention(q, k, v, dropout_p=dropout, is_causal=True, scale=scaling)
    out = _AllToAll.apply(out, 2, 1, cp)
    return out.transpose(1, 2).contiguous(), None


AttentionInterface.register(ATTENTION_NAME, ulysses_attention)


# --- linear attention -----------------------------------------------------------------------------------------------


def _gather_input(cp: CPGroup, module: nn.Module, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    if kwargs.get("cache") is not None or kwargs.get("cache_params") is not None:
        raise ValueError("context parallel: no cache (generation) support; run the model with use_cache=False")
    kwargs = dict(kwargs)
    # Padding is only at the end of a row and the layer is causal, so its 2D padding mask may go (a local mask
    # would not match the gathered length, and ranks without padding get None, so gathering it could deadlock).
    kwargs["attention_mask"] = None
    if "hidden_states" in kwargs:
        kwargs["hidden_states"] = gather_sequence(kwargs["hidden_states"], cp)
        return args, kwargs
    return (gather_sequence(args[0], cp), *args[1:]), kwargs


def _keep_local(cp: CPGroup, module: nn.Module, args: tuple, kwargs: dict, output: Any) -> Any:
    if isinstance(output, tuple):
        return (local_slice(output[0], cp), *output[1:])
    return local_slice(output, cp)


# --- switching a model on and off -----------------------------------------------------------------------------------


@dataclass(slots=True)
class ContextParallelHandle:
    model: nn.Module
    cp: CPGroup
    configs: list[tuple[PreTrainedConfig, Any]] = field(default_factory=list)
    hooks: list[Any] = field(default_factory=list)

    def disable(self) -> None:
        global _ACTIVE
        for hook in self.hooks:
            hook.remove()
        self.hooks.clear()
        for config, previous in self.configs:
            config._attn_implementation = previous
        self.configs.clear()
        if _ACTIVE is self.cp:
            _ACTIVE = None


def _configs(model: nn.Module) -> list[PreTrainedConfig]:
    seen: dict[int, PreTrainedConfig] = {}
    for module in model.modules():
        config = getattr(module, "config", None)
        if isinstance(config, PreTrainedConfig):
            seen.setdefault(id(config), config)
    return list(seen.values())


def enable_context_parallel(model: nn.Module, cp: CPGroup) -> ContextParallelHandle:
    """Make `model` (plain or FSDP-wrapped) run on this rank's sequence slice; `.disable()` undoes it.

    Sets every config's attention implementation to ATTENTION_NAME (directly: `set_attn_implementation` refuses
    classes it cannot inspect, such as FSDP's wrapper classes) and hooks every `linear_attn` module.
    """
    global _ACTIVE
    if _ACTIVE is not None and _ACTIVE is not cp:
        raise RuntimeError("context parallel: another model is already enabled in this process")
    for config in _configs(model):
        types = set(getattr(config, "layer_types", None) or []) - SUPPORTED_LAYER_TYPES
        if types:
            raise ValueError(f"context parallel: layer types {sorted(types)} are not supported")
    handle = ContextParallelHandle(model=model, cp=cp)
    _ACTIVE = cp
    try:
        for config in _configs(model):
            handle.configs.append((config, config._attn_implementation))
            config._attn_implementation = ATTENTION_NAME
        for name, module in model.named_modules():
            if name.rsplit(".", 1)[-1] == "linear_attn":
                gather = module.register_forward_pre_hook(lambda m, a, k: _gather_input(cp, m, a, k), with_kwargs=True)
                keep = module.register_forward_hook(lambda m, a, k, o: _keep_local(cp, m, a, k, o), with_kwargs=True)
                handle.hooks += [gather, keep]
    except BaseException:
        handle.disable()
        raise
    return handle


class context_parallel:  # noqa: N801 - used as a context manager, like torch.no_grad
    """`with context_parallel(model, cp): ...` enables CP for the block (a no-op when cp is None or of size 1)."""

    def __init__(self, model: nn.Module, cp: CPGroup | None) -> None:
        self.model, self.cp = model, cp
        self.handle: ContextParallelHandle | None = None

    def __enter__(self) -> ContextParallelHandle | None:
        if self.cp is not None and self.cp.size > 1:
            self.handle = enable_context_parallel(self.model, self.cp)
        return self.handle

    def __exit__(self, *exc: object) -> None:
        if self.handle is not None:
            self.handle.disable()


# --- splitting the data ---------------------------------------------------------------------------------------------


def padded_length(length: int, cp_size: int) -> int:
    return math.ceil(length / cp_size) * cp_size


def split_sequence(x: torch.Tensor, cp: CPGroup, pad_value: float | int = 0, dim: int = 1) -> torch.Tensor:
    """This rank's contiguous slice of `x` along `dim`, after right-padding that dim to a multiple of the CP size.

    Shift targets (token t+1 for position t) on the WHOLE row before splitting: the last position of a slice
    predicts the first token of the next rank's slice.
    """
    extra = padded_length(x.shape[dim], cp.size) - x.shape[dim]
    if extra:
        shape = list(x.shape)
        shape[dim] = extra
        x = torch.cat([x, x.new_full(shape, pad_value)], dim=dim)
    return local_slice(x, cp, dim)


def cp_micro_batch(rows: list[PromptRow], pad_id: int, cp: CPGroup) -> MicroBatch:
    """This CP rank's share of a micro-batch of single-trajectory rows, in the MicroBatch layout the trainer uses.

    Rows are right-padded to a multiple of P and sliced; per trajectory (B = rows) the columns are the scored
    positions of this rank's slice, left-aligned: position t predicts token t + 1, with its target, mask and sampled
    log-probability. `tokens` counts this rank's mask-1 tokens only, so a group's ranks count each token once.
    """
    if any(len(row.members) != 1 for row in rows):
        raise ValueError("context parallel: rows must hold one trajectory each (train.share_prompts off)")
    width = padded_length(max(row.length for row in rows), cp.size)
    shape = (len(rows), width)
    input_ids = torch.full(shape, pad_id, dtype=torch.long)
    targets = torch.full(shape, pad_id, dtype=torch.long)
    loss_mask = torch.zeros(shape, dtype=torch.float32)
    old = torch.zeros(shape, dtype=torch.float32)
    scored = torch.zeros(shape, dtype=torch.bool)
    has_old = torch.zeros(len(rows), dtype=torch.bool)
    for r, row in enumerate(rows):
        traj, p, n = row.members[0], row.prompt_len, row.length
        input_ids[r, :n] = torch.tensor(traj.input_ids, dtype=torch.long)
        # Shifted on the whole row: the last position of a slice predicts the first token of the next slice.
        targets[r, : n - 1] = input_ids[r, 1:n]
        loss_mask[r, p - 1 : n - 1] = torch.tensor(traj.loss_mask[p:], dtype=torch.float32)
        scored[r, p - 1 : n - 1] = True
        if traj.old_logprobs is not None:
            old[r, p - 1 : n - 1] = torch.tensor(traj.old_logprobs[p:], dtype=torch.float32)
            has_old[r] = True
    positions = torch.arange(width).expand(shape)
    input_ids, positions, scored, targets, loss_mask, old = (
        local_slice(x, cp).contiguous() for x in (input_ids, positions, scored, targets, loss_mask, old)
    )
    counts = scored.sum(dim=1)
    columns = max(int(counts.max()), 1)
    flat = torch.cumsum(scored.flatten().long(), 0).view(scored.shape) - 1  # index among the projected logits
    if not scored.any():
        # A slice of prompt only still projects one logit, so that `gather` indexes something (mask 0).
        scored[0, 0] = True
    gather = torch.zeros((len(rows), columns), dtype=torch.long)
    out_targets = torch.full((len(rows), columns), pad_id, dtype=torch.long)
    out_mask = torch.zeros((len(rows), columns), dtype=torch.float32)
    out_old = torch.zeros((len(rows), columns), dtype=torch.float32)
    for r in range(len(rows)):
        keep, k = scored[r] & (flat[r] >= 0), int(counts[r])
        gather[r, :k], out_targets[r, :k] = flat[r, keep], targets[r, keep]
        out_mask[r, :k], out_old[r, :k] = loss_mask[r, keep], old[r, keep]
    return MicroBatch(
        input_ids=input_ids,
        attention_mask=torch.ones_like(input_ids),
        position_ids=positions,
        scored=scored,
        gather=gather,
        targets=out_targets,
        loss_mask=out_mask,
        old_logprobs=out_old,
        has_old_logprobs=has_old,
        advantages=torch.tensor([row.members[0].advantage for row in rows], dtype=torch.float32),
        trajectory_ids=tuple(row.members[0].trajectory_id for row in rows),
        tokens=int(out_mask.sum()),
    )


def plan_cp_micro_batches(
    batch: Batch, *, rank: int, world_size: int, cp: CPGroup, token_budget: int, pad_id: int
) -> list[MicroBatch]:
    """This rank's micro-batches under CP: as batch.plan_rank_micro_batches over the world / P data-parallel groups
    (group g = ranks g*P .. g*P+P-1, as `new_cp_groups` builds them); the P ranks of a group get the same rows, each
    its slice. `token_budget` is per rank: a micro-batch holds up to P times as many tokens (a longer row goes
    alone). Rows never share prompts. Groups with fewer micro-batches get fillers (FSDP needs equal pass counts).
    """
    if world_size % cp.size or rank // cp.size != cp.ranks[0] // cp.size:
        raise ValueError(f"context parallel: rank {rank} of {world_size} is not in a consecutive group of {cp.size}")
    budget = token_budget * cp.size
    rows = prompt_rows(batch.trajectories, budget, share=False)
    packed = [pack_micro_batches(share, budget) for share in shard_for_ranks(rows, world_size // cp.size)]
    count = max(len(groups) for groups in packed)
    mine = [cp_micro_batch(group, pad_id, cp) for group in packed[rank // cp.size]]
    filler = Trajectory("<filler>", (pad_id, pad_id), (0, 0), 0.0, None, 0)
    mine.extend(cp_micro_batch([PromptRow(1, (filler,))], pad_id, cp) for _ in range(count - len(mine)))
    return mine
