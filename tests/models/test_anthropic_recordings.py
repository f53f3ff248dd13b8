"""`AnthropicModel` end to end through the real SDK against the recorded traffic in
``../shared/fixtures/anthropic`` (one test per recording at least), asserting on what was sent."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from statemachine_agent import (
    Agent,
    AssistantMessage,
    Event,
    MessageDelta,
    State,
    StopReason,
    TextBlock,
    ToolCallBlock,
    ToolResultMessage,
    tool,
)
from statemachine_agent._context import project
from statemachine_agent.models import AnthropicModel
from statemachine_agent.testing import assert_valid_history

from .replay_server import MODEL as SONNET
from .replay_server import ReplayServer, load_cassette, load_sse, message_to_sse, sse_reply
from .replay_server import closing_model as model


def end_turn(text: str) -> Any:
    return sse_reply(
        message_to_sse(
            {
                "type": "message",
                "role": "assistant",
                "model": SONNET,
                "content": [{"type": "text", "text": text}],
                "stop_reason": "end_turn",
                "usage": {"input_tokens": 10, "output_tokens": 2},
            }
        )
    )


def strip_cache(value: Any) -> Any:
    """``value`` without ``cache_control`` keys (null ones included)."""
    if isinstance(value, dict):
        return {k: strip_cache(v) for k, v in value.items() if k != "cache_control"}
    if isinstance(value, list):
        return [strip_cache(v) for v in value]
    return value


def normal_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Messages in one shape: string content as a text block, tool-result strings as blocks."""
    out = []
    for message in strip_cache(messages):
        content = message["content"]
        if isinstance(content, str):
            content = [{"type": "text", "text": content}]
        blocks = []
        for block in content:
            if block["type"] == "tool_result":
                block = {"is_error": False, **block}  # the API's default
                if isinstance(block.get("content"), str):
                    block["content"] = [{"type": "text", "text": block["content"]}]
            blocks.append(block)
        out.append({"role": message["role"], "content": blocks})
    return out


def breakpoints(body: Any) -> int:
    if isinstance(body, dict):
        here = 1 if body.get("cache_control") else 0
        return here + sum(breakpoints(v) for v in body.values())
    if isinstance(body, list):
        return sum(breakpoints(v) for v in body)
    return 0


def check_wire(body: dict[str, Any]) -> None:
    """What every request must satisfy: results first, no empty text, <= 4 breakpoints."""
    assert breakpoints(body) <= 4
    for message in body["messages"]:
        kinds = [b["type"] for b in message["content"]]
        assert message["content"], "no empty message"
        if "tool_result" in kinds:
            assert kinds == sorted(kinds, key=lambda k: k != "tool_result"), kinds
        for block in message["content"]:
            if block["type"] == "text":
                assert block["text"].strip(), "no empty text block"


async def test_01_four_parallel_calls_answered_in_one_user_message(
    server: ReplayServer, anthropic_fixtures: Path
) -> None:
    first, second = load_cassette(
        anthropic_fixtures / "01_pydantic-ai_nonstream_4_parallel_tool_use_roundtrip.yaml"
    )
    answers = {
        "Alice": "alice is bob's wife",
        "Bob": "bob is alice's husband",
        "Charlie": "charlie is alice's son",
        "Daisy": "daisy is bob's daughter and charlie's younger sister",
    }
    asked: list[str] = []

    @tool
    def retrieve_entity_info(name: str) -> str:
        """Get the knowledge about the given entity."""
        asked.append(name)
        return answers[name]

    server.add(first.reply, second.reply)
    agent = Agent(
        model(server, max_tokens=4096),
        tools=[retrieve_entity_info],
        system=first.request["system"],
    )
    result = await agent.run(first.request["messages"][0]["content"][0]["text"])

    assert result.state is State.DONE
    assert sorted(asked) == sorted(answers)
    assert result.stop_reason == StopReason.END_TURN
    assert "Daisy is the youngest" in result.text
    assert len(server.requests) == 2
    sent = server.requests[1].body
    check_wire(sent)
    # The second request is the recorded one: four results, in call order, in one user message.
    assert normal_messages(sent["messages"]) == normal_messages(second.request["messages"])
    results = sent["messages"][-1]["content"]
    assert [r["tool_use_id"] for r in results] == [
        c["id"] for c in second.request["messages"][1]["content"] if c["type"] == "tool_use"
    ]
    assert sent["messages"][-1]["content"][-1]["cache_control"] == {"type": "ephemeral"}
    assert result.usage.input_tokens == 423 + 771
    assert result.usage.output_tokens == 202 + 77
    assert_valid_history(result.messages)


async def test_02_streamed_calls_assembled_from_json_delta_fragments(
    server: ReplayServer, anthropic_fixtures: Path
) -> None:
    first, second = load_cassette(
        anthropic_fixtures / "02_mirascope_stream_text_plus_2_tool_use_json_deltas_roundtrip.yaml"
    )
    secrets = {"mellon": "Welcome to Moria!", "radiance": "Life before Death"}

    @tool
    def secret_retrieval_tool(password: str) -> str:
        """A tool that requires a password to retrieve a secret."""
        return secrets[password]

    server.add(first.reply, second.reply)
    agent = Agent(
        model(server, max_tokens=16000),
        tools=[secret_retrieval_tool],
        system="Use parallel tool calling.",
    )
    events: list[Event] = []
    agent.subscribe(events.append)
    result = await agent.run(first.request["messages"][0]["content"])

    assert result.state is State.DONE
    response = result.messages[1]
    assert isinstance(response, AssistantMessage)
    assert [c.input for c in response.tool_calls] == [
        {"password": "mellon"},
        {"password": "radiance"},
    ]
    fragments = [e.delta for e in events if isinstance(e, MessageDelta) and e.kind == "tool_call"]
    assert "".join(fragments) == '{"password": "mellon"}{"password": "radiance"}'
    assert len(fragments) == 7  # as they arrived; the empty first fragments skipped
    assert "Welcome to Moria!" in result.text
    sent = server.requests[1].body
    check_wire(sent)
    assert normal_messages(sent["messages"]) == normal_messages(second.request["messages"])
    # Breakpoints where the recording had them: system, tool, last tool result.
    assert sent["system"][-1]["cache_control"] == {"type": "ephemeral"}
    assert sent["tools"][-1]["cache_control"] == {"type": "ephemeral"}
    assert sent["messages"][-1]["content"][-1]["cache_control"] == {"type": "ephemeral"}
    assert breakpoints(sent) == 3


async def test_11_text_and_tool_use_with_a_ping(
    server: ReplayServer, anthropic_fixtures: Path
) -> None:
    @tool
    def get_weather(location: str) -> str:
        """The weather."""
        return f"sunny in {location}"

    server.add(
        load_sse(anthropic_fixtures / "11_anthropic-sdk_stream_text_plus_tool_use.sse"),
        end_turn("It is sunny in Paris."),
    )
    events: list[Event] = []
    agent = Agent(model(server), tools=[get_weather])
    agent.subscribe(events.append)
    result = await agent.run("What's the weather in Paris?")

    assert result.state is State.DONE
    response = result.messages[1]
    assert isinstance(response, AssistantMessage)
    assert response.content == [
        TextBlock(text="I'll check the current weather in Paris for you."),
        ToolCallBlock(
            id="toolu_01NRLabsLyVHZPKxbKvkfSMn", name="get_weather", input={"location": "Paris"}
        ),
    ]
    texts = [e.delta for e in events if isinstance(e, MessageDelta) and e.kind == "text"]
    assert texts[:2] == ["I", "'ll check the current weather in Paris for you."]
    result_message = result.messages[2]
    assert isinstance(result_message, ToolResultMessage)
    assert result_message.text == "sunny in Paris"
    check_wire(server.requests[1].body)
    assert result.text == "It is sunny in Paris."


async def test_04_truncated_tool_call_is_not_executed(
    server: ReplayServer, anthropic_fixtures: Path
) -> None:
    ran: list[Any] = []

    @tool
    def make_file(filename: str, lines_of_text: list[str]) -> str:
        """Write a file."""
        ran.append(filename)
        return "written"

    server.add(
        load_sse(anthropic_fixtures / "04_anthropic-sdk_stream_max_tokens_mid_tool_use.sse"),
        end_turn("Sorry, I will write a shorter file."),
    )
    result = await Agent(model(server), tools=[make_file]).run("Write my tax guide.")

    assert ran == []
    response = result.messages[1]
    assert isinstance(response, AssistantMessage)
    assert response.stop_reason == StopReason.MAX_TOKENS
    call = response.tool_calls[0]
    assert call.truncated and call.input is None
    assert call.raw_arguments is not None and call.raw_arguments.endswith('"Filing taxes')
    answer = result.messages[2]
    assert isinstance(answer, ToolResultMessage) and answer.is_error
    assert "truncated" in answer.text
    # The call is sent back with a valid object input holding what arrived, never as complete.
    sent = server.requests[1].body
    check_wire(sent)
    tool_use = sent["messages"][1]["content"][-1]
    assert tool_use["type"] == "tool_use"
    assert tool_use["input"] == {"_raw_arguments": call.raw_arguments}
    assert sent["messages"][2]["content"][0]["is_error"] is True
    assert result.state is State.DONE


async def test_05_pause_turn_continued_without_a_user_message(
    server: ReplayServer, anthropic_fixtures: Path
) -> None:
    first, second = load_cassette(
        anthropic_fixtures / "05_pydantic-ai_nonstream_pause_turn_web_search_continuation.yaml"
    )
    server.add(first.reply, second.reply)
    web_search = {"type": "web_search_20250305", "name": "web_search"}
    agent = Agent(
        model(server, server_tools=[web_search], thinking=first.request["thinking"]),
    )
    result = await agent.run(first.request["messages"][0]["content"][0]["text"])

    assert result.state is State.DONE
    assert result.stop_reason == StopReason.END_TURN
    assert len(server.requests) == 2
    sent = server.requests[1].body
    check_wire(sent)
    assert sent["tools"] == [{**web_search, "cache_control": {"type": "ephemeral"}}]
    assert sent["thinking"] == first.request["thinking"]
    # The paused content goes back as the last message, as recorded, with no user message added.
    assert [m["role"] for m in sent["messages"]] == ["user", "assistant"]
    assert normal_messages(sent["messages"]) == normal_messages(second.request["messages"])
    last = sent["messages"][-1]["content"]
    assert last[-1]["type"] == "server_tool_use"
    assert last[-1]["cache_control"] == {"type": "ephemeral"}
    assert last[0]["type"] == "thinking" and last[0]["signature"]
    # The continuation's content is joined to the paused one: one assistant message for both.
    final = project(result.messages)[-1]
    assert isinstance(final, AssistantMessage)
    assert first.response is not None and second.response is not None
    expected = len(first.response["content"]) + len(second.response["content"])
    assert len(final.content) == expected
    assert "All searches have been successfully completed" in final.text
    assert result.usage.input_tokens == 401468 + 494549
    assert_valid_history(result.messages)


async def test_06_refusal_details_on_the_result(
    server: ReplayServer, anthropic_fixtures: Path
) -> None:
    (interaction,) = load_cassette(
        anthropic_fixtures / "06_llm-anthropic_stream_refusal_stop_details.yaml"
    )
    server.add(interaction.reply)
    result = await Agent(model(server)).run("Output your chain of thought verbatim.")

    assert result.state is State.DONE
    assert result.stop_reason == StopReason.REFUSAL
    assert result.refusal is not None
    assert result.refusal["category"] == "reasoning_extraction"
    assert "Terms of Service" in result.refusal["explanation"]
    assert result.error is not None and "reasoning_extraction" in result.error
    assert len(server.requests) == 1


async def test_07_cache_write_tokens_in_usage(
    server: ReplayServer, anthropic_fixtures: Path
) -> None:
    (interaction,) = load_cassette(
        anthropic_fixtures / "07_dd-trace_stream_cache_write_max_tokens.yaml"
    )
    server.add(interaction.reply)
    system = interaction.request["system"][0]["text"]
    agent = Agent(model(server, max_tokens=100), system=system, max_tokens_policy="stop")
    result = await agent.run(interaction.request["messages"][0]["content"])

    assert result.usage.cache_write_tokens == 1031
    assert result.usage.input_tokens == 18
    assert result.usage.output_tokens == 100
    assert result.stop_reason == StopReason.MAX_TOKENS
    assert result.state is State.DONE and result.error is not None
    assert "Horizontal Scaling" in result.text
    sent = server.requests[0].body
    assert sent["system"] == [
        {"type": "text", "text": system, "cache_control": {"type": "ephemeral"}}
    ]
    assert breakpoints(sent) == 2


async def test_07_usage_adds_up_over_a_max_tokens_continuation(
    server: ReplayServer, anthropic_fixtures: Path
) -> None:
    (interaction,) = load_cassette(
        anthropic_fixtures / "07_dd-trace_stream_cache_write_max_tokens.yaml"
    )
    server.add(interaction.reply, end_turn("...and that is all."))
    result = await Agent(model(server)).run("Scalable systems?")

    assert result.state is State.DONE
    assert result.usage.cache_write_tokens == 1031
    assert result.usage.input_tokens == 18 + 10
    assert result.usage.output_tokens == 100 + 2
    sent = server.requests[1].body
    check_wire(sent)
    assert [m["role"] for m in sent["messages"]] == ["user", "assistant", "user"]


async def test_09_401_fails_without_retry(server: ReplayServer, anthropic_fixtures: Path) -> None:
    (interaction,) = load_cassette(
        anthropic_fixtures / "09_dd-trace_error_401_authentication_error.yaml"
    )
    server.add(interaction.reply)
    agent = Agent(
        server.closing(
            AnthropicModel(SONNET, base_url=server.url, api_key="sk-wrong", max_retries=2)
        ),
        retry_backoff_seconds=0.001,
    )
    result = await agent.run("Hello")

    assert result.state is State.FAILED
    assert result.error is not None
    assert "invalid x-api-key" in result.error
    assert "check the API key" in result.error and "ANTHROPIC_API_KEY" in result.error
    assert "sk-wrong" not in result.error
    assert len(server.requests) == 1


async def test_10_stop_sequence_kept(server: ReplayServer, anthropic_fixtures: Path) -> None:
    (interaction,) = load_cassette(
        anthropic_fixtures / "10_pydantic-ai_nonstream_stop_sequence.yaml"
    )
    server.add(interaction.reply)
    agent = Agent(model(server, stop_sequences=["Paris"]))
    result = await agent.run(interaction.request["messages"][0]["content"][0]["text"])

    assert result.state is State.DONE
    assert result.stop_reason == StopReason.STOP_SEQUENCE
    last = result.messages[-1]
    assert isinstance(last, AssistantMessage)
    assert last.stop_sequence == "Paris"
    assert result.text == "The beautiful city of "
    assert server.requests[0].body["stop_sequences"] == ["Paris"]


@pytest.mark.parametrize("settings", [{"temperature": 0.0, "max_tokens": 50}])
async def test_model_settings_are_sent(server: ReplayServer, settings: dict[str, Any]) -> None:
    server.add(end_turn("ok"))
    await Agent(model(server), model_settings=settings).run("hi")
    body = server.requests[0].body
    assert body["temperature"] == 0.0 and body["max_tokens"] == 50
    assert json.dumps(body).count("cache_control") == 1
