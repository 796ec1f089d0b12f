"""Resumable sharded checkpoints (torch.distributed.checkpoint) and serving exports, both atomic.

Layout under `checkpoint.dir` (a folder every node can reach):
    step-<n>/            .metadata + __<r>_<i>.distcp (model and optimizer shards, rank r's), rng-rank<r>.pt,
                         trainer_state.json (step, ledger), manifest.json (size, sha256 and writing rank of every
                         file, parent_step + sha256 of the parent's manifest: the lineage)
    step-<n>.tmp/        a save in progress; renamed to step-<n> only when complete, deleted on start
    exports/step-<n>/    model.safetensors + config and tokenizer files (a Hugging Face folder)

No rank reads the whole checkpoint: at save each rank hashes the files it wrote itself (while they are still in
its page cache) and rank 0 gathers the digests into the manifest; at resume rank 0 checks the manifest, sizes and
metadata, and the sha256 checks are spread over the ranks (`verifier_ranks`), their verdicts combined by an
all-reduce. A checkpoint loads onto any world size (DCP reshards); see `Checkpointer.load_latest` for the RNG.
"""

from __future__ import annotations

import errno
import hashlib
import json
import logging
import os
import pathlib
import pickle
import random
import shutil
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, cast

import numpy as np
import torch
import torch.distributed as dist
from safetensors.torch import save_file
from torch.distributed.checkpoint.api import CheckpointException
from torch.distributed.checkpoint.filesystem import FileSystemWriter
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
from .distributed import any_rank, barrier, broadcast_object
from .errors import WeightPushFailed
from .export_names import adapter_names, serving_names
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


def _digests(folder: pathlib.Path, names: list[str], threads: int) -> dict[str, dict[str, Any]]:
    """Size and sha256 of each named file in `folder`, `threads` files at a time (hashlib releases the GIL)."""

    def one(name: str) -> tuple[str, dict[str, Any]]:
        path = folder / name
        return name, {"size": path.stat().st_size, "sha256": _sha256(path)}

    if threads <= 1 or len(names) <= 1:
        return dict(map(one, names))
    with ThreadPoolExecutor(max_workers=min(threads, len(names)), thread_name_prefix="ckpt-hash") as pool:
        return dict(pool.map(one, names))


def _checksum_failures(
    folder: pathlib.Path, files: dict[str, dict[str, Any]], names: list[str], threads: int
) -> list[str]:
    """The named files whose sha256 differs from the manifest's (or that cannot be read)."""

    def bad(name: str) -> bool:
        try:
            return _sha256(folder / name) != files[name]["sha256"]
        except OSError:
            return True

    if threads <= 1 or len(names) <= 1:
        flags = [bad(name) for name in names]
    else:
        with ThreadPoolExecutor(max_workers=min(threads, len(names)), thread_name_prefix="ckpt-verify") as pool:
            flags = list(pool.map(bad, names))
    return [name for name, failed in zip(names, flags, strict=True) if failed]


def verifier_ranks(files: dict[str, dict[str, Any]], world_size: int) -> dict[str, int]:
    """Which rank checks each file's sha256 at resume: the i-th largest file (ties by name) goes to rank
    i % world_size, so the big shards land on distinct ranks first and each rank hashes about 1/world_size."""
    order = sorted(files, key=lambda name: (-int(files[name]["size"]), name))
    return {name: i % world_size for i, name in enumerate(order)}


class _RecordingWriter(FileSystemWriter):
    """DCP's FileSystemWriter that remembers the files this rank wrote (names relative to the folder)."""

    def __init__(self, path: str, thread_count: int) -> None:
        super().__init__(path, thread_count=thread_count)
        self.written: list[str] = []

    def write_data(self, plan: Any, planner: Any) -> Any:
        future = super().write_data(plan, planner)
        # FileSystemWriter writes synchronously and returns a finished future (async_save is not used here). One
        # result per tensor or value: a file holds many, and each file is named once.
        names = dict.fromkeys(result.storage_data.relative_path for result in future.wait())
        self.written.extend(name for name in names if name not in self.written)
        return future


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


def _reseed(seed: int, step: int, rank: int) -> int:
    """Seed python, numpy and torch (every device) from (seed, step, rank); returns the derived seed."""
    derived = int.from_bytes(hashlib.sha256(f"{seed}/{step}/{rank}".encode()).digest()[:4], "little")
    random.seed(derived)
    np.random.seed(derived)
    torch.manual_seed(derived)
    return derived


def load_rng_file(rng_file: pathlib.Path) -> bool:
    """Restores RNG state saved by `_rng_state`; a file that needs more than plain types is refused, unrun."""
    try:
        _set_rng_state(torch.load(rng_file, weights_only=True))
        return True
    except pickle.UnpicklingError:
        # An older format (numpy arrays pickled as objects) or a crafted file: never unpickled unchecked.
        logger.warning("%s: RNG state not loadable with weights_only=True; the RNG starts fresh", rng_file)
        return False


def _checked_manifest(folder: pathlib.Path) -> dict[str, Any]:
    """The manifest after checking its format and step, every file's presence and size, and the DCP metadata (read
    without running anything); no checksums. CheckpointError if anything is off."""
    manifest_path = folder / MANIFEST
    try:
        manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as err:
        raise CheckpointError(f"{folder}: unreadable {MANIFEST} ({err})") from err
    if not isinstance(manifest, dict):
        raise CheckpointError(f"{folder}: {MANIFEST} is not a JSON object")
    if manifest.get("format") != FORMAT_VERSION or manifest.get("step") != _step_of(folder.name):
        raise CheckpointError(f"{folder}: manifest format/step mismatch")
    files = manifest.get("files")
    if not isinstance(files, dict):
        raise CheckpointError(f"{folder}: manifest lists no files")
    for name, meta in files.items():
        if "/" in name or name in ("", ".", "..") or not isinstance(meta, dict):
            raise CheckpointError(f"{folder}: manifest entry {name!r} is not a file of the checkpoint folder")
        path = folder / name
        if not path.is_file():
            raise CheckpointError(f"{folder}: missing {name}")
        if path.stat().st_size != meta.get("size"):
            raise CheckpointError(f"{folder}: {name} has {path.stat().st_size} bytes, manifest says {meta.get('size')}")
    # The manifest lives in the same folder, so it proves nothing against someone who can write there: the
    # metadata must also be nothing but checkpoint metadata (read without running anything).
    try:
        read_metadata_file(folder / METADATA_FILE)
    except Exception as err:  # whatever the reason (crafted, truncated), the checkpoint is not used
        raise CheckpointError(f"{folder}: {METADATA_FILE} refused ({err})") from err
    return manifest


def verify(folder: pathlib.Path, *, checksums: bool, threads: int = 1) -> dict[str, Any]:
    """The manifest of a committed checkpoint after checking its files in this process alone (tools, tests; the
    learner spreads the checksums over its ranks); CheckpointError if anything is off."""
    manifest = _checked_manifest(folder)
    if checksums:
        failed = _checksum_failures(folder, manifest["files"], sorted(manifest["files"]), threads)
        if failed:
            raise CheckpointError(f"{folder}: {failed[0]} fails its sha256 check")
    return manifest


# Below this much free space a failed save is taken to have run out of it: torch.save's zip writer reports a real
# ENOSPC as `RuntimeError: [enforce fail at inline_container.cc] unexpected pos`, not as an OSError with its errno.
LOW_SPACE_BYTES = 256 * 2**20


def free_bytes(folder: pathlib.Path) -> int:
    return shutil.disk_usage(folder).free


def volume_full(err: BaseException, world_size: int, folder: pathlib.Path) -> bool:
    """Whether a failed save ran out of space on every rank at once. DCP raises a CheckpointException on all ranks
    when any rank's write failed: full if a rank met ENOSPC/EDQUOT, or if any rank's volume is all but full (one
    all-reduce: every rank is here). Alone, a plain error is one rank's, judged only in a world of one."""
    full = (errno.ENOSPC, errno.EDQUOT)
    if isinstance(err, CheckpointException):
        if any(isinstance(e, OSError) and e.errno in full for e, _ in err.failures.values()):
            return True
        low = free_bytes(folder) < LOW_SPACE_BYTES
        return low if world_size == 1 else any_rank(low)[0]
    if world_size != 1:
        return False
    return (isinstance(err, OSError) and err.errno in full) or free_bytes(folder) < LOW_SPACE_BYTES


def volume_full_reason(err: BaseException, folder: pathlib.Path) -> str:
    """One line for a full volume: the OSError a rank met, not DCP's multi-line summary of every rank's traceback;
    without one, the free space left and the first line of what the save raised."""
    failures = [e for e, _ in err.failures.values()] if isinstance(err, CheckpointException) else [err]
    oserror = next((e for e in failures if isinstance(e, OSError)), None)
    if oserror is not None:
        return str(oserror)
    first = (str(failures[0]) if failures else str(err)).strip().splitlines() or [type(err).__name__]
    return f"{free_bytes(folder) // 2**20} MiB free after the save failed: {first[0][:200]}"


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

    def discard_partial(self, step: int) -> None:
        """Every rank, after a save that failed on every rank: the half-written folder goes (it holds space)."""
        if self.info.is_main:
            shutil.rmtree(self.root / f"step-{step}.tmp", ignore_errors=True)
        barrier()

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
        threads = self.cfg.io_threads
        model_sd, optim_sd = get_state_dict(self.trainer.model, self.trainer.optimizer)
        writer = _RecordingWriter(str(tmp), thread_count=threads)
        dcp_save({"model": model_sd, "optimizer": optim_sd}, storage_writer=writer)
        faults.disk_full_after_write()
        rng_name = f"rng-rank{self.info.rank}.pt"
        torch.save(_rng_state(), tmp / rng_name)
        written = time.perf_counter()
        # Each rank hashes what it wrote, in parallel with the others: nobody reads the whole checkpoint.
        own = _digests(tmp, [*writer.written, rng_name], threads)
        for meta in own.values():
            meta["rank"] = self.info.rank
        hashed = time.perf_counter()
        per_rank: list[Any] | None = [None] * self.info.world_size if self.info.is_main else None
        dist.gather_object(own, per_rank, dst=0, group=self.info.control_group)
        if self.info.is_main:
            _write_json(tmp / TRAINER_STATE, self.trainer.state.to_json())
            files: dict[str, dict[str, Any]] = {}
            for reported in per_rank or []:
                files.update(reported)
            present = {str(p.relative_to(tmp)) for p in tmp.rglob("*") if p.is_file() and p.name != MANIFEST}
            if not files.keys() <= present:
                raise CheckpointError(f"{tmp}: ranks report files that are not there: {sorted(files.keys() - present)}")
            # Rank 0's own small files (.metadata, trainer_state.json) and anything a rank did not report (a
            # DCP version that writes more) are hashed here, so the manifest still covers every file.
            rest = sorted(present - files.keys())
            unexpected = [name for name in rest if name not in (METADATA_FILE, TRAINER_STATE)]
            if unexpected:
                logger.warning("%s: files no rank reported, hashed on rank 0: %s", tmp, unexpected)
            files.update({name: {**meta, "rank": 0} for name, meta in _digests(tmp, rest, threads).items()})
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
                "files": dict(sorted(files.items())),
            }
            _write_json(tmp / MANIFEST, manifest)
            _fsync_dir(tmp)
            faults.pause_before_commit(step, self.root)
            os.rename(tmp, final)
            _fsync_dir(self.root)
            self._prune()
        barrier()
        logger.info(
            "checkpoint %s written in %.2fs (shards %.2fs, own hashes %.2fs; %d bytes in %d files on this rank)",
            final,
            time.perf_counter() - started,
            written - started,
            hashed - written,
            sum(meta["size"] for meta in own.values()),
            len(own),
        )
        return final

    def _prune(self) -> None:
        steps = self.committed_steps()
        for old in steps[: max(0, len(steps) - self.cfg.keep_last)]:
            shutil.rmtree(self.step_dir(old), ignore_errors=True)
            logger.info("pruned checkpoint step-%s", old)
        # A checkpoint set aside at resume (`_set_aside`) goes once its step leaves the kept window.
        oldest_kept = self.committed_steps()[0]
        for rejected in self.root.glob("step-*.rejected*"):
            step = _step_of(rejected.name.split(".", 1)[0])
            if rejected.is_dir() and step is not None and step < oldest_kept:
                shutil.rmtree(rejected, ignore_errors=True)
                logger.info("pruned rejected checkpoint %s", rejected.name)

    def _choose_latest(self) -> tuple[int, dict[str, Any]] | None:
        """Every rank: the newest checkpoint that verifies, and its manifest. Rank 0 drops unfinished saves and
        checks each candidate's manifest, sizes and metadata; the sha256 checks are spread over the ranks
        (`verifier_ranks`) and one failing file on any rank rejects the candidate (an all-reduce of the flags)."""
        candidates: list[int] = []
        if self.info.is_main and self.root.exists():
            for stale in self.root.glob("step-*.tmp"):
                logger.warning("removing unfinished checkpoint %s", stale)
                shutil.rmtree(stale, ignore_errors=True)
            candidates = list(reversed(self.committed_steps()))
        for step in broadcast_object(candidates):
            folder = self.step_dir(step)
            manifest: dict[str, Any] | None = None
            if self.info.is_main:
                try:
                    manifest = _checked_manifest(folder)
                except CheckpointError as err:
                    logger.error("skipping invalid checkpoint: %s", err)
                    self._set_aside(folder)
            manifest = broadcast_object(manifest)
            if manifest is None:
                continue
            if not self.cfg.verify_checksums:
                return step, manifest
            files = manifest["files"]
            assigned = verifier_ranks(files, self.info.world_size)
            mine = [name for name, rank in assigned.items() if rank == self.info.rank]
            failed = _checksum_failures(folder, files, sorted(mine), self.cfg.io_threads)
            for name in failed:
                logger.error("skipping invalid checkpoint: %s: %s fails its sha256 check", folder, name)
            if any_rank(bool(failed))[0]:
                if self.info.is_main:
                    logger.error("skipping invalid checkpoint: %s: a sha256 check failed (see each rank's log)", folder)
                    self._set_aside(folder)
                barrier()
                continue
            return step, manifest
        return None

    def _set_aside(self, folder: pathlib.Path) -> None:
        """Rank 0: rename a rejected checkpoint to step-<n>.rejected[-<i>], kept for a look but no longer a
        committed step: the step is applied again from an older checkpoint and must be able to save as step-<n>."""
        target = folder.with_name(f"{folder.name}.rejected")
        i = 1
        while target.exists():
            target, i = folder.with_name(f"{folder.name}.rejected-{i}"), i + 1
        try:
            os.rename(folder, target)
            _fsync_dir(self.root)
        except OSError as err:  # never raised on rank 0 alone: the other ranks wait in a collective
            logger.error("cannot set %s aside (%s): saving its step again will fail", folder, err)
            return
        logger.warning("set %s aside as %s", folder, target.name)

    def has_checkpoints(self) -> bool:
        return bool(self.committed_steps())

    def load_latest(self) -> int | None:
        """Restore model, optimizer, RNG and trainer state from the newest valid checkpoint (all ranks).

        The model and AdamW state load onto any world size: DCP reshards them, so the next update equals the
        saving world's own (tests/test_learner_reshard.py). The RNG: at the saving world size each rank restores
        its own `rng-rank<r>.pt`; at another world size the per-rank streams have no counterpart (the data split
        differs too), so no file is used and every rank seeds its RNGs from (train.seed, step, rank) instead,
        which is as reproducible as a fresh start. The trainer itself draws no random numbers (no dropout)."""
        chosen = self._choose_latest()
        if chosen is None:
            return None
        step, manifest = chosen
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
        saved_world = manifest.get("world_size")
        rng_file = folder / f"rng-rank{self.info.rank}.pt"
        if saved_world == self.info.world_size:
            if rng_file.exists():
                load_rng_file(rng_file)
        else:
            seed = _reseed(self.info.config.train.seed, step, self.info.rank)
            if self.info.is_main:
                logger.warning(
                    "%s was saved by %s ranks, this learner has %s: saved RNG states unused, RNGs seeded from "
                    "(train.seed, step, rank) (rank 0: %s)",
                    folder,
                    saved_world,
                    self.info.world_size,
                    seed,
                )
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

    def push(
        self, step: int, host: str, port: int, timeout_s: float, backend: str, secret: str, world_size: int = 2
    ) -> dict[str, Any]:
        """Gather the full weights (all ranks call) and broadcast them from rank 0 to every policy-server worker of
        one sync over the collective transport (tbt_gpu.weight_transport): rank 0 hosts the group at host:port and
        `world_size - 1` workers join it. A failed send is raised only after every rank has left the barrier, so
        the ranks stay in step; a peer that never joins is a bounded store timeout, and the learner carries on."""
        if step != self.trainer.state.last_step:
            raise CheckpointError(f"push of step {step}: the weights in memory are step {self.trainer.state.last_step}")
        started = time.perf_counter()
        tensors = self._serving_weights()
        gathered = time.perf_counter()
        answer: dict[str, Any] = {}
        failure: BaseException | None = None
        if self.info.is_main:
            try:
                group = WeightGroup(host, port, 0, world_size, backend, timeout_s, secret)
                try:
                    joined = time.perf_counter()
                    sent = group.send(list(tensors.items()))
                finally:
                    group.close()
                answer = {
                    "bytes": sent,
                    "tensors": len(tensors),
                    "backend": backend,
                    "world_size": world_size,
                    "gather_s": gathered - started,
                    "join_s": joined - gathered,
                    "send_s": time.perf_counter() - joined,
                }
            except Exception as err:  # noqa: BLE001 - re-raised below, after the barrier
                failure = err
        barrier()
        if failure is not None:
            raise WeightPushFailed(f"push of step {step} to {host}:{port}: {failure}") from failure
        logger.info(
            "pushed step %s to %s receivers at %s:%s in %.2f s",
            step,
            world_size - 1,
            host,
            port,
            time.perf_counter() - started,
        )
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
        # Full (non-sharded) state dicts hold plain tensors only; named as the model's checkpoint names them.
        state = {name: cast(torch.Tensor, t).detach().to(dtype).contiguous() for name, t in full.items()}
        return serving_names(self.trainer.model, pathlib.Path(self.info.config.model.path), state)

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
        # The adapted modules as the model's checkpoint names them (a server applies each to the weight it loaded).
        renamed = adapter_names(out, pathlib.Path(self.info.config.model.path))
        return {renamed[name]: t for name, t in out.items()}

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
