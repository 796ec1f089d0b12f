"""The policy server's end of the collective weight transport, mixed into vLLM's worker.

Start vLLM with `--worker-extension-cls tbt_gpu.vllm_weight_receiver.WeightReceiver` (this package on the
worker's PYTHONPATH; vLLM's CPU build spawns its worker) and dev mode on; then

    POST /collective_rpc {"method": "receive_tbt_weights", "kwargs": {"host", "port", "timeout_s"}}

joins the learner's group as rank 1, receives one full update and loads it with the worker's own
`reload_weights` (the disk sync's loading code, layerwise reload and cache resets included). vLLM appends this
class to the worker's bases and never calls its __init__; its public names must not exist on the worker.
"""

from __future__ import annotations

import time
from typing import Any

from .weight_transport import WeightGroup

PROTOCOL = 1


class WeightReceiver:
    def tbt_weight_transport(self) -> dict[str, Any]:
        """A cheap probe: the caller syncs over disk when a server does not answer it."""
        return {"protocol": PROTOCOL}

    def receive_tbt_weights(self, host: str, port: int, timeout_s: float = 120.0, backend: str = "gloo") -> dict:
        started = time.perf_counter()
        group = WeightGroup(host, int(port), 1, 2, backend, float(timeout_s))
        try:
            joined = time.perf_counter()
            pairs = group.receive()
        finally:
            group.close()
        received = time.perf_counter()
        self.reload_weights(weights_iterator=pairs)  # type: ignore[attr-defined] - vLLM's Worker.reload_weights
        return {
            "tensors": len(pairs),
            "join_s": joined - started,
            "receive_s": received - joined,
            "load_s": time.perf_counter() - received,
        }
