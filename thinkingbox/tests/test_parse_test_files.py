"""tbt_thinkingbox.parse_test_files: defaults, tasks, line mapping, native-pattern detection, problems."""

from __future__ import annotations

import json
import subprocess
import sys

from tb_testpaths import DATASET, FIXTURES, THINKINGBOX

from tbt_thinkingbox.parse_test_files import parse_source


def run_parser(paths: list[str]) -> dict:
    proc = subprocess.run(
        [sys.executable, "-m", "tbt_thinkingbox.parse_test_files"],
        input=json.dumps(paths),
        capture_output=True,
        text=True,
        cwd=THINKINGBOX,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count("\n") == 1, "exactly one JSON line on stdout"
    return json.loads(proc.stdout)


def parse_text(text: str, path: str = "/virtual/t.py") -> dict:
    return parse_source(path, text.encode())


def tasks_by_name(result: dict) -> dict[str, dict]:
    return {t["function"]: t for t in result["tasks"]}


def test_cli_reads_paths_and_keeps_order():
    paths = [str(FIXTURES / "native_patterns.py"), str(FIXTURES / "broken_syntax.py"), str(FIXTURES / "nope.py")]
    out = run_parser(paths)
    assert [f["file"] for f in out["files"]] == paths
    missing = out["files"][2]
    assert missing["tasks"] == [] and missing["defaults"] == []
    assert missing["problems"][0]["file"] == paths[2] and "cannot read" in missing["problems"][0]["message"]


def test_cli_rejects_bad_input():
    proc = subprocess.run(
        [sys.executable, "-m", "tbt_thinkingbox.parse_test_files"],
        input='{"not": "a list"}',
        capture_output=True,
        text=True,
        cwd=THINKINGBOX,
        timeout=60,
    )
    assert proc.returncode == 2 and proc.stdout == ""


def test_defaults_and_task_lines_map_yaml_lines_to_file_lines():
    src = '''"""!
scenario: a
"""
import os


def helper():
    """plain docstring"""


def test_one(x, judge):
    """!
    query: hello
    init:
      s: {golden: []}
    """
    assert x.effects["s"]["result_db_hash"] == x.effects["s"]["golden_db_hash"]


def test_two():
    "!query: single line"
    pass
'''
    out = parse_text(src)
    file_lines = src.split("\n")
    assert out["problems"] == []
    assert out["defaults"] == [{"yaml": "\nscenario: a\n", "line": 1, "value": {"scenario": "a"}}]
    # Line L of the YAML text is file line (line + L - 1).
    d = out["defaults"][0]
    for i, yaml_line in enumerate(d["yaml"].split("\n")):
        if yaml_line.strip():
            assert yaml_line in file_lines[d["line"] + i - 1]
    t = tasks_by_name(out)
    assert list(t) == ["test_one", "test_two"]
    one = t["test_one"]
    assert one["line"] == 11 and file_lines[one["line"] - 1].startswith("def test_one")
    assert one["yaml_line"] == 12
    for i, yaml_line in enumerate(one["yaml"].split("\n")):
        assert yaml_line in file_lines[one["yaml_line"] + i - 1]
    assert file_lines[one["yaml_line"] + 1 - 1] == "    query: hello"
    assert one["params"] == ["x", "judge"]
    assert one["native"] == {"kind": "hash_and_rubrics", "servers": ["s"], "rubrics": False}
    two = t["test_two"]
    assert two["yaml"] == "query: single line" and two["yaml_line"] == 21 and two["params"] == []
    assert two["native"] is None


def test_no_defaults_and_non_bang_strings_are_ignored():
    out = parse_text('"""A normal module docstring."""\n\ndef f(x):\n    """not a task"""\n    "!not first"\n')
    assert out["defaults"] == [] and out["tasks"] == [] and out["problems"] == []


def test_native_pattern_detection():
    out = run_parser([str(FIXTURES / "native_patterns.py")])["files"][0]
    t = tasks_by_name(out)
    yes = {n: v["native"] for n, v in t.items() if n.startswith("yes_")}
    no = {n: v["native"] for n, v in t.items() if n.startswith("no_")}
    assert yes == {
        "yes_single": {"kind": "hash_and_rubrics", "servers": ["a"], "rubrics": False},
        "yes_reversed_with_message": {"kind": "hash_and_rubrics", "servers": ["a"], "rubrics": False},
        "yes_rubrics": {"kind": "hash_and_rubrics", "servers": ["a"], "rubrics": True},
        "yes_two_servers": {"kind": "hash_and_rubrics", "servers": ["a", "b"], "rubrics": True},
        "yes_no_params": {"kind": "hash_and_rubrics", "servers": ["a"], "rubrics": False},
    }
    assert len(no) == 13 and all(v is None for v in no.values()), no
    assert "helper_not_a_task" not in t
    assert t["no_other_param_name"]["params"] == ["x", "judge", "extra"]


def test_async_and_unsupported_parameters_are_problems():
    out = run_parser([str(FIXTURES / "native_patterns.py")])["files"][0]
    t = tasks_by_name(out)
    assert "async_task" not in t and "needs_fixture" not in t
    messages = {p["message"]: p["line"] for p in out["problems"]}
    src = (FIXTURES / "native_patterns.py").read_text().split("\n")
    async_line = next(i for i, line in enumerate(src, 1) if line.startswith("async def async_task"))
    fixture_line = next(i for i, line in enumerate(src, 1) if line.startswith("def needs_fixture"))
    assert messages == {
        "async_task: async test functions are not supported": async_line,
        "needs_fixture: unsupported parameter(s) db (test functions take x and/or judge)": fixture_line,
    }
    assert out["defaults"][0]["yaml"] == "\nscenario: s\ntags: [parser-fixture]\n"


def test_module_level_x_shadows_injection():
    t = tasks_by_name(run_parser([str(FIXTURES / "shadowed_globals.py")])["files"][0])
    assert t["no_shadowed"]["native"] is None
    assert t["yes_param_wins"]["native"] == {"kind": "hash_and_rubrics", "servers": ["a"], "rubrics": False}


def test_syntax_error_is_a_problem_and_other_files_still_parse():
    out = run_parser([str(FIXTURES / "broken_syntax.py"), str(FIXTURES / "invalid_yaml_task.py")])
    broken, other = out["files"]
    assert broken["tasks"] == [] and broken["defaults"] == []
    assert len(broken["problems"]) == 1
    problem = broken["problems"][0]
    assert problem["file"] == str(FIXTURES / "broken_syntax.py")
    assert problem["line"] == 17 and problem["message"].startswith("syntax error")
    # Invalid YAML is not the parser's business: the text is returned as is, for the caller to report.
    t = tasks_by_name(other)
    assert other["problems"] == [] and set(t) == {"test_valid_yaml", "test_invalid_yaml"}
    assert 'query: "an unterminated quoted string' in t["test_invalid_yaml"]["yaml"]


def test_duplicate_and_redefined_functions():
    src = '''
def test_a(x):
    """!
    query: first
    """
    pass


def test_a(x):
    """!
    query: second
    """
    pass


def test_b(x):
    """!
    query: b
    """


def test_b(x):
    return None
'''
    out = parse_text(src)
    t = tasks_by_name(out)
    assert list(t) == ["test_a"] and "second" in t["test_a"]["yaml"] and t["test_a"]["line"] == 9
    assert [p["line"] for p in out["problems"]] == [9, 22]


def test_module_defaults_are_cumulative_each_applies_to_the_functions_after_it():
    # As the reference reads a file: every module-level "!" string updates the defaults of later functions.
    src = '"!scenario: a"\ndef test_a(x):\n    "!query: qa"\n"!scenario: b"\ndef test_b(x):\n    "!query: qb"\n'
    out = parse_text(src)
    assert out["problems"] == []
    assert [(d["line"], d["value"]) for d in out["defaults"]] == [(1, {"scenario": "a"}), (4, {"scenario": "b"})]
    t = tasks_by_name(out)
    assert t["test_a"]["defaults_before"] == 1 and t["test_b"]["defaults_before"] == 2


def test_example_dataset_parses_cleanly():
    files = sorted(str(p) for p in (DATASET / "dataset" / "test_case").rglob("*.py"))
    out = run_parser(files)
    tasks = {}
    for f in out["files"]:
        assert f["problems"] == [], f["problems"]
        rel = str(__import__("pathlib").Path(f["file"]).relative_to(DATASET / "dataset" / "test_case"))
        for t in f["tasks"]:
            tasks[f"{rel}:{t['function']}"] = t
    assert len(tasks) == 13
    native = {uid for uid, t in tasks.items() if t["native"]}
    python_bodies = {"circulation.py:test_checkout_confirms_due_date", "circulation.py:test_opening_hours"}
    assert native == set(tasks) - python_bodies
    assert tasks["circulation.py:test_renew_limit_reached"]["native"]["rubrics"] is True
    assert tasks["circulation.py:test_swap_kuhn_for_le_guin"]["native"]["servers"] == ["loans", "catalog"]
    assert tasks["stacks/stacks_shelving.py:test_move_silent_spring"]["params"] == []


def alias_bomb(levels: int) -> str:
    """A YAML alias bomb: `levels` levels of nine aliases each (nine levels is the 323-byte classic)."""
    names = "abcdefghi"[:levels]
    lines = [f"{names[0]}: &{names[0]} [{','.join(['lol'] * 9)}]"]
    for prev, name in zip(names, names[1:]):
        lines.append(f"{name}: &{name} [{','.join([f'*{prev}'] * 9)}]")
    return "\n".join(lines) + "\n"


def test_second_review_finding_7_yaml_alias_bomb_moderate_one_is_a_problem_at_its_line():
    bomb = "\n".join("    " + line for line in alias_bomb(5).splitlines())
    src = (
        f'def test_bomb(x):\n    """!\n    query: hi\n{bomb}\n    """\n\n\n'
        'def test_fine(x):\n    """!\n    query: ok\n    """\n'
    )
    out = parse_text(src)
    tasks = tasks_by_name(out)
    assert "value" not in tasks["test_bomb"], "the expanded bomb (59,049 nodes) is not passed on"
    assert tasks["test_bomb"]["error"]["line"] == 2
    assert "alias" in tasks["test_bomb"]["error"]["message"]
    assert tasks["test_fine"]["value"] == {"query": "ok"}


def test_second_review_finding_7_yaml_alias_bomb_323_bytes_refused_by_the_cli_naming_the_file(tmp_path):
    bomb = alias_bomb(9)
    assert len(bomb.encode()) == 324  # the 323 bytes of the report, and a final newline
    test_file = tmp_path / "bomb.py"
    test_file.write_text(f'"""!\n{bomb}"""\n\n\ndef test_a(x):\n    """!\n    query: hi\n    """\n')

    def small_memory() -> None:
        # Without the limit the expansion needs tens of GB: fail fast instead of hurting the machine.
        import resource

        resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))

    proc = subprocess.run(
        [sys.executable, "-m", "tbt_thinkingbox.parse_test_files"],
        input=json.dumps([str(test_file)]),
        capture_output=True,
        text=True,
        cwd=THINKINGBOX,
        timeout=120,
        preexec_fn=small_memory,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    parsed = json.loads(proc.stdout)["files"][0]
    assert parsed["file"] == str(test_file)
    assert parsed["defaults"][0]["error"]["line"] == 1
    assert "alias bomb" in parsed["defaults"][0]["error"]["message"]
    assert len(proc.stdout) < 10_000


def test_second_review_finding_7_yaml_anchors_used_for_sharing_still_load():
    out = parse_text('def test_a(x):\n    """!\n    base: &b {k: 1}\n    other: *b\n    """\n')
    assert tasks_by_name(out)["test_a"]["value"] == {"base": {"k": 1}, "other": {"k": 1}}
    loop = parse_text('def test_a(x):\n    """!\n    a: &a [*a]\n    """\n')
    assert "error" in tasks_by_name(loop)["test_a"]
