"""Issue 15, bug 8: a provider block that carries its own ``cache_control`` is sent without it,
so a request with tools and a system prompt holds exactly the engine's three breakpoints (the API
accepts at most four). Through `AnthropicModel` and the real SDK against the replay server."""

from __future__ import annotations

from typing import Any

from statemachine_agent import (
    Agent,
    AssistantMessage,
    ProviderBlock,
    State,
    TextBlock,
    UserMessage,
    tool,
)

from .replay_server import ReplayServer, closing_model, message_to_sse, sse_reply

EPHEMERAL = {"type": "ephemeral"}


@tool
def lookup(key: str) -> str:
    """Look a key up."""
    return key


def breakpoints(value: Any, where: str = "") -> list[str]:
    """Where ``value`` holds a ``cache_control``, as paths like ``tools[0]``."""
    found: list[str] = []
    if isinstance(value, dict):
        if value.get("cache_control") is not None:
            found.append(where)
        for key, item in value.items():
            found += breakpoints(item, f"{where}.{key}" if where else key)
    elif isinstance(value, list):
        for i, item in enumerate(value):
            found += breakpoints(item, f"{where}[{i}]")
    return found


async def test_provider_block_cache_control_is_dropped_three_breakpoints(
    server: ReplayServer,
) -> None:
    searched = AssistantMessage(
        content=[
            ProviderBlock(
                data={
                    "type": "server_tool_use",
                    "id": "srv_1",
                    "name": "web_search",
                    "input": {"query": "weather"},
                    "cache_control": EPHEMERAL,
                }
            ),
            ProviderBlock(
                data={
                    "type": "web_search_tool_result",
                    "tool_use_id": "srv_1",
                    "content": [],
                    "cache_control": EPHEMERAL,
                }
            ),
            TextBlock(text="Sunny."),
        ],
        stop_reason="end_turn",
    )
    server.add(
        sse_reply(
            message_to_sse(
                {
                    "type": "message",
                    "role": "assistant",
                    "model": "claude-replay-test",
                    "content": [{"type": "text", "text": "Still sunny."}],
                    "stop_reason": "end_turn",
                    "usage": {"input_tokens": 10, "output_tokens": 2},
                }
            )
        )
    )
    model = closing_model(server)
    agent = Agent(
        model,
        tools=[lookup],
        system="Be brief.",
        messages=[UserMessage("Weather?"), searched],
    )
    result = await agent.run("And tomorrow?")
    assert result.state is State.DONE and result.text == "Still sunny."
    (sent,) = [r.body for r in server.requests]
    assert sorted(breakpoints(sent)) == ["messages[2].content[0]", "system[0]", "tools[0]"]
    provider_blocks = sent["messages"][1]["content"][:2]
    assert [b["type"] for b in provider_blocks] == ["server_tool_use", "web_search_tool_result"]
    assert all("cache_control" not in b for b in provider_blocks)
    # The history keeps the block as it was received; only the request is cleaned.
    assert searched.content[0].data["cache_control"] == EPHEMERAL  # type: ignore[union-attr]
