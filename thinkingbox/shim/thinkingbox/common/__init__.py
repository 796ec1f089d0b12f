"""``thinkingbox.common`` as test files use it: ``TestContext`` (the ``x`` of a test) and ``Judge``.

Written by us from the documented behaviour of the reference framework, not copied from it; one module per
reference module test code imports (chat_types, judge, rubrics_judge, config_types, graders). The judge's model
calls are not made here: they go to the episode runner over the grading protocol (a ``JudgeBackend``), which
answers with our judge client, so test code never holds an API key or a network connection.
"""

from __future__ import annotations

from thinkingbox.common.chat_types import TestContext, Text
from thinkingbox.common.judge import Judge, JudgeException

__all__ = ["Judge", "JudgeException", "TestContext", "Text"]
