"""Reward helpers test code may import (``thinkingbox.common.graders``).

Written by us from the reference framework's documented behaviour, not copied from it.
"""

from __future__ import annotations

from typing import Any

__all__ = ["average_reward", "match_score"]


def average_reward(rewards: dict[str, float], weights: dict[str, float] | None = None) -> float:
    """The mean of ``rewards``; with ``weights``, the weighted mean over the names present in both (0 if none)."""
    if not rewards:
        return 0.0
    if not weights:
        return sum(rewards.values()) / len(rewards)
    names = rewards.keys() & weights.keys()
    if not names:
        return 0.0
    return sum(rewards[n] * weights[n] for n in names) / sum(weights[n] for n in names)


def match_score(result: Any, expected: Any, partial: bool = False, is_critical: bool = False) -> float:
    """1.0 when ``result == expected``, else 0.0; ``partial`` (dicts only) scores the share of expected keys that
    match. ``is_critical`` turns anything short of a full match into an ``AssertionError`` (a test failure)."""
    if type(result) is not type(expected):
        raise ValueError(f"Cannot compare different types: {type(result)} vs {type(expected)}")
    if partial:
        if not isinstance(expected, dict):
            raise ValueError("Partial matching is only supported for dictionaries.")
        score = sum(1 for k, v in expected.items() if k in result and result[k] == v) / len(expected)
        if is_critical and score < 1.0:
            raise AssertionError(f"Critical partial match failed. Score: {score}")
        return score
    if result != expected:
        if is_critical:
            raise AssertionError(f"Critical exact match failed. Expected: {expected}, Got: {result}")
        return 0.0
    return 1.0
