"""Learner configuration: one dataclass per component, every hyperparameter explicit.

This module must not import torch: `launch.py` prints resolved configs on machines without it.
"""

from __future__ import annotations

import dataclasses
import json
import math
import pathlib
from dataclasses import dataclass, field
from typing import Any, Literal, get_args

Device = Literal["auto", "cpu", "cuda"]
Backend = Literal["auto", "nccl", "gloo"]
DType = Literal["auto", "float32", "bfloat16"]
Aggregation = Literal["token-mean"]
OldLogprobs = Literal["recompute", "sampler"]
SamplerLogprobs = Literal["raw", "processed"]


def _require(cond: bool, name: str, message: str) -> None:
    if not cond:
        raise ValueError(f"{name}: {message}")


def _require_choice(value: object, choices: Any, name: str) -> None:
    allowed = get_args(choices)
    _require(value in allowed, name, f"must be one of {list(allowed)}, got {value!r}")


def _require_number(value: object, name: str) -> float:
    _require(
        isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value),
        name,
        f"must be a finite number, got {value!r}",
    )
    return float(value)  # type: ignore[arg-type]  # checked just above


def _require_int(value: object, name: str, minimum: int) -> None:
    _require(
        isinstance(value, int) and not isinstance(value, bool) and value >= minimum,
        name,
        f"must be an integer >= {minimum}, got {value!r}",
    )


@dataclass(kw_only=True, slots=True)
class ModelConfig:
    path: str
    """Local folder of a Hugging Face causal LM (config.json, *.safetensors, tokenizer files)."""
    dtype: DType = "auto"
    """Compute dtype. Master weights and optimizer state stay float32; "auto" = bfloat16 on cuda, float32 on cpu."""
    export_dtype: DType = "auto"
    """Dtype of exported serving weights; "auto" = the compute dtype."""
    max_seq_len: int | None = None
    """Longest accepted sequence; None = the model's max_position_embeddings. Longer sequences are an error."""

    def __post_init__(self) -> None:
        _require(isinstance(self.path, str) and self.path != "", "model.path", "must be a non-empty path")
        _require_choice(self.dtype, DType, "model.dtype")
        _require_choice(self.export_dtype, DType, "model.export_dtype")
        if self.max_seq_len is not None:
            _require_int(self.max_seq_len, "model.max_seq_len", 2)


@dataclass(kw_only=True, slots=True)
class DistributedConfig:
    device: Device = "auto"
    """Where compute runs; "auto" = cuda when available, else cpu."""
    backend: Backend = "auto"
    """torch.distributed backend; "auto" = nccl on cuda, gloo on cpu."""
    world_size: int | None = None
    """Expected number of ranks; None = whatever torchrun starts. A mismatch with WORLD_SIZE is an error."""
    timeout_s: float = 1800.0
    """Collective timeout in seconds (process group creation and every collective)."""

    def __post_init__(self) -> None:
        _require_choice(self.device, Device, "distributed.device")
        _require_choice(self.backend, Backend, "distributed.backend")
        if self.world_size is not None:
            _require_int(self.world_size, "distributed.world_size", 1)
        _require(_require_number(self.timeout_s, "distributed.timeout_s") > 0, "distributed.timeout_s", "must be > 0")
        if self.device == "cpu":
            _require(self.backend != "nccl", "distributed.backend", "nccl needs device cuda")


@dataclass(kw_only=True, slots=True)
class FSDPConfig:
    cpu_offload: bool = False
    """Keep sharded parameters, gradients and optimizer state in host memory (FSDP2 CPUOffloadPolicy)."""
    activation_checkpointing: bool = False
    """Recompute decoder-layer activations in backward instead of storing them."""
    reshard_after_forward: bool = True
    """Free gathered parameters after forward (ZeRO-3); False keeps them until backward (ZeRO-2 like)."""

    def __post_init__(self) -> None:
        for name in ("cpu_offload", "activation_checkpointing", "reshard_after_forward"):
            _require(isinstance(getattr(self, name), bool), f"fsdp.{name}", "must be true or false")


@dataclass(kw_only=True, slots=True)
class OptimizerConfig:
    name: Literal["adamw"] = "adamw"
    """Optimizer; only AdamW (torch.optim.AdamW) is supported."""
    lr: float = 1e-6
    """Learning rate (constant, no schedule)."""
    betas: tuple[float, float] = (0.9, 0.999)
    """AdamW (beta1, beta2)."""
    eps: float = 1e-8
    """AdamW epsilon."""
    weight_decay: float = 0.0
    """Decoupled weight decay; pinned to 0.0 (the torch default of 0.01 is not inherited)."""

    def __post_init__(self) -> None:
        _require_choice(self.name, Literal["adamw"], "optimizer.name")
        _require(_require_number(self.lr, "optimizer.lr") > 0, "optimizer.lr", "must be > 0")
        _require(
            isinstance(self.betas, (tuple, list)) and len(self.betas) == 2,
            "optimizer.betas",
            f"must be a pair, got {self.betas!r}",
        )
        self.betas = (float(self.betas[0]), float(self.betas[1]))
        for i, beta in enumerate(self.betas):
            _require(
                0.0 <= _require_number(beta, f"optimizer.betas[{i}]") < 1.0,
                f"optimizer.betas[{i}]",
                "must be in [0, 1)",
            )
        _require(_require_number(self.eps, "optimizer.eps") > 0, "optimizer.eps", "must be > 0")
        _require(
            _require_number(self.weight_decay, "optimizer.weight_decay") >= 0, "optimizer.weight_decay", "must be >= 0"
        )


@dataclass(kw_only=True, slots=True)
class LossConfig:
    eps_low: float = 0.2
    """Lower PPO clip: the ratio is clipped at 1 - eps_low."""
    eps_high: float = 0.2
    """Upper PPO clip: the ratio is clipped at 1 + eps_high (DAPO uses 0.28)."""
    dual_clip_c: float = 3.0
    """Dual clip for negative advantages: the per-token loss is at most c * |A|; must be > 1."""
    aggregation: Aggregation = "token-mean"
    """Sum of per-token losses over the whole batch (all micro-batches and ranks) / global mask-1 token count."""
    old_logprobs: OldLogprobs = "recompute"
    """`recompute` (verl's default): the learner's own log-probabilities under the weights before the update
    (one optimizer step per batch, so the detached forward pass gives them: ratio 1); `sampler`: the ones the
    policy server returned with the episode (raw, before temperature: use with temperature 1)."""
    temperature: float = 1.0
    """Logits are divided by it before the log-softmax: the distribution the sampler drew from."""
    sampler_logprobs: SamplerLogprobs = "raw"
    """What the sampler's log-probabilities in a batch are of: `raw` (vLLM's default --logprobs-mode raw_logprobs)
    = the model's distribution at temperature 1, before temperature, top-k and top-p; `processed` (vLLM
    processed_logprobs) = the distribution the token was drawn from, temperature applied. A ratio against the
    sampler (is_cap, old_logprobs `sampler`) compares like with like only when they are of the learner's
    distribution: raw at temperature 1, or processed (without top-k/top-p, which the learner does not apply)."""
    is_cap: float = 0.0
    """Truncated importance sampling against the sampler: each token's loss is weighted by
    min(pi_learner / pi_sampler, is_cap), detached, where rows carry the sampler's log-probabilities (raw: sample
    at temperature 1); it corrects for rollouts sampled by older weights (max_staleness > 0) and for the
    sampler's numerics. 0 = off; typical 2. Not with old_logprobs `sampler` (that ratio is already the sampler's)."""

    def __post_init__(self) -> None:
        _require(0 < _require_number(self.eps_low, "loss.eps_low") < 1, "loss.eps_low", "must be in (0, 1)")
        _require(_require_number(self.eps_high, "loss.eps_high") > 0, "loss.eps_high", "must be > 0")
        _require(_require_number(self.dual_clip_c, "loss.dual_clip_c") > 1, "loss.dual_clip_c", "must be > 1")
        _require_choice(self.aggregation, Aggregation, "loss.aggregation")
        _require_choice(self.old_logprobs, OldLogprobs, "loss.old_logprobs")
        _require(_require_number(self.temperature, "loss.temperature") > 0, "loss.temperature", "must be > 0")
        is_cap = _require_number(self.is_cap, "loss.is_cap")
        _require(is_cap == 0 or is_cap >= 1, "loss.is_cap", "must be 0 (off) or >= 1")
        _require(
            is_cap == 0 or self.old_logprobs == "recompute",
            "loss.is_cap",
            "needs old_logprobs 'recompute' (with 'sampler' the PPO ratio is already against the sampler)",
        )
        _require_choice(self.sampler_logprobs, SamplerLogprobs, "loss.sampler_logprobs")
        against_sampler = "is_cap" if is_cap > 0 else "old_logprobs" if self.old_logprobs == "sampler" else None
        _require(
            against_sampler is None or self.temperature == 1 or self.sampler_logprobs == "processed",
            f"loss.{against_sampler}",
            f"the sampler's raw log-probabilities are of temperature 1 and the learner's of temperature "
            f"{self.temperature}: the ratio would be off on every token; serve the sampled distribution's "
            "log-probabilities (vLLM --logprobs-mode processed_logprobs, loss.sampler_logprobs: processed) or "
            "sample at temperature 1",
        )


@dataclass(kw_only=True, slots=True)
class TrainConfig:
    grad_clip: float = 1.0
    """Max global L2 norm of the gradient (clipped before the optimizer step)."""
    micro_batch_tokens: int = 4096
    """Padded tokens (rows x longest row) per micro-batch; one longer sequence still forms its own micro-batch."""
    seed: int = 0
    """Base RNG seed; rank r uses seed + r."""
    share_prompts: bool | None = None
    """Trajectories with the same prompt (a group's episodes) run it through the model once per micro-batch row
    (batch.PromptRow): same values and gradients, ~6x fewer tokens for 8 episodes of a 1,300-token prompt. Such
    rows carry an [S, S] attention mask, which also rules out flash attention: turn it off for very long rows.
    None (the default) = on, except for hybrid models (linear-attention or state-space layers, which ignore a 4-D
    mask and would mix the episodes); true on such a model is refused."""
    logprob_chunk_tokens: int = 1024
    """Scored tokens projected onto the vocabulary at once (loss.chunked_logprobs): peak memory of the output head
    is about 3 x chunk x vocabulary x 4 bytes (1,024 x 248k: ~3 GB), whatever the episode's length."""
    context_parallel: int = 1
    """Ranks that split one episode's sequence between them (context parallelism: Ulysses all-to-all attention,
    context_parallel.py), for episodes longer than one GPU holds: 106k tokens at 8 ranks are 13.3k per GPU. Must
    divide the ranks of a node and the model's attention heads; above 1, micro_batch_tokens is per rank and prompts
    are never shared (rows hold one episode each)."""

    def __post_init__(self) -> None:
        _require(_require_number(self.grad_clip, "train.grad_clip") > 0, "train.grad_clip", "must be > 0")
        _require_int(self.micro_batch_tokens, "train.micro_batch_tokens", 2)
        _require_int(self.seed, "train.seed", 0)
        shared = self.share_prompts
        _require(
            shared is None or isinstance(shared, bool), "train.share_prompts", f"must be true or false, got {shared!r}"
        )
        _require_int(self.logprob_chunk_tokens, "train.logprob_chunk_tokens", 1)
        _require_int(self.context_parallel, "train.context_parallel", 1)
        _require(
            not (self.context_parallel > 1 and shared),
            "train.share_prompts",
            "cannot be on with train.context_parallel > 1 (a split row holds one episode)",
        )


LORA_DEFAULT_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


@dataclass(kw_only=True, slots=True)
class LoraConfig:
    rank: int = 0
    """Rank of the low-rank adapters; 0 = full fine-tuning (every weight trains, servers load full weights)."""
    alpha: float = 32.0
    """Adapter scale numerator: the update is (alpha / rank) * B @ A."""
    targets: list[str] = field(default_factory=lambda: list(LORA_DEFAULT_TARGETS))
    """Names (last path component) of the Linear modules that get adapters; the rest of the model is frozen."""

    def __post_init__(self) -> None:
        _require_int(self.rank, "lora.rank", 0)
        _require(_require_number(self.alpha, "lora.alpha") > 0, "lora.alpha", "must be > 0")
        _require(
            isinstance(self.targets, (list, tuple))
            and len(self.targets) > 0
            and all(isinstance(t, str) and t and "." not in t for t in self.targets),
            "lora.targets",
            f"must be a non-empty list of module names such as q_proj, got {self.targets!r}",
        )
        self.targets = list(self.targets)

    @property
    def enabled(self) -> bool:
        return self.rank > 0


@dataclass(kw_only=True, slots=True)
class CheckpointConfig:
    dir: str
    """Folder for step-<n> checkpoints, exports and the control port file (shared by all nodes)."""
    keep_last: int = 3
    """Number of most recent checkpoints kept; older ones are deleted after a successful save."""
    verify_checksums: bool = True
    """Check every file's sha256 against the manifest before loading a checkpoint (the files are spread over the
    ranks: each hashes about 1/world_size of the bytes)."""
    io_threads: int = 1
    """Files each rank writes its shards into, written and sha256-hashed in parallel (DCP's FileSystemWriter
    thread_count); the resume check hashes with as many threads per rank. More helps once a rank holds GBs."""
    export_subdir: str = "exports"
    """Exports go to <dir>/<export_subdir>/step-<n>."""

    def __post_init__(self) -> None:
        _require(isinstance(self.dir, str) and self.dir != "", "checkpoint.dir", "must be a non-empty path")
        _require_int(self.keep_last, "checkpoint.keep_last", 1)
        _require(isinstance(self.verify_checksums, bool), "checkpoint.verify_checksums", "must be true or false")
        _require_int(self.io_threads, "checkpoint.io_threads", 1)
        _require(
            isinstance(self.export_subdir, str)
            and self.export_subdir not in ("", ".", "..")
            and "/" not in self.export_subdir,
            "checkpoint.export_subdir",
            "must be a plain folder name",
        )


@dataclass(kw_only=True, slots=True)
class ControlConfig:
    host: str = "127.0.0.1"
    """Address the rank-0 HTTP control endpoint binds to (local only by default)."""
    port: int = 0
    """TCP port; 0 = an ephemeral port, written to <checkpoint.dir>/control.json when ready."""
    idle_tick_s: float = 30.0
    """While idle, rank 0 broadcasts a no-op this often so waiting ranks never hit the collective timeout."""
    batch_dir: str = ""
    """Folder every /train_step batch_ref must resolve inside; "" = the campaign folder (checkpoint.dir's parent)."""

    def __post_init__(self) -> None:
        _require(isinstance(self.host, str) and self.host != "", "control.host", "must be a non-empty address")
        _require(
            isinstance(self.port, int) and 0 <= self.port <= 65535,
            "control.port",
            f"must be in [0, 65535], got {self.port!r}",
        )
        _require(_require_number(self.idle_tick_s, "control.idle_tick_s") > 0, "control.idle_tick_s", "must be > 0")
        _require(isinstance(self.batch_dir, str), "control.batch_dir", "must be a path string")


@dataclass(kw_only=True, slots=True)
class LearnerConfig:
    model: ModelConfig
    """The policy model to train."""
    checkpoint: CheckpointConfig
    """Where checkpoints and exports live."""
    distributed: DistributedConfig = field(default_factory=DistributedConfig)
    """Device, backend, world size, timeouts."""
    fsdp: FSDPConfig = field(default_factory=FSDPConfig)
    """FSDP2 sharding options."""
    optimizer: OptimizerConfig = field(default_factory=OptimizerConfig)
    """AdamW hyperparameters."""
    loss: LossConfig = field(default_factory=LossConfig)
    """PPO/GRPO surrogate."""
    train: TrainConfig = field(default_factory=TrainConfig)
    """Step mechanics: clipping, micro-batching, seed."""
    lora: LoraConfig = field(default_factory=LoraConfig)
    """Low-rank adapters instead of full fine-tuning (rank 0 = off)."""
    control: ControlConfig = field(default_factory=ControlConfig)
    """The HTTP control endpoint."""

    def __post_init__(self) -> None:
        _require(
            self.distributed.timeout_s > self.control.idle_tick_s,
            "control.idle_tick_s",
            "must be shorter than distributed.timeout_s",
        )

    @property
    def is_resolved(self) -> bool:
        return "auto" not in (
            self.distributed.device,
            self.distributed.backend,
            self.model.dtype,
            self.model.export_dtype,
        ) and (self.distributed.world_size is not None)

    def resolve(self, *, cuda_available: bool, world_size: int) -> LearnerConfig:
        """A copy with every "auto" replaced by what it means on this machine and world size."""
        if self.distributed.world_size is not None and self.distributed.world_size != world_size:
            raise ValueError(
                f"distributed.world_size: config says {self.distributed.world_size} but {world_size} ranks were started"
            )
        cp = self.train.context_parallel
        if world_size % cp:
            raise ValueError(f"train.context_parallel: {cp} does not divide the world size {world_size}")
        device = self.distributed.device
        if device == "auto":
            device = "cuda" if cuda_available else "cpu"
        if device == "cuda" and not cuda_available:
            raise ValueError("distributed.device: cuda requested but no GPU is available")
        if device == "cpu" and self.fsdp.cpu_offload:
            raise ValueError("fsdp.cpu_offload: needs device cuda (on cpu the parameters already live in host memory)")
        backend = self.distributed.backend
        if backend == "auto":
            backend = "nccl" if device == "cuda" else "gloo"
        dtype = self.model.dtype
        if dtype == "auto":
            dtype = "bfloat16" if device == "cuda" else "float32"
        export_dtype = dtype if self.model.export_dtype == "auto" else self.model.export_dtype
        return dataclasses.replace(
            self,
            model=dataclasses.replace(self.model, dtype=dtype, export_dtype=export_dtype),
            distributed=dataclasses.replace(self.distributed, device=device, backend=backend, world_size=world_size),
        )

    def to_manifest(self) -> dict[str, Any]:
        """Every resolved hyperparameter, for the run manifest and the checkpoint manifest."""
        if not self.is_resolved:
            raise ValueError("config: to_manifest() needs a resolved config (call resolve() first)")
        manifest = dataclasses.asdict(self)
        manifest["optimizer"]["betas"] = list(self.optimizer.betas)
        return manifest

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> LearnerConfig:
        if not isinstance(data, dict):
            raise ValueError("config: must be a JSON object")
        sections: dict[str, type] = {
            "model": ModelConfig,
            "checkpoint": CheckpointConfig,
            "distributed": DistributedConfig,
            "fsdp": FSDPConfig,
            "optimizer": OptimizerConfig,
            "loss": LossConfig,
            "train": TrainConfig,
            "lora": LoraConfig,
            "control": ControlConfig,
        }
        unknown = sorted(set(data) - set(sections))
        if unknown:
            raise ValueError(f"{unknown[0]}: unknown config section (known: {sorted(sections)})")
        for required in ("model", "checkpoint"):
            if required not in data:
                raise ValueError(f"{required}: section is required")
        built: dict[str, Any] = {}
        for name, section_type in sections.items():
            if name not in data:
                continue
            values = data[name]
            if not isinstance(values, dict):
                raise ValueError(f"{name}: must be an object")
            known = {f.name for f in dataclasses.fields(section_type)}
            extra = sorted(set(values) - known)
            if extra:
                raise ValueError(f"{name}.{extra[0]}: unknown field (known: {sorted(known)})")
            if name == "optimizer" and isinstance(values.get("betas"), list):
                values = {**values, "betas": tuple(values["betas"])}
            try:
                built[name] = section_type(**values)
            except TypeError as err:
                raise ValueError(f"{name}: {err}") from err
        return cls(**built)

    @classmethod
    def load(cls, path: str | pathlib.Path) -> LearnerConfig:
        text = pathlib.Path(path).read_text(encoding="utf-8")
        try:
            data = json.loads(text)
        except json.JSONDecodeError as err:
            raise ValueError(f"config: {path} is not valid JSON ({err})") from err
        return cls.from_dict(data)


def cpu_test_preset(*, model_path: str, checkpoint_dir: str) -> LearnerConfig:
    """Small CPU runs (tests, laptops): gloo, float32, short micro-batches, frequent idle ticks."""
    return LearnerConfig(
        model=ModelConfig(path=model_path, dtype="float32", export_dtype="float32"),
        checkpoint=CheckpointConfig(dir=checkpoint_dir, keep_last=2),
        distributed=DistributedConfig(device="cpu", backend="gloo", timeout_s=300.0),
        train=TrainConfig(micro_batch_tokens=1024),
        control=ControlConfig(idle_tick_s=10.0),
    )


def gpu_grpo_preset(*, model_path: str, checkpoint_dir: str) -> LearnerConfig:
    """The reference GRPO recipe on GPUs: nccl, bf16 compute, AdamW lr 1e-6 wd 0, clip 1.0, eps 0.2/0.2, c 3."""
    return LearnerConfig(
        model=ModelConfig(path=model_path, dtype="bfloat16", export_dtype="bfloat16"),
        checkpoint=CheckpointConfig(dir=checkpoint_dir, keep_last=3),
        distributed=DistributedConfig(device="cuda", backend="nccl", timeout_s=1800.0),
        fsdp=FSDPConfig(cpu_offload=False, activation_checkpointing=True),
        optimizer=OptimizerConfig(lr=1e-6, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0),
        loss=LossConfig(eps_low=0.2, eps_high=0.2, dual_clip_c=3.0),
        train=TrainConfig(grad_clip=1.0, micro_batch_tokens=16384),
    )


PRESETS = {"cpu-test": cpu_test_preset, "gpu-grpo": gpu_grpo_preset}
