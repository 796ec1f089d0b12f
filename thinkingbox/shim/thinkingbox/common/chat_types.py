"""Chat message types test code builds for ``Judge._get_text_completion`` (written by us from the format doc)."""

from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass
class Text:
    """One text message of a chat completion request or answer."""

    role: str
    content: str

    def to_dict(self) -> dict[str, str]:
        return asdict(self)
