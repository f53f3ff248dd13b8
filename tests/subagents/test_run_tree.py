"""Issue 37, item 2: one run tree. The child's events reach the parent's subscribers with
``parent`` set, in order; the parent's abort aborts the child with every call answered at both
levels; the child's usage counts toward the parent's limits; ``max_turns`` is the child's own."""

from __future__ import annotations

import asyncio
from typing import Any

from statemachine_agent import (
    Agent,
    Event,
    ParentRef,
    RunStart,
    State,
    ToolContext,
    ToolExecutionEnd,
    ToolExecutionStart,
    ToolExecutionUpdate,
    UsageLimits,
    event_to_dict,
    tool,
)
from statemachine_agent.models import ScriptedModel
from statemachine_agent.testing import assert_valid_history
from statemachine_agent.testing.steps import call, text_response, tool_response

from .subagent_helpers import orchestrator, researcher, result_of


async def test_child_events_reach_the_parent_with_the_parent_run_and_call() -> None:
    child = researcher()
    parent = orchestrator(child)
    seen: list[Event] = []
    parent.subscribe(seen.append)
    result = await parent.run("go")
    own = [e for e in seen if e.parent is None]
    nested = [e for e in seen if e.parent is not None]
    assert nested, "no event of the child reached the parent's subscribers"
    assert {e.run_id for e in own} == {result.run_id}
    assert [e.seq for e in own] == list(range(1, len(own) + 1))  # the parent's seq unchanged
    child_run = nested[0].run_id
    assert child_run != result.run_id
    assert all(e.parent == ParentRef(result.run_id, "p1", "research") for e in nested)
    assert all(e.run_id == child_run for e in nested)
    assert [e.seq for e in nested] == list(range(1, len(nested) + 1))  # in order, none missed
    assert isinstance(nested[0], RunStart)
    # all of them between the parent's start and end of call p1
    start = next(
        i for i, e in enumerate(seen) if isinstance(e, ToolExecutionStart) and e.parent is None
    )
    end = next(
        i for i, e in enumerate(seen) if isinstance(e, ToolExecutionEnd) and e.parent is None
    )
    places = [i for i, e in enumerate(seen) if e.parent is not None]
    assert start < places[0] and places[-1] < end
    # the JSON shape names the parent for a child's event only
    assert event_to_dict(nested[0])["parent"] == {
        "run_id": result.run_id,
        "call_id": "p1",
        "tool_name": "research",
    }
    assert "parent" not in event_to_dict(own[0])


async def test_a_grandchilds_events_keep_their_own_parent() -> None:
    grandchild = researcher()
    child = Agent(
        ScriptedModel(
            [
                tool_response(call("deeper", {"prompt": "dig"}, id="g1")),
                text_response("dug"),
            ]
        ),
        tools=[grandchild.as_tool("deeper", "Dig deeper.")],
    )
    parent = orchestrator(child)
    seen: list[Event] = []
    parent.subscribe(seen.append)
    result = await parent.run("go")
    child_start = next(e for e in seen if isinstance(e, RunStart) and e.parent is not None)
    assert child_start.parent == ParentRef(result.run_id, "p1", "research")
    deepest = [e for e in seen if e.parent is not None and e.parent.call_id == "g1"]
    assert deepest and all(e.parent.run_id == child_start.run_id for e in deepest)
    assert result_of(result.messages, "p1").text == "dug"


def _waiting_child(**kwargs: Any) -> tuple[Agent, list[str]]:
    """A child whose tool reports progress, then waits until its run is aborted (or ignores
    the abort with ``stubborn``)."""
    ended: list[str] = []
    stubborn = kwargs.pop("stubborn", False)

    @tool
    async def wait(ctx: ToolContext) -> str:
        """Wait."""
        ctx.progress("waiting")  # the parent's subscriber aborts on this update
        try:
            if stubborn:
                await asyncio.Event().wait()  # never set: only a cancellation ends it
            await ctx.signal.wait()
            ended.append("stopped on the abort")
            return "stopped"
        except asyncio.CancelledError:
            ended.append("cancelled")
            raise

    child = Agent(
        ScriptedModel([tool_response(call("wait", {}, id="c1")), text_response("never")]),
        tools=[wait],
        **kwargs,
    )
    return child, ended


def _abort_when_child_tool_starts(parent: Agent) -> None:
    def on_event(event: Event) -> None:
        if isinstance(event, ToolExecutionUpdate) and event.parent is not None:
            parent.abort("the user stopped it")

    parent.subscribe(on_event)


async def test_the_parents_abort_aborts_the_child_and_every_call_is_answered() -> None:
    child, ended = _waiting_child()
    parent = orchestrator(child)
    _abort_when_child_tool_starts(parent)
    result = await parent.run("go")
    assert result.state is State.ABORTED
    assert child.state is State.ABORTED
    assert ended == ["stopped on the abort"]
    answer = result_of(result.messages, "p1")
    assert answer.is_error is True
    assert "ended in state 'aborted'" in answer.text
    assert "the user stopped it" in answer.text
    assert_valid_history(result.messages)
    assert_valid_history(child.messages)
    assert result_of(child.messages, "c1").text == "stopped"


async def test_a_child_tool_ignoring_the_abort_is_cancelled_after_the_childs_grace() -> None:
    child, ended = _waiting_child(stubborn=True, abort_grace_seconds=0)
    parent = orchestrator(child)
    _abort_when_child_tool_starts(parent)
    result = await parent.run("go")
    assert result.state is State.ABORTED
    assert child.state is State.ABORTED
    assert ended == ["cancelled"]
    assert result_of(child.messages, "c1").is_error is True
    assert_valid_history(result.messages)
    assert_valid_history(child.messages)


async def test_the_parents_grace_running_out_cancels_the_child_run() -> None:
    # the child waits out its own long grace; the parent's grace (0) cancels the call first
    child, ended = _waiting_child(stubborn=True, abort_grace_seconds=3600)
    parent = orchestrator(child, abort_grace_seconds=0)
    _abort_when_child_tool_starts(parent)
    result = await parent.run("go")
    assert result.state is State.ABORTED
    assert child.state is State.ABORTED  # the cancelled child run recorded its end
    assert ended == ["cancelled"]
    assert result_of(result.messages, "p1").is_error is True
    assert result_of(child.messages, "c1").is_error is True
    assert_valid_history(result.messages)
    assert_valid_history(child.messages)


async def test_the_childs_usage_counts_toward_the_parents_limits() -> None:
    child = researcher()  # two requests, 15 tokens each
    parent = orchestrator(child, limits=UsageLimits(max_requests=3))
    result = await parent.run("go")
    # 1 parent request + 2 of the child = 3: the parent's next request is over the limit
    assert result.state is State.MAX_TURNS
    assert result.counts.requests == 3
    assert result.counts.tool_calls == 2  # the parent's call and the child's
    assert result.counts.usage.total_tokens == 45
    assert "max_requests=3" in (result.error or "")
    assert result_of(result.messages, "p1").text == "Otters hold hands."


async def test_a_limit_hit_inside_the_child_stops_both_and_says_where() -> None:
    child = researcher()
    parent = orchestrator(child, limits=UsageLimits(max_requests=2))
    result = await parent.run("go")
    assert child.state is State.MAX_TURNS
    assert result.state is State.MAX_TURNS
    answer = result_of(result.messages, "p1")
    assert answer.is_error is True
    assert answer.text.startswith("Sub-agent 'research' ended in state 'max_turns': ")
    assert "max_requests=2" in answer.text
    assert "the parent run's limit" in answer.text
    assert "max_requests=2" in (result.error or "")
    assert result.counts.requests == 2  # the child's second request was never sent
    assert_valid_history(result.messages)
    assert_valid_history(child.messages)


async def test_the_childs_own_limits_count_only_from_its_start() -> None:
    child = researcher(limits=UsageLimits(max_requests=2))
    parent = orchestrator(child, limits=UsageLimits(max_requests=10))
    result = await parent.run("go")
    assert result_of(result.messages, "p1").text == "Otters hold hands."
    assert result.state is State.DONE
    assert result.counts.requests == 4


async def test_the_childs_max_turns_is_its_own() -> None:
    child = researcher(max_turns=5)
    parent = orchestrator(child, max_turns=2)  # the parent's 2 turns; the child's 2 its own
    result = await parent.run("go")
    assert result.state is State.DONE
    assert result.turns == 2
    assert child.current_run is None and child.state is State.DONE
