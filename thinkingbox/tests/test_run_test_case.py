"""tbt_thinkingbox.run_test_case: results, the judge bridge, protocol hygiene and the network block."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from tb_testpaths import FIXTURES, THINKINGBOX

CASES = str(FIXTURES / "helpers_dir" / "runner_cases.py")
EFFECTS = {"a": {"result_hash": "h1", "golden_hash": "h1", "rubrics": ["Is it polite?"]}}
TOOL_CALLS = [
    {
        "tool_call": {"T": "ToolCall", "name": "get_member", "arguments": {"member_id": "M01"}, "id": "call_1"},
        "tool_response": {"T": "ToolResponse", "name": "get_member", "content": "{}", "id": "call_1"},
    },
    {
        "tool_call": {"T": "ToolCall", "name": "checkout_book", "arguments": {"member_id": "M01"}, "id": "call_2"},
        "tool_response": {"T": "ToolResponse", "name": "checkout_book", "content": "{}", "id": "call_2"},
    },
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
    context: dict[str, Any] | None = None,
    verdicts: list[dict[str, Any]] | None = None,
    judge_type: str | None = None,
) -> tuple[dict, list[dict], str]:
    """Runs one test function; answers judge requests in order from judge_replies (verdict lines go to
    ``verdicts``); ``context`` adds to or replaces the default context's fields.

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
                    **(context or {}),
                },
                **({"judge_type": judge_type} if judge_type else {}),
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
        elif message["type"] == "verdict":
            assert requests, "a verdict follows the judge answer it was parsed from"
            if verdicts is not None:
                verdicts.append(message)
        else:
            assert message["type"] == "result" and result is None
            result = message
    proc.stdin.close()
    stderr = proc.stderr.read()
    assert proc.wait(timeout=60) == 0, stderr
    assert result is not None, stderr
    assert set(result) - {"reward", "location"} == {"type", "status", "message", "traceback", "error_type"}
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


def test_an_error_names_the_line_of_the_test_that_raised_it():
    # The grader's task-error rule compares this place across two gradings.
    result, _, _ = run_case("test_error")
    lines = Path(CASES).read_text(encoding="utf-8").splitlines()
    line = next(i for i, text in enumerate(lines, 1) if 'x.effects["missing-server"]' in text)
    assert result["location"] == {"file": CASES, "line": line}


def test_a_syntax_error_names_the_line_of_the_file():
    file = str(FIXTURES / "broken_syntax.py")
    result, _, _ = run_case("test_fine", file=file)
    assert result["location"]["file"] == file and result["location"]["line"] > 0


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
    # The reference's judge prompt: its sentences on separate lines, the message between tags (< and > escaped),
    # then the question.
    assert requests[0]["messages"][0]["content"] == (
        "You are a judge, your task is to read the contents of a message and answer a question about the message.\n"
        "A message will be presented between <message> and </message> tags, and a question will be asked "
        "afterwards.\nAnswer the question with a single word: Yes or No."
    )
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
    calls = [{"tool_call": {"name": "checkout_book", "arguments": {}}, "tool_response": {"name": "x", "content": "{}"}}]
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


CONFORMANCE_CASES = '''
import math
from thinkingbox.common import Judge, TestContext
from thinkingbox.common.rubrics_judge import RubricJudge

def returns_true(x): return True
def returns_false(x): return False
def returns_quarter(x): return 0.25
def returns_int_one(x): return 1
def returns_numeric_string(x): return "0.5"
def returns_two(x): return 2
def returns_negative(x): return -0.1
def returns_word(x): return "good"
def returns_nan(x): return math.nan
def returns_list(x): return [1]

def airline_transfer(x: TestContext, judge: Judge):
    assert len(x.tool_calls) > 0 and x.tool_calls[-1].tool_call.name == "transfer_to_human_agents"
    summary = x.tool_calls[-1].tool_call.arguments.get("summary", "")
    assert judge.text_yesno(summary, "Does the summary mention a refund?")

def no_repeat(x, judge):
    assert judge.no_repeat(x.response, x.tool_direct_responses)

def framework_rubric_example(x, judge):
    rubric_judge = RubricJudge(judge=judge, x=x, max_workers=2)
    rubrics = [
        rubric_judge.Config(criterion="The message confirms the change", weight=50.0),
        rubric_judge.Config(criterion="The message mentions the new date", weight=50.0),
        rubric_judge.Config(criterion="The message claims a refund", weight=10.0, is_penalty=True),
    ]
    rubric_judge.evaluate(response=x.response, rubrics=rubrics, global_threshold=0.5, throw_on_failure=True)
    assert x.metadata["rubric_reward"] == 1.0
    x.metadata["tool_calls_count"] = len(x.tool_calls)

def motivated(x, judge):
    assert judge.text_yesno(x.response, "Is it polite?")

def conversation(x):
    assert x.query() == "Book me a flight"
    assert x.transcript() == "User: Book me a flight\\n\\nAssistant: Booked."
    assert [m.T for m in x.messages] == ["Text", "Text", "ParallelToolCall", "ToolResponse", "Text", "Text"]
    assert x.messages[2].tool_calls[0].id == x.messages[3].id == "call_9"
'''


def conformance_file(tmp_path: Any) -> str:
    path = tmp_path / "conformance_cases.py"
    path.write_text(CONFORMANCE_CASES)
    return str(path)


def test_returned_values_are_rewards_as_in_the_reference(tmp_path):
    file = conformance_file(tmp_path)
    for function, reward in (
        ("returns_true", 1.0),
        ("returns_false", 0.0),  # a pass with reward 0, as the reference's result=True, reward=0.0
        ("returns_quarter", 0.25),
        ("returns_int_one", 1.0),
        ("returns_numeric_string", 0.5),
    ):
        result, _, _ = run_case(function, file=file)
        assert (result["status"], result["reward"]) == ("pass", reward), (function, result)
    for function in ("returns_two", "returns_negative", "returns_word", "returns_nan", "returns_list"):
        result, _, _ = run_case(function, file=file)
        assert result["status"] == "error" and result["error_type"] == "ValueError", (function, result)
        assert "a number in [0, 1]" in result["message"]


def test_tool_calls_are_typed_as_the_airline_release_reads_them(tmp_path):
    calls = [
        *TOOL_CALLS,
        {
            "tool_call": {"T": "ToolCall", "name": "transfer_to_human_agents", "arguments": {"summary": "refund"}},
            "tool_response": {"T": "ToolResponse", "name": "transfer_to_human_agents", "content": ""},
        },
    ]
    verdicts: list[dict[str, Any]] = []
    result, requests, _ = run_case(
        "airline_transfer",
        file=conformance_file(tmp_path),
        context={"tool_calls": calls},
        judge_replies=[YES],
        verdicts=verdicts,
    )
    assert result["status"] == "pass", result
    assert requests[0]["messages"][1]["content"] == "<message>\nrefund\n</message>\nDoes the summary mention a refund?"
    assert verdicts == [{"type": "verdict", "question": "Does the summary mention a refund?", "yes": True}]


def test_judge_escapes_only_angle_brackets():
    result, requests, _ = run_case("test_judge", response="A & B <b>", judge_replies=[YES, YES])
    assert result["status"] == "pass", result
    assert requests[0]["messages"][1]["content"] == "<message>\nA & B &lt;b&gt;\n</message>\nIs it polite?"


def test_no_repeat_asks_whether_a_direct_response_is_repeated(tmp_path):
    context = {"tool_direct_responses": ["Your ticket is 42."]}
    file = conformance_file(tmp_path)
    result, requests, _ = run_case("no_repeat", file=file, context=context, judge_replies=[{"text": "No"}])
    assert result["status"] == "pass", result
    system, user = (m["content"] for m in requests[0]["messages"])
    assert system.startswith("You are a judge, your task is to read the contents of two messages")
    assert user == (
        "<first>\nall done\n</first>\n<second>\nYour ticket is 42.\n</second>\n"
        "Does the content of the first message repeat the content of the second message?\n"
    )
    assert run_case("no_repeat", file=file, context=context, judge_replies=[YES])[0]["status"] == "fail"
    assert run_case("no_repeat", file=file, context={"tool_direct_responses": []})[0]["status"] == "pass"


def test_rubric_judge_of_the_framework_example(tmp_path):
    verdicts: list[dict[str, Any]] = []
    replies = [{"text": "YES"}, {"text": "YES"}, {"text": "NO"}]
    result, requests, _ = run_case(
        "framework_rubric_example", file=conformance_file(tmp_path), judge_replies=replies, verdicts=verdicts
    )
    assert result["status"] == "pass", result
    assert [r["messages"][0]["content"].splitlines()[0] for r in requests] == ["You are a strict rubric judge."] * 3
    assert [(v["question"], v["yes"]) for v in verdicts] == [
        ("The message confirms the change", True),
        ("The message mentions the new date", True),
        ("[penalty] The message claims a refund", False),
    ]
    no = run_case("framework_rubric_example", file=conformance_file(tmp_path), judge_replies=[{"text": "NO"}] * 3)[0]
    assert no["status"] == "fail" and no["message"] == "Reward 0.000 is below threshold 0.500"


def test_motivation_judge_type(tmp_path):
    verdicts: list[dict[str, Any]] = []
    reply = {"text": '{"motivation": "It thanks the user.", "answer": "Yes"}'}
    result, requests, _ = run_case(
        "motivated", file=conformance_file(tmp_path), judge_replies=[reply], verdicts=verdicts, judge_type="motivation"
    )
    assert result["status"] == "pass", result
    assert '"motivation": a brief explanation' in requests[0]["messages"][0]["content"]
    assert verdicts[0]["motivation"] == "It thanks the user." and verdicts[0]["yes"] is True
    bad, _, _ = run_case("motivated", file=conformance_file(tmp_path), judge_replies=[YES], judge_type="motivation")
    assert bad["status"] == "fail"  # an answer that is not JSON is a no


def test_typed_messages_transcript_and_query(tmp_path):
    messages = [
        {"T": "Text", "role": "system", "content": "policy"},
        {"T": "Text", "role": "user", "content": "Book me a flight"},
        {"T": "ParallelToolCall", "tool_calls": [{"T": "ToolCall", "name": "book", "arguments": {}, "id": "call_9"}]},
        {"T": "ToolResponse", "name": "book", "content": "{}", "id": "call_9"},
        {"T": "Text", "role": "assistant", "content": "hm", "metadata": {"tag": "think"}},
        {"T": "Text", "role": "assistant", "content": "Booked.", "metadata": {"tag": "text"}},
    ]
    result, _, _ = run_case("conversation", file=conformance_file(tmp_path), context={"messages": messages})
    assert result["status"] == "pass", result


def test_untyped_context_is_a_bad_request(tmp_path):
    result, _, _ = run_case("conversation", file=conformance_file(tmp_path), context={"messages": [{"T": "Image"}]})
    assert result["status"] == "error" and result["error_type"] == "BadRequest"
    assert "unknown message type" in result["message"]
