"""Load a Hugging Face causal LM from a local folder and shard it with FSDP2."""

from __future__ import annotations

import logging
import pathlib
from dataclasses import dataclass

import torch
from torch import nn
from torch.distributed.fsdp import CPUOffloadPolicy, FSDPModule, MixedPrecisionPolicy, OffloadPolicy, fully_shard
from transformers import AutoConfig, AutoModelForCausalLM

from .distributed import DistInfo
from .lora import apply_lora

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


def _decoder_layers(model: nn.Module) -> list[nn.Module]:
    """The repeated blocks named by the model's `_no_split_modules` (Hugging Face convention)."""
    names = set(getattr(model, "_no_split_modules", None) or [])
    layers = [m for m in model.modules() if type(m).__name__ in names]
    if not layers:
        raise ValueError(
            f"model: cannot find decoder layers in {type(model).__name__} (_no_split_modules={sorted(names)})"
        )
    return layers


def load_model(info: DistInfo) -> tuple[nn.Module, ModelInfo]:
    """Every rank reads the weights on CPU in float32 (master copy), then FSDP2 keeps only its shard.

    Compute runs in the configured dtype through FSDP2's mixed-precision policy, with gradients reduced in
    float32: with lr around 1e-6 a bfloat16 master copy would round most updates away.
    """
    cfg = info.config
    path = pathlib.Path(cfg.model.path)
    if not (path / "config.json").is_file():
        raise FileNotFoundError(f"model.path: {path} has no config.json")
    hf_config = AutoConfig.from_pretrained(path)
    hf_config.use_cache = False
    model = AutoModelForCausalLM.from_pretrained(
        path, config=hf_config, dtype=torch.float32, attn_implementation="sdpa"
    )
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

    def shard(module: torch.nn.Module) -> None:
        fully_shard(
            module,
            mesh=info.mesh,
            mp_policy=mp_policy,
            offload_policy=offload,
            reshard_after_forward=cfg.fsdp.reshard_after_forward,
        )

    for layer in _decoder_layers(model):
        shard(layer)
    # fully_shard moves parameters and buffers to the mesh's device (parameters to host under offload).
    shard(model)

    text_config = hf_config.get_text_config() if hasattr(hf_config, "get_text_config") else hf_config
    context = int(getattr(text_config, "max_position_embeddings", 0) or 0)
    max_seq_len = cfg.model.max_seq_len or context
    if max_seq_len <= 0:
        raise ValueError("model.max_seq_len: the model config has no max_position_embeddings; set it")
    if context and max_seq_len > context:
        raise ValueError(f"model.max_seq_len: {max_seq_len} exceeds the model's context of {context}")
    pad_id = getattr(text_config, "pad_token_id", None)
    if pad_id is None:
        pad_id = getattr(text_config, "eos_token_id", None)
    if isinstance(pad_id, list):
        pad_id = pad_id[0]
    model_info = ModelInfo(
        vocab_size=int(text_config.vocab_size),
        max_seq_len=max_seq_len,
        pad_id=int(pad_id) if pad_id is not None else 0,
        tied_embeddings=bool(getattr(text_config, "tie_word_embeddings", False)),
        parameters=sum(p.numel() for p in model.parameters()),
        trainable_parameters=sum(p.numel() for p in model.parameters() if p.requires_grad),
    )
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


def fsdp_modules(model: nn.Module) -> list[FSDPModule]:
    return [m for m in model.modules() if isinstance(m, FSDPModule)]
