"""Each rank reads only its own rows of every weight from the model's safetensors files.

FSDP2 shards every parameter along dim 0 (`Shard(0)`), so a rank's shard is a contiguous byte range of the
tensor in a safetensors file (a JSON header of offsets, then the raw row-major data). Each rank reads its range
with plain positioned reads, not a memory map (mapped pages would count against the rank until unmapped), so its
host memory while loading is its shards plus one tensor's rows in the stored dtype, not the whole model: at 27B
on 8 ranks per node about 14 GB per rank instead of 108 GB.
"""

from __future__ import annotations

import json
import math
import pathlib
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, cast

import torch
from torch import nn
from torch.distributed.tensor import DTensor
from torch.distributed.tensor._utils import compute_local_shape_and_global_offset

from .config import LoraConfig
from .lora import LoraLinear

INDEX_FILE = "model.safetensors.index.json"
SINGLE_FILE = "model.safetensors"
CHECKPOINT_PREFIXES = (("model.language_model.", "model."),)
"""(checkpoint prefix, model prefix): multimodal checkpoints of a family hold the text model under another name."""


SAFETENSORS_DTYPES = {
    "F64": torch.float64,
    "F32": torch.float32,
    "F16": torch.float16,
    "BF16": torch.bfloat16,
    "I64": torch.int64,
    "I32": torch.int32,
    "I16": torch.int16,
    "I8": torch.int8,
    "U8": torch.uint8,
    "BOOL": torch.bool,
}


@dataclass(frozen=True, slots=True)
class StoredTensor:
    file: pathlib.Path
    dtype: torch.dtype
    shape: tuple[int, ...]
    offset: int
    """Absolute byte offset of the tensor's data in `file`."""


def _read_header(file: pathlib.Path) -> dict[str, StoredTensor]:
    with file.open("rb") as fh:
        (length,) = struct.unpack("<Q", fh.read(8))
        header = json.loads(fh.read(length))
    out: dict[str, StoredTensor] = {}
    for key, meta in header.items():
        if key == "__metadata__":
            continue
        if meta["dtype"] not in SAFETENSORS_DTYPES:
            raise ValueError(f"model.path: {file.name} stores {key} as {meta['dtype']}, which the learner cannot read")
        start, _ = meta["data_offsets"]
        out[key] = StoredTensor(file, SAFETENSORS_DTYPES[meta["dtype"]], tuple(meta["shape"]), 8 + length + start)
    return out


def stored_tensors(path: pathlib.Path) -> dict[str, StoredTensor]:
    """Every tensor of the checkpoint at `path` (one file or an index of shards), by key, from the headers alone."""
    index = path / INDEX_FILE
    if index.is_file():
        names = sorted(set(json.loads(index.read_text(encoding="utf-8"))["weight_map"].values()))
        files = [path / name for name in names]
    elif (path / SINGLE_FILE).is_file():
        files = [path / SINGLE_FILE]
    else:
        raise FileNotFoundError(f"model.path: {path} has neither {SINGLE_FILE} nor {INDEX_FILE}")
    out: dict[str, StoredTensor] = {}
    for file in files:
        out.update(_read_header(file))
    return out


def read_rows(stored: StoredTensor, start: int, rows: int) -> torch.Tensor:
    """Rows [start, start + rows) of a stored tensor (the whole of a 0-d one), read without mapping the file."""
    row_shape = stored.shape[1:]
    row_items = math.prod(row_shape)
    item = torch.empty((), dtype=stored.dtype).element_size()
    out = torch.empty((rows, *row_shape) if stored.shape else (), dtype=stored.dtype)
    if out.numel() == 0:
        return out
    with stored.file.open("rb") as fh:
        fh.seek(stored.offset + start * row_items * item)
        view = memoryview(cast(Any, out.view(torch.uint8).numpy())).cast("B")  # numpy's stubs lack __buffer__
        if fh.readinto(view) != len(view):
            raise ValueError(f"model.path: {stored.file.name} ends inside a tensor (truncated file)")
    return out


def checkpoint_key(name: str, available: dict[str, StoredTensor]) -> str | None:
    """The checkpoint key of model tensor `name` (LoRA wraps a target Linear as `base_layer`)."""
    plain = name.replace(".base_layer.", ".")
    if plain in available:
        return plain
    for stored, ours in CHECKPOINT_PREFIXES:
        if plain.startswith(ours) and stored + plain[len(ours) :] in available:
            return stored + plain[len(ours) :]
    return None


def local_rows(tensor: torch.Tensor) -> tuple[torch.Tensor, int, int]:
    """(this rank's local tensor, first row, row count) of a parameter sharded along dim 0, or whole."""
    if isinstance(tensor, DTensor):
        shape, offset = compute_local_shape_and_global_offset(tensor.shape, tensor.device_mesh, tensor.placements)
        if any(o for o in offset[1:]):
            raise ValueError(f"sharded load: expected dim-0 shards, got placements {tensor.placements}")
        return tensor.to_local(), int(offset[0]) if offset else 0, int(shape[0]) if shape else 1
    return tensor, 0, tensor.shape[0] if tensor.dim() else 1


def _named_tensors(model: nn.Module) -> Iterator[tuple[str, torch.Tensor]]:
    yield from model.named_parameters()
    non_persistent = {
        f"{prefix}.{name}" if prefix else name
        for prefix, module in model.named_modules()
        for name in module._non_persistent_buffers_set
    }
    for name, buf in model.named_buffers():
        if name not in non_persistent:
            yield name, buf


@torch.no_grad()
def load_sharded_weights(model: nn.Module, path: pathlib.Path) -> int:
    """Fills every parameter and persistent buffer from `path`; returns the bytes this rank read.

    Adapter parameters (LoRA) are not in the checkpoint and are skipped (`init_lora`). A missing weight is an
    error naming the folder and up to five tensors.
    """
    available = stored_tensors(path)
    missing: list[str] = []
    read = 0
    for name, tensor in _named_tensors(model):
        if ".lora_A." in name or ".lora_B." in name:
            continue
        key = checkpoint_key(name, available)
        if key is None:
            missing.append(name)
            continue
        stored = available[key]
        if stored.shape != tuple(tensor.shape):
            raise ValueError(f"model.path: {stored.file.name} holds {key} as {list(stored.shape)}, "
                             f"the model needs {list(tensor.shape)}")  # fmt: skip
        local, start, rows = local_rows(tensor)
        if local.numel() == 0:
            continue
        part = read_rows(stored, start, rows)
        local.copy_(part.reshape(local.shape))
        read += part.numel() * part.element_size()
    if missing:
        shown = ", ".join(missing[:5]) + (f" and {len(missing) - 5} more" if len(missing) > 5 else "")
        raise ValueError(f"model.path: {path} lacks weights the model needs: {shown}")
    return read


@torch.no_grad()
def init_lora(model: nn.Module, cfg: LoraConfig, seed: int) -> None:
    """peft's adapter initialisation (apply_lora's), redone on the materialised shards: the same seeded draws in the
    same module order on every rank, of which each rank keeps its rows."""
    del cfg  # the shapes come from the modules; kept for a signature that mirrors apply_lora
    generator = torch.Generator().manual_seed(seed)
    for module in model.modules():
        if not isinstance(module, LoraLinear):
            continue
        a, b = module.lora_A.weight, module.lora_B.weight
        full = torch.empty(tuple(a.shape), dtype=torch.float32)
        bound = 1.0 / math.sqrt(full.shape[1])
        full.uniform_(-bound, bound, generator=generator)
        local, start, rows = local_rows(a)
        local.copy_(full[start : start + rows].to(local.dtype))
        local_rows(b)[0].zero_()
