"""`AnthropicModel` failure paths, synthesised: SDK retries, error events, cut streams, empty
tool-use responses, invalid histories, missing keys."""

from __future__ import annotations

from typing import Any

import anthropic
import pytest

from statemachine_agent import (
    Agent,
    AssistantMessage,
    Event,
    ModelRetry,
    State,
    StopReason,
    ToolCallBlock,
    ToolResultMessage,
    UsageError,
    UserMessage,
    tool,
)
from statemachine_agent._errors import ModelError, ModelRetryableError
from statemachine_agent.models import AnthropicModel, ModelRequest

from .replay_server import (
    MODEL,
    ReplayServer,
    Reply,
    closing_model,
    json_reply,
    message,
    message_to_sse,
    sse,
    sse_reply,
)
from .replay_server import says as text_reply


def overloaded(status: int = 529, **headers: str) -> Reply:
    body = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
    return json_reply(status, body, headers)


def partial_then(tail: list[dict[str, Any]]) -> Reply:
    """A stream that starts a text response ("partial ") and then goes on with ``tail``."""
    head = message_to_sse(message([{"type": "text", "text": "partial "}]))[:3]
    return Reply(body=sse(head + tail))


ERROR_EVENT = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}


def agent(server: ReplayServer, max_retries: int = 0, **kwargs: Any) -> Agent:
    model = closing_model(server, max_retries=max_retries)
    return Agent(model, retry_backoff_seconds=0.001, **kwargs)


async def test_529_then_200_is_retried_by_the_sdk(server: ReplayServer) -> None:
    server.add(overloaded(**{"retry-after-ms": "1"}), text_reply("fine now"))
    result = await agent(server, max_retries=2).run("hi")

    assert result.state is State.DONE
    assert result.text == "fine now"
    assert len(server.requests) == 2
    assert server.requests[1].headers.get("x-stainless-retry-count") == "1"


async def test_529_until_the_sdk_retries_are_spent_fails_with_the_attempts(
    server: ReplayServer,
) -> None:
    server.add(*(overloaded(**{"retry-after-ms": "1"}) for _ in range(5)))
    result = await agent(server, max_retries=2).run("hi")

    assert result.state is State.FAILED
    assert len(server.requests) == 3  # the SDK's three; the engine does not retry again
    assert result.error is not None
    assert "after 3 attempt(s)" in result.error and "HTTP 529" in result.error
    assert "Overloaded" in result.error


async def test_429_honours_retry_after_then_succeeds(server: ReplayServer) -> None:
    limited = {"type": "error", "error": {"type": "rate_limit_error", "message": "Slow down"}}
    server.add(json_reply(429, limited, {"retry-after-ms": "1"}), text_reply("ok"))
    result = await agent(server, max_retries=1).run("hi")
    assert result.state is State.DONE and len(server.requests) == 2


async def test_400_fails_quoting_the_api_message(server: ReplayServer) -> None:
    body = {
        "type": "error",
        "error": {
            "type": "invalid_request_error",
            "message": "messages: text content blocks must be non-empty",
        },
    }
    server.add(json_reply(400, body))
    result = await agent(server, max_retries=2).run("hi")

    assert result.state is State.FAILED
    assert result.error is not None
    assert "messages: text content blocks must be non-empty" in result.error
    assert "HTTP 400" in result.error
    assert len(server.requests) == 1


async def test_403_is_an_auth_failure(server: ReplayServer) -> None:
    body = {"type": "error", "error": {"type": "permission_error", "message": "no access"}}
    server.add(json_reply(403, body))
    result = await agent(server).run("hi")
    assert result.state is State.FAILED
    assert result.error is not None and "check the API key" in result.error


async def test_error_event_mid_stream_is_retried_and_the_partial_discarded(
    server: ReplayServer,
) -> None:
    server.add(partial_then([ERROR_EVENT]), text_reply("complete answer"))
    events: list[Event] = []
    runner = agent(server)
    runner.subscribe(events.append)
    result = await runner.run("hi")

    assert result.state is State.DONE
    assert [m.text for m in result.messages if isinstance(m, AssistantMessage)] == [
        "complete answer"
    ]
    retries = [e for e in events if isinstance(e, ModelRetry)]
    assert len(retries) == 1 and "Overloaded" in retries[0].error
    assert len(server.requests) == 2


async def test_error_event_that_keeps_coming_fails(server: ReplayServer) -> None:
    server.add(*(partial_then([ERROR_EVENT]) for _ in range(3)))
    result = await agent(server, model_retries=2).run("hi")

    assert result.state is State.FAILED
    assert result.error is not None
    assert "overloaded_error" in result.error and "after 3 attempt(s)" in result.error
    assert len(server.requests) == 3
    assert not any(isinstance(m, AssistantMessage) and "partial" in m.text for m in result.messages)


async def test_stream_cut_before_message_stop_is_never_complete(server: ReplayServer) -> None:
    full = message_to_sse(message([{"type": "text", "text": "all of it"}]))
    server.add(Reply(body=sse(full[:-1])), Reply(body=sse(full[:-1])))
    result = await agent(server, model_retries=1).run("hi")

    assert result.state is State.FAILED
    assert result.error is not None and "incomplete" in result.error
    assert len(server.requests) == 2
    assert not any(
        isinstance(m, AssistantMessage) and m.stop_reason == StopReason.END_TURN
        for m in result.messages
    )


async def test_tool_call_cut_before_message_stop_is_not_executed(server: ReplayServer) -> None:
    ran: list[str] = []

    @tool
    def act(what: str) -> str:
        """Do it."""
        ran.append(what)
        return "done"

    call = [{"type": "tool_use", "id": "toolu_1", "name": "act", "input": {"what": "x"}}]
    events = message_to_sse(message(call, "tool_use"))
    server.add(Reply(body=sse(events[:-2])), text_reply("gave up"))
    result = await agent(server, tools=[act]).run("do it")

    assert ran == []
    assert result.state is State.DONE and result.text == "gave up"


async def test_connection_dropped_mid_stream_is_retried(server: ReplayServer) -> None:
    body = sse(message_to_sse(message([{"type": "text", "text": "lost"}]))[:3])
    server.add(Reply(body=body, declared_length=len(body) + 500), text_reply("recovered"))
    result = await agent(server).run("hi")

    assert result.state is State.DONE
    assert result.text == "recovered"


async def test_connection_refused_is_retried_by_the_sdk_not_again_by_the_engine() -> None:
    async with AnthropicModel(
        MODEL, base_url="http://127.0.0.1:9", api_key="test", max_retries=0
    ) as model:
        with pytest.raises(ModelError) as caught:
            async for _ in model.stream(ModelRequest([UserMessage("hi")])):
                pass
    assert not isinstance(caught.value, ModelRetryableError)
    assert caught.value.kind == "connection_error" and caught.value.attempts == 1
    assert model.client.is_closed()
    await model.aclose()  # closing again is harmless


async def test_empty_tool_use_response_runs_nothing_and_says_so(server: ReplayServer) -> None:
    ran: list[str] = []

    @tool
    def act(what: str) -> str:
        """Do it."""
        ran.append(what)
        return "done"

    server.add(sse_reply(message_to_sse(message([], "tool_use"))))
    result = await agent(server, tools=[act]).run("do it")

    assert ran == []
    assert len(server.requests) == 1
    assert result.state is State.DONE
    assert result.stop_reason == StopReason.TOOL_USE
    assert result.error is not None and "no tool call" in result.error
    assert isinstance(result.messages[-1], AssistantMessage)
    assert not any(isinstance(m, UserMessage) for m in result.messages[1:])


async def test_duplicate_tool_call_ids_fail_before_sending(server: ReplayServer) -> None:
    call = ToolCallBlock(id="toolu_dup", name="act", input={})
    history = [
        UserMessage("one"),
        AssistantMessage(content=[call], stop_reason="tool_use"),
        ToolResultMessage(tool_call_id="toolu_dup", tool_name="act", content=[]),
        AssistantMessage(content=[call], stop_reason="tool_use"),
        ToolResultMessage(tool_call_id="toolu_dup", tool_name="act", content=[]),
    ]
    result = await agent(server, messages=history).run("again")

    assert result.state is State.FAILED
    assert result.error is not None
    assert "toolu_dup" in result.error and "not sent" in result.error
    assert server.requests == []


def test_missing_key_names_the_variable(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    for name in (
        "ANTHROPIC_API_KEY",
        "ANTHROPIC_AUTH_TOKEN",
        "ANTHROPIC_PROFILE",
        "ANTHROPIC_IDENTITY_TOKEN",
        "ANTHROPIC_IDENTITY_TOKEN_FILE",
        "ANTHROPIC_FEDERATION_RULE_ID",
    ):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("ANTHROPIC_CONFIG_DIR", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    with pytest.raises(UsageError, match="ANTHROPIC_API_KEY"):
        AnthropicModel(MODEL)
    # A profile directory the SDK cannot use gives the same clear error.
    monkeypatch.setenv("ANTHROPIC_CONFIG_DIR", str(tmp_path))
    with pytest.raises(UsageError, match="ANTHROPIC_API_KEY"):
        AnthropicModel(MODEL)


def test_key_from_the_environment_is_never_shown(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-secret-value")
    model = AnthropicModel(MODEL)
    assert "sk-secret-value" not in repr(model)
    assert "sk-secret-value" not in str(vars(model).get("_options"))
    assert model.name == MODEL


async def test_a_ready_client_is_used(server: ReplayServer) -> None:
    async with anthropic.AsyncAnthropic(
        api_key="test", base_url=server.url, max_retries=0
    ) as client:
        server.add(text_reply("from the client"), text_reply("still open"))
        async with AnthropicModel(MODEL, client=client) as model:
            result = await Agent(model).run("hi")
        assert result.text == "from the client"
        # The model did not create the client, so it leaves it open for its owner.
        assert not client.is_closed()
        again = await Agent(AnthropicModel(MODEL, client=client)).run("hi")
        assert again.text == "still open"
        with pytest.raises(UsageError):
            AnthropicModel(MODEL, client=client, api_key="other")
    assert client.is_closed()
