"""Request encoding (`RequestEncoder`) and stream assembly (`StreamAccumulator`), without HTTP."""

from __future__ import annotations

from typing import Any

import pytest

from statemachine_agent import (
    AssistantMessage,
    TextBlock,
    ThinkingBlock,
    ToolCallBlock,
    ToolResultMessage,
    UserMessage,
)
from statemachine_agent._errors import ModelError, ModelRetryableError
from statemachine_agent._messages import ImageBlock, ProviderBlock
from statemachine_agent.models import ResponseStart, TextDelta, ToolCallDelta, ToolDefinition
from statemachine_agent.models._anthropic_request import (
    RequestEncoder,
    count_breakpoints,
    tool_input,
)
from statemachine_agent.models._anthropic_response import StreamAccumulator

CALL_A = ToolCallBlock(id="a", name="read", input={"path": "x"})
CALL_B = ToolCallBlock(id="b", name="read", input={"path": "y"})
TOOLS = [ToolDefinition("read", "Read a file.", {"type": "object", "properties": {}})]


def history() -> list[Any]:
    return [
        UserMessage("go"),
        AssistantMessage(
            content=[
                ThinkingBlock(thinking="hmm", signature="sig"),
                TextBlock(text=""),
                CALL_A,
                CALL_B,
            ],
            stop_reason="tool_use",
        ),
        ToolResultMessage(
            tool_call_id="a", tool_name="read", content=[TextBlock(text="A")], is_error=True
        ),
        ToolResultMessage(tool_call_id="b", tool_name="read", content=[TextBlock(text="B")]),
        UserMessage("and also this"),
    ]


def test_results_are_grouped_first_with_queued_text_after() -> None:
    wire = RequestEncoder(cache=False).messages(history())
    assert [m["role"] for m in wire] == ["user", "assistant", "user"]
    assert wire[2]["content"] == [
        {
            "type": "tool_result",
            "tool_use_id": "a",
            "is_error": True,
            "content": [{"type": "text", "text": "A"}],
        },
        {
            "type": "tool_result",
            "tool_use_id": "b",
            "is_error": False,
            "content": [{"type": "text", "text": "B"}],
        },
        {"type": "text", "text": "and also this"},
    ]
    # The blank text the API returned before the calls is not sent back; the signature is.
    assert wire[1]["content"] == [
        {"type": "thinking", "thinking": "hmm", "signature": "sig"},
        {"type": "tool_use", "id": "a", "name": "read", "input": {"path": "x"}},
        {"type": "tool_use", "id": "b", "name": "read", "input": {"path": "y"}},
    ]


def test_breakpoints_on_last_tool_system_and_newest_block_only() -> None:
    encoder = RequestEncoder()
    body = {
        "tools": encoder.tools(
            TOOLS,
            [
                {
                    "type": "web_search_20250305",
                    "name": "web_search",
                    "cache_control": {"type": "ephemeral"},
                }
            ],
        ),
        "system": encoder.system("be brief"),
        "messages": encoder.messages(history()),
    }
    assert count_breakpoints(body) == 3
    assert "cache_control" not in body["tools"][0]
    assert body["tools"][-1]["cache_control"] == {"type": "ephemeral"}
    assert body["messages"][-1]["content"][-1]["cache_control"] == {"type": "ephemeral"}
    assert all("cache_control" not in b for b in body["messages"][-1]["content"][:-1])


def test_breakpoint_skips_a_trailing_thinking_block() -> None:
    paused = AssistantMessage(
        content=[TextBlock(text="looking"), ThinkingBlock(thinking="t", signature="s")],
        stop_reason="pause_turn",
    )
    wire = RequestEncoder().messages([UserMessage("q"), paused])
    assert wire[-1]["content"][0]["cache_control"] == {"type": "ephemeral"}
    assert "cache_control" not in wire[-1]["content"][1]


def test_encoding_is_reused_per_message_and_cached_dicts_never_marked() -> None:
    encoder = RequestEncoder()
    messages = history()
    first = encoder.messages(messages[:2] + messages[2:4])
    messages.append(AssistantMessage(content=[TextBlock(text="done")], stop_reason="end_turn"))
    messages.append(UserMessage("next"))
    second = encoder.messages(messages)
    assert second[0] is first[0]  # the same dict: not encoded again
    assert second[1] is first[1]
    assert "cache_control" not in second[0]["content"][-1]
    assert count_breakpoints({"messages": second}) == 1


def test_calls_with_unusable_arguments_are_sent_as_objects() -> None:
    assert tool_input(ToolCallBlock(id="1", name="t", input=None, raw_arguments='{"a": ')) == {
        "_raw_arguments": '{"a": '
    }
    assert tool_input(ToolCallBlock(id="1", name="t", input=[1, 2])) == {"_value": [1, 2]}
    assert tool_input(ToolCallBlock(id="1", name="t", input=None, truncated=True)) == {}
    assert tool_input(ToolCallBlock(id="1", name="t", input={"a": 1}, truncated=True)) == {"a": 1}


def test_provider_blocks_verbatim_images_and_foreign_thinking() -> None:
    data = {"type": "server_tool_use", "id": "s", "name": "web_search", "input": {"q": "x"}}
    assistant = AssistantMessage(
        content=[
            ProviderBlock(data=data),
            ProviderBlock(provider="other", data={"type": "x"}),
            ThinkingBlock(thinking="no signature"),
            TextBlock(text="ok"),
        ],
        stop_reason="end_turn",
    )
    user = UserMessage(
        content=[ImageBlock(media_type="image/png", data="AAAA"), ImageBlock(url="https://x/y.png")]
    )
    wire = RequestEncoder(cache=False).messages([user, assistant])
    assert wire[0]["content"] == [
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"}},
        {"type": "image", "source": {"type": "url", "url": "https://x/y.png"}},
    ]
    assert wire[1]["content"] == [data, {"type": "text", "text": "ok"}]


def events(*items: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        {"type": "message_start", "message": {"model": "m", "usage": {"input_tokens": 7}}},
        *items,
    ]


def test_accumulator_keeps_one_block_per_index_and_ignores_strays() -> None:
    acc = StreamAccumulator()
    out: list[Any] = []
    for event in events(
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "hi"}},
        {"type": "content_block_delta", "index": 5, "delta": {"type": "text_delta", "text": "??"}},
        {"type": "content_block_stop", "index": 0},
        {
            "type": "content_block_start",
            "index": 1,
            "content_block": {"type": "tool_use", "id": "t", "name": "n", "input": {}},
        },
        {
            "type": "content_block_delta",
            "index": 1,
            "delta": {"type": "input_json_delta", "partial_json": '{"a":'},
        },
        {
            "type": "content_block_delta",
            "index": 1,
            "delta": {"type": "input_json_delta", "partial_json": " 1}"},
        },
        {"type": "content_block_stop", "index": 1},
        {"type": "something_new"},
        {
            "type": "message_delta",
            "delta": {"stop_reason": "brand_new_reason"},
            "usage": {"output_tokens": 4, "input_tokens": None},
        },
        {"type": "message_stop"},
    ):
        out += acc.feed(event)
    assert out[0] == ResponseStart("m")
    assert TextDelta(0, "hi") in out and TextDelta(5, "??") not in out
    assert ToolCallDelta(1, "t", "n", '{"a":') in out
    message = acc.message()
    assert message.content == [
        TextBlock(text="hi"),
        ToolCallBlock(id="t", name="n", input={"a": 1}),
    ]
    assert message.stop_reason == "brand_new_reason"
    assert (message.usage.input_tokens, message.usage.output_tokens) == (7, 4)


def test_accumulator_marks_an_unclosed_call_truncated_even_if_it_parses() -> None:
    acc = StreamAccumulator()
    for event in events(
        {
            "type": "content_block_start",
            "index": 0,
            "content_block": {"type": "tool_use", "id": "t", "name": "n", "input": {}},
        },
        {
            "type": "content_block_delta",
            "index": 0,
            "delta": {"type": "input_json_delta", "partial_json": '{"a": 1}'},
        },
        {"type": "message_delta", "delta": {"stop_reason": "max_tokens"}, "usage": {}},
        {"type": "message_stop"},
    ):
        acc.feed(event)
    (call,) = acc.message().tool_calls
    assert call.truncated and call.input is None and call.raw_arguments == '{"a": 1}'


def test_accumulator_refuses_an_incomplete_stream_and_raises_error_events() -> None:
    acc = StreamAccumulator()
    for event in events():
        acc.feed(event)
    with pytest.raises(ModelRetryableError, match="incomplete"):
        acc.message()
    with pytest.raises(ModelRetryableError):
        acc.feed({"type": "error", "error": {"type": "overloaded_error", "message": "busy"}})
    with pytest.raises(ModelError):
        acc.feed({"type": "error", "error": {"type": "invalid_request_error", "message": "bad"}})
