"""Chat messages, tool calls and ``TestContext`` as test code sees them (``thinkingbox.common.chat_types``).

Written by us from the reference framework's documented behaviour, not copied from it. Plain dataclasses keep
the shim free of dependencies; like the reference's models they accept their serialised form (dicts carrying a
``T`` discriminator) wherever a typed value is expected, so ``TestContext(**json)`` gives typed messages.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any, ClassVar, Literal

__all__ = [
    "Message",
    "MessageT",
    "ParallelToolCall",
    "TestContext",
    "Text",
    "TextMessageTag",
    "ToolCall",
    "ToolCallResponse",
    "ToolResponse",
    "get_conversation_transcript",
    "message_from_dict",
]

TextMessageTag = Literal["think", "text", "direct"]
TEXT_ROLES = ("system", "user", "assistant")
NULL_SESSION_ID = "00000000-0000-0000-0000-000000000000"


def new_call_id() -> str:
    return "call_" + uuid.uuid4().hex


class ItemAccess:
    """``obj["name"]`` reads attribute ``name``: test code written for our earlier dict-shaped ``x.tool_calls``
    keeps working (a superset of the reference, whose models have attributes only)."""

    def __getitem__(self, key: str) -> Any:
        if not isinstance(key, str) or key.startswith("_") or not hasattr(self, key):
            raise KeyError(key)
        return getattr(self, key)

    def get(self, key: str, default: Any = None) -> Any:
        try:
            return self[key]
        except KeyError:
            return default


@dataclass(kw_only=True)
class Message(ItemAccess):
    """Base of every conversation message; ``metadata`` carries tags such as ``tag``, ``is_dummy``, ``error``."""

    T: ClassVar[str] = "Message"
    metadata: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"T": self.T, **asdict(self)}


@dataclass(kw_only=True)
class Text(Message):
    """A text message. Assistant text is tagged ``think`` (hidden reasoning), ``text`` or ``direct`` (a tool's
    direct response shown to the user) in ``metadata["tag"]``; no tag means ``text``."""

    T: ClassVar[str] = "Text"
    role: Literal["system", "user", "assistant"]
    content: str

    def __post_init__(self) -> None:
        if self.role not in TEXT_ROLES:
            raise ValueError(f"Text.role must be one of {TEXT_ROLES}, not {self.role!r}")

    @property
    def tag(self) -> TextMessageTag:
        return self.metadata.get("tag", "text")

    @property
    def is_visible(self) -> bool:
        return self.tag != "think"


@dataclass(kw_only=True)
class ToolCall(Message):
    """One call the assistant made; ``id`` pairs it with its ``ToolResponse``."""

    T: ClassVar[str] = "ToolCall"
    name: str
    arguments: dict[str, Any]
    id: str = field(default_factory=new_call_id)


@dataclass(kw_only=True)
class ParallelToolCall(Message):
    """The tool calls of one assistant message."""

    T: ClassVar[str] = "ParallelToolCall"
    tool_calls: list[ToolCall]

    def __post_init__(self) -> None:
        self.tool_calls = [as_type(ToolCall, c) for c in self.tool_calls]


@dataclass(kw_only=True)
class ToolResponse(Message):
    """What a tool answered (``content``), paired with its call by ``id``."""

    T: ClassVar[str] = "ToolResponse"
    name: str
    content: str
    id: str = field(default_factory=new_call_id)


MessageT = Text | ToolCall | ParallelToolCall | ToolResponse
MESSAGE_TYPES: dict[str, type[Message]] = {t.T: t for t in (Text, ToolCall, ParallelToolCall, ToolResponse)}


def as_type(cls: type[Any], value: Any) -> Any:
    """``value`` if it already is a ``cls``, else ``cls`` built from its dict (its ``T`` must agree)."""
    if isinstance(value, cls):
        return value
    if not isinstance(value, dict):
        raise TypeError(f"expected {cls.__name__} or a dict, not {type(value).__name__}")
    fields = dict(value)
    kind = fields.pop("T", getattr(cls, "T", None))
    if kind != getattr(cls, "T", kind):
        raise ValueError(f"expected T={cls.T!r}, not {kind!r}")
    return cls(**fields)


def message_from_dict(value: Any) -> MessageT:
    """A typed message from its serialised form, chosen by its ``T``."""
    if isinstance(value, Message):
        return value  # type: ignore[return-value]
    if not isinstance(value, dict):
        raise TypeError(f"a message is an object, not {type(value).__name__}")
    cls = MESSAGE_TYPES.get(value.get("T", ""))
    if cls is None:
        raise ValueError(f"unknown message type T={value.get('T')!r} (expected one of {sorted(MESSAGE_TYPES)})")
    return as_type(cls, value)


@dataclass(kw_only=True)
class ToolCallResponse(ItemAccess):
    """A tool call with the response it got (an end-turn tool's response is empty)."""

    tool_call: ToolCall
    tool_response: ToolResponse

    def __post_init__(self) -> None:
        self.tool_call = as_type(ToolCall, self.tool_call)
        self.tool_response = as_type(ToolResponse, self.tool_response)


def get_conversation_transcript(
    messages: list[Any], limit: int = 0, content_transform_fn: Callable[[str], str] | None = None
) -> str:
    """The user-visible conversation as "User: ..." / "Assistant: ..." paragraphs.

    Only user and assistant ``Text`` messages count; hidden reasoning and dummy messages are left out. With
    ``limit`` > 0 the transcript is the tail that holds the last ``limit`` assistant messages, starting at the
    earliest of them.
    """
    if limit < 0:
        raise ValueError("limit must be >= 0")
    kept: list[str] = []
    assistant_seen = 0
    for m in reversed(messages):
        if not isinstance(m, Text) or m.role not in ("user", "assistant"):
            continue
        if not m.is_visible or m.metadata.get("is_dummy"):
            continue
        content = m.content if content_transform_fn is None else content_transform_fn(m.content)
        kept.append(f"{'Assistant' if m.role == 'assistant' else 'User'}: {content}")
        if m.role == "assistant":
            assistant_seen += 1
            if limit and assistant_seen >= limit:
                break
    return "\n\n".join(reversed(kept))


@dataclass(kw_only=True)
class TestContext:
    """What a test function sees as ``x`` once the episode is over."""

    # pytest would otherwise try to collect this class from test files that import it.
    __test__: ClassVar[bool] = False

    # The last visible assistant text.
    response: str = ""
    # The direct responses of tools, as shown to the user, in order.
    tool_direct_responses: list[str] = field(default_factory=list)
    # Server name -> what its `__reserved__geteffects` returned (result/golden hashes, diff, rubrics...).
    effects: dict[str, Any] = field(default_factory=dict)
    # Every tool call with its response, in order.
    tool_calls: list[ToolCallResponse] = field(default_factory=list)
    messages: list[MessageT] = field(default_factory=list)
    # Server name -> what its `__reserved__init` returned, less the status.
    init_result: dict[str, Any] = field(default_factory=dict)
    session_id: str = NULL_SESSION_ID
    # Free for test code and fixtures to write (RubricJudge writes rubric_reward and rubric_scores).
    metadata: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.tool_calls = [as_type(ToolCallResponse, c) for c in self.tool_calls]
        self.messages = [message_from_dict(m) for m in self.messages]

    def transcript(self, limit: int = 0) -> str:
        return get_conversation_transcript(self.messages, limit=limit)

    def query(self) -> str:
        """The first real user message: not a dummy, not hidden reasoning."""
        for m in self.messages:
            if isinstance(m, Text) and m.role == "user" and not m.metadata.get("is_dummy") and m.tag != "think":
                return m.content
        raise ValueError("No user message found in messages")
