"""tbt_thinkingbox.run_test_case: results, the judge bridge, protocol hygiene and the network block."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

from tb_testpaths import FIXTURES, THINKINGBOX

CASES = str(FIXTURES / "helpers_dir" / "runner_cases.py")
EFFECTS = {"a": {"result_hash": "h1", "golden_hash": "h1", "rubrics": ["Is it polite?"]}}
TOOL_CALLS = [
    {"tool_call": {"name": "get_member", "arguments": {"member_id": "M01"}}, "tool_response": "{}"},
    {"tool_call": {"name": "checkout_book", "arguments": {"member_id": "M01"}}, "tool_response": "{}"},
]
YES, NO = {"text": "Yes."}, {"text": "No, it is rude."}


def question(request: dict[str, Any]) -> str:
    return request["settings"]["question"]


def run_case(
    function: str,
    *,
    file: str = CASES,
    effects: dict | None = None,
    response: str = "all done",
    judge_replies: list[dict] | None = None,
    raw_input: str | None = None,
) -> tuple[dict, list[dict], str]:
    """Runs one test function; answers judge requests in order from judge_replies.

    Returns (result line, judge requests seen, stderr)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "tbt_thinkingbox.run_test_case"],
        cwd=THINKINGBOX,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdin and proc.stdout and proc.stderr
    request = (
        raw_input
        if raw_input is not None
        else json.dumps(
            {
                "file": file,
                "function": function,
                "context": {
                    "effects": EFFECTS if effects is None else effects,
                    "response": response,
                    "tool_calls": TOOL_CALLS,
                },
            }
        )
    )
    proc.stdin.write(request + "\n")
    proc.stdin.flush()
    replies = list(judge_replies or [])
    requests: list[dict[str, Any]] = []
    result = None
    for line in proc.stdout:
        message = json.loads(line)  # every stdout line must be protocol JSON
        if message["type"] == "judge":
            requests.append(message)
            reply = replies.pop(0) if replies else {"error": "no more replies in this test"}
            proc.stdin.write(json.dumps(reply) + "\n")
            proc.stdin.flush()
        else:
            assert message["type"] == "result" and result is None
            result = message
    proc.stdin.close()
    stderr = proc.stderr.read()
    assert proc.wait(timeout=60) == 0, stderr
    assert result is not None, stderr
    assert set(result) - {"reward"} == {"type", "status", "message", "traceback", "error_type"}
    return result, requests, stderr


def test_pass():
    result, requests, _ = run_case("test_pass")
    assert result["status"] == "pass" and result["message"] == "" and requests == []


def test_fail_with_message():
    result, _, _ = run_case("test_fail_message", effects={"a": {"result_hash": "h1", "golden_hash": "h2"}})
    assert result["status"] == "fail" and result["message"] == "state mismatch"
    assert "runner_cases.py" in result["traceback"] and "AssertionError" in result["traceback"]
    assert "run_test_case.py" not in result["traceback"]


def test_fail_without_message_uses_the_assert_line():
    result, _, _ = run_case("test_fail_bare")
    assert result["status"] == "fail"
    assert result["message"] == 'assert x.response == "something else"'


def test_other_exception_is_an_error():
    result, _, _ = run_case("test_error")
    assert result["status"] == "error" and result["error_type"] == "KeyError"
    assert "missing-server" in result["message"]


def test_import_error_is_an_error():
    result, _, _ = run_case("test_anything", file=str(FIXTURES / "import_error_case.py"))
    assert result["status"] == "error" and result["error_type"] == "ModuleNotFoundError"


def test_syntax_error_file_is_an_error():
    result, _, _ = run_case("test_fine", file=str(FIXTURES / "broken_syntax.py"))
    assert result["status"] == "error" and result["error_type"] == "SyntaxError"


def test_missing_function_and_missing_file_are_errors():
    result, _, _ = run_case("test_does_not_exist")
    assert result["status"] == "error" and "no function 'test_does_not_exist'" in result["message"]
    result, _, _ = run_case("test_pass", file=str(FIXTURES / "nope.py"))
    assert result["status"] == "error"


def test_bad_request_is_an_error_result():
    result, _, _ = run_case("", raw_input="this is not json")
    assert result["status"] == "error" and result["message"].startswith("bad request")


def test_parameterless_function_gets_x_and_judge_as_globals():
    result, _, _ = run_case("test_no_params")
    assert result["status"] == "pass", result


def test_sibling_helper_module_imports():
    assert run_case("test_sibling_import")[0]["status"] == "pass"
    assert run_case("test_sibling_import", response="other")[0]["status"] == "fail"


def test_tool_calls_are_visible():
    result, _, _ = run_case("test_tool_calls")
    assert result["status"] == "pass", result


def test_judge_yes():
    result, requests, _ = run_case("test_judge", judge_replies=[YES] * 2)
    assert result["status"] == "pass", result
    assert [question(r) for r in requests] == ["Is it polite?", "Is this about custom text?"]
    # The reference's judge prompt: the message between tags (< and > escaped), then the question.
    assert requests[0]["messages"][0]["content"].startswith("You are a judge, your task is to read")
    assert requests[0]["messages"][1]["content"] == "<message>\nall done\n</message>\nIs it polite?"
    assert requests[1]["messages"][1]["content"].startswith("<message>\ncustom text\n</message>")
    assert requests[0]["settings"] == {"temperature": 0.0, "max_completion_tokens": 128, "question": "Is it polite?"}


def test_judge_no_is_a_fail():
    result, requests, _ = run_case("test_judge", judge_replies=[NO])
    assert result["status"] == "fail" and result["message"] == "rubric failed: Is it polite?"
    assert len(requests) == 1


def test_judge_error_is_an_error_not_a_fail():
    result, _, _ = run_case("test_judge", judge_replies=[{"error": "judge model unavailable"}])
    assert result["status"] == "error" and result["error_type"] == "JudgeUnavailable"
    assert "judge model unavailable" in result["message"]


def test_judge_malformed_reply_is_an_error():
    result, _, _ = run_case("test_judge", judge_replies=[{"answer": "yes"}])
    assert result["status"] == "error" and result["error_type"] == "JudgeUnavailable"


def test_prints_do_not_corrupt_the_protocol():
    result, requests, stderr = run_case("test_noisy", judge_replies=[YES])
    assert result["status"] == "pass", result
    assert [question(r) for r in requests] == ["noisy question?"]
    for text in ("printed by the test", '"message": "fake"', "raw write", "fd 1 write", "after judge"):
        assert text in stderr


def test_test_code_cannot_read_the_protocol_input():
    assert run_case("test_reads_stdin")[0]["status"] == "pass"


def test_network_is_blocked():
    for function in ("test_network_connect", "test_network_dns", "test_network_create_connection"):
        result, _, _ = run_case(function)
        assert result["status"] == "error", (function, result)
        assert result["error_type"] == "PermissionError"
        assert "network access is disabled in test code" in result["message"]
    assert run_case("test_network_swallowed")[0]["status"] == "pass"


def test_sys_exit_is_an_error():
    result, _, _ = run_case("test_sys_exit")
    assert result["status"] == "error" and result["error_type"] == "SystemExit"


def test_effects_arrive_unchanged():
    assert run_case("test_json_in_effects")[0]["status"] == "pass"


def test_fixture_dataset_custom_task():
    """The example dataset's custom-body task, against a hand-made terminal context."""
    from tb_testpaths import DATASET

    file = str(DATASET / "dataset" / "test_case" / "circulation.py")
    effects = {"loans": {"result_db_hash": "h", "golden_db_hash": "h", "diff": []}}
    calls = [{"tool_call": {"name": "checkout_book", "arguments": {}}, "tool_response": "{}"}]
    for response, status in (("It is due back on 2025-04-01.", "pass"), ("Enjoy the book!", "fail")):
        request = json.dumps(
            {
                "file": file,
                "function": "test_checkout_confirms_due_date",
                "context": {"effects": effects, "response": response, "tool_calls": calls},
            }
        )
        result, _, _ = run_case("", raw_input=request)
        assert result["status"] == status, result


def test_exits_even_if_test_code_leaves_a_thread_running():
    assert run_case("test_leaves_a_thread_running")[0]["status"] == "pass"
