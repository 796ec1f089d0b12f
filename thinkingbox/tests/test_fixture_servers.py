"""The example dataset's MCP tool servers, driven over real stdio MCP with the official client SDK.

Needs the tool-server venv (.tools/thinkingbox-venv, made by scripts/setup.sh) and PyYAML (in the learner
venv) to read the dataset's YAML; skips with the reason otherwise.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
from tb_testpaths import DATASET as FIXTURE

from tbt_thinkingbox.parse_test_files import parse_file

yaml = pytest.importorskip("yaml", reason="PyYAML is needed to read the example dataset's YAML")

DRIVER = Path(__file__).resolve().parent / "mcp_driver.py"
RESERVED = {"__reserved__init", "__reserved__geteffects", "__reserved__teardown"}
DATASET = FIXTURE / "dataset"
SERVERS = FIXTURE / "servers"
PACKAGES = SERVERS / "library_servers"
TESTLIST = FIXTURE / "releases" / "fixture_v1" / "testlist_fixture_v1.yaml"


def merge(base: Any, override: Any) -> Any:
    """ThinkingBox init merge: dicts recursively, lists concatenated, scalars replaced, falsy base replaced."""
    if not base:
        return override
    if isinstance(base, list) and isinstance(override, list):
        return base + override
    if isinstance(base, dict) and isinstance(override, dict):
        out = dict(base)
        for key, value in override.items():
            out[key] = merge(base[key], value) if key in base else value
        return out
    return override


def load_yaml(path: Path) -> Any:
    return yaml.safe_load(path.read_text())


def servers() -> dict[str, dict[str, Any]]:
    return load_yaml(SERVERS / "servers.yaml")["servers"]


def dataset_tasks() -> list[dict[str, Any]]:
    tasks = []
    for path in sorted((DATASET / "test_case").rglob("*.py")):
        parsed = parse_file(str(path))
        for t in parsed["tasks"]:
            # Each module "!" string before the function updates its defaults (the reference's rule).
            defaults: dict[str, Any] = {}
            for d in parsed["defaults"][: t["defaults_before"]]:
                defaults.update(yaml.safe_load(d["yaml"]) or {})
            spec = {**defaults, **yaml.safe_load(t["yaml"])}
            scenario = load_yaml(DATASET / "scenario" / f"{spec['scenario']}.yaml")
            world = {
                name: merge(cfg, spec.get("init", {}).get(name, {})) for name, cfg in scenario["world_state"].items()
            }
            extra = set(spec.get("init", {})) - set(world)
            assert not extra, f"init names servers outside the scenario's world_state: {extra}"
            visible = [v["name"] for v in scenario["tools"]]
            uid = f"{path.name}:{t['function']}"
            tasks.append({"uid": uid, "spec": spec, "world": world, "visible": visible, "native": t["native"]})
    return tasks


def drive(tb_python: Path, server: str, sessions: list[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    argv = [("python" if a == "{python}" else a) for a in servers()[server]["command"]]
    plan = {
        "cwd": str(SERVERS),
        "command": argv[0],
        "args": argv[1:],
        "env": {"PYTHONPATH": str(PACKAGES), **servers()[server].get("env", {})},
        "sessions": sessions,
    }
    proc = subprocess.run(
        [str(tb_python), str(DRIVER)], input=json.dumps(plan), capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout)["sessions"]


def body(result: dict[str, Any]) -> Any:
    assert not result["is_error"], result["text"]
    value = json.loads(result["text"])
    assert not (isinstance(value, dict) and "error" in value), value
    return value


def tool_error(result: dict[str, Any]) -> str | None:
    """A domain failure answers the text {"error", "tool"} (as ThinkingBox servers do); reserved ones: isError."""
    if result["is_error"]:
        return result["text"]
    try:
        value = json.loads(result["text"])
    except json.JSONDecodeError:
        return None
    return value.get("error") if isinstance(value, dict) else None


def golden_of(config: dict[str, Any]) -> list[dict[str, Any]]:
    return ((config or {}).get("golden_test_case") or {}).get("tool_interactions") or []


@pytest.fixture(scope="module")
def tasks() -> list[dict[str, Any]]:
    return dataset_tasks()


def test_dataset_shape(tasks):
    uids = [t["uid"] for t in tasks]
    listed = load_yaml(TESTLIST)
    assert len(tasks) >= 8 and set(listed) <= set(uids) and len(listed) == len(uids) - 1
    assert (DATASET / "test_case" / "stacks" / "stacks_shelving.py").is_file(), "a task file one folder down"
    for t in tasks:
        for config in t["world"].values():
            for call in golden_of(config):
                assert call["tool"] in t["visible"], f"{t['uid']}: golden tool {call['tool']} is not visible"
    agent = load_yaml(DATASET / "agent" / "default.yaml")
    assert agent["system_instructions"] and agent["builtin_tools"][0]["is_end_turn"] is True


def test_tools_list_has_domain_and_reserved_tools(tb_python):
    all_tools: dict[str, dict[str, Any]] = {}
    for server in servers():
        (session,) = drive(tb_python, server, [[]])
        assert session["protocol_version"]
        names = {t["name"] for t in session["tools"]}
        assert RESERVED <= names and len(names - RESERVED) >= 2
        for t in session["tools"]:
            assert t["description"] and t["input_schema"]["type"] == "object"
        all_tools.update({t["name"]: t for t in session["tools"] if t["name"] not in RESERVED})
    assert set(all_tools) == {
        "search_books",
        "move_book",
        "get_member",
        "checkout_book",
        "return_book",
        "renew_loan",
        "opening_hours",
    }
    # Every tool a scenario makes visible exists on some server, and each scenario hides at least one.
    for path in (DATASET / "scenario").glob("*.yaml"):
        visible = {v["name"] for v in load_yaml(path)["tools"] if "direct_response" not in v}
        assert visible <= set(all_tools), path.name
        assert set(all_tools) - visible, f"{path.name} should hide a tool"


def test_golden_replay_through_visible_tools_matches(tb_python, tasks):
    """Per task and server: init; no calls -> mismatch unless nothing should change; the golden calls made
    as ordinary tool calls -> result_hash == golden_hash; teardown. All tasks of a server share one process
    (init reseeds everything), which keeps this test fast; episodes use a fresh process each."""
    plans: dict[str, list[tuple[str, dict[str, Any]]]] = {}
    for t in tasks:
        for server, config in t["world"].items():
            plans.setdefault(server, []).append((t["uid"], config))
    assert set(plans) == {"catalog", "loans"}
    for server, entries in plans.items():
        steps: list[dict[str, Any]] = []
        for _uid, config in entries:
            steps += [{"tool": "__reserved__init", "arguments": {"config": config}}, {"tool": "__reserved__geteffects"}]
            steps += [{"tool": c["tool"], "arguments": c.get("parameters") or {}} for c in golden_of(config)]
            steps += [
                {"tool": "__reserved__geteffects"},
                {"tool": "__reserved__teardown"},
                {"tool": "__reserved__geteffects"},
            ]
        (session,) = drive(tb_python, server, [steps])
        results = session["results"]
        for uid, config in entries:
            golden_calls = golden_of(config)
            block, results = results[: 5 + len(golden_calls)], results[5 + len(golden_calls) :]
            assert body(block[0])["status"] == "ok", uid
            before = body(block[1])
            assert set(before) == {
                "initial_db_state",
                "result_db_state",
                "golden_db_state",
                "result_db_hash",
                "golden_db_hash",
                "diff",
                "rubrics",
                "rubrics_yesno",
            }
            assert before["initial_db_state"] == before["result_db_state"]
            if golden_calls:
                assert before["result_db_hash"] != before["golden_db_hash"] and before["diff"], uid
            else:
                assert before["result_db_hash"] == before["golden_db_hash"] and before["diff"] == [], uid
            for r in block[2 : 2 + len(golden_calls)]:
                body(r)  # each golden call succeeds as an ordinary call
            after = body(block[2 + len(golden_calls)])
            assert after["result_db_hash"] == after["golden_db_hash"], (uid, after["diff"])
            assert after["diff"] == [] and after["result_db_state"] == after["golden_db_state"]
            assert after["rubrics_yesno"] == (config.get("rubrics_yesno") or [])
            assert body(block[-2]) == {"status": "ok"}
            assert block[-1]["is_error"] and "not initialised" in block[-1]["text"]
        assert results == []


def test_no_change_and_rubric_tasks(tasks):
    by_uid = {t["uid"]: t for t in tasks}
    lookup = by_uid["circulation.py:test_list_my_loans"]
    assert all(not golden_of(cfg) for cfg in lookup["world"].values())
    rubric = by_uid["circulation.py:test_renew_limit_reached"]
    assert rubric["world"]["loans"]["rubrics_yesno"] and rubric["native"]["rubrics"] is True


def test_bad_calls_are_tool_errors_not_crashes(tb_python):
    config = load_yaml(DATASET / "scenario" / "circulation_desk.yaml")["world_state"]["loans"]
    bad_golden = merge(
        config,
        {"golden_test_case": {"tool_interactions": [{"tool": "return_book", "parameters": {"loan_id": "L0003"}}]}},
    )
    steps = [
        {"tool": "get_member", "arguments": {"member_id": "M01"}},  # before init
        {"tool": "__reserved__geteffects"},  # before init
        {"tool": "__reserved__init", "arguments": {"config": bad_golden}},  # golden call fails
        {"tool": "__reserved__init", "arguments": {"config": config}},
        {"tool": "no_such_tool", "arguments": {}},
        {"tool": "get_member", "arguments": {"member_id": 7}},  # wrong type
        {"tool": "get_member", "arguments": {}},  # missing argument
        {"tool": "get_member", "arguments": {"member_id": "M99"}},  # unknown id
        {"tool": "get_member", "arguments": {"member_id": "M01", "extra": 1}},  # unknown argument
        {"tool": "checkout_book", "arguments": {"member_id": "M01", "book_id": "B001", "due_date": "soon"}},
        {"tool": "checkout_book", "arguments": {"member_id": "M04", "book_id": "B001", "due_date": "2025-04-01"}},
        {"tool": "renew_loan", "arguments": {"loan_id": "L0004", "new_due_date": "2025-04-08"}},
        {"tool": "get_member", "arguments": {"member_id": "M01"}},  # still alive and well
        {"tool": "__reserved__geteffects"},
    ]
    (session,) = drive(tb_python, "loans", [steps])
    r = session["results"]
    assert "__reserved__init" in (tool_error(r[0]) or "")
    assert r[1]["is_error"] and "not initialised" in r[1]["text"]
    assert r[2]["is_error"] and "golden call 0 (return_book) failed" in r[2]["text"]
    assert body(r[3])["status"] == "ok"
    expected = [
        "unknown tool",
        "expected string",
        "missing required argument",
        "no member",
        "unknown argument",
        "not a date",
        "blocked",
        "renewed 2 times",
    ]
    for result, text in zip(r[4:12], expected, strict=True):
        assert not result["is_error"] and text in (tool_error(result) or ""), (text, result)
    member = body(r[12])
    assert member["id"] == "M01" and [loan["id"] for loan in member["active_loans"]] == ["L0001"]
    effects = body(r[13])
    assert effects["result_db_hash"] == effects["golden_db_hash"]
    assert effects["result_db_state"] == effects["initial_db_state"]


def test_diff_and_volatile_fields(tb_python):
    catalog = load_yaml(DATASET / "scenario" / "stacks_maintenance.yaml")["world_state"]["catalog"]
    move = {"tool": "move_book", "parameters": {"book_id": "B004", "shelf": "A3"}}
    catalog = merge(catalog, {"golden_test_case": {"tool_interactions": [move]}})
    (session,) = drive(
        tb_python,
        "catalog",
        [
            [
                {"tool": "__reserved__init", "arguments": catalog},  # the bare config as arguments is accepted too
                {"tool": "move_book", "arguments": {"book_id": "B004", "shelf": "A4"}},
                {"tool": "__reserved__geteffects"},
            ]
        ],
    )
    effects = body(session["results"][2])
    assert effects["diff"] == [{"path": "books[B004].shelf", "type": "changed", "result": "A4", "golden": "A3"}]

    loans = load_yaml(DATASET / "scenario" / "circulation_desk.yaml")["world_state"]["loans"]
    golden = [
        {"tool": "checkout_book", "parameters": {"member_id": "M02", "book_id": "B001", "due_date": "2025-04-01"}}
    ]
    (session,) = drive(
        tb_python,
        "loans",
        [
            [
                {
                    "tool": "__reserved__init",
                    "arguments": {"config": merge(loans, {"golden_test_case": {"tool_interactions": golden}})},
                },
                {"tool": "checkout_book", "arguments": {**golden[0]["parameters"], "note": "asked for a bag"}},
                {"tool": "__reserved__geteffects"},
            ]
        ],
    )
    effects = body(session["results"][2])
    assert effects["result_db_hash"] == effects["golden_db_hash"], "the free-text note is volatile"
    assert all("note" not in row for row in effects["result_db_state"]["loans"])


def _rpc(proc: subprocess.Popen, message: dict[str, Any]) -> dict[str, Any] | None:
    assert proc.stdin and proc.stdout
    proc.stdin.write(json.dumps(message) + "\n")
    proc.stdin.flush()
    if "id" not in message:
        return None
    return json.loads(proc.stdout.readline())


@pytest.mark.parametrize("version", ["2025-11-25", "2025-06-18"])
def test_raw_jsonrpc_handshake_like_the_typescript_client(tb_python, version):
    """No SDK on the client side: the wire format a TypeScript MCP client sees (camelCase fields)."""
    proc = subprocess.Popen(
        [str(tb_python), "-m", "library_servers.catalog_server"],
        cwd=SERVERS,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(PACKAGES)},
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        init = _rpc(
            proc,
            {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "initialize",
                "params": {
                    "protocolVersion": version,
                    "capabilities": {},
                    "clientInfo": {"name": "raw-test", "version": "0"},
                },
            },
        )
        assert init and init["result"]["protocolVersion"] == version and "tools" in init["result"]["capabilities"]
        _rpc(proc, {"jsonrpc": "2.0", "method": "notifications/initialized"})
        listed = _rpc(proc, {"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {}})
        tools = {t["name"]: t for t in listed["result"]["tools"]}
        assert tools["move_book"]["inputSchema"]["required"] == ["book_id", "shelf"]
        assert tools["search_books"]["annotations"]["readOnlyHint"] is True
        bad = _rpc(
            proc,
            {
                "jsonrpc": "2.0",
                "id": 3,
                "method": "tools/call",
                "params": {"name": "move_book", "arguments": {"book_id": "nope"}},
            },
        )
        assert bad["result"].get("isError", False) is False
        assert "error" in json.loads(bad["result"]["content"][0]["text"]), "a domain failure is an error text"
        ok = _rpc(
            proc,
            {
                "jsonrpc": "2.0",
                "id": 4,
                "method": "tools/call",
                "params": {"name": "__reserved__init", "arguments": {"config": {}}},
            },
        )
        assert ok["result"].get("isError", False) is False
        assert json.loads(ok["result"]["content"][0]["text"])["status"] == "ok"
    finally:
        assert proc.stdin
        proc.stdin.close()
        proc.wait(timeout=10)
