"""Collective weight transport: learner rank 0 broadcasts full weights into every worker of every policy server.

A sync opens one group: learner rank 0 is rank 0 and each receiving vLLM worker (one per TP x PP rank of each server)
joins with its own rank, so world = 1 + the servers' worker counts and all servers receive the same broadcast at
once. The group sends one update and closes, so a restarted server or learner never holds a stale group. It is a
standalone torch c10d backend (gloo on CPU, NCCL on GPU) over its own TCPStore, which rank 0 hosts on a port the
caller chose: it never touches the default process group that torchrun and vLLM's worker each own. Needs only
torch, so both the learner's venv and vLLM's can import it.

Rendezvous: every rank first checks in through the store (a key per rank) and waits, bounded by the timeout, for
all the others and then for rank 0's go; only then is the backend group built. A missing peer is therefore a store
timeout on every rank, never a NCCL communicator waiting for a rank that does not come.

Peers are authenticated by a per-sync secret the caller draws and hands to every rank (never logged): the store has
no authentication, so a check-in is HMAC(secret, rank) and rank 0 checks every one before its go, which is itself an
HMAC only the holder of the secret can write. A wrong or missing proof aborts the group on every rank before any
weight moves (the caller then loads the disk export); a rank 0 that is not our learner gets no joiner. The backend
group's store keys sit under a prefix derived from the secret, so a stranger that copies a valid check-in cannot
find the mesh either.

Wire format, every message a broadcast from rank 0:
  1. an int64 tensor [n], the length of the metadata;
  2. n uint8, JSON {"names", "dtype_names", "shapes", "bucket_bytes"}: the receiver needs no arguments;
  3. the tensors in metadata order, packed into uint8 buckets of about `bucket_bytes`, each at a 64-byte
     aligned offset (a tensor larger than a bucket gets its own). Both ends cut the stream from the metadata.
A receiver streams: it yields one bucket's tensors while the next one travels, so it holds about two buckets, never
the whole model; one that stops loading drains the rest of the broadcast, so the sender and the other receivers
are never stranded. Every collective is bounded by the group's timeout; after any failure the group is dropped.
"""

from __future__ import annotations

import contextlib
import datetime
import hashlib
import hmac
import json
import os
import socket
from collections.abc import Generator, Iterator, Sequence
from typing import Any

import torch
import torch.distributed as dist

ALIGN = 64
DEFAULT_BUCKET_BYTES = 64 << 20
STORE_PREFIX = "tbt-weight-transport"
LOOPBACK = ("127.0.0.1", "localhost", "::1")
NCCL_ERROR_HANDLING = "TORCH_NCCL_ASYNC_ERROR_HANDLING"
MIN_SECRET_CHARS = 32
ABORT = "abort"
_GRACE = datetime.timedelta(seconds=5)


def _proof(secret: str, what: str) -> str:
    return hmac.new(secret.encode(), f"{STORE_PREFIX}/{what}".encode(), hashlib.sha256).hexdigest()


def _checked_secret(secret: str | None) -> str:
    if not isinstance(secret, str) or len(secret) < MIN_SECRET_CHARS:
        raise ValueError(f"weight group: no sync secret of at least {MIN_SECRET_CHARS} characters; nothing is sent")
    return secret


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


def _stream_plan(meta: dict[str, Any]) -> tuple[list[torch.dtype], list[tuple[int, list[tuple[int, int, int]]]]]:
    dtypes = [getattr(torch, d) for d in meta["dtype_names"]]
    return dtypes, plan_buckets(dtypes, meta["shapes"], int(meta["bucket_bytes"]))


def peak_pair_bytes(plan: Sequence[tuple[int, Any]]) -> int:
    """The most a streaming receiver holds at once: the bucket it yields plus the one in flight behind it."""
    sizes = [size for size, _ in plan]
    return max((a + b for a, b in zip(sizes, sizes[1:])), default=sizes[0] if sizes else 0)


class WeightGroup:
    """The group of one update; rank 0 hosts the store. Construct concurrently on every rank: the constructor is
    the rendezvous and blocks (at most about `timeout_s`) until all ranks joined, else raises on every rank."""

    def __init__(
        self,
        host: str,
        port: int,
        rank: int,
        world_size: int,
        backend: str,
        timeout_s: float,
        secret: str | None = None,
    ) -> None:
        self._secret = _checked_secret(secret)
        if not 0 <= rank < world_size:
            raise ValueError(f"weight group: rank {rank} outside a world of {world_size}")
        if backend not in ("gloo", "nccl"):
            raise ValueError(f"weight transport backend {backend!r}: expected gloo or nccl")
        timeout = datetime.timedelta(seconds=timeout_s)
        self.backend = backend
        self.rank = rank
        self.world_size = world_size
        self.pg: Any = None
        # Any: torch's stubs declare neither the backends' broadcast/allreduce overloads nor their _Options fields.
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
            self._check_in(prefixed, timeout)
            mesh = f"pg/{_proof(self._secret, f'mesh/{world_size}')[:32]}"
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
                self.pg = c10d.ProcessGroupGloo(c10d.PrefixStore(mesh, prefixed), rank, world_size, opts)
            else:
                self.pg = _nccl_group(c10d, c10d.PrefixStore(mesh, prefixed), rank, world_size, timeout)
            probe = torch.ones(1, device=_device(backend))
            self.pg.allreduce([probe]).wait()  # proves the mesh is up (and builds NCCL's communicator eagerly)
            if int(probe.item()) != world_size:
                raise RuntimeError(f"weight group probe: got {probe.item()}, expected {world_size}")
        except BaseException:
            self.close()
            raise

    def _check_in(self, store: Any, timeout: datetime.timedelta) -> None:
        """Every rank announces itself with its proof and waits for all others, then for rank 0's go: a rank that
        never comes (or a rank 0 that gave up) is a store timeout here, a wrong proof a refusal, both before any
        backend state exists."""
        store.set(f"joined/{self.rank}", _proof(self._secret, f"rank/{self.rank}/{self.world_size}"))
        self._wait(store, [f"joined/{r}" for r in range(self.world_size)], timeout)
        go = _proof(self._secret, f"go/{self.world_size}")
        if self.rank == 0:
            unproven = [
                r
                for r in range(1, self.world_size)
                if not hmac.compare_digest(
                    store.get(f"joined/{r}"), _proof(self._secret, f"rank/{r}/{self.world_size}").encode()
                )
            ]
            if unproven:
                store.set("go", ABORT)
                # The honest joiners read the abort before this store goes with this rank (a stranger never says).
                with contextlib.suppress(Exception):
                    store.wait([f"aborted/{r}" for r in range(1, self.world_size) if r not in unproven], _GRACE)
                raise PermissionError(
                    f"weight group: ranks {unproven} did not prove the sync's secret; the group is aborted and "
                    "nothing was sent"
                )
            store.set("go", go)
            return
        self._wait(store, ["go"], timeout)
        said = store.get("go")
        if said == ABORT.encode():
            store.set(f"aborted/{self.rank}", "1")
        if not hmac.compare_digest(said, go.encode()):
            raise PermissionError(
                f"weight group, rank {self.rank}: rank 0 aborted the group (a peer did not prove the sync's secret)"
                if said == ABORT.encode()
                else f"weight group, rank {self.rank}: rank 0 did not prove the sync's secret (not our learner)"
            )

    def _wait(self, store: Any, keys: list[str], timeout: datetime.timedelta) -> None:
        try:
            store.wait(keys, timeout)
        except Exception as err:  # DistStoreError and friends: say who is missing
            try:
                missing: Any = [r for r in range(self.world_size) if not store.check([f"joined/{r}"])]
            except Exception:  # noqa: BLE001 - rank 0's store is gone: it gave up first
                missing = "unknown (rank 0's store is gone)"
            raise TimeoutError(
                f"weight group rendezvous, rank {self.rank} of {self.world_size}: missing ranks {missing} after "
                f"{timeout.total_seconds():g} s ({err})"
            ) from err

    def close(self) -> None:
        if self.pg is not None:
            try:
                self.pg.shutdown()
            except Exception:  # noqa: BLE001 - best effort: the group is never reused
                pass
            self.pg = None
        if self.listener is not None:
            self.listener.close()
            self.listener = None

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

    def stream(self) -> ReceivedStream:
        """Rank > 0: the update's metadata now, its tensors as they arrive (ReceivedStream)."""
        return ReceivedStream(self, self._metadata(None))

    def receive(self) -> list[tuple[str, torch.Tensor]]:
        """Rank > 0: the whole update at once (tools and benchmarks; the server's worker streams instead)."""
        return [(name, t.clone()) for name, t in self.stream()]


class ReceivedStream:
    """One update as it arrives: iterating yields (name, tensor) views into a bucket while the next bucket is
    already posted, so at most two buckets are held (`live_bytes`, its maximum `peak_bytes`). A consumer that
    stops early (a failed load) calls `drain()`, which takes the rest of the broadcast and drops it."""

    def __init__(self, group: WeightGroup, meta: dict[str, Any]) -> None:
        self.group = group
        self.names: list[str] = meta["names"]
        self.shapes: list[list[int]] = meta["shapes"]
        self.dtypes, self.plan = _stream_plan(meta)
        self.posted = 0
        self.taken = 0
        self.yielded = 0
        self.live_bytes = 0
        self.peak_bytes = 0
        self.broken = False
        self._inflight: Any = None
        self._iterator: Generator[tuple[str, torch.Tensor], None, None] | None = None

    @property
    def total_bytes(self) -> int:
        return sum(size for size, _ in self.plan)

    def _post(self) -> None:
        if self.posted < len(self.plan) and self._inflight is None:
            size = self.plan[self.posted][0]
            buf = torch.empty(size, dtype=torch.uint8, device=_device(self.group.backend))
            self._inflight = (self.group.pg.broadcast(buf, 0), buf)
            self.posted += 1
            self.live_bytes += size
            self.peak_bytes = max(self.peak_bytes, self.live_bytes)

    def _take(self) -> torch.Tensor:
        work, buf = self._inflight
        self._inflight = None
        try:
            work.wait()
        except BaseException:
            self.broken = True  # the group is gone: nothing more can be drained
            raise
        self.taken += 1
        return buf

    def __iter__(self) -> Iterator[tuple[str, torch.Tensor]]:
        if self._iterator is None:
            self._iterator = self._tensors()
        return self._iterator

    def _tensors(self) -> Generator[tuple[str, torch.Tensor], None, None]:
        self._post()
        while self._inflight is not None:
            size, items = self.plan[self.taken]
            buf = self._take()
            self._post()  # the next bucket travels while this one is loaded
            try:
                for i, offset, n in items:
                    self.yielded += 1
                    yield self.names[i], buf[offset : offset + n].view(self.dtypes[i]).view(list(self.shapes[i]))
            finally:  # also when the consumer gives up mid-bucket: this stream lets go of it
                del buf
                self.live_bytes -= size

    def drain(self) -> int:
        """Receives and drops what was not consumed; returns the tensors dropped. A no-op after a full read."""
        if self._iterator is not None:
            self._iterator.close()  # drops the bucket the consumer abandoned
            self._iterator = None
        if self.broken:
            raise RuntimeError("weight stream: the transport failed; nothing left to drain")
        dropped = len(self.names) - self.yielded
        while self._inflight is not None or self.posted < len(self.plan):
            self._post()
            size = self.plan[self.taken][0]
            self._take()
            self.live_bytes -= size
        return dropped


def _nccl_group(c10d: Any, store: Any, rank: int, world_size: int, timeout: datetime.timedelta) -> Any:
    """A NCCL group whose watchdog, on a timeout or a lost peer, aborts this group's communicator and lets the wait
    raise (mode 2, CleanUpOnly) instead of tearing the process down (torch's default): a failed sync must not take
    the learner or the server with it. The variable is read when the group is built, so it is set around that."""
    previous = os.environ.get(NCCL_ERROR_HANDLING)
    os.environ[NCCL_ERROR_HANDLING] = "2"
    try:
        opts = c10d.ProcessGroupNCCL.Options()
        opts._timeout = timeout
        return c10d.ProcessGroupNCCL(store, rank, world_size, opts)
    finally:
        if previous is None:
            os.environ.pop(NCCL_ERROR_HANDLING, None)
        else:
            os.environ[NCCL_ERROR_HANDLING] = previous
