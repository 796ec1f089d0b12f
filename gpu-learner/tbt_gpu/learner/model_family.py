"""What a model's config says about how it mixes tokens; no torch import (check_config runs without torch)."""

from __future__ import annotations

from typing import Any

SOFTMAX_LAYER_TYPES = ("full_attention", "sliding_attention", "attention", "chunked_attention")
"""`layer_types` values of Hugging Face configs whose layers are softmax attention (masks of any shape apply)."""


def _field(config: Any, name: str) -> Any:
    return config.get(name) if isinstance(config, dict) else getattr(config, name, None)


def non_softmax_layer_types(config: Any) -> list[str]:
    """The layer types of a Hugging Face config (object or config.json dict, multimodal or not) that are not softmax
    attention: linear attention, state-space layers. Empty for a plain transformer."""
    text = _field(config, "text_config") or config
    layer_types = _field(text, "layer_types") or []
    return sorted({t for t in layer_types if t not in SOFTMAX_LAYER_TYPES})


def share_prompts_refusal(model_path: str, config: Any) -> str | None:
    """Why train.share_prompts cannot be on for this model, or None when it can."""
    others = non_softmax_layer_types(config)
    if not others:
        return None
    return (
        f"train.share_prompts: {model_path} has {', '.join(others)} layers, which ignore the 4-D mask that keeps a "
        "group's episodes apart (the episodes would see each other); leave share_prompts unset or false for it"
    )
