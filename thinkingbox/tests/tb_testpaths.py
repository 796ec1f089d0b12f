"""Paths shared by the thinkingbox tests (a uniquely named module: gpu-learner/tests has its own conftest)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

THINKINGBOX = Path(__file__).resolve().parent.parent
REPO = THINKINGBOX.parent
FIXTURES = Path(__file__).resolve().parent / "fixtures"
DATASET = REPO / "examples" / "thinkingbox-fixture"

if str(THINKINGBOX) not in sys.path:
    sys.path.insert(0, str(THINKINGBOX))


def tbvenv_python() -> Path | None:
    """The dataset tool-server venv's python (scripts/setup.sh records the venv in .tools/thinkingbox-venv)."""
    marker = REPO / ".tools" / "thinkingbox-venv"
    if not marker.is_file():
        return None
    python = Path(marker.read_text().strip()) / "bin" / "python"
    return python if python.is_file() and os.access(python, os.X_OK) else None
