"""The conversation apart from the agent (issue 35, item 1): one way to replace the history, the
event bus, run settings read once when a run is claimed, and a `Run` that holds no agent."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from statemachine_agent import (
    Agent,
    AssistantMessage,
    Compaction,
    Message,
    Run,
    State,
    TextBlock,
    ToolCallBlock,
    ToolResultMessage,
    UserMessage,
    tool,
)
from statemachine_agent.models import ScriptedModel
from statemachine_agent.testing import assert_valid_history
from statemachine_agent.testing.steps import call, text_response, tool_response


@tool
def lookup() -> str:
    """Look something up."""
    return "found"


def _history() -> list[Message]:
    history: list[Message] = [UserMessage("task")]
    for n in range(3):
        block = ToolCallBlock(id=f"h{n}", name="lookup", input={})
        history.append(AssistantMessage(content=[block], stop_reason="tool_use"))
        history.append(
            ToolResultMessage(
                tool_call_id=f"h{n}", tool_name="lookup", content=[TextBlock(text="r" * 400)]
            )
        )
    return history


async def test_compaction_inside_a_run_replaces_the_history_through_the_conversation() -> None:
    """A compaction inside a run swaps the history the one way the setter and restore do: the
    call ids start over from the new history (the summarized calls are gone from them)."""

    def summarize(old: Sequence[Message]) -> str:
        return "summary"

    agent = Agent(
        ScriptedModel([text_response("answer")]),
        tools=[lookup],
        messages=_history(),
        compaction=Compaction(threshold=50, keep_recent=0, summarize=summarize),
    )
    assert agent.conversation.call_ids == {"h0", "h1", "h2"}
    result = await agent.run("next")
    assert result.state is State.DONE
    assert agent.messages[0].text.endswith("summary")  # type: ignore[union-attr]
    assert agent.conversation.call_ids == set()  # the summarized calls left with their messages
    assert_valid_history(agent.messages)


def test_replacing_the_history_resets_call_ids_projection_and_meter() -> None:
    agent = Agent(ScriptedModel([]), messages=_history())
    projector = agent.conversation.projector
    agent.messages = [UserMessage("fresh")]
    assert agent.conversation.call_ids == set()
    assert agent.conversation.projector is not projector
    assert agent.messages == [UserMessage("fresh")]


async def test_a_run_holds_settings_conversation_and_bus_and_no_agent() -> None:
    seen: list[Run] = []

    async def look() -> str:
        """Look at the run."""
        run = agent.current_run
        assert run is not None
        seen.append(run)
        return "ok"

    agent = Agent(ScriptedModel([tool_response(call("look")), text_response("done")]), tools=[look])
    result = await agent.run("go")
    assert result.state is State.DONE
    (run,) = seen
    assert not hasattr(run, "agent")
    assert run.conversation is agent.conversation
    assert run.bus is agent.bus
    assert run.machine is agent.machine
    assert run.settings.model is agent.model
    assert agent.current_run is None  # released once the run ended


async def test_configuration_assigned_during_a_run_applies_from_the_next_run() -> None:
    """The configuration is read once, when a run is claimed: a tool that lowers
    ``agent.max_turns`` mid-run does not cut the run short; the next run has the new cap."""

    @tool
    def tighten() -> str:
        """Lower the cap."""
        agent.max_turns = 1
        return "tightened"

    script = [
        tool_response(call("tighten", id="t1")),
        tool_response(call("tighten", id="t2")),
        text_response("done"),
        tool_response(call("tighten", id="t3")),
        tool_response(call("tighten", id="t4")),
    ]
    agent = Agent(ScriptedModel(script), tools=[tighten], max_turns=5)
    first = await agent.run("go")
    assert (first.state, first.turns) == (State.DONE, 3)
    second = await agent.run("again")
    assert (second.state, second.turns) == (State.MAX_TURNS, 1)


def test_unsubscribing_from_the_bus_stops_delivery_and_listening() -> None:
    agent = Agent(ScriptedModel([text_response("hi")]))
    got: list[str] = []
    unsubscribe = agent.subscribe(lambda event: got.append(event.type))
    assert agent.bus.listening()
    agent.run_sync("hello")
    assert got[0] == "run_start" and got[-1] == "run_end"
    unsubscribe()
    assert not agent.bus.listening()
    assert agent.bus.subscribers == ()


def test_a_subscribed_async_callback_is_refused() -> None:
    async def callback(event: object) -> None:
        return None

    agent = Agent(ScriptedModel([]))
    with pytest.raises(TypeError, match="async"):
        agent.subscribe(callback)
