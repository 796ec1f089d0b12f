"""The policy server's end of the collective weight transport, mixed into vLLM's worker.

Start vLLM with `--worker-extension-cls tbt_gpu.vllm_weight_receiver.WeightReceiver` (this package on the
worker's PYTHONPATH; vLLM's CPU build spawns its worker) and dev mode on; then

    POST /collective_rpc {"method": "tbt_weight_transport"}
        -> {"results": [{"protocol", "worker", "workers"}, ...]}, one per worker: how many ranks the server needs
    POST /collective_rpc {"method": "receive_tbt_weights",
                          "kwargs": {"host", "port", "timeout_s", "backend", "base_rank", "world_size", "secret"}}

runs on every worker of the server at once (vLLM's collective_rpc): each joins the learner's group as
`base_rank + worker`, where `worker` is its index in the server (tp rank + tp size x pp rank). Each worker gets the
full tensors (once every rank proved the sync's `secret`, which the caller draws per sync and gives the learner's
push too: tbt_gpu.weight_transport) and loads them, bucket by bucket as they arrive, through its own
`reload_weights(weights_iterator=...)` (the disk sync's loading code, layerwise reload and cache resets included):
vLLM's weight loaders slice what its TP rank owns, and a PP stage skips the layers it does not hold.
reload_weights takes one iterator and consumes it lazily; it cannot be split into several calls (each call finalises
every layer, and a layer loaded half in one call would be processed half-filled), so the stream is that one iterator.

A failed load does not stop the receiving: the rest of the broadcast is drained and dropped, so the learner and the
other workers finish, and the failure is reported afterwards, as the result's `error` (the caller then loads the
disk export, which also repairs a half-applied load). vLLM appends this class to the worker's bases and never calls
its __init__; its public names must not exist on the worker, and its private ones start with `_tbt_`.
"""

from __future__ import annotations

import time
from typing import Any

from .weight_transport import WeightGroup

PROTOCOL = 2


class WeightReceiver:
    def tbt_weight_transport(self) -> dict[str, Any]:
        """A cheap probe: the caller syncs over disk when a server does not answer it with this protocol."""
        worker, workers = self._tbt_worker()
        return {"protocol": PROTOCOL, "worker": worker, "workers": workers}

    def _tbt_worker(self) -> tuple[int, int]:
        """(this worker's index in its server, the server's worker count), from vLLM's TP and PP groups."""
        # vLLM's venv only (the learner's type checker does not see it).
        from vllm.distributed.parallel_state import get_pp_group, get_tp_group  # pyright: ignore[reportMissingImports]

        tp, pp = get_tp_group(), get_pp_group()
        return pp.rank_in_group * tp.world_size + tp.rank_in_group, tp.world_size * pp.world_size

    def receive_tbt_weights(
        self,
        host: str,
        port: int,
        timeout_s: float = 120.0,
        backend: str = "gloo",
        base_rank: int = 1,
        world_size: int | None = None,
        secret: str | None = None,
    ) -> dict[str, Any]:
        worker, workers = self._tbt_worker()
        rank = int(base_rank) + worker
        world = int(world_size) if world_size is not None else 1 + workers
        answer: dict[str, Any] = {"rank": rank, "world_size": world}
        started = time.perf_counter()
        try:
            group = WeightGroup(host, int(port), rank, world, backend, float(timeout_s), secret=secret)
        except Exception as err:  # noqa: BLE001 - reported, not raised: the caller falls back to disk
            return {**answer, "error": f"join: {err}", "join_s": time.perf_counter() - started}
        joined = time.perf_counter()
        load_error: BaseException | None = None
        try:
            stream = group.stream()
            try:
                self.reload_weights(weights_iterator=iter(stream))  # type: ignore[attr-defined] - vLLM's Worker
            except Exception as err:  # noqa: BLE001 - the rest is drained first, then reported
                load_error = err
            dropped = stream.drain()
            answer.update(
                tensors=stream.yielded,
                dropped=dropped,
                bytes=stream.total_bytes,
                peak_buffered_bytes=stream.peak_bytes,
            )
        except Exception as err:  # noqa: BLE001 - the transport failed: reported, the caller falls back to disk
            answer["error"] = f"transport: {err}"
        finally:
            group.close()
        if load_error is not None and "error" not in answer:
            answer["error"] = f"load: {load_error!r} (the rest of the update was drained)"
        return {**answer, "join_s": joined - started, "receive_load_s": time.perf_counter() - joined}
