"""Load a Hugging Face causal LM from a local folder and shard it with FSDP2."""

from __future__ import annotations

import contextlib
import logging
import pathlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, cast

import torch
from torch import nn
from torch.distributed.fsdp import CPUOffloadPolicy, FSDPModule, MixedPrecisionPolicy, OffloadPolicy, fully_shard
from transformers import AutoConfig, AutoModelForCausalLM

from .distributed import DistInfo
from .lora import apply_lora
from .model_family import non_softmax_layer_types
from .sharded_load import init_lora, load_sharded_weights

logger = logging.getLogger(__name__)

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


@dataclass(frozen=True, slots=True)
class ModelInfo:
    vocab_size: int
    max_seq_len: int
    pad_id: int
    tied_embeddings: bool
    parameters: int
    trainable_parameters: int
    hybrid: bool = False
    """Some layers mix tokens without softmax attention (linear attention, state-space): no 4-D masks."""


def _decoder_layers(model: nn.Module) -> list[nn.Module]:
    """The repeated blocks named by the model's `_no_split_modules` (Hugging Face convention)."""
    names = set(getattr(model, "_no_split_modules", None) or [])
    layers = [m for m in model.modules() if type(m).__name__ in names]
    if not layers:
        raise ValueError(
            f"model: cannot find decoder layers in {type(model).__name__} (_no_split_modules={sorted(names)})"
        )
    return layers


def build_model(info: DistInfo, hf_config: Any) -> nn.Module:
    """The learner's model for `hf_config`, wrapped and sharded, with no weights: parameters stay on the meta device.

    Construction on meta allocates nothing, so a 27B model costs no host memory per rank before its shards exist;
    `load_model` then materialises each rank's shards and reads only those from the checkpoint. The memory model
    (tbt_gpu.learner.memory_model) runs this same function under fake tensors.
    """
    cfg = info.config
    hf_config.use_cache = False
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(hf_config, dtype=torch.float32, attn_implementation="sdpa")
    if cfg.fsdp.activation_checkpointing:
        model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
    if cfg.lora.enabled:
        apply_lora(model, cfg.lora, cfg.train.seed)
    model.train()

    compute_dtype = DTYPES[cfg.model.dtype]
    mp_policy = MixedPrecisionPolicy(
        param_dtype=compute_dtype if compute_dtype != torch.float32 else None,
        reduce_dtype=torch.float32,
    )
    offload: OffloadPolicy = CPUOffloadPolicy() if cfg.fsdp.cpu_offload else OffloadPolicy()

    def shard(module: torch.nn.Module, reshard_after_forward: bool | None = cfg.fsdp.reshard_after_forward) -> None:
        fully_shard(
            module,
            mesh=info.mesh,
            mp_policy=mp_policy,
            offload_policy=offload,
            reshard_after_forward=reshard_after_forward,
        )

    for layer in _decoder_layers(model):
        shard(layer)
    embeddings = model.get_input_embeddings()
    if not _tied(hf_config) and embeddings is not None:
        # Its own unit (as torchtitan does): a 150k-248k vocabulary is ~1B parameters, gathered only around the
        # lookup. The output head stays with the root.
        shard(embeddings)
    # None: FSDP's choice for a root, which keeps its parameters gathered from forward into backward. The chunked
    # log-probabilities (loss.chunked_logprobs) recompute each chunk with the head's weight in backward, before
    # any hook of the root's would gather it again.
    shard(model, None)
    return model


def _tied(hf_config: Any) -> bool:
    text_config = hf_config.get_text_config() if hasattr(hf_config, "get_text_config") else hf_config
    return bool(getattr(text_config, "tie_word_embeddings", False) or getattr(hf_config, "tie_word_embeddings", False))


def materialize(model: nn.Module, device: torch.device) -> None:
    """Allocates every rank's shards (uninitialised) and recomputes the buffers no checkpoint holds (RoPE)."""
    model.to_empty(device=device)
    init_weights = getattr(model, "_init_weights", None)
    for module in model.modules():
        if "RotaryEmbedding" in type(module).__name__ and init_weights is not None:
            with torch.no_grad():
                init_weights(module)


def load_model(info: DistInfo) -> tuple[nn.Module, ModelInfo]:
    """Builds the sharded model on meta, then every rank reads only its own rows of each weight (float32 master).

    Compute runs in the configured dtype through FSDP2's mixed-precision policy, with gradients reduced in
    float32: with lr around 1e-6 a bfloat16 master copy would round most updates away. Host memory per rank
    stays near the model's size / world size (one tensor's rows at a time), not the whole model per rank.
    """
    cfg = info.config
    path = pathlib.Path(cfg.model.path)
    if not (path / "config.json").is_file():
        raise FileNotFoundError(f"model.path: {path} has no config.json")
    hf_config = AutoConfig.from_pretrained(path)
    model = build_model(info, hf_config)
    materialize(model, torch.device("cpu") if cfg.fsdp.cpu_offload else info.device)
    load_sharded_weights(model, path)
    if cfg.lora.enabled:
        init_lora(model, cfg.lora, cfg.train.seed)
    model_info = describe_model(model, hf_config, cfg.model.max_seq_len)
    logger.info(
        "loaded %s (%s parameters, %s trainable, %s compute, offload=%s, activation checkpointing=%s)",
        path,
        model_info.parameters,
        model_info.trainable_parameters,
        cfg.model.dtype,
        cfg.fsdp.cpu_offload,
        cfg.fsdp.activation_checkpointing,
    )
    return model, model_info


def describe_model(model: nn.Module, hf_config: Any, max_seq_len: int | None) -> ModelInfo:
    """What the trainer needs to know of the model: vocabulary, context, padding, sizes (counted unsharded)."""
    text_config = hf_config.get_text_config() if hasattr(hf_config, "get_text_config") else hf_config
    context = int(getattr(text_config, "max_position_embeddings", 0) or 0)
    max_seq_len = max_seq_len or context
    if max_seq_len <= 0:
        raise ValueError("model.max_seq_len: the model config has no max_position_embeddings; set it")
    if context and max_seq_len > context:
        raise ValueError(f"model.max_seq_len: {max_seq_len} exceeds the model's context of {context}")
    pad_id = getattr(text_config, "pad_token_id", None)
    if pad_id is None:
        pad_id = getattr(text_config, "eos_token_id", None)
    if isinstance(pad_id, list):
        pad_id = pad_id[0]
    return ModelInfo(
        vocab_size=int(text_config.vocab_size),
        max_seq_len=max_seq_len,
        pad_id=int(pad_id) if pad_id is not None else 0,
        tied_embeddings=_tied(hf_config),
        parameters=sum(p.numel() for p in model.parameters()),
        trainable_parameters=sum(p.numel() for p in model.parameters() if p.requires_grad),
        hybrid=is_hybrid(hf_config),
    )


def is_hybrid(hf_config: Any) -> bool:
    """Whether some layers are not softmax attention (Gated-DeltaNet, Mamba, ...): those ignore a 4-D mask."""
    return bool(non_softmax_layer_types(hf_config))


@contextlib.contextmanager
def output_head_replaced(model: nn.Module, project: Callable[[torch.Tensor, torch.Tensor], Any]) -> Iterator[list[Any]]:
    """Within the block, the output head projects nothing: `project(hidden, head_weight)` runs in its place, on the
    final hidden states of the kept positions, and its result lands in the yielded list.

    A forward pre-hook rather than a second code path through the model: the model's own forward runs unchanged,
    and `project` runs inside it, where FSDP has the head's weight gathered (and in the compute dtype).
    """
    results: list[Any] = []
    head = cast(nn.Module, cast(Any, model).get_output_embeddings())

    def replace(module: nn.Module, args: tuple[Any, ...]) -> tuple[Any, ...]:
        results.append(project(args[0], cast(torch.Tensor, module.weight)))
        return (args[0][..., :0, :],)

    handle = head.register_forward_pre_hook(replace)
    try:
        yield results
    finally:
        handle.remove()


def fsdp_modules(model: nn.Module) -> list[FSDPModule]:
    return [m for m in model.modules() if isinstance(m, FSDPModule)]
