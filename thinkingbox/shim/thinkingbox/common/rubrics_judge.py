"""``RubricJudge``: grades a message against a list of yes/no rubric questions with a ``Judge``."""

from __future__ import annotations

from dataclasses import dataclass

from thinkingbox.common import Judge


@dataclass
class RubricResult:
    rubric: str
    passed: bool


class RubricJudge:
    """Asks the judge each rubric question about the message; the message passes when every answer is yes."""

    def __init__(self, judge: Judge):
        self.judge = judge

    def evaluate(self, text: str, rubrics: list[str]) -> list[RubricResult]:
        return [RubricResult(r, self.judge.text_yesno(text, r)) for r in rubrics]

    def passes(self, text: str, rubrics: list[str]) -> bool:
        return all(r.passed for r in self.evaluate(text, rubrics))
