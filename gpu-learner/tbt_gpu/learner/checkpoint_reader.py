"""Reads a torch.distributed.checkpoint folder without unpickling anything a crafted file could make run code.

torch's FileSystemReader reads `.metadata` with plain `pickle.load`, and DefaultLoadPlanner loads every
non-tensor value (optimizer hyperparameters) with `torch.load(weights_only=False)`: whoever can write the
checkpoint folder could make a resume run code. Here `.metadata` goes through an unpickler that resolves only
the checkpoint's own metadata classes, torch.Size, pathlib.PosixPath and torch's dtypes and layouts (any other
global is refused before it is looked up, so no callable of the file's choosing is ever reached), and
non-tensor values load with `torch.load(weights_only=True)`. A file name in the metadata must name a file
inside the checkpoint folder.
"""

from __future__ import annotations

import enum
import io
import pathlib
import pickle
import sys
from typing import Any

import torch
from torch.distributed.checkpoint._traverse import set_element
from torch.distributed.checkpoint.default_planner import DefaultLoadPlanner
from torch.distributed.checkpoint.filesystem import FileSystemReader
from torch.distributed.checkpoint.metadata import Metadata, StorageMeta
from torch.distributed.checkpoint.planner import ReadItem

METADATA_FILE = ".metadata"

# Exactly the globals torch writes into a `.metadata` file (see tests/test_control_security.py).
_METADATA_CLASSES = {
    ("torch.distributed.checkpoint.metadata", name)
    for name in (
        "Metadata",
        "MetadataIndex",
        "StorageMeta",
        "TensorStorageMetadata",
        "BytesStorageMetadata",
        "ChunkStorageMetadata",
        "TensorProperties",
        "_MEM_FORMAT_ENCODING",
    )
} | {("torch.distributed.checkpoint.filesystem", "_StorageInfo"), ("torch", "Size"), ("pathlib", "PosixPath")}


class UnsafeCheckpointError(pickle.UnpicklingError):
    """A checkpoint file that needs more than the checkpoint's own types to load: refused, never run."""


class _MetadataUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in _METADATA_CLASSES:
            return super().find_class(module, name)
        if module == "torch" and "." not in name and isinstance(getattr(torch, name, None), torch.dtype):
            return getattr(torch, name)  # a dtype pickles as the global torch.float32
        if (module, name) == ("torch.serialization", "_get_layout"):
            return _layout_named  # a layout pickles as a call of this lookup: ours does the same, no more
        if (module, name) in (("builtins", "getattr"), ("__builtin__", "getattr")):
            return _enum_member  # some Pythons (3.11.2, Debian's) pickle an Enum member as getattr(Enum, name)
        raise UnsafeCheckpointError(f"global {module}.{name} is not a checkpoint metadata type")

    def persistent_load(self, pid: Any) -> Any:
        raise UnsafeCheckpointError("persistent ids are not part of checkpoint metadata")


def _layout_named(name: object) -> torch.layout:
    value = getattr(torch, name.removeprefix("torch."), None) if isinstance(name, str) else None
    if not isinstance(value, torch.layout):
        raise UnsafeCheckpointError(f"{name!r} is not a torch layout")
    return value


def _enum_member(cls: object, name: object) -> enum.Enum:
    """getattr, for one member of an Enum among the metadata types and nothing else."""
    allowed = any(cls is getattr(sys.modules.get(m), n, None) for m, n in _METADATA_CLASSES)
    if not (allowed and isinstance(cls, type) and issubclass(cls, enum.Enum) and isinstance(name, str)):
        raise UnsafeCheckpointError(f"getattr({cls!r}, {name!r}) is not a metadata enum member")
    member = cls.__members__.get(name)
    if member is None:
        raise UnsafeCheckpointError(f"{name!r} is not a member of {cls.__name__}")
    return member


def read_metadata_file(path: pathlib.Path) -> Metadata:
    """The Metadata in a `.metadata` file; UnsafeCheckpointError for anything else (nothing in it is run)."""
    with path.open("rb") as fh:
        metadata = _MetadataUnpickler(fh).load()
    if not isinstance(metadata, Metadata):
        raise UnsafeCheckpointError(f"{path}: holds a {type(metadata).__name__}, not checkpoint metadata")
    for info in (metadata.storage_data or {}).values():
        relative = getattr(info, "relative_path", None)
        if not isinstance(relative, str) or not relative or "/" in relative or relative in (".", ".."):
            raise UnsafeCheckpointError(f"{path}: a shard name points outside the checkpoint folder")
    return metadata


class SafeFileSystemReader(FileSystemReader):
    """FileSystemReader whose `.metadata` is read by `read_metadata_file`."""

    def read_metadata(self, *args: Any, **kwargs: Any) -> Metadata:
        rank = kwargs.get("rank")
        name = METADATA_FILE if rank is None else f"__{rank}{METADATA_FILE}"
        metadata = read_metadata_file(pathlib.Path(self.path) / name)
        storage_meta = getattr(metadata, "storage_meta", None) or StorageMeta()
        storage_meta.load_id = self.load_id
        metadata.storage_meta = storage_meta
        return metadata


class WeightsOnlyLoadPlanner(DefaultLoadPlanner):
    """DefaultLoadPlanner that loads non-tensor values with weights_only=True (plain types only)."""

    def load_bytes(self, read_item: ReadItem, value: io.BytesIO) -> None:
        fqn = read_item.dest_index.fqn
        try:
            loaded = torch.load(value, weights_only=True)
        except pickle.UnpicklingError as err:
            raise UnsafeCheckpointError(f"checkpoint value {fqn} needs more than plain types to load") from err
        # As DefaultLoadPlanner.load_bytes, with the vetted value.
        if self.flatten_state_dict:
            set_element(self.original_state_dict, self.mappings[fqn], loaded)
        else:
            self.state_dict[fqn] = loaded
