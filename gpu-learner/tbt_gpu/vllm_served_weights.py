"""A vLLM middleware that answers every completion with the weights that served it (tbt_gpu.served_weights).

    vllm serve ... --middleware tbt_gpu.vllm_route_guard.guard_routes \\
                   --middleware tbt_gpu.vllm_served_weights.tag_served_weights

vLLM keeps the label `/update_weight_version` writes, but says nothing per request and forgets it on a restart.
This middleware sees every weight-sync call pass through the API server: a load (`/collective_rpc` reload or
receive, `/v1/load_lora_adapter`) drops the label, a successful `/update_weight_version` writes it, and each
`/v1/completions` or `/v1/chat/completions` answer carries `x-tbt-served-weights` (the label that held for the whole
request, `none` or `mixed`) and `x-tbt-boot-id` (this process's, new at each start). It keeps its state in the API
server process: run one API server process per vLLM server (vLLM's default).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

from .served_weights import BOOT_HEADER, ServedWeights

SERVED = ServedWeights()

COMPLETIONS = frozenset({"/v1/completions", "/v1/chat/completions"})
LOADS = frozenset({"reload_weights", "receive_tbt_weights"})


def loads_weights(path: str, body: bytes) -> bool:
    """Whether a request replaces the served weights (pure: the unit tests call it)."""
    if path in ("/v1/load_lora_adapter", "/v1/unload_lora_adapter"):
        return True
    if path != "/collective_rpc":
        return False
    try:
        data: Any = json.loads(body or b"{}")
    except ValueError:
        return False
    return isinstance(data, dict) and data.get("method") in LOADS


def new_label(body: bytes) -> str | None:
    """The label an `/update_weight_version` body writes, or None when it names none."""
    try:
        data: Any = json.loads(body or b"{}")
    except ValueError:
        return None
    version = data.get("new_version") if isinstance(data, dict) else None
    return None if version is None else str(version)


async def tag_served_weights(request: Any, call_next: Callable[[Any], Awaitable[Any]]) -> Any:
    """Starlette http middleware (vLLM's `--middleware`): tracks the label, tags completions with it."""
    path = request.url.path
    if path in COMPLETIONS:
        ticket = SERVED.ticket()
        response = await call_next(request)
        # A non-streaming answer is complete here; a streamed one is tagged when it starts (the client does not
        # stream token-mode completions).
        response.headers.update(SERVED.headers(ticket))
        return response
    if path == "/update_weight_version":
        label = new_label(await request.body())
        response = await call_next(request)
        if response.status_code == 200 and label is not None:
            SERVED.set_label(label)
        return response
    loaders = ("/collective_rpc", "/v1/load_lora_adapter", "/v1/unload_lora_adapter")
    if request.method == "POST" and path in loaders and loads_weights(path, await request.body()):
        SERVED.loading()
    response = await call_next(request)
    if path == "/weight_info":
        response.headers[BOOT_HEADER] = SERVED.boot_id
    return response
