"""Conformance of ``thinkingbox.common.graders`` (reward helpers test code may import) with the reference."""

from __future__ import annotations

import sys

import pytest
from tb_testpaths import THINKINGBOX

sys.path.insert(0, str(THINKINGBOX / "shim"))

from thinkingbox.common.graders import average_reward, match_score


def test_average_reward():
    assert average_reward({}) == 0.0
    assert average_reward({"a": 1.0, "b": 0.0}) == 0.5
    assert average_reward({"a": 1.0, "b": 0.0}, {"a": 3.0, "b": 1.0}) == 0.75
    assert average_reward({"a": 1.0, "b": 0.0}, {"a": 1.0, "c": 5.0}) == 1.0  # only keys in both count
    assert average_reward({"a": 1.0}, {"c": 1.0}) == 0.0


def test_match_score():
    assert match_score({"a": 1}, {"a": 1}) == 1.0 and match_score([1], [2]) == 0.0
    assert match_score({"a": 1, "b": 2}, {"a": 1, "b": 3}, partial=True) == 0.5
    with pytest.raises(ValueError, match="Cannot compare different types"):
        match_score(1, "1")
    with pytest.raises(ValueError, match="only supported for dictionaries"):
        match_score([1], [1], partial=True)
    with pytest.raises(AssertionError, match="Critical partial match failed. Score: 0.5"):
        match_score({"a": 1, "b": 2}, {"a": 1, "b": 3}, partial=True, is_critical=True)
    with pytest.raises(AssertionError, match="Critical exact match failed"):
        match_score(1, 2, is_critical=True)
