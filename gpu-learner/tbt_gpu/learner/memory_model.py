"""Per-GPU and per-node host memory of the learner's training step, estimated without the hardware.

Runs the learner's own code (build_model, materialize, Trainer._update: forward, backward, clip, AdamW step) under
FakeTensorMode with a fake process group at the target world size, one micro-batch of one trajectory per sequence
length, and tracks every tensor with FSDP2's memory tracker (memory_tracker.SplitMemTracker). Fake tensors do no
compute, so a 27B model at 24 ranks runs on a laptop CPU; this process plays rank 0.

    python -m tbt_gpu.learner.memory_model --learner-config learner.json --world-size 24 --gpus-per-node 8 \
        --lengths 16384,65536,106496 --episode-budget 106496

What is estimated, not measured: the fixed per-rank overheads below (CUDA context, NCCL buffers, allocator
fragmentation, overlap of collectives with compute, host process size) and the GPU/host split (from where
CPUOffloadPolicy puts each category). The tracked bytes are the learner's real tensors; `memory_calibration`
compares the total with a measured run on CPU.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import dataclasses
import json
import pathlib
import sys
import time
from dataclasses import dataclass, field
from typing import Any, cast

GIB = 1024**3
SHAPES_DIR = pathlib.Path(__file__).resolve().parents[2] / "model-shapes"
DEFAULT_SHAPE = "qwen3.5-27b"

CUDA_CONTEXT_GIB = 0.75
"""CUDA context, kernels and cuBLAS/cuDNN workspaces per process on an H100 (CUDA 12 lazy loading): ~0.5-1 GiB."""
NCCL_GIB = 1.0
"""NCCL communicator buffers per rank for a 24-rank, 3-node world (NCCL_BUFFSIZE 4 MiB x channels x peers, plus the
gloo control group's few MB); set NCCL_BUFFSIZE lower to shrink it."""
FRAGMENTATION = 1.10
"""Caching-allocator overhead on the tracked peak (block rounding, streams' unreusable blocks); ~1.05 with
PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True, up to ~1.3 without it on long varying sequences."""
STREAM_OVERLAP_UNITS = 1
"""Extra FSDP units held on the GPU because collectives overlap compute on their own streams: the next unit's
all-gather (prefetch) in forward and backward, and the previous unit's reduce-scatter input in backward. The fake
run issues them in program order, so one largest unit's gathered params + fp32 reduce-scatter input is added."""
HOST_PROCESS_GIB = 3.0
"""Host RSS per learner process outside the tensors: Python, torch and CUDA libraries, the CUDA driver's host
side, the loaded batch file (~76 bytes per token as Python tuples)."""
PINNED_POWER_OF_TWO = True
"""Pinned host tensors (CPUOffloadPolicy pins the sharded parameters; gradients arrive by non_blocking D2H copies
into pinned memory) come from CUDA's caching host allocator, which rounds each block up to a power of two."""
PROMPT_TOKENS = 1024
"""Prompt of the simulated episode; every later position is scored (agent episodes: tool output included)."""


@dataclass(slots=True)
class LengthEstimate:
    tokens: int
    gpu_tracked: int
    """Bytes at the tracked GPU peak (the learner's tensors)."""
    gpu_breakdown: dict[str, int]
    overlap: int
    """STREAM_OVERLAP_UNITS largest units: gathered params + reduce-scatter input."""
    gpu_total: float = 0.0
    """GiB per GPU, all overheads included."""
    seconds: float = 0.0


@dataclass(slots=True)
class Estimate:
    parameters: int
    trainable: int
    world_size: int
    gpus_per_node: int
    offload: bool
    sharded_param_bytes: int
    sharded_grad_bytes: int
    opt_state_bytes: int
    host_rank_train: int
    """Pinned-rounded host bytes per rank while training (params + grads + optimizer state)."""
    host_rank_load: int
    """Host bytes per rank at the loading peak: shards + one tensor's rows read and converted."""
    lengths: list[LengthEstimate] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def host_node_gib(self) -> float:
        per_rank = max(self.host_rank_train, self.host_rank_load) / GIB + HOST_PROCESS_GIB
        return per_rank * self.gpus_per_node


def _pow2(n: int) -> int:
    return 1 << (n - 1).bit_length() if n > 0 else 0


def gpu_gib(tracked: int, overlap: int) -> float:
    return (tracked + overlap) * FRAGMENTATION / GIB + CUDA_CONTEXT_GIB + NCCL_GIB


def load_hf_config(model_path: str, override: str | None, notes: list[str]) -> Any:
    from transformers import AutoConfig

    for candidate in ([override] if override else []) + [model_path]:
        folder = pathlib.Path(candidate)
        folder = folder.parent if folder.name == "config.json" else folder
        if (folder / "config.json").is_file():
            notes.append(f"model config: {folder / 'config.json'}")
            return AutoConfig.from_pretrained(folder)
    shape = SHAPES_DIR / DEFAULT_SHAPE
    notes.append(f"model config: {model_path} has no config.json; using the reference shape {shape / 'config.json'}")
    return AutoConfig.from_pretrained(shape)


def _resolved(cfg: Any, world_size: int, device: str) -> Any:
    cfg = dataclasses.replace(cfg, distributed=dataclasses.replace(cfg.distributed, world_size=world_size))
    return cfg.resolve(cuda_available=device == "cuda", world_size=world_size)


class _Session:
    """The fake world: process group, DistInfo and a Trainer whose model is built with the learner's functions."""

    def __init__(self, cfg: Any, hf_config: Any, world_size: int, target_device: str) -> None:
        import torch
        import torch.distributed as dist
        from torch.distributed.device_mesh import init_device_mesh
        from torch.testing._internal.distributed.fake_pg import FakeStore

        from . import distributed
        from .distributed import DistInfo

        if not dist.is_initialized():
            dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=world_size)
        elif dist.get_world_size() != world_size:
            raise RuntimeError("memory model: the process group already has another world size")
        resolved = _resolved(cfg, world_size, target_device)
        self.info = DistInfo(
            rank=0,
            world_size=world_size,
            local_rank=0,
            device=torch.device("cpu"),
            backend="fake",
            mesh=init_device_mesh("cpu", (world_size,), mesh_dim_names=("dp_shard",)),
            control_group=dist.group.WORLD,
            config=resolved,
        )
        distributed._STATE = self.info  # any_rank / sum_across_ranks read it
        self.hf_config = hf_config


def _trainer_class() -> Any:
    import torch

    from .model import build_model, describe_model, materialize
    from .trainer import Trainer

    class FakeTrainer(Trainer):
        """The learner's Trainer; only the model comes from the config instead of a checkpoint (no weights)."""

        hf_config: Any = None

        def _build_model(self) -> tuple[torch.nn.Module, Any]:
            hf_config = copy.deepcopy(self.hf_config)
            model = build_model(self.info, hf_config)
            materialize(model, torch.device("cpu"))
            return model, describe_model(model, hf_config, self.cfg.model.max_seq_len)

    return FakeTrainer


def episode_batch(tokens: int, vocab: int, prompt_tokens: int = PROMPT_TOKENS, count: int = 1) -> Any:
    from .batch import Batch, Trajectory

    prompt = max(1, min(prompt_tokens, tokens // 2))
    trajectories = []
    for i in range(count):
        ids = tuple((7919 * (t + i) + 3) % vocab for t in range(tokens))
        mask = (0,) * prompt + (1,) * (tokens - prompt)
        trajectories.append(Trajectory(f"mem-{tokens}-{i}", ids, mask, 1.0 if i % 2 == 0 else -1.0, None, i + 1))
    return Batch(path=f"<memory-model {tokens}>", trajectories=tuple(trajectories))


def _largest_unit_bytes(model: Any, compute_bytes: int) -> int:
    """Gathered (compute dtype) + fp32 reduce-scatter input of the largest FSDP unit other than the root."""
    from .model import fsdp_modules

    # The root holds every parameter and the embeddings are gathered once, around the lookup: the units that
    # follow one another with their collectives overlapping are the decoder layers.
    embeddings = model.get_input_embeddings()
    layers = [m for m in fsdp_modules(model) if m is not model and m is not embeddings]
    largest = max((sum(p.numel() for p in cast(Any, m).parameters()) for m in layers), default=0)
    return largest * (compute_bytes + 4)


def estimate(
    cfg: Any,
    hf_config: Any,
    *,
    world_size: int,
    gpus_per_node: int,
    lengths: list[int],
    prompt_tokens: int = PROMPT_TOKENS,
    target_device: str = "cuda",
    progress: Any = None,
    delta_rule: str = "fla",
) -> Estimate:
    """Build the learner's model and trainer on fake tensors, then run one training step per length."""
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode

    from .delta_rule_memory import fla_kernel_memory
    from .fake_values import ShadowValues, eager_transformers
    from .memory_tracker import SplitMemTracker, storage_bytes
    from .model import DTYPES

    session = _Session(cfg, hf_config, world_size, target_device)
    offload = session.info.config.fsdp.cpu_offload
    notes: list[str] = []
    trainer_cls = _trainer_class()
    trainer_cls.hf_config = hf_config
    with contextlib.ExitStack() as stack:
        stack.enter_context(_fake_world_sums())
        stack.enter_context(FakeTensorMode(allow_non_fake_inputs=True))
        stack.enter_context(ShadowValues())
        stack.enter_context(eager_transformers())
        trainer = trainer_cls(session.info)
        if delta_rule == "fla" and stack.enter_context(fla_kernel_memory()):
            notes.append("linear attention: flash-linear-attention's chunk kernel memory (delta_rule_memory)")
        # A short step first creates AdamW's state (lazily, in step()), as any step after the first has it.
        _update(trainer, 1, episode_batch(min(64, min(lengths)), trainer.model_info.vocab_size, prompt_tokens))
        params = [p for p in trainer.model.parameters()]
        trainable = [p for p in params if p.requires_grad]
        states = [v for s in trainer.optimizer.state.values() for v in s.values() if isinstance(v, torch.Tensor)]
        sharded_param_bytes = storage_bytes(params)
        opt_state_bytes = storage_bytes(states)
        # Gradients exist only inside a step (zero_grad(set_to_none) in its finally): same shards as the params.
        sharded_grad_bytes = storage_bytes(trainable)
        pinned = offload and PINNED_POWER_OF_TWO
        host_params = sum(_pow2(_nbytes(p)) if pinned else _nbytes(p) for p in params)
        host_grads = sum(_pow2(_nbytes(p)) if pinned else _nbytes(p) for p in trainable)
        host_rank_train = host_params + host_grads + opt_state_bytes
        largest_rows = max(_nbytes(p) // 4 * (2 + 4) for p in params)  # bf16 rows read + their fp32 conversion
        host_rank_load = host_params + largest_rows
        compute_bytes = DTYPES[session.info.config.model.dtype].itemsize
        overlap = STREAM_OVERLAP_UNITS * _largest_unit_bytes(trainer.model, compute_bytes)
        result = Estimate(
            parameters=trainer.model_info.parameters,
            trainable=trainer.model_info.trainable_parameters,
            world_size=world_size,
            gpus_per_node=gpus_per_node,
            offload=offload,
            sharded_param_bytes=sharded_param_bytes,
            sharded_grad_bytes=sharded_grad_bytes,
            opt_state_bytes=opt_state_bytes,
            host_rank_train=host_rank_train if offload else 0,
            host_rank_load=host_rank_load if offload else 0,
            notes=notes,
        )
        for tokens in lengths:
            started = time.perf_counter()
            one = run_length(trainer, tokens, prompt_tokens, offload, SplitMemTracker)
            one.overlap = overlap
            one.gpu_total = gpu_gib(one.gpu_tracked, overlap)
            one.seconds = time.perf_counter() - started
            result.lengths.append(one)
            if progress:
                progress(one)
    return result


_GLOBAL_TOKENS: list[int] = [0]


@contextlib.contextmanager
def _fake_world_sums() -> Any:
    """The fake process group sums nothing, so rank 0's token count stands for the world's: right when rank 0 holds
    the whole batch, not when context parallelism splits the episode over ranks. The step's check that the ranks
    trained every token of the batch is then given the batch's count (rank 0's other sums are kept)."""
    from . import trainer as trainer_module
    from .loss import LossSums

    original = trainer_module.sum_across_ranks
    index = list(LossSums.__slots__).index("tokens")

    def summed(values: list[float]) -> list[float]:
        values = list(values)
        values[index] = float(_GLOBAL_TOKENS[0])
        return values

    trainer_module.sum_across_ranks = summed
    try:
        yield
    finally:
        trainer_module.sum_across_ranks = original


def _update(trainer: Any, step_id: int, batch: Any) -> None:
    _GLOBAL_TOKENS[0] = batch.token_count
    trainer._update(step_id, batch)


def _nbytes(t: Any) -> int:
    from torch.distributed.tensor import DTensor

    local = t.to_local() if isinstance(t, DTensor) else t
    return local.numel() * local.element_size()


def run_length(trainer: Any, tokens: int, prompt_tokens: int, offload: bool, tracker_cls: Any) -> LengthEstimate:
    batch = episode_batch(tokens, trainer.model_info.vocab_size, prompt_tokens)
    tracker = tracker_cls(trainer.model, trainer.optimizer, offload=offload)
    tracker.classify_persistent()
    optimizer = trainer.optimizer
    handle = optimizer.register_step_pre_hook(lambda *_: tracker.track_grads())
    try:
        with tracker:
            tracker.classify_persistent()
            _update(trainer, 2, batch)
    finally:
        handle.remove()
    return LengthEstimate(
        tokens=tokens, gpu_tracked=tracker.gpu_peak, gpu_breakdown=tracker.gpu_peak_breakdown, overlap=0
    )


def max_tokens_under(points: list[tuple[int, float]], limit_gib: float) -> int:
    """Longest episode whose GPU peak stays under `limit_gib`, linear between (or beyond) the measured lengths."""
    points = sorted(points)
    if len(points) == 1:
        tokens, gib = points[0]
        return tokens if gib <= limit_gib else 0
    for (t0, g0), (t1, g1) in zip(points, points[1:]):
        if g0 <= limit_gib < g1:
            return int(t0 + (limit_gib - g0) * (t1 - t0) / (g1 - g0))
    (t0, g0), (t1, g1) = points[-2], points[-1]
    if g1 <= limit_gib:
        slope = (g1 - g0) / (t1 - t0)
        return int(t1 + (limit_gib - g1) / slope) if slope > 0 else 1 << 40
    (t0, g0), (t1, g1) = points[0], points[1]
    if g0 > limit_gib:
        slope = (g1 - g0) / (t1 - t0)
        return max(0, int(t0 - (g0 - limit_gib) / slope)) if slope > 0 else 0
    return t0


def _lengths(text: str) -> list[int]:
    values = sorted({int(v) for v in text.replace(" ", "").split(",") if v})
    if not values or values[0] < 2:
        raise ValueError(f"--lengths: need token counts >= 2, got {text!r}")
    return values


def learner_config_from_args(args: argparse.Namespace) -> Any:
    from .config import LearnerConfig

    if args.learner_config:
        data = json.loads(pathlib.Path(args.learner_config).read_text(encoding="utf-8"))
    else:
        data = {"model": {"path": args.model_path or str(SHAPES_DIR / DEFAULT_SHAPE)}, "checkpoint": {"dir": "/tmp"}}
    data = copy.deepcopy(data)
    fsdp = data.setdefault("fsdp", {})
    train = data.setdefault("train", {})
    if args.cpu_offload is not None:
        fsdp["cpu_offload"] = args.cpu_offload == "true"
    if args.activation_checkpointing is not None:
        fsdp["activation_checkpointing"] = args.activation_checkpointing == "true"
    if args.micro_batch_tokens:
        train["micro_batch_tokens"] = args.micro_batch_tokens
    # The estimate is of the GPU run: whatever device the config names, it is resolved as cuda (bf16 "auto").
    data.setdefault("distributed", {}).update({"device": "cuda", "backend": "auto", "world_size": None})
    return LearnerConfig.from_dict(data)


def _gib(n: float) -> str:
    return f"{n / GIB:.2f}"


def report(est: Estimate, *, limit_gib: float, episode_budget: int | None, out: Any = sys.stdout) -> int:
    """Prints the estimate; the last line is the summary the campaign tools parse. Returns max_episode_tokens."""
    w = est.world_size
    p = print
    for note in est.notes:
        p(f"note: {note}", file=out)
    p(
        f"model: {est.parameters:,} parameters ({est.parameters / 1e9:.2f}B), {est.trainable:,} trainable; "
        f"{w} ranks, {est.gpus_per_node} per node; cpu_offload={'on' if est.offload else 'off'}",
        file=out,
    )
    arithmetic = est.parameters * 4 / w
    p(
        f"per rank (fp32 shards): params {_gib(est.sharded_param_bytes)} GiB, grads {_gib(est.sharded_grad_bytes)} "
        f"GiB, AdamW state {_gib(est.opt_state_bytes)} GiB (arithmetic N*4/W = {_gib(arithmetic)} GiB, "
        f"x{est.opt_state_bytes / (est.trainable * 4 / w):.2f} for the optimizer)",
        file=out,
    )
    where = "host" if est.offload else "GPU"
    p(f"  ({where}: {'CPUOffloadPolicy' if est.offload else 'no offload'})", file=out)
    p(
        f"fixed per GPU: CUDA context {CUDA_CONTEXT_GIB} GiB + NCCL {NCCL_GIB} GiB; tracked peak x{FRAGMENTATION} "
        f"allocator fragmentation; + {STREAM_OVERLAP_UNITS} FSDP unit in flight (collective/compute overlap)",
        file=out,
    )
    for one in est.lengths:
        parts = ", ".join(f"{k.lower().replace(' ', '_')}={_gib(v)}" for k, v in one.gpu_breakdown.items() if v)
        p(
            f"tokens={one.tokens}: peak_gpu_gib={one.gpu_total:.2f} (tracked {_gib(one.gpu_tracked)}: {parts}; "
            f"overlap {_gib(one.overlap)}) [{one.seconds:.0f}s]",
            file=out,
        )
    host_train = est.host_rank_train / GIB
    host_load = est.host_rank_load / GIB
    p(
        f"host per node: {est.host_node_gib:.1f} GiB = {est.gpus_per_node} x (max(train {host_train:.2f}, "
        f"load {host_load:.2f}) GiB pinned-rounded shards + {HOST_PROCESS_GIB} GiB process)",
        file=out,
    )
    points = [(one.tokens, one.gpu_total) for one in est.lengths]
    max_tokens = max_tokens_under(points, limit_gib)
    peak_gpu = max(one.gpu_total for one in est.lengths)
    budget_tokens = episode_budget if episode_budget is not None else max(one.tokens for one in est.lengths)
    at_budget = next((g for t, g in points if t == budget_tokens), None)
    if at_budget is not None:
        peak_gpu = at_budget
    fits = max_tokens >= budget_tokens and peak_gpu <= limit_gib
    if not fits:
        over = peak_gpu - limit_gib
        worst = max(est.lengths, key=lambda o: o.tokens)
        category = max(worst.gpu_breakdown.items(), key=lambda kv: kv[1])[0] if worst.gpu_breakdown else "?"
        p(
            f"verdict: does not fit: {budget_tokens} tokens need {peak_gpu:.1f} GiB per GPU, {over:.1f} GiB over the "
            f"{limit_gib} GiB limit; largest category: {category}; longest episode that fits: {max_tokens} tokens",
            file=out,
        )
    p(
        f"memory: params_b={est.parameters / 1e9:.2f} ranks={w} peak_gpu_gib={peak_gpu:.1f} "
        f"peak_host_gib={est.host_node_gib:.1f} max_episode_tokens={max_tokens} fits={'yes' if fits else 'no'}",
        file=out,
    )
    return max_tokens


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tbt_gpu.learner.memory_model", description=(__doc__ or "").split("\n")[0]
    )
    parser.add_argument("--learner-config", help="the learner's JSON config (LearnerConfig)")
    parser.add_argument("--model-path", help="without --learner-config: the model folder (or a model-shapes one)")
    parser.add_argument("--model-config", help="config.json (or its folder) to use instead of the model path's")
    parser.add_argument("--world-size", type=int, required=True)
    parser.add_argument("--gpus-per-node", type=int, default=8)
    parser.add_argument("--lengths", default="16384,65536,106496", help="episode lengths in tokens, comma-separated")
    parser.add_argument("--episode-budget", type=int, help="the longest episode the campaign allows (tokens)")
    parser.add_argument("--gpu-limit-gib", type=float, default=75.0)
    parser.add_argument("--prompt-tokens", type=int, default=PROMPT_TOKENS)
    parser.add_argument("--cpu-offload", choices=["true", "false"])
    parser.add_argument("--activation-checkpointing", choices=["true", "false"])
    parser.add_argument("--micro-batch-tokens", type=int)
    parser.add_argument(
        "--delta-rule",
        choices=["fla", "torch"],
        default="fla",
        help="linear attention: fla kernel memory (default) or transformers' PyTorch reference loop",
    )
    args = parser.parse_args(argv)
    import logging

    logging.disable(logging.WARNING)
    cfg = learner_config_from_args(args)
    notes: list[str] = []
    hf_config = load_hf_config(cfg.model.path, args.model_config, notes)
    lengths = _lengths(args.lengths)
    if args.episode_budget and args.episode_budget not in lengths:
        lengths = sorted({*lengths, args.episode_budget})

    def progress(one: LengthEstimate) -> None:
        print(f"  ran tokens={one.tokens} in {one.seconds:.0f}s", file=sys.stderr, flush=True)

    est = estimate(
        cfg,
        hf_config,
        world_size=args.world_size,
        gpus_per_node=args.gpus_per_node,
        lengths=lengths,
        prompt_tokens=args.prompt_tokens,
        progress=progress,
        delta_rule=args.delta_rule,
    )
    est.notes[:0] = notes
    report(est, limit_gib=args.gpu_limit_gib, episode_budget=args.episode_budget)
    return 0


if __name__ == "__main__":
    sys.exit(main())
