"""Conformance of ``thinkingbox.common.chat_types`` (messages, tool calls, ``TestContext``) with the reference.

One test per public item. The conversation pattern and expected transcripts follow the reference's own tests
(tests/test_chat_types.py); the serialised forms are what the reference's models dump to JSON.
"""

from __future__ import annotations

import sys

import pytest
from tb_testpaths import THINKINGBOX

sys.path.insert(0, str(THINKINGBOX / "shim"))

from thinkingbox.common import TestContext
from thinkingbox.common.chat_types import (
    Message,
    ParallelToolCall,
    Text,
    ToolCall,
    ToolCallResponse,
    ToolResponse,
    get_conversation_transcript,
    message_from_dict,
)


def conversation(turns: int) -> list[Message]:
    messages: list[Message] = [Text(role="system", content="You are a helpful assistant")]
    for i in range(1, turns + 1):
        messages += [
            Text(role="user", content=f"User message {i}"),
            Text(role="assistant", content=f"Thinking about message {i}", metadata={"tag": "think"}),
            ParallelToolCall(tool_calls=[ToolCall(name=f"tool_{i}", arguments={"arg": f"value_{i}"})]),
            ToolResponse(name=f"tool_{i}", content=f"Tool result {i}"),
            Text(role="assistant", content=f"Assistant response {i}", metadata={"tag": "text"}),
        ]
    return messages


def test_text():
    t = Text(role="assistant", content="hi")
    assert (t.T, t.tag, t.is_visible, t.metadata) == ("Text", "text", True, {})
    assert Text(role="assistant", content="hm", metadata={"tag": "think"}).is_visible is False
    assert Text(role="assistant", content="d", metadata={"tag": "direct"}).tag == "direct"
    with pytest.raises(ValueError):
        Text(role="tool", content="x")


def test_tool_call():
    a, b = ToolCall(name="f", arguments={"k": 1}), ToolCall(name="f", arguments={})
    assert a.T == "ToolCall" and a.id.startswith("call_") and a.id != b.id and len(a.id) == 37
    assert ToolCall(name="f", arguments={}, id="call_1").id == "call_1"


def test_parallel_tool_call():
    p = ParallelToolCall(tool_calls=[{"name": "f", "arguments": {"a": 1}, "id": "c1"}])
    assert p.T == "ParallelToolCall" and isinstance(p.tool_calls[0], ToolCall) and p.tool_calls[0].id == "c1"


def test_tool_response():
    r = ToolResponse(name="f", content="{}", id="c1", metadata={"direct_response": None})
    assert (r.T, r.name, r.content, r.id) == ("ToolResponse", "f", "{}", "c1")
    assert ToolResponse(name="f", content="").id.startswith("call_")


def test_tool_call_response():
    tcr = ToolCallResponse(
        tool_call={"name": "transfer", "arguments": {"summary": "s"}, "id": "c9"},
        tool_response={"name": "transfer", "content": "", "id": "c9"},
    )
    assert isinstance(tcr.tool_call, ToolCall) and isinstance(tcr.tool_response, ToolResponse)
    assert tcr.tool_call.arguments.get("summary") == "s" and tcr.tool_response.content == ""
    # A superset kept for test code written against our earlier dict shape (the reference has only attributes).
    assert tcr["tool_call"]["name"] == "transfer"


def test_message_from_dict():
    dumped = [
        {"T": "Text", "role": "user", "content": "q", "metadata": {}},
        {"T": "ParallelToolCall", "metadata": {}, "tool_calls": [{"T": "ToolCall", "name": "f", "arguments": {}}]},
        {"T": "ToolResponse", "name": "f", "content": "r", "id": "call_1", "metadata": {}},
    ]
    parsed = [message_from_dict(d) for d in dumped]
    assert [type(m) for m in parsed] == [Text, ParallelToolCall, ToolResponse]
    with pytest.raises(ValueError):
        message_from_dict({"T": "Image"})


def test_get_conversation_transcript():
    assert get_conversation_transcript(conversation(3), limit=1) == "Assistant: Assistant response 3"
    assert get_conversation_transcript(conversation(5), limit=3) == (
        "Assistant: Assistant response 3\n\nUser: User message 4\n\nAssistant: Assistant response 4\n\n"
        "User: User message 5\n\nAssistant: Assistant response 5"
    )
    assert get_conversation_transcript(conversation(2), limit=0, content_transform_fn=str.upper) == (
        "User: USER MESSAGE 1\n\nAssistant: ASSISTANT RESPONSE 1\n\n"
        "User: USER MESSAGE 2\n\nAssistant: ASSISTANT RESPONSE 2"
    )
    dummy = [Text(role="user", content="Hello"), Text(role="assistant", content="", metadata={"is_dummy": True})]
    assert get_conversation_transcript(dummy) == "User: Hello"
    assert get_conversation_transcript([]) == ""
    with pytest.raises(ValueError, match="limit must be >= 0"):
        get_conversation_transcript([], limit=-1)


def test_test_context_defaults():
    x = TestContext()
    assert (x.response, x.tool_direct_responses, x.effects, x.tool_calls, x.messages) == ("", [], {}, [], [])
    assert (x.init_result, x.metadata) == ({}, {})
    assert x.session_id == "00000000-0000-0000-0000-000000000000"


def test_test_context_tool_calls():
    x = TestContext(
        tool_calls=[
            {
                "tool_call": {"name": "get_user", "arguments": {"id": 1}},
                "tool_response": {"name": "get_user", "content": "{}"},
            },
            {
                "tool_call": {"name": "transfer_to_human_agents", "arguments": {"summary": "Refund"}},
                "tool_response": {"name": "transfer_to_human_agents", "content": ""},
            },
        ]
    )
    # The airline release's own test code.
    assert len(x.tool_calls) > 0 and x.tool_calls[-1].tool_call.name == "transfer_to_human_agents"
    assert x.tool_calls[-1].tool_call.arguments.get("summary", "") == "Refund"
    assert [tc.tool_call.name for tc in x.tool_calls] == ["get_user", "transfer_to_human_agents"]


def test_test_context_messages():
    x = TestContext(messages=[{"T": "Text", "role": "user", "content": "q"}, Text(role="assistant", content="a")])
    assert all(isinstance(m, Text) for m in x.messages)


def test_test_context_transcript():
    x = TestContext(messages=conversation(2))
    assert x.transcript() == get_conversation_transcript(conversation(2))
    assert x.transcript(limit=1) == "Assistant: Assistant response 2"


def test_test_context_query():
    messages = [
        Text(role="system", content="s"),
        Text(role="user", content="", metadata={"is_dummy": True}),
        Text(role="user", content="hm", metadata={"tag": "think"}),
        Text(role="user", content="Book a flight"),
        Text(role="user", content="later"),
    ]
    assert TestContext(messages=messages).query() == "Book a flight"
    with pytest.raises(ValueError, match="No user message found"):
        TestContext().query()
