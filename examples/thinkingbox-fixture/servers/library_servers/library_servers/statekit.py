"""Shared machinery for the fixture's MCP tool servers (original code, written for this fixture).

A server is a name, a list of domain tools and the state keys that are volatile (excluded from hashing).
This module adds the reserved tools, argument checking against each tool's JSON Schema (the subset the
fixture uses), canonical hashing, golden replay and the terminal-state diff, and serves the whole over
MCP stdio with the low-level server of the official `mcp` SDK (1.x API), as the ThinkingBox format has it.

Reserved tools (listed by tools/list like any other; the client hides them from the agent):
  __reserved__init({"config": CONFIG})   CONFIG = {"state": {table: rows}, "data_patch": {table: rows},
                                          "golden_test_case": {"tool_interactions": [{"tool", "parameters"}]},
                                          "rubrics_yesno": [...]}  (data_patch upserts rows by id)
  __reserved__geteffects({})             -> the terminal state as JSON text (see effects())
  __reserved__teardown({})               -> {"status": "ok"}; the server forgets everything
A failing domain call answers the text {"error": "...", "tool": "..."} (not an MCP error), as the
ThinkingBox servers do; a failing reserved call is an MCP error result.
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
import re
import sys
from dataclasses import dataclass, field
from datetime import date
from typing import Any, Callable

RESERVED_PREFIX = "__reserved__"

Handler = Callable[[dict[str, Any], dict[str, Any]], Any]


class ToolError(Exception):
    """A failure the caller should see as a tool error (isError result), never a crash."""


@dataclass
class Tool:
    name: str
    description: str
    input_schema: dict[str, Any]
    handler: Handler
    read_only: bool = False


def obj_schema(
    properties: dict[str, Any], required: list[str] | None = None
) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": properties,
        "required": required or [],
        "additionalProperties": False,
    }


# --- argument checking: the JSON Schema subset used by the fixture's tools ----------------------------

_TYPES: dict[str, Callable[[Any], bool]] = {
    "string": lambda v: isinstance(v, str),
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool),
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
    "null": lambda v: v is None,
}


def check(value: Any, schema: dict[str, Any], where: str) -> None:
    types = schema.get("type")
    if types is not None:
        names = types if isinstance(types, list) else [types]
        if not any(_TYPES[t](value) for t in names):
            raise ToolError(
                f"{where}: expected {' or '.join(names)}, got {json.dumps(value)}"
            )
    if "enum" in schema and value not in schema["enum"]:
        raise ToolError(
            f"{where}: must be one of {', '.join(map(str, schema['enum']))}"
        )
    if isinstance(value, str):
        if len(value) < schema.get("minLength", 0):
            raise ToolError(f"{where}: must not be empty")
        if "pattern" in schema and not re.search(schema["pattern"], value):
            raise ToolError(f"{where}: {value!r} does not match {schema['pattern']}")
        if schema.get("format") == "date":
            try:
                date.fromisoformat(value)
            except ValueError:
                raise ToolError(
                    f"{where}: {value!r} is not a date (YYYY-MM-DD)"
                ) from None
    if _TYPES["number"](value):
        if "minimum" in schema and value < schema["minimum"]:
            raise ToolError(f"{where}: must be >= {schema['minimum']}")
        if "maximum" in schema and value > schema["maximum"]:
            raise ToolError(f"{where}: must be <= {schema['maximum']}")
    if isinstance(value, dict) and schema.get("type") == "object":
        props = schema.get("properties", {})
        for key in schema.get("required", []):
            if key not in value:
                raise ToolError(f"{where}: missing required argument {key!r}")
        for key, item in value.items():
            if key in props:
                check(
                    item, props[key], f"{where}.{key}" if where != "arguments" else key
                )
            elif schema.get("additionalProperties") is False:
                raise ToolError(f"unknown argument {key!r}")
    if isinstance(value, list) and "items" in schema:
        for i, item in enumerate(value):
            check(item, schema["items"], f"{where}[{i}]")


# --- canonical form, hash, diff ------------------------------------------------------------------------


def _is_row_list(value: list[Any]) -> bool:
    return bool(value) and all(isinstance(v, dict) and "id" in v for v in value)


def canonical(value: Any, volatile: frozenset[str]) -> Any:
    """Rows sorted by id, lists of primitives sorted, volatile keys dropped (keys are sorted when dumped)."""
    if isinstance(value, dict):
        return {
            k: canonical(v, volatile) for k, v in value.items() if k not in volatile
        }
    if isinstance(value, list):
        items = [canonical(v, volatile) for v in value]
        if _is_row_list(items):
            return sorted(items, key=lambda r: str(r["id"]))
        if all(v is None or isinstance(v, (str, int, float, bool)) for v in items):
            return sorted(items, key=lambda v: (type(v).__name__, v))
        return items
    return value


def canonical_json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def state_hash(canonical_state: Any) -> str:
    return hashlib.sha256(canonical_json(canonical_state).encode("utf-8")).hexdigest()


def diff(result: Any, golden: Any, path: str = "") -> list[dict[str, Any]]:
    """Differences between two canonical states; a missing key or row shows as null on that side."""
    if isinstance(result, dict) and isinstance(golden, dict):
        out: list[dict[str, Any]] = []
        for key in sorted(set(result) | set(golden)):
            sub = f"{path}.{key}" if path else key
            if key not in result or key not in golden:
                kind = "missing_in_result" if key not in result else "missing_in_golden"
                out.append(
                    {
                        "path": sub,
                        "type": kind,
                        "result": result.get(key),
                        "golden": golden.get(key),
                    }
                )
            else:
                out += diff(result[key], golden[key], sub)
        return out
    if (
        isinstance(result, list)
        and isinstance(golden, list)
        and (_is_row_list(result) or _is_row_list(golden))
        and all(isinstance(r, dict) and "id" in r for r in result + golden)
    ):
        by_r = {str(r["id"]): r for r in result}
        by_g = {str(r["id"]): r for r in golden}
        out = []
        for rid in sorted(set(by_r) | set(by_g)):
            sub = f"{path}[{rid}]"
            if rid not in by_r or rid not in by_g:
                kind = "missing_in_result" if rid not in by_r else "missing_in_golden"
                out.append(
                    {
                        "path": sub,
                        "type": kind,
                        "result": by_r.get(rid),
                        "golden": by_g.get(rid),
                    }
                )
            else:
                out += diff(by_r[rid], by_g[rid], sub)
        return out
    if canonical_json(result) != canonical_json(golden):
        return [
            {"path": path or "$", "type": "changed", "result": result, "golden": golden}
        ]
    return []


# --- the server ------------------------------------------------------------------------------------------


@dataclass
class StateServer:
    name: str
    tools: list[Tool]
    state_keys: list[str]
    volatile: frozenset[str] = frozenset()
    initial: dict[str, Any] | None = None
    current: dict[str, Any] | None = None
    golden: dict[str, Any] | None = None
    rubrics: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.by_name = {t.name: t for t in self.tools}

    # Domain calls ------------------------------------------------------------------------------------
    def apply(self, state: dict[str, Any], name: str, arguments: Any) -> Any:
        tool = self.by_name.get(name)
        if tool is None:
            raise ToolError(f"unknown tool {name!r}")
        if arguments is None:
            arguments = {}
        check(arguments, tool.input_schema, "arguments")
        return tool.handler(state, arguments)

    # Reserved tools ----------------------------------------------------------------------------------
    def init(self, arguments: dict[str, Any]) -> dict[str, Any]:
        config = arguments["config"] if set(arguments) == {"config"} else arguments
        if not isinstance(config, dict):
            raise ToolError("config must be an object")
        state = config.get("state", {})
        if not isinstance(state, dict):
            raise ToolError("config.state must be an object")
        patch = config.get("data_patch") or {}
        if not isinstance(patch, dict):
            raise ToolError("config.data_patch must be an object")
        state = {k: list(v) for k, v in state.items()}
        for table, rows in patch.items():
            if not isinstance(rows, list):
                raise ToolError(f"config.data_patch.{table} must be a list of rows")
            by_id = {
                str(r.get("id")): i
                for i, r in enumerate(state.get(table, []))
                if isinstance(r, dict)
            }
            for row in rows:
                if isinstance(row, dict) and str(row.get("id")) in by_id:
                    state[table][by_id[str(row["id"])]] = row
                else:
                    state.setdefault(table, []).append(row)
        unknown = set(state) - set(self.state_keys)
        if unknown:
            raise ToolError(
                f"config.state has unknown tables: {', '.join(sorted(unknown))}"
            )
        initial = {key: copy.deepcopy(state.get(key, [])) for key in self.state_keys}
        for key, rows in initial.items():
            if not isinstance(rows, list) or not all(
                isinstance(r, dict) and "id" in r for r in rows
            ):
                raise ToolError(f"config.state.{key} must be a list of rows with an id")
            ids = [str(r["id"]) for r in rows]
            dupes = sorted({i for i in ids if ids.count(i) > 1})
            if dupes:
                raise ToolError(
                    f"config.state.{key} has duplicate ids: {', '.join(dupes)}"
                )
        golden_calls = (config.get("golden_test_case") or {}).get(
            "tool_interactions"
        ) or []
        rubrics = config.get("rubrics_yesno") or []
        if not isinstance(golden_calls, list):
            raise ToolError(
                "config.golden_test_case.tool_interactions must be a list of {tool, parameters}"
            )
        if not isinstance(rubrics, list) or not all(
            isinstance(r, str) for r in rubrics
        ):
            raise ToolError("config.rubrics_yesno must be a list of strings")
        golden = copy.deepcopy(initial)
        for i, call in enumerate(golden_calls):
            if not isinstance(call, dict) or not isinstance(call.get("tool"), str):
                raise ToolError(f"tool_interactions[{i}] must be {{tool, parameters}}")
            if call["tool"].startswith(RESERVED_PREFIX):
                raise ToolError(
                    f"tool_interactions[{i}]: reserved tools cannot be golden calls"
                )
            try:
                self.apply(golden, call["tool"], call.get("parameters") or {})
            except ToolError as e:
                raise ToolError(
                    f"golden call {i} ({call['tool']}) failed: {e}"
                ) from None
        self.initial, self.current, self.golden, self.rubrics = (
            initial,
            copy.deepcopy(initial),
            golden,
            list(rubrics),
        )
        return {
            "status": "ok",
            "server": self.name,
            "rows": {k: len(v) for k, v in initial.items()},
            "golden_calls": len(golden_calls),
            "today": os.environ.get("LIBRARY_TODAY"),
        }

    def effects(self) -> dict[str, Any]:
        if self.initial is None or self.current is None or self.golden is None:
            raise ToolError("not initialised: call __reserved__init first")
        initial, result, golden = (
            canonical(s, self.volatile)
            for s in (self.initial, self.current, self.golden)
        )
        return {
            "initial_db_state": initial,
            "result_db_state": result,
            "golden_db_state": golden,
            "result_db_hash": state_hash(result),
            "golden_db_hash": state_hash(golden),
            "diff": diff(result, golden),
            "rubrics": {},
            "rubrics_yesno": list(self.rubrics),
        }

    def teardown(self) -> dict[str, Any]:
        self.initial = self.current = self.golden = None
        self.rubrics = []
        return {"status": "ok"}

    def call(self, name: str, arguments: Any) -> Any:
        """Dispatch one tools/call; raises ToolError for anything the caller should see as an error."""
        if arguments is not None and not isinstance(arguments, dict):
            raise ToolError("arguments must be an object")
        arguments = arguments or {}
        if name == "__reserved__init":
            return self.init(arguments)
        if name == "__reserved__geteffects":
            return self.effects()
        if name == "__reserved__teardown":
            return self.teardown()
        if self.current is None:
            if name in self.by_name:
                raise ToolError(
                    "the server has no state yet (call __reserved__init first)"
                )
            raise ToolError(f"unknown tool {name!r}")
        return self.apply(self.current, name, arguments)

    # Listing -----------------------------------------------------------------------------------------
    def listing(self) -> list[dict[str, Any]]:
        reserved = [
            {
                "name": "__reserved__init",
                "description": "Seed the server state, golden calls and rubrics.",
                "input_schema": obj_schema({"config": {"type": "object"}}, ["config"])
                | {"additionalProperties": True},
            },
            {
                "name": "__reserved__geteffects",
                "description": "Terminal state: states, hashes, diff, rubrics.",
                "input_schema": obj_schema({}),
            },
            {
                "name": "__reserved__teardown",
                "description": "Forget all state.",
                "input_schema": obj_schema({}),
            },
        ]
        domain = [
            {
                "name": t.name,
                "description": t.description,
                "input_schema": t.input_schema,
                "read_only": t.read_only,
            }
            for t in self.tools
        ]
        return domain + reserved


def _answer(server: StateServer, name: str, arguments: Any) -> tuple[str, bool]:
    """The text of a tools/call answer and whether it is an MCP error (only reserved calls are)."""
    try:
        return json.dumps(server.call(name, arguments), ensure_ascii=False), False
    except ToolError as e:
        if name.startswith(RESERVED_PREFIX):
            return str(e), True
        return json.dumps({"error": str(e), "tool": name}, ensure_ascii=False), False
    except Exception as e:  # noqa: BLE001 - a bug in a handler is reported, never a crash
        print(f"[{server.name}] internal error in {name}: {e!r}", file=sys.stderr)
        return json.dumps({"error": f"internal error: {e}", "tool": name}), False


def serve(server: StateServer) -> None:
    """Serve over MCP stdio until the client closes stdin, with the `mcp` SDK's low-level server (1.x or 2.x)."""
    import anyio
    from mcp.server.lowlevel import Server
    from mcp.server.stdio import stdio_server

    try:
        import mcp_types as types2  # the 2.x SDK keeps its types in a separate package
    except ImportError:
        types2 = None

    if types2 is not None:

        async def on_list_tools(ctx: Any, params: Any) -> Any:
            return types2.ListToolsResult(
                tools=[
                    types2.Tool(
                        name=t["name"],
                        description=t["description"],
                        input_schema=t["input_schema"],
                        annotations=types2.ToolAnnotations(read_only_hint=True)
                        if t.get("read_only")
                        else None,
                    )
                    for t in server.listing()
                ]
            )

        async def on_call_tool(ctx: Any, params: Any) -> Any:
            text, is_error = _answer(server, params.name, params.arguments)
            return types2.CallToolResult(
                content=[types2.TextContent(text=text)], is_error=is_error
            )

        app: Any = Server(
            server.name,
            version="1.0.0",
            on_list_tools=on_list_tools,
            on_call_tool=on_call_tool,
        )
    else:
        import mcp.types as types

        app = Server(server.name, version="1.0.0")

        @app.list_tools()
        async def list_tools() -> list[types.Tool]:
            return [
                types.Tool(
                    name=t["name"],
                    description=t["description"],
                    inputSchema=t["input_schema"],
                    annotations=types.ToolAnnotations(readOnlyHint=True)
                    if t.get("read_only")
                    else None,
                )
                for t in server.listing()
            ]

        @app.call_tool(validate_input=False)
        async def call_tool(name: str, arguments: dict[str, Any]) -> Any:
            text, is_error = _answer(server, name, arguments)
            content = [types.TextContent(type="text", text=text)]
            return (
                types.CallToolResult(content=content, isError=True)
                if is_error
                else content
            )

    async def main() -> None:
        async with stdio_server() as (read_stream, write_stream):
            await app.run(
                read_stream, write_stream, app.create_initialization_options()
            )

    anyio.run(main)


def find(rows: list[dict[str, Any]], row_id: str, what: str) -> dict[str, Any]:
    for row in rows:
        if row["id"] == row_id:
            return row
    raise ToolError(f"no {what} with id {row_id!r}")
