"""The command loop every rank runs, and the HTTP endpoint rank 0 serves to feed it.

Rank 0 owns all decisions: a request is answered on rank 0 alone when nothing has to change (a finished
step, an out-of-order step, a bad batch, an existing export); only work that every rank must do is
broadcast. While idle, rank 0 broadcasts a no-op every `control.idle_tick_s` so the other ranks, blocked
in that broadcast, never reach the collective timeout.

Every request carries `Authorization: Bearer <token>`: rank 0 makes a fresh token per run and writes it,
mode 0600, to `<checkpoint dir>/control.token` before it announces its port in `control.json`; whoever can
read that folder may drive the learner, nobody else on the machine. A batch_ref must resolve inside the
campaign's batch folder (`control.batch_dir`), so the endpoint cannot be used to read arbitrary files.

    GET  /health                      {"ready", "step", "world_size", "busy", ...}
    GET  /manifest                    every resolved hyperparameter
    POST /train_step {step_id, batch_ref}
                                      a step already applied is answered, never trained again: `batch_matches` says
                                      whether batch_ref holds the ids it trained (`trained_batch_ids` when not)
    POST /export     {step_id}
    POST /push_weights {step_id, host, port, timeout_s, secret, backend?, world_size?}
                                      broadcast the weights into every policy-server worker of one sync over a
                                      collective (gloo or nccl): world_size = 1 + the receiving workers (default 2);
                                      only to peers that prove the sync's `secret` (tbt_gpu.weight_transport)
    POST /cancel                      abort the running step at its next micro-batch boundary
    POST /shutdown
"""

from __future__ import annotations

import hmac
import json
import logging
import os
import pathlib
import queue
import secrets
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from ..weight_transport import MIN_SECRET_CHARS
from .batch import Batch, BatchError
from .checkpoint import Checkpointer, volume_full, volume_full_reason
from .distributed import DistInfo, broadcast_object
from .errors import CheckpointVolumeFull, ExportRefused, LearnerError, NotReady, StepRefused
from .trainer import Trainer, batch_ids_sha256

logger = logging.getLogger(__name__)

PORT_FILE = "control.json"
MAX_WORLD = 4096  # learner rank 0 plus every receiving policy-server worker of one weight sync
TOKEN_FILE = "control.token"


class Unauthorized(LearnerError):
    code = "unauthorized"
    http_status = 401


class PathRefused(LearnerError):
    code = "path_refused"
    http_status = 403


class RequestError(LearnerError):
    code = "bad_request"
    http_status = 400


class BadBatch(LearnerError):
    code = "bad_batch"
    http_status = 400


class Fatal(LearnerError):
    """Ranks may disagree about what happened; the learner exits and is restarted with --resume."""

    code = "fatal"
    http_status = 500


@dataclass(slots=True)
class Command:
    op: str
    args: dict[str, Any] = field(repr=False)  # a push's args hold the sync's secret
    future: Future = field(default_factory=Future)


class LearnerService:
    def __init__(self, trainer: Trainer, checkpointer: Checkpointer, token: str = "") -> None:
        self.trainer = trainer
        self.checkpointer = checkpointer
        self.info: DistInfo = trainer.info
        self.token = token or secrets.token_hex(32)
        cfg = self.info.config
        self.batch_dir = pathlib.Path(cfg.control.batch_dir or pathlib.Path(cfg.checkpoint.dir).parent).resolve()
        self.tick_s = self.info.config.control.idle_tick_s
        self.inbox: queue.Queue[Command] = queue.Queue()
        self.ready = threading.Event()
        self.stopping = threading.Event()
        self._lock = threading.Lock()
        self._running: tuple[int, Future] | None = None
        # A step applied whose checkpoint did not fit (CheckpointVolumeFull): its retry only saves.
        self._uncommitted: int | None = None
        self._pending_train: dict[int, Future] = {}

    # ---- rank 0, HTTP threads -------------------------------------------------------------------

    def health(self) -> dict[str, Any]:
        running = self._running
        return {
            "ready": self.ready.is_set(),
            "step": self.trainer.state.last_step,
            "world_size": self.info.world_size,
            "busy": running[0] if running else None,
            "device": str(self.info.device),
            "backend": self.info.backend,
            "model": self.info.config.model.path,
            "pid": os.getpid(),
            "progress": self.trainer.progress.report(),
        }

    def authorized(self, header: str | None) -> bool:
        presented = (header or "").removeprefix("Bearer ").strip()
        return hmac.compare_digest(presented.encode(), self.token.encode())

    def checked_batch_path(self, batch_ref: str) -> str:
        """The batch file, resolved (symlinks too), if it lies inside the batch folder; refused otherwise."""
        resolved = pathlib.Path(batch_ref).resolve()
        if not resolved.is_relative_to(self.batch_dir):
            raise PathRefused(f"field 'batch_ref': {batch_ref!r} is outside the campaign's batch folder")
        return str(resolved)

    def submit(self, op: str, args: dict[str, Any]) -> Future:
        if self.stopping.is_set():
            raise NotReady("the learner is shutting down")
        if not self.ready.is_set() and op != "shutdown":
            raise NotReady("the learner is still loading")
        with self._lock:
            if op == "train_step":
                # A client that retries while its step is still running waits for the same answer.
                pending = self._pending_train.get(args["step_id"])
                if pending is not None:
                    return pending
            command = Command(op=op, args=args)
            if op == "train_step":
                self._pending_train[args["step_id"]] = command.future
                command.future.add_done_callback(lambda _f, s=args["step_id"]: self._forget(s))
            self.inbox.put(command)
            return command.future

    def _forget(self, step_id: int) -> None:
        with self._lock:
            self._pending_train.pop(step_id, None)

    def cancel(self) -> dict[str, Any]:
        running = self._running
        if running is None:
            return {"cancelling": None, "message": "no step is running"}
        self.trainer.cancel_requested.set()
        return {"cancelling": running[0], "message": f"step {running[0]} will stop at its next micro-batch"}

    # ---- every rank, main thread -----------------------------------------------------------------

    def run(self) -> None:
        """Serve commands until shutdown. Returns normally on shutdown; raises on a fatal error."""
        last_broadcast = time.monotonic()
        while True:
            if self.info.is_main:
                command, message = self._next_message(last_broadcast)
            else:
                command, message = None, None
            message = broadcast_object(message)
            last_broadcast = time.monotonic()
            op = message["op"]
            if op == "noop":
                continue
            if op == "shutdown":
                self._finish(command, {"ok": True, "step": self.trainer.state.last_step})
                return
            try:
                answer = self._execute(message)
            except (LearnerError, BatchError) as err:
                self._fail(command, err)
                continue
            except BaseException as err:
                logger.exception("fatal error in %s", op)
                self._fail(command, Fatal(f"{op} failed ({err!r}); the learner exits, restart it with --resume"))
                raise
            finally:
                self._running = None
                self.trainer.progress.mark(phase="idle", micro_batch=0, of=0)
            self._finish(command, answer)

    def _next_message(self, last_broadcast: float) -> tuple[Command | None, dict[str, Any]]:
        """Rank 0: wait for a command that needs every rank; answer the others on the spot."""
        while True:
            wait = last_broadcast + self.tick_s - time.monotonic()
            try:
                command = self.inbox.get(timeout=max(wait, 0.0))
            except queue.Empty:
                return None, {"op": "noop"}
            try:
                message = self._decide(command)
            except (LearnerError, BatchError) as err:
                self._fail(command, err)
                continue
            except Exception as err:  # a bug in deciding must not take the service down
                logger.exception("cannot decide %s", command.op)
                self._fail(command, LearnerError(f"{command.op}: {err!r}"))
                continue
            if message is None:
                continue
            return command, message

    def _decide(self, command: Command) -> dict[str, Any] | None:
        state = self.trainer.state
        if command.op == "shutdown":
            self.stopping.set()
            return {"op": "shutdown"}
        if command.op == "train_step":
            step_id = command.args["step_id"]
            if step_id == state.last_step and step_id == self._uncommitted:
                self._running = (step_id, command.future)
                return {"op": "commit", "step_id": step_id, "offered": self._offered_batch(step_id, command.args)}
            if self._uncommitted is not None:
                raise CheckpointVolumeFull(f"step {self._uncommitted} is applied but not saved yet: retry it first")
            if step_id == state.last_step and step_id in state.ledger:
                offered = self._offered_batch(step_id, command.args)
                self._finish(command, {**self._train_answer(step_id, repeated=True), **offered})
                return None
            if step_id != state.last_step + 1:
                raise StepRefused(step_id, state.last_step)
            try:
                batch = self.trainer.load_batch(command.args["batch_ref"])
            except BatchError as err:
                raise BadBatch(str(err)) from err
            self.trainer.cancel_requested.clear()
            self._running = (step_id, command.future)
            return {"op": "train_step", "step_id": step_id, "batch": batch}
        if command.op == "export":
            step_id = command.args["step_id"]
            folder = self.checkpointer.export_dir(step_id)
            if folder.is_dir():
                self._finish(command, {"step_id": step_id, "path": str(folder), "existing": True})
                return None
            if step_id != state.last_step:
                raise ExportRefused(
                    f"export of step {step_id} refused: the learner holds step {state.last_step} "
                    f"and step {step_id} was never exported"
                )
            return {"op": "export", "step_id": step_id}
        if command.op == "push_weights":
            if self.trainer.cfg.lora.enabled:
                raise ExportRefused("push refused: a LoRA learner serves adapters (load its /export), not full weights")
            if command.args["step_id"] != state.last_step:
                raise ExportRefused(
                    f"push of step {command.args['step_id']} refused: the learner holds step {state.last_step}"
                )
            return {"op": "push_weights", **command.args}
        raise RequestError(f"unknown command {command.op!r}")

    def _execute(self, message: dict[str, Any]) -> dict[str, Any]:
        op = message["op"]
        if op == "train_step":
            self.trainer.train_step(message["step_id"], message["batch"])
            # The answer leaves only after the checkpoint is committed: a crash before that point
            # replays the step from the previous checkpoint, a crash after it finds the step done.
            return self._commit(message["step_id"])
        if op == "commit":
            return {**self._commit(message["step_id"]), **message["offered"]}
        if op == "export":
            self.trainer.progress.mark(step=message["step_id"], phase="export", micro_batch=0, of=0)
            folder = self.checkpointer.export(message["step_id"])
            return {"step_id": message["step_id"], "path": str(folder), "existing": False}
        if op == "push_weights":
            self.trainer.progress.mark(step=message["step_id"], phase="push", micro_batch=0, of=0)
            pushed = self.checkpointer.push(
                message["step_id"],
                message["host"],
                message["port"],
                message["timeout_s"],
                message["backend"],
                message["secret"],
                message.get("world_size", 2),
            )
            return {"step_id": message["step_id"], **pushed}
        raise RuntimeError(f"unknown broadcast op {op!r}")

    def _commit(self, step_id: int) -> dict[str, Any]:
        """Checkpoint the applied step and answer it; a full volume is answered 507 and leaves the step to save."""
        self.trainer.progress.mark(phase="checkpoint")
        try:
            self.checkpointer.save()
        except BaseException as err:  # DCP's CheckpointException is a BaseException
            if not volume_full(err, self.info.world_size, self.checkpointer.root):
                raise
            self._uncommitted = step_id
            self.checkpointer.discard_partial(step_id)
            raise CheckpointVolumeFull(
                f"step {step_id} was applied but its checkpoint does not fit in {self.checkpointer.root} "
                f"({volume_full_reason(err, self.checkpointer.root)}); "
                "free space there and resume: the retry saves the step, it does not train it again"
            ) from err
        self._uncommitted = None
        return self._train_answer(step_id, repeated=False)

    def _offered_batch(self, step_id: int, args: dict[str, Any]) -> dict[str, Any]:
        """Rank 0: whether a step already applied is offered the batch it trained; it is never trained again."""
        return offered_batch_check(
            step_id, self.trainer.state.ledger[step_id], lambda: self.trainer.load_batch(args["batch_ref"])
        )

    def _train_answer(self, step_id: int, *, repeated: bool) -> dict[str, Any]:
        # The trained ids travel only in a mismatch's answer (offered_batch_check), not in every step's result.
        result = {k: v for k, v in self.trainer.state.ledger[step_id].items() if k != "batch_ids"}
        return {
            "step_id": step_id,
            "result": result,
            "repeated": repeated,
            "checkpoint": str(self.checkpointer.step_dir(step_id)),
        }

    @staticmethod
    def _finish(command: Command | None, answer: dict[str, Any]) -> None:
        if command is not None and not command.future.done():
            command.future.set_result(answer)

    @staticmethod
    def _fail(command: Command | None, err: BaseException) -> None:
        if command is not None and not command.future.done():
            command.future.set_exception(err)

    def drain(self) -> None:
        """Refuse whatever is still queued (rank 0, at shutdown)."""
        while True:
            try:
                command = self.inbox.get_nowait()
            except queue.Empty:
                return
            self._fail(command, NotReady("the learner is shutting down"))


def offered_batch_check(step_id: int, trained: dict[str, Any], load: Callable[[], Batch]) -> dict[str, Any]:
    """What a repeated step's answer says of the batch offered this time, next to the ledger entry `trained`.

    A caller that runs the step again (a workflow re-run, say) may have drawn other episodes than the first time:
    `batch_matches` false tells it so, with the ids trained (`trained_batch_ids`, absent from ledgers saved before
    they were kept), so its record can name the batch trained. An offered batch that cannot be read, or a ledger
    entry without a hash, gives `batch_matches` null: the step stays answered.
    """
    try:
        offered = batch_ids_sha256(load())
    except Exception as err:  # noqa: BLE001 - logged: whatever the file holds, the applied step is answered
        logger.warning("step %s is applied; its offered batch cannot be read (%s): batch_matches unknown", step_id, err)
        return {"batch_matches": None}
    expected = trained.get("batch_ids_sha256")
    if expected is None:
        return {"batch_matches": None}
    if offered == expected:
        return {"batch_matches": True}
    logger.warning("step %s is applied on another batch than the one offered again: answered, not trained", step_id)
    ids = trained.get("batch_ids")
    return {"batch_matches": False, **({"trained_batch_ids": list(ids)} if ids is not None else {})}


def _parse_step_id(body: dict[str, Any]) -> int:
    step_id = body.get("step_id")
    if isinstance(step_id, bool) or not isinstance(step_id, int) or step_id < 1:
        raise RequestError(f"field 'step_id': must be an integer >= 1, got {step_id!r}")
    return step_id


class _Handler(BaseHTTPRequestHandler):
    service: LearnerService  # set on the subclass made by start_control_server
    # HTTP/1.0: one request per connection, so closing the server never waits on an idle keep-alive.
    protocol_version = "HTTP/1.0"

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        logger.debug("http %s", format % args)

    def _send(self, status: int, payload: dict[str, Any]) -> None:
        body = json.dumps(payload).encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _body(self) -> dict[str, Any]:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b"{}"
        try:
            body = json.loads(raw or b"{}")
        except json.JSONDecodeError as err:
            raise RequestError(f"body is not JSON ({err.msg})") from err
        if not isinstance(body, dict):
            raise RequestError("body must be a JSON object")
        return body

    def _guard(self, work: Any) -> None:
        try:
            if not self.service.authorized(self.headers.get("Authorization")):
                # The body is never read for an unauthorised request.
                raise Unauthorized(f"missing or wrong bearer token (it is in <checkpoint dir>/{TOKEN_FILE})")
            self._send(HTTPStatus.OK, work())
        except LearnerError as err:
            self._send(err.http_status, {"error": str(err), "code": err.code})
        except Exception as err:  # keep the endpoint answering whatever went wrong
            logger.exception("request failed")
            self._send(HTTPStatus.INTERNAL_SERVER_ERROR, {"error": repr(err), "code": "internal"})

    def do_GET(self) -> None:
        if self.path == "/health":
            self._guard(self.service.health)
        elif self.path == "/manifest":
            self._guard(self.service.info.config.to_manifest)
        else:
            self._send(HTTPStatus.NOT_FOUND, {"error": f"no route GET {self.path}", "code": "not_found"})

    def do_POST(self) -> None:
        routes = {
            "/train_step": self._train_step,
            "/export": self._export,
            "/push_weights": self._push_weights,
            "/cancel": lambda: self.service.cancel(),
            "/shutdown": lambda: self.service.submit("shutdown", {}).result(),
        }
        route = routes.get(self.path)
        if route is None:
            self._send(HTTPStatus.NOT_FOUND, {"error": f"no route POST {self.path}", "code": "not_found"})
            return

        def work() -> dict[str, Any]:
            body = self._body()
            return route(body) if self.path in ("/train_step", "/export", "/push_weights") else route()

        self._guard(work)

    def _train_step(self, body: dict[str, Any]) -> dict[str, Any]:
        step_id = _parse_step_id(body)
        batch_ref = body.get("batch_ref")
        if not isinstance(batch_ref, str) or not batch_ref:
            raise RequestError(f"field 'batch_ref': must be a batch file path, got {batch_ref!r}")
        batch_ref = self.service.checked_batch_path(batch_ref)
        return self.service.submit("train_step", {"step_id": step_id, "batch_ref": batch_ref}).result()

    def _export(self, body: dict[str, Any]) -> dict[str, Any]:
        return self.service.submit("export", {"step_id": _parse_step_id(body)}).result()

    def _push_weights(self, body: dict[str, Any]) -> dict[str, Any]:
        host, port, timeout_s = body.get("host"), body.get("port"), body.get("timeout_s", 120)
        if not isinstance(host, str) or not host:
            raise RequestError(f"field 'host': must be the address the policy server reaches, got {host!r}")
        if isinstance(port, bool) or not isinstance(port, int) or not 0 < port < 65536:
            raise RequestError(f"field 'port': must be a free TCP port, got {port!r}")
        if isinstance(timeout_s, bool) or not isinstance(timeout_s, (int, float)) or not 0 < timeout_s <= 3600:
            raise RequestError(f"field 'timeout_s': must be seconds in (0, 3600], got {timeout_s!r}")
        default_backend = "nccl" if self.service.info.device.type == "cuda" else "gloo"
        backend = body.get("backend", default_backend)
        if backend not in ("gloo", "nccl"):
            raise RequestError(f"field 'backend': must be gloo or nccl (the server's too), got {backend!r}")
        secret = body.get("secret")
        if not isinstance(secret, str) or not MIN_SECRET_CHARS <= len(secret) <= 1024:
            # Never echoed: the answer and the logs must not hold it.
            raise RequestError(f"field 'secret': must be the sync's secret, {MIN_SECRET_CHARS} to 1024 characters")
        world_size = body.get("world_size", 2)
        if isinstance(world_size, bool) or not isinstance(world_size, int) or not 2 <= world_size <= MAX_WORLD:
            raise RequestError(
                f"field 'world_size': must be 1 + the receiving workers, in [2, {MAX_WORLD}], got {world_size!r}"
            )
        args = {
            "step_id": _parse_step_id(body),
            "host": host,
            "port": port,
            "timeout_s": float(timeout_s),
            "backend": backend,
            "world_size": world_size,
            "secret": secret,
        }
        return self.service.submit("push_weights", args).result()


def start_control_server(service: LearnerService) -> ThreadingHTTPServer:
    """Rank 0: bind the endpoint and serve it from a background thread; close with stop_control_server."""
    cfg = service.info.config.control
    handler = type("LearnerHandler", (_Handler,), {"service": service})
    server = ThreadingHTTPServer((cfg.host, cfg.port), handler)
    server.daemon_threads = False
    threading.Thread(target=server.serve_forever, name="learner-control", daemon=True).start()
    logger.info("control endpoint on http://%s:%s", *server.server_address[:2])
    return server


def stop_control_server(server: ThreadingHTTPServer, service: LearnerService) -> None:
    """Refuse queued commands, stop accepting, and wait for handlers to send their answers."""
    service.drain()
    server.shutdown()
    server.server_close()


def write_token_file(checkpoint_dir: pathlib.Path, service: LearnerService) -> pathlib.Path:
    """The run's token, readable by this user only (created 0600, never widened), swapped in atomically."""
    path = checkpoint_dir / TOKEN_FILE
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(service.token)
    os.replace(tmp, path)
    return path


def write_port_file(checkpoint_dir: pathlib.Path, server: ThreadingHTTPServer, service: LearnerService) -> pathlib.Path:
    host, port = server.server_address[:2]
    path = checkpoint_dir / PORT_FILE
    tmp = path.with_suffix(".tmp")
    tmp.write_text(
        json.dumps({"host": host, "port": port, "pid": os.getpid(), "step": service.trainer.state.last_step}),
        encoding="utf-8",
    )
    os.replace(tmp, path)
    return path


def remove_port_file(checkpoint_dir: pathlib.Path) -> None:
    (checkpoint_dir / PORT_FILE).unlink(missing_ok=True)
