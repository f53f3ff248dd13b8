"""Issue 37: bug reports filed against peers' sub-agents (agents as tools), replayed on ours.

Each test names the behaviour, cites the report it replays and asserts what
``docs/guides/subagents.md`` promises for that case.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from statemachine_agent import (
    Agent,
    Event,
    Message,
    ParentRef,
    RunStart,
    State,
    ToolExecutionStart,
    ToolResultMessage,
    UsageLimits,
    UserMessage,
    tool,
)
from statemachine_agent.models import FunctionModel, ScriptedModel
from statemachine_agent.testing import assert_valid_history
from statemachine_agent.testing.steps import call, text_response, tool_response

from .subagent_helpers import USAGE, orchestrator, researcher, result_of


def _results(messages: list[Any]) -> list[str]:
    return [m.tool_call_id for m in messages if isinstance(m, ToolResultMessage)]


@pytest.mark.parametrize(
    ("limits", "named", "requests", "tool_calls"),
    [
        # the parent's response 15 tokens + the child's first 15 = 30 > 25: the child's batch is
        # not run, and the parent's next request is never sent
        (UsageLimits(max_total_tokens=25), "max_total_tokens=25", 2, 1),
        # the parent's call p1 is the tree's one tool call: the child's c1 would be a second,
        # and so would the parent's next call p2 (its request is sent, its batch is not run)
        (UsageLimits(max_tool_calls=1), "max_tool_calls=1", 3, 1),
        # the parent's request and the child's first: the child's second is never sent
        (UsageLimits(max_requests=2), "max_requests=2", 2, 2),
    ],
    ids=["tokens", "tool_calls", "requests"],
)
async def test_the_parents_usage_limits_apply_across_the_whole_tree(
    limits: UsageLimits, named: str, requests: int, tool_calls: int
) -> None:
    """pydantic-ai-harness forwarded the parent's usage but not its ``usage_limits`` to child
    runs, so a parent limit did not bind inside the tree:
    https://github.com/pydantic/pydantic-ai-harness/issues/588

    Ours: the child is checked against the parent's limits in the tree's counts, a limit reached
    inside the child ends it ``max_turns`` and the call's result says it is the parent run's
    limit (whichever limit it is), and the parent stops at its next check."""
    child = researcher()  # no limits of its own
    parent = orchestrator(
        child,
        [
            tool_response(call("research", {"prompt": "otters"}, id="p1"), usage=USAGE),
            tool_response(call("research", {"prompt": "again"}, id="p2"), usage=USAGE),
            text_response("never", usage=USAGE),
        ],
        limits=limits,
    )
    result = await parent.run("go")
    assert child.state is State.MAX_TURNS
    answer = result_of(result.messages, "p1")
    assert answer.is_error is True
    assert answer.text.startswith("Sub-agent 'research' ended in state 'max_turns': ")
    assert f"(the parent run's limit: the usage limit {named} was reached" in answer.text
    assert result.state is State.MAX_TURNS
    assert named in (result.error or "")
    assert result.counts.requests == requests
    assert result.counts.tool_calls == tool_calls  # p2 never runs
    p2 = [m for m in result.messages if isinstance(m, ToolResultMessage) and m.tool_call_id == "p2"]
    assert all(m.is_error and named in m.text for m in p2)  # refused by the limit, if asked
    assert_valid_history(result.messages)
    assert_valid_history(child.messages)


async def test_the_parents_abort_stops_a_child_waiting_on_its_model() -> None:
    """Cancelling a parent run left a synchronously spawned sub-agent running to completion
    (more model and tool calls after the stop):
    https://github.com/agentscope-ai/agentscope-java/issues/2408

    Ours: the parent's abort aborts the child's run at once, also while the child waits on its
    model; the child sends no further request and runs no tool, and every call at both levels
    is answered."""
    requests: list[int] = []
    outcome: list[str] = []
    parent: Agent | None = None

    async def child_model(messages: list[Message], request: Any) -> Any:
        requests.append(len(messages))
        assert parent is not None
        parent.abort("the user pressed stop")
        try:
            await asyncio.Event().wait()  # never set: only the abort ends this request
        except asyncio.CancelledError:
            outcome.append("request cancelled")
            raise
        return text_response("never")  # pragma: no cover - the wait never ends

    ran: list[str] = []

    @tool
    def side_effect() -> str:
        """Do something the user no longer wants."""
        ran.append("ran")
        return "done"

    child = Agent(FunctionModel(child_model), tools=[side_effect])
    parent = orchestrator(child)
    result = await parent.run("go")
    assert result.state is State.ABORTED
    assert child.state is State.ABORTED
    assert child.current_run is None
    assert outcome == ["request cancelled"]
    assert len(requests) == 1 and ran == []
    answer = result_of(result.messages, "p1")
    assert answer.is_error is True
    assert "ended in state 'aborted'" in answer.text
    assert "the user pressed stop" in answer.text
    assert result.counts.requests == 2  # the parent's one and the child's cancelled one
    assert_valid_history(result.messages)
    assert_valid_history(child.messages)


async def test_a_failing_sub_agent_in_a_parallel_batch_leaves_its_siblings_results() -> None:
    """deepagents: one sub-agent raising in a parallel batch of ``task`` calls failed the whole
    tool node, dropped the completed siblings' results and ended the run:
    https://github.com/langchain-ai/deepagents/pull/5067

    Ours: a sub-agent whose run fails (here its model raises) answers its own call with an
    error result naming the state and why; the other sub-agent's result stands, every call gets
    exactly one result and the parent goes on to ``done``."""

    def broken_model(messages: list[Message], request: Any) -> Any:
        raise RuntimeError("the upstream server returned an error")

    broken = Agent(FunctionModel(broken_model))
    healthy = researcher()
    parent = Agent(
        ScriptedModel(
            [
                tool_response(
                    call("flaky", {"prompt": "a"}, id="p1"),
                    call("research", {"prompt": "otters"}, id="p2"),
                    usage=USAGE,
                ),
                text_response("Recovered from the failure.", usage=USAGE),
            ]
        ),
        tools=[
            broken.as_tool("flaky", "A flaky helper."),
            healthy.as_tool("research", "Research a topic."),
        ],
    )
    result = await parent.run("go")
    assert result.state is State.DONE
    assert result.text == "Recovered from the failure."
    assert broken.state is State.FAILED
    failed = result_of(result.messages, "p1")
    assert failed.is_error is True
    assert failed.text.startswith("Sub-agent 'flaky' ended in state 'failed': ")
    assert "the upstream server returned an error" in failed.text
    sibling = result_of(result.messages, "p2")
    assert sibling.is_error is False
    assert sibling.text == "Otters hold hands."
    assert sorted(_results(result.messages)) == ["p1", "p2"]
    assert_valid_history(result.messages)


async def test_parallel_calls_of_one_sub_agent_do_not_share_a_conversation() -> None:
    """smolagents: two parallel calls of one managed agent ran on one instance and shared its
    memory and step counter, so the calls' results came out identical:
    https://github.com/huggingface/smolagents/issues/1781

    Ours: each call of a sub-agent tool is a run of its own on a fresh history (calls of one
    sub-agent are serialized), so each call sees only its own prompt and answers it."""
    seen: list[list[str]] = []

    def echo(messages: list[Message], request: Any) -> str:
        prompts = [m.text for m in messages if isinstance(m, UserMessage)]
        seen.append(prompts)
        return f"answer to {prompts[-1]}"

    child = Agent(FunctionModel(echo))
    parent = Agent(
        ScriptedModel(
            [
                tool_response(
                    call("ask", {"prompt": "alpha"}, id="p1"),
                    call("ask", {"prompt": "beta"}, id="p2"),
                ),
                text_response("ok"),
            ]
        ),
        tools=[child.as_tool("ask", "Ask.")],
    )
    events: list[Event] = []
    parent.subscribe(events.append)
    result = await parent.run("go")
    assert result.state is State.DONE
    assert result_of(result.messages, "p1").text == "answer to alpha"
    assert result_of(result.messages, "p2").text == "answer to beta"
    assert sorted(seen) == [["alpha"], ["beta"]]  # neither call saw the other's conversation
    starts = [e for e in events if isinstance(e, RunStart) and e.parent is not None]
    assert len({e.run_id for e in starts}) == 2  # two runs, one per call
    assert sorted(e.parent.call_id for e in starts if e.parent) == ["p1", "p2"]


async def test_forwarded_events_name_the_sub_agent_that_produced_them() -> None:
    """VoltAgent: events forwarded from sub-agents to the parent's stream carried the parent
    agent's identity instead of the sub-agent that ran the tool:
    https://github.com/VoltAgent/voltagent/issues/849

    Ours: with two different sub-agents running in parallel, every forwarded event carries the
    `ParentRef` of the call that started its run (parent run id, call id, tool name), each run's
    events arrive in order, and the parent's own events have no ``parent``."""

    @tool
    def tool_a() -> str:
        """Sub-agent A's tool."""
        return "a"

    @tool
    def tool_b() -> str:
        """Sub-agent B's tool."""
        return "b"

    def worker(tool_name: str, answer: str) -> Agent:
        return Agent(
            ScriptedModel([tool_response(call(tool_name, {})), text_response(answer)]),
            tools=[tool_a if tool_name == "tool_a" else tool_b],
        )

    parent = Agent(
        ScriptedModel(
            [
                tool_response(
                    call("agent_a", {"prompt": "x"}, id="p1"),
                    call("agent_b", {"prompt": "y"}, id="p2"),
                ),
                text_response("ok"),
            ]
        ),
        tools=[
            worker("tool_a", "A done").as_tool("agent_a", "Sub-agent A."),
            worker("tool_b", "B done").as_tool("agent_b", "Sub-agent B."),
        ],
    )
    events: list[Event] = []
    parent.subscribe(events.append)
    result = await parent.run("go")
    assert result.state is State.DONE
    expected = {
        "tool_a": ParentRef(result.run_id, "p1", "agent_a"),
        "tool_b": ParentRef(result.run_id, "p2", "agent_b"),
    }
    nested_tools = [e for e in events if isinstance(e, ToolExecutionStart) and e.parent is not None]
    assert sorted(e.call.name for e in nested_tools) == ["tool_a", "tool_b"]
    for event in nested_tools:
        assert event.parent == expected[event.call.name]
    by_run: dict[str, list[Event]] = {}
    for event in events:
        if event.parent is not None:
            by_run.setdefault(event.run_id, []).append(event)
    assert len(by_run) == 2
    for run_events in by_run.values():
        assert len({e.parent for e in run_events}) == 1  # one run, one call
        assert [e.seq for e in run_events] == list(range(1, len(run_events) + 1))
    own = [e for e in events if e.parent is None]
    assert {e.run_id for e in own} == {result.run_id}
    assert not any(isinstance(e, ToolExecutionStart) and e.call.name in expected for e in own)
