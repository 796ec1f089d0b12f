"""Where the learner's current command is, for the control endpoint's /health (read from its HTTP thread).

The GPU worker polls it while a step runs: a micro-batch counter that stops moving means a hung collective or a
stuck device, which no process exit or HTTP error would ever report.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Progress:
    step: int | None = None
    phase: str = "idle"
    micro_batch: int = 0
    of: int = 0
    changed: float = field(default_factory=time.monotonic)

    def mark(self, **fields: Any) -> None:
        """Sets the given fields and restarts the clock (each field is one atomic attribute write)."""
        for name, value in fields.items():
            setattr(self, name, value)
        self.changed = time.monotonic()

    def report(self) -> dict[str, Any]:
        return {
            "step": self.step,
            "phase": self.phase,
            "micro_batch": self.micro_batch,
            "of": self.of,
            "seconds_since_change": round(time.monotonic() - self.changed, 1),
        }
