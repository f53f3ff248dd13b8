"""Issue 37, item 1: ``agent.as_tool(...)`` runs a child agent per call; its answer (or typed
output) is the result, any other ending an error result naming the state and why."""

from __future__ import annotations

import asyncio
import json

import pytest
from pydantic import BaseModel

from statemachine_agent import (
    Agent,
    Defer,
    State,
    ToolContext,
    ToolDefinitionError,
    tool,
)
from statemachine_agent.models import ScriptedModel
from statemachine_agent.testing import assert_valid_history
from statemachine_agent.testing.steps import call, text_response, tool_response

from .subagent_helpers import lookup, orchestrator, researcher, result_of


async def test_the_childs_final_text_is_the_calls_result() -> None:
    child = researcher()
    parent = orchestrator(child)
    result = await parent.run("Tell me about otters")
    assert result.state is State.DONE
    answer = result_of(result.messages, "p1")
    assert answer.is_error is False
    assert answer.text == "Otters hold hands."
    # the child ran its own machine and tools: its history holds its own call and result
    assert [m.role for m in child.messages] == ["user", "assistant", "tool_result", "assistant"]
    assert child.messages[0].text == "otters"
    assert_valid_history(child.messages)
    assert_valid_history(result.messages)


async def test_the_tool_takes_a_prompt_string() -> None:
    research = researcher().as_tool("research", "Research a topic.")
    assert research.input_schema["properties"]["prompt"]["type"] == "string"
    assert research.input_schema["required"] == ["prompt"]
    assert research.description == "Research a topic."


class Query(BaseModel):
    topic: str
    depth: int = 1


class Finding(BaseModel):
    fact: str
    confidence: float


async def test_typed_input_and_typed_output_cross_the_call() -> None:
    child = Agent(
        ScriptedModel(
            [tool_response(call("final_result", {"fact": "otters hold hands", "confidence": 0.9}))]
        ),
        output_type=Finding,
    )
    research = child.as_tool("research", "Research.", input_type=Query)
    assert set(research.input_schema["properties"]) == {"topic", "depth"}
    parent = Agent(
        ScriptedModel(
            [
                tool_response(call("research", {"topic": "otters", "depth": 2}, id="p1")),
                text_response("ok"),
            ]
        ),
        tools=[research],
    )
    result = await parent.run("go")
    assert json.loads(child.messages[0].text) == {"topic": "otters", "depth": 2}
    answer = result_of(result.messages, "p1")
    assert answer.is_error is False
    assert json.loads(answer.text) == {"fact": "otters hold hands", "confidence": 0.9}


async def test_a_child_at_max_turns_is_an_error_result_naming_the_state() -> None:
    # the child's max_turns is its own: 1 turn, then it would need a second
    child = researcher(max_turns=1)
    parent = orchestrator(child, max_turns=10)
    result = await parent.run("go")
    answer = result_of(result.messages, "p1")
    assert answer.is_error is True
    assert answer.text.startswith("Sub-agent 'research' ended in state 'max_turns': ")
    assert "max_turns" in answer.text
    assert answer.details["state"] == "max_turns"
    assert result.state is State.DONE  # the parent goes on: its own cap is 10
    assert_valid_history(child.messages)


async def test_a_failed_child_is_an_error_result_saying_why() -> None:
    child = researcher([{"error": {"type": "invalid_request_error", "message": "bad request"}}])
    parent = orchestrator(child)
    result = await parent.run("go")
    answer = result_of(result.messages, "p1")
    assert answer.is_error is True
    assert answer.text.startswith("Sub-agent 'research' ended in state 'failed': ")
    assert "bad request" in answer.text


async def test_each_call_starts_from_a_fresh_history() -> None:
    steps = [text_response("one"), text_response("two")]
    child = Agent(ScriptedModel(steps))
    parent = Agent(
        ScriptedModel(
            [
                tool_response(call("ask", {"prompt": "first"}, id="p1")),
                tool_response(call("ask", {"prompt": "second"}, id="p2")),
                text_response("ok"),
            ]
        ),
        tools=[child.as_tool("ask", "Ask.")],
    )
    await parent.run("go")
    assert [m.text for m in child.messages] == ["second", "two"]


async def test_a_persistent_child_keeps_its_conversation() -> None:
    steps = [text_response("one"), text_response("two")]
    child = Agent(ScriptedModel(steps))
    parent = Agent(
        ScriptedModel(
            [
                tool_response(call("ask", {"prompt": "first"}, id="p1")),
                tool_response(call("ask", {"prompt": "second"}, id="p2")),
                text_response("ok"),
            ]
        ),
        tools=[child.as_tool("ask", "Ask.", persistent=True)],
    )
    await parent.run("go")
    assert [m.text for m in child.messages] == ["first", "one", "second", "two"]


async def test_concurrent_calls_of_one_sub_agent_are_serialized() -> None:
    """A parallel batch calling the same sub-agent twice: both calls get their own run, one
    after the other (an agent runs one run at a time), never AgentBusyError."""
    inside: list[str] = []
    overlap: list[bool] = []

    @tool
    async def work(ctx: ToolContext, item: str) -> str:
        """Work on an item."""
        overlap.append(bool(inside))
        inside.append(item)
        await asyncio.sleep(0)  # yield to the other call of the batch
        inside.remove(item)
        return f"did {item}"

    child = Agent(
        ScriptedModel(
            [
                tool_response(call("work", {"item": "a"})),
                text_response("a done"),
                tool_response(call("work", {"item": "b"})),
                text_response("b done"),
            ]
        ),
        tools=[work],
    )
    parent = Agent(
        ScriptedModel(
            [
                tool_response(
                    call("ask", {"prompt": "a"}, id="p1"), call("ask", {"prompt": "b"}, id="p2")
                ),
                text_response("ok"),
            ]
        ),
        tools=[child.as_tool("ask", "Ask.")],
    )
    result = await parent.run("go")
    assert result_of(result.messages, "p1").text == "a done"
    assert result_of(result.messages, "p2").text == "b done"
    assert overlap == [False, False]


def test_a_bad_input_type_is_refused_with_a_clear_error() -> None:
    with pytest.raises(ToolDefinitionError, match="input_type must be a pydantic model class"):
        researcher().as_tool("research", "Research.", input_type=dict)  # type: ignore[arg-type]


def test_the_child_keeps_its_own_tools() -> None:
    child = researcher()
    parent = orchestrator(child)
    assert set(parent.tools) == {"research"}
    assert set(child.tools) == {lookup.name}


async def test_a_child_that_asks_for_approval_is_aborted_and_its_result_says_so() -> None:
    """Nobody can decide a sub-agent's calls inside the parent's call: the child's waiting run is
    aborted (its deferred call answered "not run"), and the call's error result names the state
    the child ended in, ``aborted``, and why."""

    def ask_first(info: object) -> Defer:
        return Defer("a person must look first")

    child = researcher(before_tool_call=ask_first)
    parent = orchestrator(child)
    result = await parent.run("Tell me about otters")
    assert result.state is State.DONE
    answer = result_of(result.messages, "p1")
    assert answer.is_error is True
    assert answer.text == (
        "Sub-agent 'research' ended in state 'aborted': it asked for approval of calls c1, "
        "which nobody can give inside a call"
    )
    assert child.state is State.ABORTED
    waiting = result_of(child.messages, "c1")
    assert waiting.is_error is True and waiting.text.startswith("Not run")
    assert_valid_history(child.messages)
    assert_valid_history(result.messages)
