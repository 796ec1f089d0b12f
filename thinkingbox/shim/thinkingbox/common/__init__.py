"""``thinkingbox.common`` as test files use it: ``TestContext`` (the ``x`` of a test) and ``Judge``.

Written by us from the documented behaviour of the reference framework, not copied from it. The judge's
model calls are not made here: they go to the episode runner over the grading protocol (a ``JudgeBackend``),
which answers with our judge client, so test code never holds an API key or a network connection.
"""

from __future__ import annotations

import html
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from thinkingbox.common.chat_types import Text

__all__ = ["Judge", "JudgeError", "TestContext", "Text", "yes_no_answer"]

JUDGE_SYSTEM_PROMPT = (
    "You are a judge, your task is to read the contents of a message and answer a question about the message. "
    "A message will be presented between <message> and </message> tags, and a question will be asked afterwards. "
    "Answer the question with a single word: Yes or No."
)


def judge_user_message(text: str, question: str) -> str:
    """The user turn of a yes/no judgement: the message (``<`` and ``>`` escaped) between tags, then the question."""
    escaped = html.escape(text, quote=False)
    return f"<message>\n{escaped}\n</message>\n{question}"


def yes_no_answer(answer: str) -> bool:
    """Yes iff the first or the last word is "yes" once ``. , ; :`` and newlines are spaces (case-insensitive)."""
    words = re.sub(r"[.,;:\r\n]", " ", answer).split()
    return bool(words) and (words[0].lower() == "yes" or words[-1].lower() == "yes")


class JudgeError(Exception):
    """The judge could not answer: a system error of the test, never a fail."""


# A backend takes the chat messages and the completion settings and returns the answer text.
JudgeBackend = Callable[[list[dict[str, str]], dict[str, Any]], str]


class Judge:
    """LLM-as-judge helpers test code calls; every call is a chat completion through the backend."""

    def __init__(self, backend: JudgeBackend):
        self._backend = backend

    def _get_text_completion(
        self, messages: list[Text], temperature: float = 0.0, max_completion_tokens: int = 1024
    ) -> Text:
        payload = [{"role": m.role, "content": m.content} for m in messages]
        answer = self._backend(payload, {"temperature": temperature, "max_completion_tokens": max_completion_tokens})
        if not isinstance(answer, str):
            raise JudgeError("the judge returned no text")
        return Text(role="assistant", content=answer)

    def text_yesno(self, text: str, question: str) -> bool:
        """Asks the judge a yes/no question about ``text``, at temperature 0 with at most 128 tokens."""
        reply = self._get_text_completion(
            [
                Text(role="system", content=JUDGE_SYSTEM_PROMPT),
                Text(role="user", content=judge_user_message(str(text), question)),
            ],
            temperature=0.0,
            max_completion_tokens=128,
        )
        return yes_no_answer(reply.content)

    def no_repeat(self, text: str, direct_responses: list[str]) -> bool:
        """True when the message does not repeat any direct tool response verbatim (a question to the judge each)."""
        return all(
            self.text_yesno(text, f"Does the message avoid repeating this text word for word?\n{r}")
            for r in direct_responses
        )


@dataclass
class TestContext:
    """What a test function sees as ``x`` once the episode is over."""

    response: str = ""
    effects: dict[str, Any] = field(default_factory=dict)
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    messages: list[Any] = field(default_factory=list)
    init_result: dict[str, Any] = field(default_factory=dict)
    session_id: str = ""
    metadata: dict[str, Any] = field(default_factory=dict)
    tool_direct_responses: list[str] = field(default_factory=list)

    # pytest would otherwise try to collect this class from test files that import it.
    __test__ = False
