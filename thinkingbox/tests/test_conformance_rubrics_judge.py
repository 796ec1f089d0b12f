"""Conformance of ``thinkingbox.common.rubrics_judge`` and ``config_types.RubricConfig`` with the reference.

One test per public item. Numbers follow the reference's docs (docs/rubrics_judge.md) and its own tests
(tests/test_rubrics_judge.py); the judge is a scripted double of ``Judge.evaluate_bool``.
"""

from __future__ import annotations

import sys
import types
from typing import Any

import pytest
from tb_testpaths import THINKINGBOX

sys.path.insert(0, str(THINKINGBOX / "shim"))

from thinkingbox.common import Judge
from thinkingbox.common.config_types import RubricConfig
from thinkingbox.common.rubrics_judge import (
    SYSTEM_PROMPT_PENALTY,
    SYSTEM_PROMPT_POSITIVE,
    USER_PROMPT_TPL,
    EvaluationResult,
    RubricJudge,
    RubricScore,
)


class RatingJudge:
    """Answers ``evaluate_bool`` from a script and records its prompts."""

    def __init__(self, *ratings: bool):
        self.ratings = list(ratings)
        self.calls: list[dict[str, str]] = []

    def evaluate_bool(self, *, system: str, user: str) -> bool:
        self.calls.append({"system": system, "user": user})
        return self.ratings.pop(0)


def x_double() -> Any:
    return types.SimpleNamespace(metadata={})


def evaluate(ratings: list[bool], rubrics: list[RubricConfig], **kwargs: Any) -> EvaluationResult:
    return RubricJudge(judge=RatingJudge(*ratings), x=x_double()).evaluate("Sample text", rubrics, **kwargs)


def test_rubric_config():
    c = RubricConfig(criterion="c", weight=2)
    assert (c.criterion, c.weight, c.is_penalty, c.penalty_type) == ("c", 2.0, False, "deduction")
    assert isinstance(c.weight, float)  # an int weight becomes a float, as the reference's model coerces it
    with pytest.raises(ValueError):
        RubricConfig(criterion="c", weight=1.5, is_penalty=True, penalty_type="multiplicative")
    with pytest.raises(ValueError):
        RubricConfig(criterion="c", weight=-1)
    with pytest.raises(ValueError):
        RubricConfig(criterion="c", weight=1, penalty_type="additive")
    assert RubricJudge.Config is RubricConfig


def test_rubric_judge_evaluate_documented_example():
    # docs/rubrics_judge.md: 50+30 earned of 100, a 15-point deduction, a x0.5 multiplier -> 0.325, below 0.70.
    rubrics = [
        RubricConfig(criterion="Addresses the question", weight=50),
        RubricConfig(criterion="Professional tone", weight=30),
        RubricConfig(criterion="All requested information", weight=20),
        RubricConfig(criterion="Factual errors", weight=15, is_penalty=True, penalty_type="deduction"),
        RubricConfig(criterion="Offensive content", weight=0.5, is_penalty=True, penalty_type="multiplicative"),
    ]
    result = evaluate([True, True, False, True, True], rubrics, global_threshold=0.70)
    assert result.reward == pytest.approx(0.325) and result.passed is False
    assert [s.rating for s in result.scores] == [1, 1, 0, 1, 1]
    with pytest.raises(AssertionError, match="Reward 0.325 is below threshold 0.700"):
        evaluate([True, True, False, True, True], rubrics, global_threshold=0.70, throw_on_failure=True)


def test_rubric_judge_evaluate_prompts():
    judge = RatingJudge(True, False)
    rubrics = [RubricConfig(criterion="Good?", weight=1), RubricConfig(criterion="Bad", weight=1, is_penalty=True)]
    RubricJudge(judge=judge, x=x_double()).evaluate("The <reply>", rubrics)
    user = USER_PROMPT_TPL.format(response="The <reply>", criterion="Good?")
    assert judge.calls[0] == {"system": SYSTEM_PROMPT_POSITIVE, "user": user}
    assert user == "<response>\nThe <reply>\n</response>\n\n<criterion>Good?</criterion>\n\nAnswer YES or NO."
    assert judge.calls[1]["system"] == SYSTEM_PROMPT_PENALTY


def test_rubric_judge_evaluate_errors():
    judge = RubricJudge(judge=RatingJudge(), x=x_double())
    with pytest.raises(ValueError, match="Rubrics list cannot be empty"):
        judge.evaluate("text", [])
    with pytest.raises(ValueError, match="Response cannot be empty"):
        judge.evaluate("  ", [RubricConfig(criterion="c", weight=1)])
    with pytest.raises(ValueError, match="max_workers must be a positive integer"):
        RubricJudge(judge=RatingJudge(), x=x_double(), max_workers=0)


def test_rubric_judge_evaluate_writes_metadata():
    x = x_double()
    judge = RubricJudge(judge=RatingJudge(False), x=x)
    with pytest.raises(AssertionError):
        judge.evaluate("t", [RubricConfig(criterion="A", weight=10)], global_threshold=0.5, throw_on_failure=True)
    assert x.metadata == {"rubric_reward": 0.0, "rubric_scores": [{"criterion": "A", "rating": 0, "score": 0.0}]}


def test_rubric_judge_compute_reward():
    judge = RubricJudge(judge=RatingJudge(), x=x_double())
    scores = [
        RubricScore(criterion="q", weight=10, rating=1, score=10),
        RubricScore(criterion="p", weight=3, rating=1, score=3, is_penalty=True),
        RubricScore(criterion="m", weight=0.5, rating=1, score=0.5, is_penalty=True, penalty_type="multiplicative"),
    ]
    assert judge.compute_reward(scores) == pytest.approx(0.35)
    assert judge.compute_reward([RubricScore(criterion="p", weight=3, rating=1, score=3, is_penalty=True)]) == 0.0
    assert RubricJudge(judge=RatingJudge(), x=x_double(), reward_fn=lambda s: 1.5).compute_reward(scores) == 1.0
    assert RubricJudge(judge=RatingJudge(), x=x_double(), reward_fn=lambda s: -1).compute_reward(scores) == 0.0
    with pytest.raises(ValueError, match="could not convert string to float"):
        RubricJudge(judge=RatingJudge(), x=x_double(), reward_fn=lambda s: "good").compute_reward(scores)


def test_rubric_judge_check_threshold():
    judge = RubricJudge(judge=RatingJudge(), x=x_double())
    assert judge.check_threshold(0.7, 0.7) is True and judge.check_threshold(0.5, 0.7) is False
    assert judge.check_threshold(0.8, 0.7, throw_on_failure=True) is True
    with pytest.raises(AssertionError, match="Reward 0.500 is below threshold 0.700"):
        judge.check_threshold(0.5, 0.7, throw_on_failure=True)


def test_evaluation_result_assert_passed():
    assert evaluate([True], [RubricConfig(criterion="A", weight=1)]).assert_passed() == 1.0
    with pytest.raises(AssertionError, match="below threshold"):
        evaluate([False], [RubricConfig(criterion="A", weight=1)]).assert_passed()


def test_evaluation_result_message():
    result = evaluate(
        [True, True, False],
        [
            RubricConfig(criterion="A", weight=10),
            RubricConfig(criterion="P", weight=2, is_penalty=True),
            RubricConfig(criterion="M", weight=0.5, is_penalty=True, penalty_type="multiplicative"),
        ],
        global_threshold=0.5,
    )
    assert result.message == (
        "Rubric Evaluation Results:\n"
        "A | Met: YES | Weight: 10.0 | Effect: +10.0 pts\n"
        "[PENALTY: deduction] P | Triggered: YES | Weight: 2.0 | Effect: -2.0 pts\n"
        "[PENALTY: multiplicative] M | Triggered: NO | Magnitude: 0.5 | Factor: \u00d71.00\n"
        "Reward: 0.800 | Threshold: 0.500 | PASSED"
    )


def test_rubric_judge_with_the_real_judge():
    """The framework's own example (dataset/test_case/cloud_drive.py) through our Judge: no TypeError."""
    asked: list[list[dict[str, str]]] = []

    def model(messages: list[dict[str, str]], settings: dict[str, Any]) -> str:
        asked.append(messages)
        return "YES" if "confirms" in messages[1]["content"] or "mentions" in messages[1]["content"] else "NO"

    x = x_double()
    rubric_judge = RubricJudge(judge=Judge(model), x=x, max_workers=2)
    rubrics = [
        rubric_judge.Config(criterion="The message clearly confirms that file.txt was modified", weight=50.0),
        rubric_judge.Config(criterion="The message mentions that 'some more text' was appended", weight=50.0),
        rubric_judge.Config(
            criterion="The message claims the file was deleted", weight=10.0, is_penalty=True, penalty_type="deduction"
        ),
    ]
    result = rubric_judge.evaluate(response="Appended.", rubrics=rubrics, global_threshold=0.5, throw_on_failure=True)
    assert result.reward == 1.0 and x.metadata["rubric_reward"] == 1.0
    assert [m[0]["content"] for m in asked] == [SYSTEM_PROMPT_POSITIVE] * 2 + [SYSTEM_PROMPT_PENALTY]
