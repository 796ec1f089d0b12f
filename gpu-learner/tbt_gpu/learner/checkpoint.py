"""Resumable sharded checkpoints (torch.distributed.checkpoint) and serving exports, both atomic.

Layout under `checkpoint.dir` (a folder every node can reach):
    step-<n>/            .metadata + *.distcp (model and optimizer shards), rng-rank<r>.pt,
                         trainer_state.json (step, ledger), manifest.json (sizes + sha256 of every file,
                         parent_step + sha256 of the parent's manifest: the lineage)
    step-<n>.tmp/        a save in progress; renamed to step-<n> only when complete, deleted on start
    exports/step-<n>/    model.safetensors + config and tokenizer files (a Hugging Face folder)
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import pathlib
import pickle
import random
import shutil
import time
from typing import Any, cast

import numpy as np
import torch
from safetensors.torch import save_file
from torch.distributed.checkpoint.api import CheckpointException
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_state_dict,
    set_state_dict,
)
from torch.distributed.checkpoint.state_dict_loader import load as dcp_load
from torch.distributed.checkpoint.state_dict_saver import save as dcp_save
from torch.distributed.tensor import DTensor

from ..lora_adapter import adapter_config, write_adapter
from ..weight_transport import WeightGroup
from . import faults
from .checkpoint_reader import (
    METADATA_FILE,
    SafeFileSystemReader,
    UnsafeCheckpointError,
    WeightsOnlyLoadPlanner,
    read_metadata_file,
)
from .distributed import barrier, broadcast_object
from .errors import WeightPushFailed
from .lora import adapter_parameter
from .model import DTYPES
from .trainer import Trainer, TrainerState

logger = logging.getLogger(__name__)

FORMAT_VERSION = 1
MANIFEST = "manifest.json"
TRAINER_STATE = "trainer_state.json"
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".gguf", ".h5", ".msgpack", ".safetensors.index.json")


class CheckpointError(RuntimeError):
    pass


def _sha256(path: pathlib.Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _fsync_dir(path: pathlib.Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_json(path: pathlib.Path, data: Any) -> None:
    with path.open("w", encoding="utf-8") as fh:
        json.dump(data, fh, indent=2, sort_keys=True)
        fh.flush()
        os.fsync(fh.fileno())


def _step_of(name: str) -> int | None:
    if not name.startswith("step-"):
        return None
    tail = name[len("step-") :]
    return int(tail) if tail.isdigit() else None


def _rng_state() -> dict[str, Any]:
    # Plain types and tensors only, so the file loads with torch.load(weights_only=True): unpickling
    # arbitrary objects from a checkpoint folder would run whatever code a crafted file names.
    # The legacy (tuple) form of numpy's state: name, key array, position, gauss flag, cached gaussian.
    kind, keys, pos, has_gauss, cached_gaussian = cast(tuple[str, Any, int, int, float], np.random.get_state())
    state: dict[str, Any] = {
        "python": random.getstate(),
        "numpy": [kind, torch.from_numpy(keys.astype(np.int64)), int(pos), int(has_gauss), float(cached_gaussian)],
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def _set_rng_state(state: dict[str, Any]) -> None:
    version, internal, gauss_next = state["python"]
    random.setstate((version, tuple(internal), gauss_next))
    kind, keys, pos, has_gauss, cached_gaussian = state["numpy"]
    np.random.set_state((kind, keys.numpy().astype(np.uint32), pos, has_gauss, cached_gaussian))
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def load_rng_file(rng_file: pathlib.Path) -> bool:
    """Restores RNG state saved by `_rng_state`; a file that needs more than plain types is refused, unrun."""
    try:
        _set_rng_state(torch.load(rng_file, weights_only=True))
        return True
    except pickle.UnpicklingError:
        # An older format (numpy arrays pickled as objects) or a crafted file: never unpickled unchecked.
        logger.warning("%s: RNG state not loadable with weights_only=True; the RNG starts fresh", rng_file)
        return False


def verify(folder: pathlib.Path, *, checksums: bool) -> dict[str, Any]:
    """The manifest of a committed checkpoint after checking its files; CheckpointError if anything is off."""
    manifest_path = folder / MANIFEST
    try:
        manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as err:
        raise CheckpointError(f"{folder}: unreadable {MANIFEST} ({err})") from err
    if manifest.get("format") != FORMAT_VERSION or manifest.get("step") != _step_of(folder.name):
        raise CheckpointError(f"{folder}: manifest format/step mismatch")
    for name, meta in manifest["files"].items():
        path = folder / name
        if not path.is_file():
            raise CheckpointError(f"{folder}: missing {name}")
        if path.stat().st_size != meta["size"]:
            raise CheckpointError(f"{folder}: {name} has {path.stat().st_size} bytes, manifest says {meta['size']}")
        if checksums and _sha256(path) != meta["sha256"]:
            raise CheckpointError(f"{folder}: {name} fails its sha256 check")
    # The manifest lives in the same folder, so it proves nothing against someone who can write there: the
    # metadata must also be nothing but checkpoint metadata (read without running anything).
    try:
        read_metadata_file(folder / METADATA_FILE)
    except Exception as err:  # whatever the reason (crafted, truncated), the checkpoint is not used
        raise CheckpointError(f"{folder}: {METADATA_FILE} refused ({err})") from err
    return manifest


class Checkpointer:
    def __init__(self, trainer: Trainer) -> None:
        self.trainer = trainer
        self.info = trainer.info
        self.cfg = trainer.cfg.checkpoint
        self.root = pathlib.Path(self.cfg.dir)
        self.export_root = self.root / self.cfg.export_subdir
        if self.info.is_main:
            self.root.mkdir(parents=True, exist_ok=True)
        barrier()

    def step_dir(self, step: int) -> pathlib.Path:
        return self.root / f"step-{step}"

    def export_dir(self, step: int) -> pathlib.Path:
        return self.export_root / f"step-{step}"

    def committed_steps(self) -> list[int]:
        steps = [_step_of(p.name) for p in self.root.iterdir() if p.is_dir()] if self.root.exists() else []
        return sorted(s for s in steps if s is not None)

    def save(self) -> pathlib.Path:
        """Write the trainer's current state as step-<last_step>; every rank calls this."""
        step = self.trainer.state.last_step
        final = self.step_dir(step)
        tmp = self.root / f"step-{step}.tmp"
        if self.info.is_main:
            if final.exists():
                raise CheckpointError(f"{final} already exists; a step is checkpointed once")
            shutil.rmtree(tmp, ignore_errors=True)
            tmp.mkdir(parents=True)
        barrier()
        started = time.perf_counter()
        model_sd, optim_sd = get_state_dict(self.trainer.model, self.trainer.optimizer)
        dcp_save({"model": model_sd, "optimizer": optim_sd}, checkpoint_id=str(tmp))
        torch.save(_rng_state(), tmp / f"rng-rank{self.info.rank}.pt")
        barrier()
        if self.info.is_main:
            _write_json(tmp / TRAINER_STATE, self.trainer.state.to_json())
            files = sorted(p for p in tmp.rglob("*") if p.is_file() and p.name != MANIFEST)
            # Lineage: the committed checkpoint this step was applied on (none for the first step).
            parent = self.trainer.state.ledger.get(step, {}).get("parent_step")
            parent_manifest = self.step_dir(parent) / MANIFEST if parent else None
            manifest = {
                "format": FORMAT_VERSION,
                "step": step,
                "parent_step": parent,
                "parent_manifest_sha256": _sha256(parent_manifest)
                if parent_manifest and parent_manifest.is_file()
                else None,
                "world_size": self.info.world_size,
                "created_unix": time.time(),
                "hyperparameters": self.info.config.to_manifest(),
                "files": {str(p.relative_to(tmp)): {"size": p.stat().st_size, "sha256": _sha256(p)} for p in files},
            }
            _write_json(tmp / MANIFEST, manifest)
            _fsync_dir(tmp)
            faults.pause_before_commit(step, self.root)
            os.rename(tmp, final)
            _fsync_dir(self.root)
            self._prune()
        barrier()
        logger.info("checkpoint %s written in %.2fs", final, time.perf_counter() - started)
        return final

    def _prune(self) -> None:
        steps = self.committed_steps()
        for old in steps[: max(0, len(steps) - self.cfg.keep_last)]:
            shutil.rmtree(self.step_dir(old), ignore_errors=True)
            logger.info("pruned checkpoint step-%s", old)

    def _choose_latest(self) -> int | None:
        """Rank 0: drop unfinished saves, then the newest checkpoint that verifies."""
        if not self.root.exists():
            return None
        for stale in self.root.glob("step-*.tmp"):
            logger.warning("removing unfinished checkpoint %s", stale)
            shutil.rmtree(stale, ignore_errors=True)
        for step in reversed(self.committed_steps()):
            try:
                verify(self.step_dir(step), checksums=self.cfg.verify_checksums)
                return step
            except CheckpointError as err:
                logger.error("skipping invalid checkpoint: %s", err)
        return None

    def has_checkpoints(self) -> bool:
        return bool(self.committed_steps())

    def load_latest(self) -> int | None:
        """Restore model, optimizer, RNG and trainer state from the newest valid checkpoint (all ranks)."""
        step = broadcast_object(self._choose_latest() if self.info.is_main else None)
        if step is None:
            return None
        folder = self.step_dir(step)
        model_sd, optim_sd = get_state_dict(self.trainer.model, self.trainer.optimizer)
        state = {"model": model_sd, "optimizer": optim_sd}
        try:
            dcp_load(state, storage_reader=SafeFileSystemReader(str(folder)), planner=WeightsOnlyLoadPlanner())
        except CheckpointException as err:  # a BaseException: each rank's failure, wrapped
            unsafe = [e for e, _ in err.failures.values() if isinstance(e, UnsafeCheckpointError)]
            if unsafe:
                raise CheckpointError(f"{folder}: refused, {unsafe[0]}") from err
            raise
        set_state_dict(
            self.trainer.model,
            self.trainer.optimizer,
            model_state_dict=state["model"],
            optim_state_dict=state["optimizer"],
        )
        rng_file = folder / f"rng-rank{self.info.rank}.pt"
        if rng_file.exists():
            load_rng_file(rng_file)
        self.trainer.state = TrainerState.from_json(json.loads((folder / TRAINER_STATE).read_text(encoding="utf-8")))
        barrier()
        logger.info("resumed from %s (last applied step %s)", folder, self.trainer.state.last_step)
        return step

    def export(self, step: int) -> pathlib.Path:
        """Gather the full weights to rank 0 and write a Hugging Face folder atomically (all ranks call)."""
        if step != self.trainer.state.last_step:
            raise CheckpointError(
                f"export of step {step}: the weights in memory are step {self.trainer.state.last_step}"
            )
        final = self.export_dir(step)
        lora = self.info.config.lora
        tensors = self._adapter_weights() if lora.enabled else self._serving_weights()
        if self.info.is_main:
            tmp = final.with_name(final.name + ".tmp")
            shutil.rmtree(tmp, ignore_errors=True)
            tmp.mkdir(parents=True)
            dtype = DTYPES[self.info.config.model.export_dtype]
            if lora.enabled:  # the adapter only: the servers keep the base weights and hot-load this
                config = adapter_config(lora.rank, lora.alpha, lora.targets, self.info.config.model.path)
                write_adapter(tmp, tensors, config, {"step": str(step)})
            else:
                save_file(tensors, str(tmp / "model.safetensors"), metadata={"format": "pt", "step": str(step)})
                self._copy_model_files(tmp, dtype)
            mode = "lora" if lora.enabled else "full"
            _write_json(
                tmp / "tbt_export.json", {"step": step, "dtype": str(dtype).removeprefix("torch."), "mode": mode}
            )
            _fsync_dir(tmp)
            shutil.rmtree(final, ignore_errors=True)
            os.rename(tmp, final)
            _fsync_dir(self.export_root)
        barrier()
        logger.info("exported step %s to %s", step, final)
        return final

    def push(self, step: int, host: str, port: int, timeout_s: float, backend: str) -> dict[str, Any]:
        """Gather the full weights (all ranks call) and send them from rank 0 to one policy server's worker over
        the collective transport (tbt_gpu.weight_transport): the server joins the group at host:port as rank 1.
        A failed send is raised only after every rank has left the barrier, so the ranks stay in step."""
        if step != self.trainer.state.last_step:
            raise CheckpointError(f"push of step {step}: the weights in memory are step {self.trainer.state.last_step}")
        started = time.perf_counter()
        tensors = self._serving_weights()
        gathered = time.perf_counter()
        answer: dict[str, Any] = {}
        failure: BaseException | None = None
        if self.info.is_main:
            try:
                group = WeightGroup(host, port, 0, 2, backend, timeout_s)
                try:
                    joined = time.perf_counter()
                    sent = group.send(list(tensors.items()))
                finally:
                    group.close()
                answer = {
                    "bytes": sent,
                    "tensors": len(tensors),
                    "backend": backend,
                    "gather_s": gathered - started,
                    "join_s": joined - gathered,
                    "send_s": time.perf_counter() - joined,
                }
            except Exception as err:  # noqa: BLE001 - re-raised below, after the barrier
                failure = err
        barrier()
        if failure is not None:
            raise WeightPushFailed(f"push of step {step} to {host}:{port}: {failure}") from failure
        logger.info("pushed step %s to %s:%s in %.2f s", step, host, port, time.perf_counter() - started)
        return answer

    def _serving_weights(self) -> dict[str, torch.Tensor]:
        """The full weights as the policy servers load them (every rank calls; rank 0 gets them, others {})."""
        full = get_model_state_dict(
            self.trainer.model, options=StateDictOptions(full_state_dict=True, cpu_offload=True)
        )
        if not self.info.is_main:
            return {}
        if self.trainer.model_info.tied_embeddings:
            full.pop("lm_head.weight", None)
        dtype = DTYPES[self.info.config.model.export_dtype]
        # Full (non-sharded) state dicts hold plain tensors only.
        return {name: cast(torch.Tensor, t).detach().to(dtype).contiguous() for name, t in full.items()}

    def _adapter_weights(self) -> dict[str, torch.Tensor]:
        """The LoRA parameters only, gathered to rank 0 (every rank calls; others get {})."""
        dtype = DTYPES[self.info.config.model.export_dtype]
        out: dict[str, torch.Tensor] = {}
        for name, p in self.trainer.model.named_parameters():
            if not adapter_parameter(name):
                continue
            full = p.full_tensor() if isinstance(p, DTensor) else p  # a collective: every rank, same order
            if self.info.is_main:
                out[name] = full.detach().to("cpu", dtype).contiguous()
        return out

    def _copy_model_files(self, dest: pathlib.Path, dtype: torch.dtype) -> None:
        source = pathlib.Path(self.info.config.model.path)
        for path in sorted(source.iterdir()):
            if not path.is_file() or path.name.startswith(".") or path.name.endswith(WEIGHT_SUFFIXES):
                continue
            if path.name == "config.json":
                config = json.loads(path.read_text(encoding="utf-8"))
                config["dtype"] = str(dtype).removeprefix("torch.")
                config.pop("torch_dtype", None)
                _write_json(dest / "config.json", config)
            else:
                shutil.copy2(path, dest / path.name)
