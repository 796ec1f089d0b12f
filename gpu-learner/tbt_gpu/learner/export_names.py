"""The names exports and pushes give tensors: the model checkpoint's own keys, not the learner's module paths.

A learner's parameter name can differ from the key it was read from: transformers 5 renames some checkpoints on
load (conversion mappings, e.g. a multimodal family's `model.language_model.` prefix becomes `model.`), and a
learner that reads the safetensors itself maps names the same way. The served model and the export's config.json
are the checkpoint's, so the weights must go back under the checkpoint's keys:

- a model loaded by `from_pretrained` carries the conversions it applied (`_weight_conversions`), and
  transformers' own `revert_weight_conversion` (what `save_pretrained` calls) reverses them, converters included;
- otherwise each name is matched against the keys the model folder holds: kept when it is one, else the one key
  that is the name with a run of components inserted (a dropped prefix), else kept as it is.
"""

from __future__ import annotations

import json
import logging
import pathlib
from collections.abc import Iterable, Mapping

import torch
from safetensors import safe_open

logger = logging.getLogger(__name__)

INDEX_FILE = "model.safetensors.index.json"
SINGLE_FILE = "model.safetensors"
LORA_SUFFIXES = (".lora_A.weight", ".lora_B.weight")


def checkpoint_keys(model_path: pathlib.Path) -> set[str]:
    """The tensor keys the model folder's safetensors hold (the index only, or one file's header); empty if none."""
    index = model_path / INDEX_FILE
    if index.is_file():
        return set(json.loads(index.read_text(encoding="utf-8"))["weight_map"])
    single = model_path / SINGLE_FILE
    if not single.is_file():
        return set()
    with safe_open(str(single), framework="pt", device="cpu") as fh:
        return set(fh.keys())


def _dropped_prefix_index(keys: Iterable[str]) -> dict[str, str | None]:
    """learner name -> checkpoint key, for every key with one run of inner components removed (None: ambiguous)."""
    index: dict[str, str | None] = {}
    for key in keys:
        parts = key.split(".")
        # Remove parts[i:j] for 1 <= i < j < len(parts): never the first component nor the tensor's own name.
        for i in range(1, len(parts) - 1):
            for j in range(i + 1, len(parts)):
                name = ".".join(parts[:i] + parts[j:])
                index[name] = key if index.get(name, key) == key else None
    return index


def names_for_checkpoint(names: Iterable[str], keys: set[str]) -> dict[str, str]:
    """Each learner tensor name -> its key in the checkpoint (`keys`); see the module docstring for the rule."""
    names = list(names)
    unknown = [n for n in names if n.replace(".base_layer.", ".") not in keys]
    index = _dropped_prefix_index(keys) if unknown and keys else {}
    out: dict[str, str] = {}
    for name in names:
        plain = name.replace(".base_layer.", ".")
        key = plain if plain in keys else index.get(plain)
        out[name] = key or name
    unmatched = [n for n, k in out.items() if k == n and n.replace(".base_layer.", ".") not in keys]
    if unmatched and keys:
        logger.warning(
            "export names: %d tensors not in the model's checkpoint, kept as named: %s", len(unmatched), unmatched[:5]
        )
    return out


def serving_names(
    model: torch.nn.Module, model_path: pathlib.Path, state: Mapping[str, torch.Tensor]
) -> dict[str, torch.Tensor]:
    """`state` (the learner's full state dict) under the checkpoint's keys."""
    if getattr(model, "_weight_conversions", None):
        from transformers.core_model_loading import revert_weight_conversion

        return dict(revert_weight_conversion(model, dict(state)))  # type: ignore[arg-type]
    mapping = names_for_checkpoint(state, checkpoint_keys(model_path))
    return {mapping[name]: t for name, t in state.items()}


def adapter_names(names: Iterable[str], model_path: pathlib.Path) -> dict[str, str]:
    """LoRA parameter `<module>.lora_A.weight` -> `<the module's checkpoint path>.lora_A.weight`: the adapter names
    the module as the checkpoint does, so a server applies it to the weight it loaded under that name."""
    keys = checkpoint_keys(model_path)
    modules: dict[str, tuple[str, str]] = {}
    out: dict[str, str] = {}
    for name in names:
        suffix = next((s for s in LORA_SUFFIXES if name.endswith(s)), None)
        if suffix is None:
            out[name] = name  # not an adapter matrix: kept as named
        else:
            modules[name] = (name[: -len(suffix)], suffix)
    weights = names_for_checkpoint([m + ".weight" for m, _ in modules.values()], keys)
    for name, (module, suffix) in modules.items():
        out[name] = weights[module + ".weight"].removesuffix(".weight") + suffix
    return out
