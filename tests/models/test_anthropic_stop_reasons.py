"""`AnthropicModel` cases from the audit of issue 3, synthesised and served by the replay server:
``model_context_window_exceeded``, an unknown stop reason, the SDK timeout, ``ping`` events."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from statemachine_agent import (
    Agent,
    AssistantMessage,
    Compaction,
    Event,
    ModelRetry,
    State,
    StopReason,
    TextBlock,
    ToolCallBlock,
    ToolResultMessage,
    UserMessage,
    tool,
)
from statemachine_agent._compacting import CUT_BY_WINDOW
from statemachine_agent._errors import ModelError, ModelRetryableError
from statemachine_agent.models import AnthropicModel, ModelRequest
from statemachine_agent.models._anthropic_response import StreamAccumulator
from statemachine_agent.models._base import ResponseComplete
from statemachine_agent.session import SUMMARY_PREFIX

from .replay_server import (
    MODEL,
    ReplayServer,
    Reply,
    json_reply,
    load_cassette,
    load_sse,
    reply,
    sse_reply,
)
from .replay_server import closing_model as model

CONTEXT_EXCEEDED = "model_context_window_exceeded"


def text(value: str) -> dict[str, Any]:
    return {"type": "text", "text": value}


# -- model_context_window_exceeded: a truncated response ------------------------------------------


async def test_context_window_exceeded_text_is_kept_and_not_continued(server: ReplayServer) -> None:
    """Issue 13: a continuation cannot fit, so none is sent; the run ends with the cut text and
    an error that names the context window and compaction."""
    server.add(reply([text("The first half of the answer")], CONTEXT_EXCEEDED))
    result = await Agent(model(server)).run("Explain everything.")

    assert len(server.requests) == 1
    assert result.state is State.DONE
    assert result.stop_reason == StopReason.MODEL_CONTEXT_WINDOW_EXCEEDED
    assert result.text == "The first half of the answer"
    assert result.error is not None
    assert "context window" in result.error and "Compaction()" in result.error


async def test_context_window_exceeded_with_policy_stop_ends_done_naming_the_window(
    server: ReplayServer,
) -> None:
    server.add(reply([text("Cut off here")], CONTEXT_EXCEEDED))
    result = await Agent(model(server), max_tokens_policy="stop").run("Explain everything.")

    assert result.state is State.DONE
    assert result.stop_reason == StopReason.MODEL_CONTEXT_WINDOW_EXCEEDED
    assert result.error is not None
    assert "context window" in result.error and CONTEXT_EXCEEDED in result.error
    assert result.text == "Cut off here"
    assert len(server.requests) == 1


async def test_context_window_exceeded_trailing_tool_call_is_answered_as_cut_and_never_run(
    server: ReplayServer,
) -> None:
    ran: list[str] = []

    @tool
    def write_file(path: str) -> str:
        """Write a file."""
        ran.append(path)
        return "written"

    call = {"type": "tool_use", "id": "toolu_cw", "name": "write_file", "input": {"path": "a"}}
    server.add(reply([text("Writing it."), call], CONTEXT_EXCEEDED))
    result = await Agent(model(server), tools=[write_file]).run("Write a.")

    assert ran == []
    assert len(server.requests) == 1
    response = result.messages[1]
    assert isinstance(response, AssistantMessage)
    assert response.stop_reason == StopReason.MODEL_CONTEXT_WINDOW_EXCEEDED
    (marked,) = response.tool_calls
    assert marked.truncated
    answer = result.messages[2]
    assert isinstance(answer, ToolResultMessage)
    assert answer.tool_call_id == "toolu_cw" and answer.is_error
    assert answer.text == CUT_BY_WINDOW
    assert "max_tokens" not in answer.text
    assert result.state is State.DONE and result.text == "Writing it."
    assert result.error is not None and "context window" in result.error


PROMPT_TOO_LONG = {
    "type": "error",
    "error": {
        "type": "invalid_request_error",
        "message": "prompt is too long: 210000 tokens > 200000 maximum",
    },
}


async def test_prompt_too_long_from_the_api_fails_naming_compaction(server: ReplayServer) -> None:
    server.add(json_reply(400, PROMPT_TOO_LONG))
    result = await Agent(model(server)).run("Explain everything.")

    assert len(server.requests) == 1
    assert result.state is State.FAILED
    assert result.error is not None
    assert "prompt is too long" in result.error and "compaction" in result.error


async def test_prompt_too_long_from_the_api_compacts_once_and_retries(server: ReplayServer) -> None:
    server.add(
        json_reply(400, PROMPT_TOO_LONG),
        reply([text("Answered from the summary.")], "end_turn"),
    )
    history = [
        UserMessage("an old question"),
        AssistantMessage(content=[TextBlock(text="an old answer")], stop_reason="end_turn"),
    ]
    agent = Agent(
        model(server),
        messages=history,
        compaction=Compaction(threshold=10**9, keep_recent=0, summarize=lambda old: "earlier"),
    )
    result = await agent.run("Explain everything.")

    assert len(server.requests) == 2
    assert result.state is State.DONE and result.text == "Answered from the summary."
    sent = server.requests[1].body["messages"]
    assert sent[0]["content"][0]["text"] == SUMMARY_PREFIX + "earlier"
    # the summary and the prompt (the kept window) go as one user turn
    assert [b["text"] for b in sent[0]["content"]] == [
        SUMMARY_PREFIX + "earlier",
        "Explain everything.",
    ]


# -- a stop reason this library does not know ----------------------------------------------------


async def test_unknown_stop_reason_is_kept_and_the_run_ends_done(server: ReplayServer) -> None:
    server.add(reply([text("Something new happened.")], "brand_new_reason"))
    result = await Agent(model(server)).run("hi")

    assert result.state is State.DONE
    assert result.stop_reason == "brand_new_reason"
    last = result.messages[-1]
    assert isinstance(last, AssistantMessage)
    assert last.stop_reason == "brand_new_reason"
    assert isinstance(last.stop_reason, str)
    assert last.text == "Something new happened."
    assert len(server.requests) == 1


# -- the SDK's request timeout -------------------------------------------------------------------

# Far longer than the client's timeout, so the timeout always fires first.
SLOW_SECONDS = 2.0
TIMEOUT_SECONDS = 0.2


async def test_timeout_before_the_response_is_a_model_error_of_kind_timeout(
    server: ReplayServer,
) -> None:
    server.add(Reply(body=b"", delay_seconds=SLOW_SECONDS))
    slow = model(server, timeout_seconds=TIMEOUT_SECONDS)
    with pytest.raises(ModelError) as caught:
        async for _ in slow.stream(ModelRequest([UserMessage("hi")])):
            pass
    # The SDK retries timeouts itself (max_retries), so the engine must not retry them again.
    assert not isinstance(caught.value, ModelRetryableError)
    assert caught.value.kind == "timeout" and caught.value.attempts == 1
    assert "timed out" in str(caught.value) and "0.2 s" in str(caught.value)
    assert len(server.requests) == 1  # max_retries=0: the SDK sent it once


async def test_timeout_is_retried_by_the_sdk_only_then_fails_counting_every_request(
    server: ReplayServer,
) -> None:
    server.add(*(Reply(body=b"", delay_seconds=SLOW_SECONDS) for _ in range(2)))
    sdk_retrying = AnthropicModel(
        MODEL,
        base_url=server.url,
        api_key="test",
        max_retries=1,
        timeout_seconds=TIMEOUT_SECONDS,
    )
    agent = Agent(server.closing(sdk_retrying), model_retries=1, retry_backoff_seconds=0.01)
    events: list[Event] = []
    agent.subscribe(events.append)
    result = await agent.run("hi")

    assert result.state is State.FAILED
    assert result.error is not None
    assert "timed out" in result.error
    assert "(timeout)" in result.error and "after 2 attempt(s)" in result.error
    # Two requests in all (the SDK's first try and its retry), not multiplied by the engine.
    assert not [e for e in events if isinstance(e, ModelRetry)]
    assert len(server.requests) == 2
    # The only assistant message is the engine's error record: no response content at all.
    (record,) = [m for m in result.messages if isinstance(m, AssistantMessage)]
    assert record.stop_reason == StopReason.ERROR and record.content == []


# -- ping events are ignored ---------------------------------------------------------------------


def sse_events(body: bytes) -> list[dict[str, Any]]:
    """The JSON ``data`` of each event in an SSE body."""
    events = []
    for chunk in body.decode().split("\n\n"):
        data = [
            line[len("data:") :].strip() for line in chunk.splitlines() if line.startswith("data:")
        ]
        if data:
            events.append(json.loads("\n".join(data)))
    return events


def recording(fixtures: Path, name: str) -> list[dict[str, Any]]:
    if name.endswith(".sse"):
        return sse_events(load_sse(fixtures / name).body)
    return sse_events(load_cassette(fixtures / name)[0].reply.body)


EXPECTED_11 = [
    TextBlock(text="I'll check the current weather in Paris for you."),
    ToolCallBlock(
        id="toolu_01NRLabsLyVHZPKxbKvkfSMn", name="get_weather", input={"location": "Paris"}
    ),
]
RECORDINGS = {
    "11_anthropic-sdk_stream_text_plus_tool_use.sse": EXPECTED_11,
    "02_mirascope_stream_text_plus_2_tool_use_json_deltas_roundtrip.yaml": None,
}


@pytest.mark.parametrize("name", sorted(RECORDINGS))
def test_ping_yields_nothing_and_adds_no_block(anthropic_fixtures: Path, name: str) -> None:
    events = recording(anthropic_fixtures, name)
    pings = [e for e in events if e["type"] == "ping"]
    assert pings, "the recording holds a ping"

    accumulator = StreamAccumulator()
    for event in events:
        produced = accumulator.feed(event)
        if event["type"] == "ping":
            assert produced == []
    message = accumulator.message()

    # Exactly the blocks the content_block_start events announced, in index order.
    starts = [e for e in events if e["type"] == "content_block_start"]
    assert [type(b).__name__ for b in message.content] == [
        {"text": "TextBlock", "tool_use": "ToolCallBlock"}[s["content_block"]["type"]]
        for s in starts
    ]
    expected = RECORDINGS[name]
    if expected is not None:
        assert message.content == expected
    else:  # 02: text, then the two calls assembled from their fragments
        assert [c.input for c in message.tool_calls] == [
            {"password": "mellon"},
            {"password": "radiance"},
        ]
        assert all(not c.truncated and c.raw_arguments is None for c in message.tool_calls)
    # The same stream without its pings assembles the same message.
    without = StreamAccumulator()
    for event in events:
        if event["type"] != "ping":
            without.feed(event)
    assert without.message() == message


async def test_ping_through_the_adapter_changes_nothing(
    server: ReplayServer, anthropic_fixtures: Path
) -> None:
    name = "11_anthropic-sdk_stream_text_plus_tool_use.sse"
    events = recording(anthropic_fixtures, name)
    server.add(load_sse(anthropic_fixtures / name))
    server.add(sse_reply([e for e in events if e["type"] != "ping"]))
    adapter = model(server)
    request = ModelRequest([UserMessage("What's the weather in Paris?")])

    with_pings = [item async for item in adapter.stream(request)]
    without_pings = [item async for item in adapter.stream(request)]

    assert with_pings == without_pings
    final = with_pings[-1]
    assert isinstance(final, ResponseComplete)
    assert final.message.content == EXPECTED_11
    assert final.message.stop_reason == StopReason.TOOL_USE


async def test_count_context_uses_the_token_counting_endpoint(server: ReplayServer) -> None:
    server.add(json_reply(200, {"input_tokens": 1234}))
    history = [
        UserMessage("a question"),
        AssistantMessage(content=[TextBlock(text="an answer")], stop_reason="end_turn"),
    ]
    agent = Agent(model(server), system="be brief", messages=history)
    context = await agent.count_context()

    (request,) = server.requests
    assert request.path.startswith("/v1/messages/count_tokens")
    assert request.body["model"] == MODEL and request.body["system"][0]["text"] == "be brief"
    assert [m["role"] for m in request.body["messages"]] == ["user", "assistant"]
    assert context.reported == 1234 and context.estimated == 0 and context.tokens == 1234
    assert context.window == 200_000
    assert agent.context_usage == context
