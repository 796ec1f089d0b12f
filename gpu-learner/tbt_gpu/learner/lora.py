"""Low-rank adapters (LoRA) on a Hugging Face model: the base weights freeze, only the adapters train.

Each target Linear becomes a LoraLinear holding the original as `base_layer` plus `lora_A` / `lora_B`, peft's
names, so a parameter's name is also its adapter key (`...q_proj.lora_A.weight`, tbt_gpu.lora_adapter). Written
here rather than taken from peft: its wrapper model renames every parameter and adds a dependency pinned to
transformers' versions, while this is one small module FSDP2 shards like any other.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from ..lora_adapter import target_linears
from .config import LoraConfig


class LoraLinear(nn.Module):
    """y = base(x) + (alpha / rank) * B(A(x)); B starts at zero, so a fresh adapter is exactly the base model."""

    def __init__(self, base: nn.Linear, rank: int, alpha: float, generator: torch.Generator) -> None:
        super().__init__()
        self.base_layer = base
        self.lora_A = nn.Linear(base.in_features, rank, bias=False, dtype=base.weight.dtype)
        self.lora_B = nn.Linear(rank, base.out_features, bias=False, dtype=base.weight.dtype)
        # peft's initialisation (kaiming-uniform A, zero B), drawn from a generator every rank seeds alike: FSDP2
        # shards each rank's own copy, so the copies must agree.
        bound = 1.0 / math.sqrt(base.in_features)
        with torch.no_grad():
            self.lora_A.weight.uniform_(-bound, bound, generator=generator)
            self.lora_B.weight.zero_()
        self.scaling = alpha / rank

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.base_layer(x) + self.lora_B(self.lora_A(x)) * self.scaling


def apply_lora(model: nn.Module, cfg: LoraConfig, seed: int) -> int:
    """Freezes every parameter and wraps each target Linear in a LoraLinear; returns the trainable count."""
    for p in model.parameters():
        p.requires_grad_(False)
    generator = torch.Generator().manual_seed(seed)
    for name, linear in target_linears(model, cfg.targets):
        parent_name, _, child = name.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        setattr(parent, child, LoraLinear(linear, cfg.rank, cfg.alpha, generator))
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def adapter_parameter(name: str) -> bool:
    return ".lora_A." in name or ".lora_B." in name
