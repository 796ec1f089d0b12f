"""HTTP routing: stdlib ThreadingHTTPServer, JSON in and out, errors as ``{error: {...}}``."""

from __future__ import annotations

import hmac
import json
import logging
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from ..served_weights import ServedWeights
from . import protocol
from .batcher import Batcher
from .config import ServerConfig
from .engine import Engine, read_chat_template
from .errors import ApiError, BadRequest, Forbidden, MethodNotAllowed, NotFound, Unauthorized

logger = logging.getLogger(__name__)

MAX_BODY_BYTES = 64 << 20

# A handler answers a JSON object, or one with response headers (the completions' served weights).
Handler = Callable[[Any], dict[str, Any] | tuple[dict[str, Any], dict[str, str]]]

# Routes that change what the server serves: bearer token required (inference stays open, on loopback).
PROTECTED_ROUTES = frozenset(
    {"/reload_weights", "/collective_rpc", "/pause", "/resume", "/reset_prefix_cache", "/update_weight_version"}
)


class PolicyServer:
    """Owns the engine, the batcher and the HTTP listener."""

    def __init__(self, config: ServerConfig) -> None:
        self.config = config
        self.started_at = time.time()
        # Read once at start: the file is the run's secret, the process keeps it in memory only.
        self.token = config.token_file.read_text(encoding="utf-8").strip() if config.token_file else None
        self.weights_roots = tuple(r.resolve() for r in config.weights_roots)
        template = read_chat_template(config.chat_template) if config.chat_template else None
        self.engine = Engine(
            config.model, threads=config.threads, max_model_len=config.max_model_len, chat_template=template
        )
        self.batcher = Batcher(self.engine, max_batch=config.max_batch, batch_wait_s=config.batch_wait_ms / 1000)
        self.routes: dict[str, dict[str, Handler]] = {
            "/health": {"GET": self._health},
            "/v1/models": {"GET": self._models},
            "/v1/completions": {"POST": self._completions},
            "/v1/chat/completions": {"POST": self._chat_completions},
            "/tokenize": {"POST": self._tokenize},
            "/detokenize": {"POST": self._detokenize},
            "/reload_weights": {"POST": self._reload_weights},
            # vLLM's dev-mode weight-sync routes, so one client syncs both servers (see _collective_rpc).
            "/pause": {"POST": self._pause},
            "/resume": {"POST": self._resume},
            "/is_paused": {"GET": lambda _: {"is_paused": not self.accepting.is_set()}},
            "/collective_rpc": {"POST": self._collective_rpc},
            "/reset_prefix_cache": {"POST": lambda _: {}},  # no prefix cache here
            "/update_weight_version": {"POST": self._update_weight_version},
            "/weight_info": {"GET": lambda _: self.served.info()},
        }
        # Generation requests wait while paused; the batcher runs jobs in order, so a reload queued after
        # /pause starts once the in-flight generations are done (vLLM's `mode=wait`).
        self.accepting = threading.Event()
        self.accepting.set()
        # The label the last sync wrote and this process's boot id; each completion is answered with what served it.
        self.served = ServedWeights()
        self.httpd = ThreadingHTTPServer((config.host, config.port), _RequestHandler)
        self.httpd.daemon_threads = True
        self.httpd.app = self  # type: ignore[attr-defined]

    @property
    def port(self) -> int:
        return int(self.httpd.server_address[1])

    def serve_forever(self) -> None:
        self.batcher.start()
        try:
            self.httpd.serve_forever(poll_interval=0.2)
        finally:
            self.batcher.close()
            self.httpd.server_close()

    def shutdown(self) -> None:
        """Stop serving; call from a thread other than the one in ``serve_forever``."""
        self.httpd.shutdown()

    def authorize(self, path: str, header: str | None) -> None:
        if (path.rstrip("/") or "/") not in PROTECTED_ROUTES:
            return
        if self.token is None:
            raise Forbidden(f"{path} is disabled: start the server with --token-file and --weights-root")
        presented = (header or "").removeprefix("Bearer ").strip()
        if not hmac.compare_digest(presented.encode(), self.token.encode()):
            raise Unauthorized(f"{path}: missing or wrong bearer token")

    def checked_weights_path(self, path: str) -> Path:
        resolved = Path(path).resolve()
        if not any(resolved.is_relative_to(root) for root in self.weights_roots):
            raise Forbidden(f"path {path!r} is outside the folders this server may load weights from")
        return resolved

    def route(self, method: str, path: str) -> Handler:
        methods = self.routes.get(path.rstrip("/") or "/")
        if methods is None:
            raise NotFound(f"no route {path}")
        handler = methods.get(method)
        if handler is None:
            raise MethodNotAllowed(f"{method} is not allowed on {path}; use {', '.join(methods)}")
        return handler

    # ---- handlers --------------------------------------------------------------------------------

    def _health(self, _: None) -> dict[str, Any]:
        return {
            "status": "ok",
            "model": self.config.model_name,
            **self.engine.describe(),
            "load_seconds": round(self.engine.load_seconds, 2),
            "uptime_seconds": round(time.time() - self.started_at, 1),
            "batcher": self.batcher.stats(),
        }

    def _models(self, _: None) -> dict[str, Any]:
        return {"object": "list", "data": [{
            "id": self.config.model_name, "object": "model", "created": int(self.started_at),
            "owned_by": "thinkingbox-temporal", "root": str(self.config.model),
            "max_model_len": self.engine.max_model_len,
        }]}  # fmt: skip

    def _completions(self, data: Any) -> tuple[dict[str, Any], dict[str, str]]:
        self.accepting.wait()
        ticket = self.served.ticket()
        body = protocol.Body(data)
        protocol.check_model_name(body, self.config.model_name)
        parsed = protocol.parse_completion(body, self.engine)
        result = self.batcher.generate(parsed.request).result()
        response = protocol.completion_response(parsed, result, self.engine, self.config.model_name)
        return response, self.served.headers(ticket)

    def _chat_completions(self, data: Any) -> tuple[dict[str, Any], dict[str, str]]:
        self.accepting.wait()
        ticket = self.served.ticket()
        body = protocol.Body(data)
        protocol.check_model_name(body, self.config.model_name)
        parsed = protocol.parse_chat(body, self.engine)
        result = self.batcher.generate(parsed.request).result()
        response = protocol.chat_response(parsed, result, self.engine, self.config.model_name)
        return response, self.served.headers(ticket)

    def _tokenize(self, data: Any) -> dict[str, Any]:
        return protocol.tokenize(protocol.Body(data), self.engine)

    def _detokenize(self, data: Any) -> dict[str, Any]:
        return protocol.detokenize(protocol.Body(data), self.engine)

    def _reload_weights(self, data: Any) -> dict[str, Any]:
        path, version = protocol.reload_request(protocol.Body(data))
        folder = self.checked_weights_path(path)
        started = time.monotonic()
        self.served.loading()
        new_version = self.batcher.reload(folder, version).result()
        return {"weight_version": new_version, "path": path, "seconds": round(time.monotonic() - started, 2)}

    def _pause(self, data: Any) -> dict[str, Any]:
        """`mode=wait` (default): generations in flight finish first, on the old weights. `mode=abort` (partial
        rollouts): they end at once with what they sampled (finish_reason `abort`) and new ones wait for /resume."""
        mode = data.get("mode", "wait") if isinstance(data, dict) else "wait"
        if mode not in ("wait", "abort", "keep"):
            raise BadRequest(f"pause mode {mode!r}: use wait, abort or keep", param="mode")
        self.accepting.clear()
        if mode == "abort":
            self.engine.abort_running()
        return {"status": "paused"}

    def _resume(self, _: Any) -> dict[str, Any]:
        self.engine.allow_running()
        self.accepting.set()
        return {"status": "resumed"}

    def _collective_rpc(self, data: Any) -> dict[str, Any]:
        """Only vLLM's ``reload_weights`` with ``kwargs.weights_path``: the one call weight sync makes."""
        body = protocol.Body(data)
        method = body.string("method", required=True)
        if method != "reload_weights":
            raise BadRequest(f"collective_rpc method {method!r} is not supported; only reload_weights", param="method")
        kwargs = data.get("kwargs") if isinstance(data, dict) else None
        path = kwargs.get("weights_path") if isinstance(kwargs, dict) else None
        if not isinstance(path, str) or not path:
            raise BadRequest("collective_rpc reload_weights needs kwargs.weights_path", param="kwargs")
        folder = self.checked_weights_path(path)
        self.served.loading()
        self.batcher.reload(folder, None).result()
        return {"results": [None]}

    def _update_weight_version(self, data: Any) -> dict[str, Any]:
        version = protocol.Body(data).string("new_version", required=True)
        assert version is not None
        self.served.set_label(version)
        return {"success": True, "new_version": version}


class _RequestHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "tbt-policy-server/1"

    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_POST(self) -> None:
        self._dispatch("POST")

    def _dispatch(self, method: str) -> None:
        app: PolicyServer = self.server.app  # type: ignore[attr-defined]
        path = urlsplit(self.path).path
        try:
            app.authorize(path, self.headers.get("Authorization"))  # before the body is read
            data = self._read_json() if method == "POST" else None
            if path == "/pause":  # vLLM takes its mode in the query: /pause?mode=abort
                query = {k: v[-1] for k, v in parse_qs(urlsplit(self.path).query).items()}
                data = {**(data if isinstance(data, dict) else {}), **query}
            handler = app.route(method, path)
            status, answer = 200, handler(data)
            payload, headers = answer if isinstance(answer, tuple) else (answer, {})
        except ApiError as exc:
            status, payload, headers = exc.status, exc.body(), {}
        except Exception as exc:
            logger.exception("%s %s failed", method, path)
            status, payload, headers = 500, ApiError(f"internal error: {type(exc).__name__}: {exc}").body(), {}
        if status >= 400:
            self.close_connection = True  # the request body may be unread: do not reuse the connection
        self._send(status, payload, headers)

    def _read_json(self) -> Any:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            raise BadRequest("chunked request bodies are not supported; send Content-Length")
        try:
            length = int(self.headers.get("Content-Length", "0"))
        except ValueError:
            raise BadRequest("bad Content-Length header") from None
        if length > MAX_BODY_BYTES:
            raise BadRequest(f"request body over {MAX_BODY_BYTES} bytes")
        raw = self.rfile.read(length) if length else b""
        if not raw:
            raise BadRequest("the request body is empty; send a JSON object")
        try:
            return json.loads(raw)
        except ValueError as exc:
            raise BadRequest(f"the request body is not valid JSON: {exc}") from None

    def _send(self, status: int, payload: dict[str, Any], headers: dict[str, str] | None = None) -> None:
        body = json.dumps(payload, allow_nan=False, separators=(",", ":")).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - http.server's signature
        logger.debug("%s - %s", self.address_string(), format % args)
