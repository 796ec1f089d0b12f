"""``Judge``: the LLM-as-judge helpers test code calls (``thinkingbox.common.judge``).

Written by us from the reference framework's documented behaviour, not copied from it. The prompts below are
the reference's texts (they are what the judge model sees, so grading depends on them word for word). The
model calls are not made here: they go to a ``JudgeBackend``, which the test runner connects to the episode
runner over the grading protocol, so test code never holds an API key or a network connection.
"""

from __future__ import annotations

import contextvars
import json
import re
from collections.abc import Callable
from typing import Any

from thinkingbox.common.chat_types import Text

__all__ = [
    "QUESTION_FIRST_REPEATS_SECOND",
    "SYSTEM_COMPARE_YESNO",
    "SYSTEM_TEXT_YESNO",
    "SYSTEM_TEXT_YESNO_MOTIVATION",
    "SYSTEM_YESNO",
    "USER_COMPARE_YESNO",
    "USER_TEXT_YESNO",
    "Judge",
    "JudgeBackend",
    "JudgeException",
    "safe_tag_encode",
]

SYSTEM_YESNO = """\
You are a judge, your task is to answer a question.
Answer with a single word: Yes or No.
"""

SYSTEM_TEXT_YESNO = """\
You are a judge, your task is to read the contents of a message and answer a question about the message.
A message will be presented between <message> and </message> tags, and a question will be asked afterwards.
Answer the question with a single word: Yes or No."""

SYSTEM_TEXT_YESNO_MOTIVATION = """\
You are a judge, your task is to read the contents of a message and answer a question about the message.
The message may contain a brief interaction between the assistant and the user. When answering, consider
only the assistant responses across the conversation.
A message will be presented between <message> and </message> tags, and a question will be asked afterwards.
Answer the question as follows:

{
    "motivation": a brief explanation of your answer (1-2 sentences) in quotes,
    "answer": a single word: Yes or No in quotes.
}
"""

USER_TEXT_YESNO = """\
<message>
{message}
</message>
{question}"""

SYSTEM_COMPARE_YESNO = """\
You are a judge, your task is to read the contents of two messages and answer a question about the messages.
The two messages will be presented as follows:
<first>
content of the first message
</first>
<second>
content of the second message
</second>
A question will be asked afterwards.
Answer the question with a single word: Yes or No."""

USER_COMPARE_YESNO = """\
<first>
{first}
</first>
<second>
{second}
</second>
{question}"""

QUESTION_FIRST_REPEATS_SECOND = """\
Does the content of the first message repeat the content of the second message?
"""

# Completion settings we send with each kind of call (the reference takes them from its judge model's config).
YESNO_SETTINGS: dict[str, Any] = {"temperature": 0.0, "max_completion_tokens": 128}
MOTIVATION_SETTINGS: dict[str, Any] = {"temperature": 0.0, "max_completion_tokens": 512}
COMPLETION_SETTINGS: dict[str, Any] = {"temperature": 0.0, "max_completion_tokens": 1024}

# A backend takes the chat messages and the completion settings and returns the answer text. Settings may carry
# "question": what the call decides, for the caller's records.
JudgeBackend = Callable[[list[dict[str, str]], dict[str, Any]], str]
# Told of every yes/no decision: (question, yes, motivation or None).
DecisionListener = Callable[[str, bool, "str | None"], None]

# What an `evaluate_bool` call decides, when its caller knows better than the prompt (RubricJudge: the criterion).
decision_label: contextvars.ContextVar[str | None] = contextvars.ContextVar("decision_label", default=None)


class JudgeException(Exception):
    """The judge gave no answer: the test errs (a system error), it does not fail."""


def safe_tag_encode(text: str) -> str:
    """``<`` and ``>`` as ``&lt;`` ``&gt;`` so inserted text cannot open or close the prompt's tags (``&`` stays)."""
    return text.replace("<", "&lt;").replace(">", "&gt;")


def _parse_yesno(text: str) -> bool:
    """Yes iff the first or the last word is "yes" once ``. , ; :`` and newlines are spaces (any case)."""
    words = re.sub(r"[.,;:\n]", " ", text).split()
    return bool(words) and "yes" in (words[0].lower(), words[-1].lower())


def _quoted_keys(raw: str) -> str:
    """JSON double quotes around the keys ``answer`` and ``motivation`` when a model wrote them single-quoted or bare
    (bare only at the start, after ``{`` or after ``,``, so values are left alone)."""
    for key in ("answer", "motivation"):
        raw = re.sub(rf"'({key})'\s*:", r'"\1":', raw)
        raw = re.sub(rf"(?:(?<=\{{)|(?<=,)|^)(\s*)({key})(\s*:)", r'\1"\2"\3', raw)
    return raw


class Judge:
    """LLM-as-judge helpers; every call is one chat completion through the backend.

    ``judge_type`` "legacy" answers ``text_yesno`` with a bare Yes/No prompt; "motivation" asks for a JSON
    answer with a short motivation and records it (``drain_decisions``).
    """

    def __init__(self, backend: JudgeBackend, judge_type: str = "legacy", on_decision: DecisionListener | None = None):
        if judge_type not in ("legacy", "motivation"):
            raise ValueError(f"Invalid judge_type: {judge_type}")
        self._backend = backend
        self.judge_type = judge_type
        self._on_decision = on_decision
        self._decisions: list[dict[str, Any]] = []

    def _completion(self, messages: list[Text], settings: dict[str, Any]) -> Text:
        payload = [{"role": m.role, "content": m.content} for m in messages]
        try:
            answer = self._backend(payload, settings)
        except JudgeException:
            raise
        except Exception as e:
            raise JudgeException(f"Error getting Judge completion: {e}") from e
        return Text(role="assistant", content=answer if isinstance(answer, str) else "")

    def _get_text_completion(self, messages: list[Text], **settings: Any) -> Text:
        """One completion of the caller's own messages; the answer is an assistant ``Text``."""
        return self._completion(messages, {**COMPLETION_SETTINGS, **settings})

    def _decided(self, question: str, yes: bool, motivation: str | None = None) -> bool:
        if self._on_decision is not None:
            self._on_decision(question, yes, motivation)
        return yes

    def _ask(self, system: str, user: str, question: str, settings: dict[str, Any] = YESNO_SETTINGS) -> str:
        messages = [Text(role="system", content=system), Text(role="user", content=user)]
        return self._completion(messages, {**settings, "question": question}).content

    def _grade(
        self,
        system_prompt: str,
        user_prompt: str,
        format_dict: dict[str, Any],
        encode_keys: tuple[str, ...] = ("message", "first", "second"),
    ) -> str:
        """The model's answer to ``user_prompt`` filled from ``format_dict`` (string values of ``encode_keys``
        tag-encoded first)."""
        values = {
            k: safe_tag_encode(v) if k in encode_keys and isinstance(v, str) else v for k, v in format_dict.items()
        }
        question = str(format_dict.get("question", user_prompt))
        return self._ask(system_prompt, user_prompt.format(**values), question)

    def evaluate_bool(self, system: str, user: str) -> bool:
        """A yes/no answer to the caller's own system and user prompts (sent as given)."""
        question = decision_label.get() or user
        return self._decided(question, _parse_yesno(self._ask(system, user, question)))

    def text_yesno_legacy(self, text: str, question: str) -> bool:
        user = USER_TEXT_YESNO.format(message=safe_tag_encode(text), question=question)
        return self._decided(question, _parse_yesno(self._ask(SYSTEM_TEXT_YESNO, user, question)))

    def text_yesno_with_motivation(self, text: str, question: str) -> dict[str, Any]:
        """``{"answer": bool, "motivation": str}`` from the model's JSON; an answer that is not JSON is a no."""
        user = USER_TEXT_YESNO.format(message=safe_tag_encode(text), question=question)
        raw = self._ask(SYSTEM_TEXT_YESNO_MOTIVATION, user, question, MOTIVATION_SETTINGS)
        try:
            answer = json.loads(_quoted_keys(raw))
            answer["answer"] = _parse_yesno(answer["answer"])
        except json.JSONDecodeError:
            # A reply that breaks the JSON contract cannot be trusted either way.
            answer = {"answer": False, "motivation": "Failed to parse response"}
        decision = {
            "question": question,
            "answer": bool(answer.get("answer")),
            "motivation": answer.get("motivation", ""),
        }
        self._decisions.append(decision)
        self._decided(question, decision["answer"], str(decision["motivation"]))
        return answer

    def text_yesno(self, text: str, question: str) -> bool:
        """Does ``text`` (the assistant's message) answer yes to ``question``? As the judge type says."""
        if self.judge_type == "legacy":
            return self.text_yesno_legacy(text, question)
        return self.text_yesno_with_motivation(text, question)["answer"]

    def compare_yesno(self, first: str, second: str, question: str) -> bool:
        """A yes/no question about two messages, shown between ``<first>`` and ``<second>`` tags."""
        values = {"first": first, "second": second, "question": question}
        answer = self._grade(SYSTEM_COMPARE_YESNO, USER_COMPARE_YESNO, values)
        return self._decided(question, _parse_yesno(answer))

    def yesno(self, question: str) -> bool:
        """A yes/no question on its own (not escaped)."""
        answer = self._grade(SYSTEM_YESNO, "{question}", {"question": question}, encode_keys=())
        return self._decided(question, _parse_yesno(answer))

    def no_repeat(self, first: str, second_list: list[str]) -> bool:
        """True unless ``first`` repeats one of ``second_list`` (asked one at a time; stops at the first yes)."""
        return not any(self.compare_yesno(first, second, QUESTION_FIRST_REPEATS_SECOND) for second in second_list)

    def drain_decisions(self) -> list[dict[str, Any]]:
        """The motivated decisions recorded so far, which are then forgotten."""
        decisions, self._decisions = self._decisions, []
        return decisions
