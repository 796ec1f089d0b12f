"""Configuration types test code uses (``thinkingbox.common.config_types``): ``RubricConfig``.

Written by us from the reference framework's documented behaviour (its rubrics judge documentation), not copied from it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

__all__ = ["TEST_CASE_FN_NAME", "RubricConfig"]

# The name the reference's test loader binds the selected test function to.
TEST_CASE_FN_NAME = "__tb_test_fn"

PENALTY_TYPES = ("deduction", "multiplicative")


@dataclass(kw_only=True)
class RubricConfig:
    """One rubric criterion, rated yes/no by the judge.

    ``weight``: the points a positive rubric earns, the points a deduction penalty takes away, or the fraction a
    multiplicative penalty scales the reward down by (in [0, 1]). Invalid values raise ``ValueError`` (the
    reference raises pydantic's ``ValidationError``, itself a ``ValueError``).
    """

    criterion: str
    weight: float
    is_penalty: bool = False
    penalty_type: Literal["deduction", "multiplicative"] = "deduction"

    def __post_init__(self) -> None:
        if not isinstance(self.criterion, str):
            raise ValueError(f"criterion must be a string, not {type(self.criterion).__name__}")
        if isinstance(self.weight, bool) or not isinstance(self.weight, (int, float)):
            raise ValueError(f"weight must be a number, not {self.weight!r}")
        self.weight = float(self.weight)
        if not self.weight >= 0:
            raise ValueError(f"weight must be >= 0, not {self.weight}")
        if self.penalty_type not in PENALTY_TYPES:
            raise ValueError(f"penalty_type must be one of {PENALTY_TYPES}, not {self.penalty_type!r}")
        if self.is_penalty and self.penalty_type == "multiplicative" and self.weight > 1:
            raise ValueError("multiplicative penalty weight must be in [0.0, 1.0]")
