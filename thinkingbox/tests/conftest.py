"""Fixtures for the thinkingbox tests; tb_testpaths makes `tbt_thinkingbox` importable without installing it."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from tb_testpaths import tbvenv_python


@pytest.fixture(scope="session")
def tb_python() -> Path:
    python = tbvenv_python()
    if python is None:
        pytest.skip(
            "the thinkingbox tool-server venv is missing: run scripts/setup.sh (it records .tools/thinkingbox-venv)"
        )
    return python
