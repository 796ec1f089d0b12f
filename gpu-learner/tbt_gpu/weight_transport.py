"""Collective weight transport: learner rank 0 broadcasts full weights straight into a policy server's worker.

A sync opens a group of two (learner rank 0 = rank 0, the server's worker = rank 1), sends one update and
closes it, so a restarted server or learner never holds a stale group. The group is a standalone torch c10d
backend (gloo on CPU, NCCL on GPU) over its own TCPStore, which rank 0 hosts on a port the caller chose: it
never touches the default process group that torchrun and vLLM's worker each own. Needs only torch, so both
the learner's venv and vLLM's can import it.

Wire format, every message a broadcast from rank 0:
  1. an int64 tensor [n], the length of the metadata;
  2. n uint8, JSON {"names", "dtype_names", "shapes", "bucket_bytes"}: the receiver needs no arguments;
  3. the tensors in metadata order, packed into uint8 buckets of about `bucket_bytes`, each at a 64-byte
     aligned offset (a tensor larger than a bucket gets its own). Both ends cut the stream from the metadata.
The receiver takes the whole update before loading it, so a failing load never strands the sender mid-send.
Every collective is bounded by the group's timeout; after any failure the group is dropped, not reused.
"""

from __future__ import annotations

import datetime
import json
import socket
from collections.abc import Sequence
from typing import Any

import torch
import torch.distributed as dist

ALIGN = 64
DEFAULT_BUCKET_BYTES = 64 << 20
STORE_PREFIX = "tbt-weight-transport"
LOOPBACK = ("127.0.0.1", "localhost", "::1")


def _nbytes(dtype: torch.dtype, shape: Sequence[int]) -> int:
    n = torch.empty((), dtype=dtype).element_size()
    for d in shape:
        n *= int(d)
    return n


def _aligned(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


def plan_buckets(
    dtypes: Sequence[torch.dtype], shapes: Sequence[Sequence[int]], bucket_bytes: int
) -> list[tuple[int, list[tuple[int, int, int]]]]:
    """[(bucket size, [(tensor index, offset, bytes), ...]), ...]: a pure function of the metadata."""
    buckets: list[tuple[int, list[tuple[int, int, int]]]] = []
    items: list[tuple[int, int, int]] = []
    size = 0
    for i, (dtype, shape) in enumerate(zip(dtypes, shapes)):
        n = _nbytes(dtype, shape)
        if items and size + n > bucket_bytes:
            buckets.append((size, items))
            items, size = [], 0
        items.append((i, size, n))
        size = _aligned(size + n)
    if items:
        buckets.append((size, items))
    return buckets


def _device(backend: str) -> torch.device:
    return torch.device("cuda", torch.cuda.current_device()) if backend == "nccl" else torch.device("cpu")


class WeightGroup:
    """A two-or-more-rank group for one update; rank 0 hosts the store. Construct concurrently on every rank:
    the constructor is the rendezvous and blocks (at most `timeout_s`) until all ranks joined."""

    def __init__(self, host: str, port: int, rank: int, world_size: int, backend: str, timeout_s: float) -> None:
        timeout = datetime.timedelta(seconds=timeout_s)
        self.backend = backend
        # Any: torch's stubs declare neither the backends' broadcast/allreduce overloads nor their _Options fields.
        self.pg: Any
        c10d: Any = dist
        # Rank 0 listens on `host` only: a TCPStore left to bind itself listens on every interface.
        self.listener = socket.create_server((host, port)) if rank == 0 else None
        try:
            self.store = c10d.TCPStore(
                host,
                port,
                world_size=world_size,
                is_master=rank == 0,
                timeout=timeout,
                wait_for_workers=False,
                master_listen_fd=self.listener.fileno() if self.listener else None,
            )
            prefixed = c10d.PrefixStore(STORE_PREFIX, self.store)
            if backend == "gloo":
                opts = c10d.ProcessGroupGloo._Options()
                opts._timeout = timeout
                # An explicit device: the default resolves this machine's hostname, which may pick the wrong
                # interface.
                device = (
                    c10d.ProcessGroupGloo.create_device(hostname="127.0.0.1")
                    if host in LOOPBACK
                    else c10d.ProcessGroupGloo.create_default_device()
                )
                opts._devices = [device]
                self.pg = c10d.ProcessGroupGloo(prefixed, rank, world_size, opts)
            elif backend == "nccl":
                nccl_opts = c10d.ProcessGroupNCCL.Options()
                nccl_opts._timeout = timeout
                self.pg = c10d.ProcessGroupNCCL(prefixed, rank, world_size, nccl_opts)
            else:
                raise ValueError(f"weight transport backend {backend!r}: expected gloo or nccl")
            probe = torch.ones(1, device=_device(backend))
            self.pg.allreduce([probe]).wait()  # proves the mesh is up (and builds NCCL's communicator eagerly)
            if int(probe.item()) != world_size:
                raise RuntimeError(f"weight group probe: got {probe.item()}, expected {world_size}")
        except BaseException:
            if self.listener is not None:
                self.listener.close()
            raise

    def close(self) -> None:
        try:
            self.pg.shutdown()
        except Exception:  # noqa: BLE001 - best effort: the group is never reused
            pass
        if self.listener is not None:
            self.listener.close()

    def _metadata(self, meta: dict[str, Any] | None) -> dict[str, Any]:
        """Rank 0 passes `meta`; the others pass None and get it back."""
        device = _device(self.backend)
        payload = json.dumps(meta).encode() if meta is not None else b""
        header = torch.tensor([len(payload)], dtype=torch.int64, device=device)
        self.pg.broadcast(header, 0).wait()
        if meta is not None:
            body = torch.frombuffer(bytearray(payload), dtype=torch.uint8).to(device)
        else:
            body = torch.empty(int(header.item()), dtype=torch.uint8, device=device)
        self.pg.broadcast(body, 0).wait()
        return meta if meta is not None else json.loads(bytes(body.cpu().numpy()).decode())

    def send(self, named: Sequence[tuple[str, torch.Tensor]], bucket_bytes: int = DEFAULT_BUCKET_BYTES) -> int:
        """Rank 0: broadcast `named`; returns the bytes sent. Two buckets in flight: pack one while one travels."""
        device = _device(self.backend)
        tensors = [t.detach() for _, t in named]
        meta = {
            "names": [n for n, _ in named],
            "dtype_names": [str(t.dtype).removeprefix("torch.") for t in tensors],
            "shapes": [list(t.shape) for t in tensors],
            "bucket_bytes": int(bucket_bytes),
        }
        self._metadata(meta)
        pending = None
        sent = 0
        for size, items in plan_buckets([t.dtype for t in tensors], [t.shape for t in tensors], bucket_bytes):
            buf = torch.empty(size, dtype=torch.uint8, device=device)
            for i, offset, n in items:
                if n:
                    buf[offset : offset + n].copy_(tensors[i].contiguous().reshape(-1).view(torch.uint8))
            work = self.pg.broadcast(buf, 0)
            if pending is not None:
                pending[0].wait()
            pending = (work, buf)
            sent += size
        if pending is not None:
            pending[0].wait()
        return sent

    def receive(self) -> list[tuple[str, torch.Tensor]]:
        """Rank > 0: one update, as (name, tensor) views into the received buckets."""
        device = _device(self.backend)
        meta = self._metadata(None)
        names, shapes = meta["names"], meta["shapes"]
        dtypes = [getattr(torch, d) for d in meta["dtype_names"]]
        plan = plan_buckets(dtypes, shapes, int(meta["bucket_bytes"]))
        buffers = [torch.empty(size, dtype=torch.uint8, device=device) for size, _ in plan]
        works = [self.pg.broadcast(buf, 0) for buf in buffers]  # all posted at once; run in order
        for work in works:
            work.wait()
        out: list[tuple[str, torch.Tensor]] = []
        for buf, (_size, items) in zip(buffers, plan):
            for i, offset, n in items:
                out.append((names[i], buf[offset : offset + n].view(dtypes[i]).view(list(shapes[i]))))
        return out
