"""Grading subprocess: runs one ThinkingBox test function against an episode's terminal context.

Protocol (one JSON object per line):
  stdin, first line:  {"file": PATH, "function": NAME, "judge_type"?: "legacy"|"motivation",
                       "context": {"effects": {server: object}, "response": str,
                                   "tool_calls": [{"tool_call": ToolCall, "tool_response": ToolResponse}],
                                   "messages": [Text|ParallelToolCall|ToolResponse, as dicts with "T"],
                                   "init_result", "session_id", "metadata", "tool_direct_responses"}}
  stdout, per judge model call:  {"type": "judge", "messages": [{"role", "content"}], "settings": {...}}
                                 (settings.question is set when the call decides a yes/no question)
  stdin, the answer:             {"text": str}  or  {"error": str}
  stdout, per yes/no decision:   {"type": "verdict", "question": str, "yes": bool, "motivation"?: str}
                                 (right after the answer it was parsed from)
  stdout, last line:         {"type": "result", "status": "pass"|"fail"|"error", "message": str, "reward": float|null,
                              "traceback": str, "error_type": str, "location"?: {"file": str, "line": int}}

The test sees ``x`` (thinkingbox.common.TestContext, typed as the reference's: ``x.tool_calls[i].tool_call.name``)
and ``judge`` (thinkingbox.common.Judge, our own shim in thinkingbox/shim). As in the reference: pass = the
function returned; its value is the reward: None = 1 (sent as null), True/False = 1/0, a number in [0, 1] as it
is (a numeric string too, as the reference's float field reads it); anything else (out of range, NaN, another
type) is an error. fail = AssertionError (message = str(error), or the failing assert's source line when that
is empty); error = anything else (import errors, judge outage, sys.exit, bad input).
``error_type`` is the exception's class name ("" on pass) so the caller can tell a judge outage
("JudgeUnavailable") from a broken test; ``location`` (on fail and error) is where the exception was raised: the
innermost frame in the test's own file, else the innermost frame. The caller grades again once, and the same
exception at the same place twice is a property of the task, not of the infrastructure. Exit code 0 whenever the
result line was written.

The protocol uses private duplicates of file descriptors 0 and 1; during the test fd 1 (and sys.stdout)
point at stderr and fd 0 at /dev/null, so test code that prints or reads cannot corrupt the protocol.
The isolation is the sandbox this runs in (datasets/thinkingbox/dataset-sandbox.ts: own user, pid, network
and mount namespaces, an allow-listed environment, a read-only filesystem but a scratch folder, rlimits); the
socket functions patched below before the test module loads are only a clearer error message for the common
case, not a defence (``_socket`` and subprocesses get past them, the network namespace does not).
"""

from __future__ import annotations

import importlib.util
import inspect
import json
import math
import os
import re
import socket
import sys
import threading
import traceback
from collections.abc import Callable
from typing import Any, TextIO

# Our own `thinkingbox.common` (thinkingbox/shim), which test files import, whatever PYTHONPATH says.
SHIM_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "shim")
if SHIM_DIR not in sys.path:
    sys.path.insert(0, SHIM_DIR)


from thinkingbox.common.judge import JudgeException  # noqa: E402 - after the shim is on the path


class JudgeUnavailable(JudgeException):
    """The judge could not answer (outage, refusal, bad reply): an infrastructure error, never a fail."""


CONTEXT_FIELDS = (
    "effects",
    "response",
    "tool_calls",
    "messages",
    "init_result",
    "session_id",
    "metadata",
    "tool_direct_responses",
)


NETWORK_DISABLED = "network access is disabled in test code"


def block_network() -> None:
    """Clear errors for the plain socket API; the sandbox's empty network namespace is what blocks the rest."""

    def refuse(*_args: Any, **_kwargs: Any) -> Any:
        raise PermissionError(NETWORK_DISABLED)

    socket.socket.connect = refuse  # type: ignore[method-assign]
    socket.socket.connect_ex = refuse  # type: ignore[method-assign]
    socket.socket.sendto = refuse  # type: ignore[method-assign]
    socket.create_connection = refuse  # type: ignore[assignment]
    socket.getaddrinfo = refuse  # type: ignore[assignment]


def make_judge(proto_in: TextIO, proto_out: TextIO, judge_type: str = "legacy") -> Any:
    """The test's ``judge``: each model call goes to the episode runner over the protocol and waits for its answer;
    each yes/no decision is reported back (the runner records it with the answer and its usage)."""
    from thinkingbox.common import Judge

    # Test code may call the judge from threads; one request and its answer are one exchange on the pipe.
    exchange = threading.Lock()

    def send(message: dict[str, Any]) -> None:
        proto_out.write(json.dumps(message, ensure_ascii=False) + "\n")
        proto_out.flush()

    def backend(messages: list[dict[str, str]], settings: dict[str, Any]) -> str:
        with exchange:
            send({"type": "judge", "messages": messages, "settings": settings})
            line = proto_in.readline()
        if not line:
            raise JudgeUnavailable("no judge answer (input closed)")
        try:
            reply = json.loads(line)
        except json.JSONDecodeError as e:
            raise JudgeUnavailable(f"unreadable judge answer: {e}") from None
        if not isinstance(reply, dict):
            raise JudgeUnavailable("judge answer is not an object")
        if "error" in reply:
            raise JudgeUnavailable(str(reply["error"]))
        if not isinstance(reply.get("text"), str):
            raise JudgeUnavailable("judge answer has no 'text'")
        return reply["text"]

    def on_decision(question: str, yes: bool, motivation: str | None) -> None:
        with exchange:
            send(
                {
                    "type": "verdict",
                    "question": question,
                    "yes": yes,
                    **({} if motivation is None else {"motivation": motivation}),
                }
            )

    return Judge(backend, judge_type=judge_type, on_decision=on_decision)


def _module_name(path: str) -> str:
    stem = os.path.splitext(os.path.basename(path))[0]
    if (
        stem.isidentifier()
        and stem not in sys.modules
        and stem not in sys.stdlib_module_names
        and not stem.startswith("tbt_")
    ):
        return stem
    return "tbt_testcase_" + re.sub(r"\W", "_", stem)


def load_function(path: str, function: str) -> Callable[..., Any]:
    folder = os.path.dirname(os.path.abspath(path))
    if folder not in sys.path:
        sys.path.insert(0, folder)
    name = _module_name(path)
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    func = getattr(module, function, None)
    if func is None:
        raise LookupError(f"{os.path.basename(path)} has no function {function!r}")
    if not callable(func):
        raise TypeError(f"{function} is not a function")
    if inspect.iscoroutinefunction(func) or inspect.isasyncgenfunction(func):
        raise TypeError(f"{function}: async test functions are not supported")
    if inspect.isgeneratorfunction(func):
        raise TypeError(f"{function}: generator test functions are not supported")
    return func


def call_test(func: Callable[..., Any], x: Any, judge: Any) -> Any:
    provided = {"x": x, "judge": judge}
    kwargs: dict[str, Any] = {}
    params = inspect.signature(func).parameters
    for p in params.values():
        if p.name in provided and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            kwargs[p.name] = provided[p.name]
        elif p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) or p.default is not p.empty:
            continue
        else:
            raise TypeError(f"unsupported test parameter {p.name!r} (test functions take x and/or judge)")
    # Names the function does not take as parameters are injected as globals unless the module defines them.
    g = getattr(func, "__globals__", None)
    if isinstance(g, dict):
        for key, value in provided.items():
            if key not in kwargs and key not in g:
                g[key] = value
    return func(**kwargs)


def reward_of(returned: Any) -> float | None:
    """The reward a passing test's return value gives, read as the reference's ``reward: float`` field in [0, 1]
    reads it (None: the default reward, 1)."""
    if returned is None:
        return None
    value: float | None = None
    if isinstance(returned, (bool, int, float)):
        value = float(returned)
    elif isinstance(returned, str):
        try:
            value = float(returned.strip())
        except ValueError:
            value = None
    if value is None or not math.isfinite(value) or not 0.0 <= value <= 1.0:
        raise ValueError(
            f"the test returned {returned!r:.80}; a test returns None, a bool or a number in [0, 1] (its reward)"
        )
    return value


def _assert_message(e: AssertionError) -> str:
    text = str(e)
    if text:
        return text
    frames = traceback.extract_tb(e.__traceback__)
    if frames and frames[-1].line:
        return frames[-1].line.strip()
    return "assertion failed"


def _location(e: BaseException, path: str) -> dict[str, Any]:
    """Where `e` was raised: the innermost frame in the test file `path`, else the innermost frame."""
    if isinstance(e, SyntaxError) and e.filename:  # raised by the compiler, not from a frame of the file
        return {"file": e.filename, "line": e.lineno or 0}
    # This module's frames are never the place (a bad return value is raised here, after the test returned).
    frames = [
        f for f in traceback.extract_tb(e.__traceback__) if os.path.abspath(f.filename) != os.path.abspath(__file__)
    ]
    own = [f for f in frames if os.path.abspath(f.filename) == os.path.abspath(path)]
    frame = (own or frames or [None])[-1]
    if frame is None:
        return {"file": path, "line": 0}
    return {"file": frame.filename, "line": frame.lineno or 0}


def _trimmed_traceback(e: BaseException) -> str:
    """The traceback without this module's own frames at the top."""
    tb = e.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename == __file__:
        tb = tb.tb_next
    return "".join(traceback.format_exception(type(e), e, tb))


def run(proto_in: TextIO, proto_out: TextIO) -> dict[str, Any]:
    line = proto_in.readline()
    try:
        request = json.loads(line)
        path, function, context = request["file"], request["function"], request.get("context") or {}
        if not isinstance(path, str) or not isinstance(function, str) or not isinstance(context, dict):
            raise TypeError("file and function must be strings, context an object")
        if not isinstance(context.get("effects") or {}, dict) or not isinstance(context.get("response") or "", str):
            raise TypeError("context.effects must be an object, response a string")
        from thinkingbox.common import TestContext

        x = TestContext(**{k: context[k] for k in CONTEXT_FIELDS if context.get(k) is not None})
        judge = make_judge(proto_in, proto_out, request.get("judge_type") or "legacy")
    except Exception as e:  # noqa: BLE001 - any malformed request is reported as an error result
        return {"status": "error", "message": f"bad request: {e}", "traceback": "", "error_type": "BadRequest"}

    try:
        block_network()
        func = load_function(path, function)
        reward = reward_of(call_test(func, x, judge))
    except AssertionError as e:
        return {
            "status": "fail",
            "message": _assert_message(e),
            "traceback": _trimmed_traceback(e),
            "error_type": type(e).__name__,
            "location": _location(e, path),
        }
    except SystemExit as e:
        return {
            "status": "error",
            "message": f"test code called sys.exit({e.code!r})",
            "traceback": _trimmed_traceback(e),
            "error_type": "SystemExit",
            "location": _location(e, path),
        }
    except BaseException as e:  # noqa: BLE001 - everything else is a system error, including KeyboardInterrupt
        return {
            "status": "error",
            "message": f"{type(e).__name__}: {e}",
            "traceback": _trimmed_traceback(e),
            "error_type": type(e).__name__,
            "location": _location(e, path),
        }
    return {"status": "pass", "message": "", "reward": reward, "traceback": "", "error_type": ""}


def main() -> int:
    sys.stdout.flush()
    # Private protocol channels, then fd 1 -> stderr and fd 0 -> /dev/null for the test code.
    proto_out = os.fdopen(os.dup(1), "w", encoding="utf-8", buffering=1)
    proto_in = os.fdopen(os.dup(0), "r", encoding="utf-8")
    os.dup2(2, 1)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    sys.stdout = sys.stderr
    sys.stdin = open(os.devnull, encoding="utf-8")  # noqa: SIM115 - stays open for the process lifetime

    result = run(proto_in, proto_out)
    try:
        sys.stderr.flush()
    except Exception:  # noqa: BLE001
        pass
    proto_out.write(json.dumps({"type": "result", **result}, ensure_ascii=False) + "\n")
    proto_out.flush()
    return 0


if __name__ == "__main__":
    code = main()
    # Leave at once: threads or atexit hooks left behind by test code must not hold the grader open.
    for stream in (sys.stderr, sys.__stderr__):
        try:
            if stream is not None:
                stream.flush()
        except Exception:  # noqa: BLE001 - a broken stream must not keep the process alive
            pass
    os._exit(code)
