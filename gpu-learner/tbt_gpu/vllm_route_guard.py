"""A vLLM middleware that puts the dev-mode control routes behind the GPU worker's token.

    vllm serve ... --middleware tbt_gpu.vllm_route_guard.guard_routes
    env: TBT_POLICY_TOKEN_FILE (0600 file with the bearer token), TBT_WEIGHTS_ROOTS (folders, os.pathsep-joined)

Weight sync needs vLLM's dev mode (VLLM_SERVER_DEV_MODE=1), whose routes take no authentication: `VLLM_API_KEY`
guards `/v1/...` only, `/collective_rpc` calls any worker method, and our weight receiver joins whatever
host:port the caller names. Here inference stays as vLLM serves it (`/v1/...`, tokenising, health, metrics and
the weight version), and every other route, LoRA loading included, needs `Authorization: Bearer <token>`. With
the token, `/collective_rpc` still runs only the methods weight sync uses, and weights and adapters load only from
the campaign's folders. Without a readable token file every guarded route is refused (fail closed).
"""

from __future__ import annotations

import hmac
import json
import os
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

#: Served without the token: inference and read-only status (vLLM's own API key, if set, still guards /v1).
#: `/weight_info` is the served weight version, which the GPU worker reads from any server before sampling.
OPEN_PATHS = frozenset(
    {"/health", "/ping", "/version", "/metrics", "/load", "/tokenize", "/detokenize", "/weight_info"}
)
OPEN_PREFIXES = ("/v1/",)
#: Under /v1 but control, not inference: they change the served model.
GUARDED_V1 = frozenset({"/v1/load_lora_adapter", "/v1/unload_lora_adapter"})
#: What weight sync asks of the workers (tbt_gpu.vllm_weight_receiver and vLLM's own reload).
RPC_METHODS = frozenset({"reload_weights", "tbt_weight_transport", "receive_tbt_weights"})


def guarded(path: str) -> bool:
    if path in GUARDED_V1:
        return True
    return path not in OPEN_PATHS and not path.startswith(OPEN_PREFIXES)


def _token() -> str | None:
    file = os.environ.get("TBT_POLICY_TOKEN_FILE")
    try:
        token = Path(file).read_text().strip() if file else ""
    except OSError:
        return None
    return token or None


def _inside_roots(path: object) -> bool:
    roots = [Path(r).resolve() for r in os.environ.get("TBT_WEIGHTS_ROOTS", "").split(os.pathsep) if r]
    if not isinstance(path, str) or not roots:
        return False
    target = Path(path).resolve()
    return any(target == root or root in target.parents for root in roots)


def refusal(path: str, authorization: str | None, body: bytes) -> tuple[int, str] | None:
    """Why a request is refused (HTTP status, message), or None to serve it. Pure: the unit tests call it."""
    if not guarded(path):
        return None
    token = _token()
    if token is None:
        return 503, "the policy server's control token is not configured (TBT_POLICY_TOKEN_FILE)"
    if not authorization or not hmac.compare_digest(authorization.encode(), f"Bearer {token}".encode()):
        return 401, f"{path} needs the policy server's control token"
    if path not in ("/collective_rpc", "/v1/load_lora_adapter"):
        return None
    try:
        data: Any = json.loads(body or b"{}")
    except ValueError:
        return 400, f"{path}: the body is not JSON"
    if not isinstance(data, dict):
        return 400, f"{path}: the body is not a JSON object"
    if path == "/v1/load_lora_adapter":
        return None if _inside_roots(data.get("lora_path")) else (403, "lora_path is outside the campaign's folders")
    method = data.get("method")
    if method not in RPC_METHODS:
        return 403, f"collective_rpc method {method!r} is not one weight sync uses"
    kwargs = data.get("kwargs") or {}
    if method == "reload_weights" and "weights_path" in kwargs and not _inside_roots(kwargs["weights_path"]):
        return 403, "weights_path is outside the campaign's folders"
    return None


async def guard_routes(request: Any, call_next: Callable[[Any], Awaitable[Any]]) -> Any:
    """Starlette http middleware (vLLM's `--middleware`): refuses what `refusal` refuses, serves the rest."""
    path = request.url.path
    body = await request.body() if path in ("/collective_rpc", "/v1/load_lora_adapter") else b""
    refused = refusal(path, request.headers.get("authorization"), body)
    if refused is None:
        return await call_next(request)
    from starlette.responses import JSONResponse  # pyright: ignore[reportMissingImports] - vLLM's environment

    status, message = refused
    return JSONResponse({"error": {"message": message, "type": "Forbidden", "code": status}}, status_code=status)
