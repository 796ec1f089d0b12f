"""Process-group setup and the few collectives the learner's control flow needs."""

from __future__ import annotations

import dataclasses
import datetime
import logging
import os
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh

from .config import LearnerConfig

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class DistInfo:
    rank: int
    world_size: int
    local_rank: int
    device: torch.device
    backend: str
    mesh: DeviceMesh
    control_group: Any
    """A gloo group for small CPU-side collectives (commands, flags), whatever the training backend."""
    config: LearnerConfig
    """The config resolved for this machine and world size."""

    @property
    def is_main(self) -> bool:
        return self.rank == 0


_STATE: DistInfo | None = None


def _env_int(name: str) -> int:
    value = os.environ[name]
    try:
        return int(value)
    except ValueError as err:
        raise ValueError(f"environment {name}={value!r} is not an integer") from err


def node_major_rank(node_rank: int) -> int:
    """This process's global rank when node `node_rank` holds ranks node_rank * G .. node_rank * G + G - 1.

    torchrun's c10d rendezvous numbers the nodes in an order of its own (sorted by host name and agent pid), not
    by `--node-rank`. The learner renumbers node-major from the node rank its GPU worker gave it, so that global
    rank 0, and with it the control endpoint on 127.0.0.1, is on node 0, whose GPU worker sends the steps. Every
    process keeps a distinct rank in 0..world_size-1, so the process group forms as before.
    """
    local_rank, local_world = _env_int("LOCAL_RANK"), _env_int("LOCAL_WORLD_SIZE")
    world_size = _env_int("WORLD_SIZE")
    if world_size % local_world != 0 or not 0 <= node_rank < world_size // local_world:
        raise ValueError(
            f"node rank {node_rank}: outside 0..{world_size // local_world - 1} "
            f"(world size {world_size}, {local_world} per node)"
        )
    return node_rank * local_world + local_rank


def init_distributed(cfg: LearnerConfig, *, node_rank: int | None = None) -> DistInfo:
    """Join (or create) the process group once; later calls reuse it (with their own resolved config).

    Under torchrun the rank layout comes from RANK/WORLD_SIZE/LOCAL_RANK. A plain `python` process
    (one GPU, tests, benchmarks) becomes a one-rank world. `node_rank` (multi-node launches) renumbers the
    global ranks node-major (`node_major_rank`).
    """
    global _STATE
    if _STATE is not None and dist.is_initialized():
        # Same process group; the config may differ (several trainers in one test process).
        resolved = cfg.resolve(cuda_available=torch.cuda.is_available(), world_size=_STATE.world_size)
        if resolved.distributed.backend != _STATE.backend or resolved.distributed.device != _STATE.device.type:
            raise ValueError("distributed: the process group already runs with another backend or device")
        return dataclasses.replace(_STATE, config=resolved)
    under_torchrun = "RANK" in os.environ
    if under_torchrun:
        if node_rank is not None:
            # env:// initialisation reads RANK: the renumbered rank must be what the process group sees.
            os.environ["RANK"] = str(node_major_rank(node_rank))
        rank, world_size, local_rank = _env_int("RANK"), _env_int("WORLD_SIZE"), _env_int("LOCAL_RANK")
    else:
        rank, world_size, local_rank = 0, 1, 0
    resolved = cfg.resolve(cuda_available=torch.cuda.is_available(), world_size=world_size)
    device_type = resolved.distributed.device
    backend = resolved.distributed.backend
    timeout = datetime.timedelta(seconds=resolved.distributed.timeout_s)
    if device_type == "cuda":
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
    else:
        device = torch.device("cpu")
    if not dist.is_initialized():
        # A lone process uses an in-memory store: no port, and nothing leaks into os.environ for
        # child processes to inherit.
        # torch re-exports HashStore from its C extension without listing it in __all__.
        store = None if under_torchrun else dist.HashStore()  # pyright: ignore[reportPrivateImportUsage]
        dist.init_process_group(
            backend=backend,
            timeout=timeout,
            device_id=device if device_type == "cuda" else None,
            **({} if store is None else {"store": store, "rank": 0, "world_size": 1}),
        )
    # Commands and abort flags travel on a CPU group so that an idle rank waiting for the next
    # command never holds a GPU stream, and so that object broadcasts need no device copies.
    control_group = dist.new_group(backend="gloo", timeout=timeout) if backend != "gloo" else dist.group.WORLD
    mesh = init_device_mesh(device_type, (world_size,), mesh_dim_names=("dp_shard",))
    torch.manual_seed(resolved.train.seed + rank)
    _STATE = DistInfo(
        rank=rank,
        world_size=world_size,
        local_rank=local_rank,
        device=device,
        backend=backend,
        mesh=mesh,
        control_group=control_group,
        config=resolved,
    )
    barrier()
    logger.info("rank %s/%s joined (%s on %s)", rank, world_size, backend, device)
    return _STATE


def current() -> DistInfo:
    if _STATE is None:
        raise RuntimeError("init_distributed() has not been called")
    return _STATE


def barrier() -> None:
    dist.barrier(group=current().control_group)


def broadcast_object(obj: Any) -> Any:
    """Rank 0's `obj` on every rank (other ranks' argument is ignored)."""
    holder = [obj]
    dist.broadcast_object_list(holder, src=0, group=current().control_group)
    return holder[0]


def any_rank(*flags: bool) -> list[bool]:
    """Element-wise OR of boolean flags across ranks (one small CPU all-reduce)."""
    tensor = torch.tensor([1 if f else 0 for f in flags], dtype=torch.int32)
    dist.all_reduce(tensor, op=dist.ReduceOp.MAX, group=current().control_group)
    return [bool(v) for v in tensor.tolist()]


def sum_across_ranks(values: list[float]) -> list[float]:
    tensor = torch.tensor(values, dtype=torch.float64)
    dist.all_reduce(tensor, op=dist.ReduceOp.SUM, group=current().control_group)
    return [float(v) for v in tensor.tolist()]


def destroy_distributed() -> None:
    global _STATE
    if dist.is_initialized():
        dist.destroy_process_group()
    _STATE = None
