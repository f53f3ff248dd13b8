"""Issue 31, cases 5 and 6 on the wire: the real SDK against the local replay server.

5. A streamed ``tool_use`` whose ``partial_json`` holds ``1e400`` or ``NaN``: the call is answered
   with an error naming the field and the value, the next request body is strict JSON (the SDK's
   encoder would refuse it otherwise), also after a session-log resume.
6. ``tool_choice`` from ``model_settings`` is sent only in a request with ``tools`` (not in the
   summary request of compaction).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from statemachine_agent import (
    Agent,
    AssistantMessage,
    Compaction,
    State,
    TextBlock,
    ToolCallBlock,
    ToolResultMessage,
    UserMessage,
    tool,
)
from statemachine_agent.models import AnthropicModel
from statemachine_agent.testing import FakeMessagesAPI

from .replay_server import ReplayServer, message_to_sse, sse_reply

MODEL = "claude-haiku-4-5"


def _refuse(text: str) -> Any:
    raise ValueError(f"not JSON: {text}")


def strict(raw: bytes) -> Any:
    """The body as the API parses it: NaN and Infinity refused."""
    return json.loads(raw, parse_constant=_refuse)


def message(content: list[dict[str, Any]], stop_reason: str) -> dict[str, Any]:
    return {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": MODEL,
        "content": content,
        "stop_reason": stop_reason,
        "stop_sequence": None,
        "usage": {"input_tokens": 10, "output_tokens": 3},
    }


def streamed_call(call_id: str, name: str, partial_json: str) -> list[dict[str, Any]]:
    """Raw SSE events of one ``tool_use`` whose arguments arrive as ``partial_json`` fragments."""
    start = {**message([], "tool_use"), "stop_reason": None}
    head, tail = partial_json[: len(partial_json) // 2], partial_json[len(partial_json) // 2 :]
    block = {"type": "tool_use", "id": call_id, "name": name, "input": {}}
    return [
        {"type": "message_start", "message": start},
        {"type": "content_block_start", "index": 0, "content_block": block},
        *(
            {
                "type": "content_block_delta",
                "index": 0,
                "delta": {"type": "input_json_delta", "partial_json": part},
            }
            for part in ("", head, tail)
        ),
        {"type": "content_block_stop", "index": 0},
        {
            "type": "message_delta",
            "delta": {"stop_reason": "tool_use", "stop_sequence": None},
            "usage": {"output_tokens": 5},
        },
        {"type": "message_stop"},
    ]


def answer(text: str) -> Any:
    return sse_reply(message_to_sse(message([{"type": "text", "text": text}], "end_turn")))


ran: list[Any] = []


@tool
def set_limit(limit: float) -> str:
    """Set a limit."""
    ran.append(limit)
    return f"limit {limit}"


def tool_results(body: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        b
        for m in body["messages"]
        for b in m["content"]
        if isinstance(b, dict) and b.get("type") == "tool_result"
    ]


@pytest.mark.parametrize(
    ("partial", "shown"), [('{"limit": 1e400}', "1e400"), ('{"limit": NaN}', "NaN")]
)
async def test_streamed_non_finite_input_answered_and_next_request_strict_json(
    server: ReplayServer, tmp_path: Path, partial: str, shown: str
) -> None:
    ran.clear()
    server.add(sse_reply(streamed_call("toolu_x", "set_limit", partial)), answer("Fixed."))
    model = server.closing(AnthropicModel(MODEL, base_url=server.url, api_key="test"))
    path = tmp_path / "s.jsonl"
    agent = Agent(model, tools=[set_limit], session=path)
    result = await agent.run("Set the limit")
    agent.close()
    assert (result.state, result.text, result.error) == (State.DONE, "Fixed.", None)
    assert ran == []  # the tool did not run
    assert len(server.requests) == 2
    second = strict(server.requests[1].raw)  # strict JSON
    (only,) = tool_results(second)
    uses = [b for m in second["messages"] for b in m["content"] if b.get("type") == "tool_use"]
    assert [u["id"] for u in uses] == ["toolu_x"]  # the call's id echoed, with one result
    assert only["tool_use_id"] == "toolu_x" and only["is_error"] is True
    text = "".join(c["text"] for c in only["content"])
    assert f"the value of 'limit' is {shown}" in text, text

    # Resumed from the session log: the next request is strict JSON too.
    server.add(answer("Again."))
    resumed = Agent.resume(
        path,
        model=server.closing(AnthropicModel(MODEL, base_url=server.url, api_key="test")),
        tools=[set_limit],
    )
    try:
        again = await resumed.run("Once more")
    finally:
        resumed.close()
    assert (again.state, again.text) == (State.DONE, "Again.")
    third = strict(server.requests[2].raw)
    assert [r["tool_use_id"] for r in tool_results(third)] == ["toolu_x"]
    assert ran == []


async def test_thirty_digit_integer_reaches_the_tool_exactly(server: ReplayServer) -> None:
    seen: list[int] = []

    @tool
    def count(n: int) -> str:
        """Count."""
        seen.append(n)
        return "counted"

    digits = "123456789012345678901234567890"
    server.add(sse_reply(streamed_call("toolu_n", "count", '{"n": ' + digits + "}")), answer("ok"))
    model = server.closing(AnthropicModel(MODEL, base_url=server.url, api_key="test"))
    result = await Agent(model, tools=[count]).run("Count")
    assert result.state is State.DONE
    assert seen == [int(digits)]
    assert digits.encode() in server.requests[1].raw


@tool
def lookup(key: str) -> str:
    """Look a key up."""
    return "r" * 400


@pytest.mark.parametrize("choice", [{"type": "any"}, {"type": "auto"}])
async def test_summary_request_carries_no_tool_choice_on_the_wire(
    server: ReplayServer, choice: dict[str, Any]
) -> None:
    history: list[Any] = [UserMessage("task")]
    for n in range(3):
        history.append(
            AssistantMessage(
                content=[ToolCallBlock(id=f"h{n}", name="lookup", input={"key": "k"})],
                stop_reason="tool_use",
            )
        )
        history.append(
            ToolResultMessage(
                tool_call_id=f"h{n}", tool_name="lookup", content=[TextBlock(text="r" * 400)]
            )
        )
    server.add(answer("SUMMARY"), answer("done"))
    model = server.closing(AnthropicModel(MODEL, base_url=server.url, api_key="test"))
    agent = Agent(
        model,
        tools=[lookup],
        messages=history,
        model_settings={"tool_choice": choice},
        compaction=Compaction(threshold=50, keep_recent=0),
    )
    result = await agent.run("next")
    assert result.state is State.DONE, result.error
    summary, turn = (r.body for r in server.requests)
    assert "tools" not in summary and "tool_choice" not in summary
    assert [t["name"] for t in turn["tools"]] == ["lookup"] and turn["tool_choice"] == choice


def test_body_without_tools_drops_tool_choice_and_server_tools_keep_it() -> None:
    from statemachine_agent.models import ModelRequest

    plain = AnthropicModel(MODEL, api_key="test")
    request = ModelRequest([UserMessage("hi")], None, [], {"tool_choice": {"type": "any"}})
    assert "tool_choice" not in plain.body(request)
    search = {"type": "web_search_20250305", "name": "web_search"}
    served = AnthropicModel(MODEL, api_key="test", server_tools=[search])
    assert served.body(request)["tool_choice"] == {"type": "any"}


async def test_server_tools_only_agent_keeps_tool_choice_and_tools_on_the_wire() -> None:
    """An agent with no function tools whose model sends server tools: every request offers a
    tool, so the user's ``tool_choice`` stays (dropping it would change what the model may do)."""
    search = {"type": "web_search_20250305", "name": "web_search"}
    with FakeMessagesAPI([{"content": [{"type": "text", "text": "Found it."}]}]) as api:
        async with api.model(MODEL, server_tools=[search]) as model:
            agent = Agent(model, model_settings={"tool_choice": {"type": "any"}})
            result = await agent.run("Search the web")
    assert (result.state, result.text) == (State.DONE, "Found it.")
    (request,) = api.requests
    assert [{k: t[k] for k in search} for t in request.body["tools"]] == [search]
    assert request.body["tool_choice"] == {"type": "any"}
