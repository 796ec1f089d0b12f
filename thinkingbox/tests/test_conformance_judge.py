"""Conformance of ``thinkingbox.common.judge`` with the reference framework's documented behaviour.

One test per public item (named after it). Inputs and expected outputs follow the reference's own tests
(tests/test_judge.py) and its prompt texts; the judge model is a scripted backend that records each request.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import pytest
from tb_testpaths import FIXTURES, THINKINGBOX

# Our `thinkingbox.common` (the shim), as the test runner puts it first on the path.
sys.path.insert(0, str(THINKINGBOX / "shim"))

import thinkingbox.common.judge as shim_judge
from thinkingbox.common import Judge
from thinkingbox.common.chat_types import Text
from thinkingbox.common.judge import (
    QUESTION_FIRST_REPEATS_SECOND,
    SYSTEM_COMPARE_YESNO,
    SYSTEM_TEXT_YESNO,
    SYSTEM_TEXT_YESNO_MOTIVATION,
    SYSTEM_YESNO,
    JudgeException,
    _parse_yesno,
    _quoted_keys,
    safe_tag_encode,
)

# The reference's prompt texts as its judge.py holds them, with the commit they were taken from.
REFERENCE = json.loads((FIXTURES / "reference_judge_prompts.json").read_text(encoding="utf-8"))


class ScriptedModel:
    """A judge backend answering from a script and recording every request."""

    def __init__(self, *answers: str):
        self.answers = list(answers)
        self.requests: list[tuple[list[dict[str, str]], dict[str, Any]]] = []

    def __call__(self, messages: list[dict[str, str]], settings: dict[str, Any]) -> str:
        self.requests.append((messages, settings))
        if not self.answers:
            raise RuntimeError("no more scripted answers")
        return self.answers.pop(0)

    def prompts(self, i: int = -1) -> tuple[str, str]:
        messages = self.requests[i][0]
        assert [m["role"] for m in messages] == ["system", "user"]
        return messages[0]["content"], messages[1]["content"]


def test_parse_yesno():
    for text in ("yes", "Yes", "Yes.", "Yes,", "Yes;", "Yes:", "Yes\n", "Yes, I agree.", "The answer is yes."):
        assert _parse_yesno(text) is True, text
    for text in ("no", "maybe", "", "   ", "yes!", "I'd say yes, maybe"):
        assert _parse_yesno(text) is False, text


def test_safe_tag_encode():
    # Only < and > are escaped: & and quotes pass unchanged (the reference does not html-escape).
    assert safe_tag_encode("a <b> & 'c' \"d\"") == "a &lt;b&gt; & 'c' \"d\""


def test_judge_rejects_an_unknown_judge_type():
    with pytest.raises(ValueError, match="Invalid judge_type"):
        Judge(ScriptedModel(), judge_type="fancy")


def test_judge_text_yesno():
    model = ScriptedModel("Yes.", "No")
    judge = Judge(model)
    assert judge.text_yesno("Done <b>& sent</b>", "Was it sent?") is True
    system, user = model.prompts()
    assert system == SYSTEM_TEXT_YESNO
    assert system.count("\n") == 2 and "  " not in system  # newline-joined, as the reference
    assert user == "<message>\nDone &lt;b&gt;& sent&lt;/b&gt;\n</message>\nWas it sent?"
    assert judge.text_yesno("x", "q") is False
    assert judge.drain_decisions() == []  # the legacy judge records no motivations


def test_judge_text_yesno_legacy():
    model = ScriptedModel("yes")
    assert Judge(model, judge_type="motivation").text_yesno_legacy("t", "q?") is True
    assert model.prompts() == (SYSTEM_TEXT_YESNO, "<message>\nt\n</message>\nq?")


def test_judge_text_yesno_with_motivation():
    model = ScriptedModel('{"motivation": "Answer is stated", "answer": "Yes"}')
    judge = Judge(model)
    assert judge.text_yesno_with_motivation("Assistant <reply>", "Did they comply?") == {
        "motivation": "Answer is stated",
        "answer": True,
    }
    user = "<message>\nAssistant &lt;reply&gt;\n</message>\nDid they comply?"
    assert model.prompts() == (SYSTEM_TEXT_YESNO_MOTIVATION, user)
    assert judge.drain_decisions() == [
        {"question": "Did they comply?", "answer": True, "motivation": "Answer is stated"}
    ]
    assert judge.drain_decisions() == []


@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        ("Yes, absolutely", {"answer": False, "motivation": "Failed to parse response"}),
        ("{'motivation': \"Looks good\", 'answer': \"Yes\"}", {"answer": True, "motivation": "Looks good"}),
        ('{motivation: "Clear", answer: "Yes"}', {"answer": True, "motivation": "Clear"}),
        ('{"motivation": "Insufficient info", "answer": "No"}', {"answer": False, "motivation": "Insufficient info"}),
    ],
)
def test_judge_text_yesno_with_motivation_parsing(answer: str, expected: dict[str, Any]):
    assert Judge(ScriptedModel(answer)).text_yesno_with_motivation("r", "q") == expected


def test_quoted_keys():
    assert _quoted_keys("{'answer': 'x'}") == "{\"answer\": 'x'}"
    assert _quoted_keys('{answer: "Yes", motivation: "m"}') == '{"answer": "Yes", "motivation": "m"}'
    assert _quoted_keys('{"answer": "Yes"}') == '{"answer": "Yes"}'


def test_judge_text_yesno_motivation_type():
    judge = Judge(ScriptedModel('{"motivation": "Insufficient info", "answer": "No"}'), judge_type="motivation")
    assert judge.text_yesno("Assistant reply", "Was it compliant?") is False
    assert judge.drain_decisions() == [
        {"question": "Was it compliant?", "answer": False, "motivation": "Insufficient info"}
    ]


def test_judge_evaluate_bool():
    model = ScriptedModel("YES")
    assert Judge(model).evaluate_bool(system="S <x>", user="U <y>") is True
    assert model.prompts() == ("S <x>", "U <y>")  # custom prompts are sent as given, unescaped


def test_judge_compare_yesno():
    model = ScriptedModel("No.")
    assert Judge(model).compare_yesno("a<1>", "b & c", "Same?") is False
    system, user = model.prompts()
    assert system == SYSTEM_COMPARE_YESNO
    assert user == "<first>\na&lt;1&gt;\n</first>\n<second>\nb & c\n</second>\nSame?"


def test_judge_yesno():
    model = ScriptedModel("yes")
    assert Judge(model).yesno("Is <2> > 1?") is True
    assert model.prompts() == (SYSTEM_YESNO, "Is <2> > 1?")  # the question is not escaped


def test_judge_no_repeat():
    # True when no direct response is repeated; stops at the first one the judge says is repeated.
    model = ScriptedModel("No", "Yes", "No")
    judge = Judge(model)
    assert judge.no_repeat("reply", ["d1", "d2", "d3"]) is False
    assert len(model.requests) == 2
    system, user = model.prompts()
    assert system == SYSTEM_COMPARE_YESNO
    assert user == f"<first>\nreply\n</first>\n<second>\nd2\n</second>\n{QUESTION_FIRST_REPEATS_SECOND}"
    assert Judge(ScriptedModel("No", "no")).no_repeat("reply", ["d1", "d2"]) is True
    assert Judge(ScriptedModel()).no_repeat("reply", []) is True


def test_judge_get_text_completion():
    model = ScriptedModel("42")
    messages = [Text(role="system", content="s"), Text(role="user", content="u")]
    reply = Judge(model)._get_text_completion(messages=messages)
    assert isinstance(reply, Text) and reply.role == "assistant" and reply.content == "42"
    assert model.requests[0][0] == [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]


def test_judge_exception():
    with pytest.raises(JudgeException, match="Error getting Judge completion"):
        Judge(ScriptedModel()).text_yesno("t", "q")


def test_judge_drain_decisions():
    judge = Judge(ScriptedModel('{"motivation": "m", "answer": "Yes"}', "yes"))
    judge.text_yesno_with_motivation("t", "q1")
    judge.text_yesno("t", "q2")
    assert judge.drain_decisions() == [{"question": "q1", "answer": True, "motivation": "m"}]
    assert judge.drain_decisions() == []


def test_judge_prompts_are_the_references_byte_for_byte():
    source = REFERENCE["source"]
    assert source["repository"] == "microsoft/thinkingbox" and len(source["commit"]) == 40
    assert len(REFERENCE["prompts"]) == 7, "every prompt constant of the reference's judge.py"
    for name, text in REFERENCE["prompts"].items():
        assert getattr(shim_judge, name) == text, name


@pytest.mark.parametrize("judge_type", ["legacy", "motivation"])
def test_judge_text_yesno_sends_the_reference_prompt_of_its_judge_type(judge_type: str):
    # What the judge model receives in each mode, built from the reference's own templates.
    reply = "Yes" if judge_type == "legacy" else '{"motivation": "m", "answer": "Yes"}'
    model = ScriptedModel(reply)
    assert Judge(model, judge_type=judge_type).text_yesno("Booked <b>two</b> seats & a meal.", "Two seats?") is True
    prompts = REFERENCE["prompts"]
    user = prompts[REFERENCE["modes"]["user"]].format(
        message="Booked &lt;b&gt;two&lt;/b&gt; seats & a meal.", question="Two seats?"
    )
    assert model.prompts() == (prompts[REFERENCE["modes"][judge_type]], user)
