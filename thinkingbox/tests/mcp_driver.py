"""Drives a dataset tool server over real MCP stdio with the official `mcp` client SDK.

Run with the thinkingbox tool-server venv's python (the learner venv used by pytest has no `mcp`).
stdin: {"cwd": DIR, "command": CMD, "args": [...], "env": {...},
        "sessions": [[{"tool": NAME, "arguments": {...}}, ...], ...]}
  Each session is a fresh server process; "list_tools" lists the tools first.
stdout: {"sessions": [{"tools": [{"name", "description", "input_schema"}], "protocol_version": V,
                       "results": [{"is_error": bool, "text": str}]}]}

`--time N --config FILE --server PATH --cwd DIR [--raw]` instead measures, N times, the wall time from spawning the
server to a completed initialize handshake plus __reserved__init (config from FILE), and prints the samples.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from typing import Any

import anyio
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client


def _env() -> dict[str, str]:
    # Servers run with this venv's bin/ first on PATH, so "python" in servers.yaml is this venv's python.
    return {"PATH": os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", "")}


async def run_session(
    cwd: str, command: str, args: list[str], steps: list[dict[str, Any]], env: dict[str, str] | None = None
) -> dict[str, Any]:
    params = StdioServerParameters(command=command, args=args, cwd=cwd, env={**_env(), **(env or {})})
    out: dict[str, Any] = {"results": []}
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        init = await session.initialize()
        out["protocol_version"] = init.protocol_version
        listed = await session.list_tools()
        out["tools"] = [
            {"name": t.name, "description": t.description, "input_schema": t.input_schema} for t in listed.tools
        ]
        for step in steps:
            result = await session.call_tool(step["tool"], step.get("arguments", {}))
            text = "".join(getattr(c, "text", "") for c in result.content)
            out["results"].append({"is_error": bool(result.is_error), "text": text})
    return out


async def time_start(cwd: str, server: str, config: dict[str, Any]) -> float:
    params = StdioServerParameters(command="python", args=[server], cwd=cwd, env=_env())
    t0 = time.perf_counter()
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        result = await session.call_tool("__reserved__init", {"config": config})
        elapsed = time.perf_counter() - t0
        assert not result.is_error, result
    return elapsed


def time_start_raw(cwd: str, server: str, config: dict[str, Any]) -> float:
    """The same measurement with a bare JSON-RPC client (no SDK), as a TypeScript client would see it."""
    import subprocess

    env = {**os.environ, **_env()}
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        ["python", server], cwd=cwd, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert proc.stdin and proc.stdout

    def send(message: dict[str, Any]) -> None:
        proc.stdin.write(json.dumps(message) + "\n")  # type: ignore[union-attr]
        proc.stdin.flush()  # type: ignore[union-attr]

    send(
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-11-25",
                "capabilities": {},
                "clientInfo": {"name": "timer", "version": "0"},
            },
        }
    )
    json.loads(proc.stdout.readline())
    send({"jsonrpc": "2.0", "method": "notifications/initialized"})
    send(
        {
            "jsonrpc": "2.0",
            "id": 2,
            "method": "tools/call",
            "params": {"name": "__reserved__init", "arguments": {"config": config}},
        }
    )
    reply = json.loads(proc.stdout.readline())
    elapsed = time.perf_counter() - t0
    assert not reply["result"].get("isError"), reply
    proc.stdin.close()
    proc.wait(timeout=10)
    return elapsed


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--time", type=int)
    parser.add_argument("--config")
    parser.add_argument("--server")
    parser.add_argument("--cwd")
    parser.add_argument("--raw", action="store_true", help="time with a bare JSON-RPC client instead of the SDK")
    opts = parser.parse_args()
    if opts.time:
        with open(opts.config) as f:
            config = json.load(f)
        if opts.raw:
            samples = [time_start_raw(opts.cwd, opts.server, config) for _ in range(opts.time)]
        else:
            samples = [anyio.run(time_start, opts.cwd, opts.server, config) for _ in range(opts.time)]
        print(json.dumps({"samples_s": samples, "median_s": statistics.median(samples)}))
        return 0
    plan = json.load(sys.stdin)
    sessions = [
        anyio.run(run_session, plan["cwd"], plan["command"], plan.get("args", []), steps, plan.get("env"))
        for steps in plan["sessions"]
    ]
    print(json.dumps({"sessions": sessions}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
