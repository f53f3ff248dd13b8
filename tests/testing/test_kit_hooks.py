"""The kit catches broken hooks with a short shrunk example, and passes correct ones (issue 5,
case 1)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis.stateful import run_state_machine_as_test
from kit_find import FIND
from kit_find import kit_failure as find_failure

from statemachine_agent import (
    Agent,
    AssistantMessage,
    LoopData,
    Run,
    State,
    ToolCallInfo,
    ToolResultMessage,
    TransitionSpec,
    TurnEnd,
)
from statemachine_agent.testing import AgentKit, agent_state_machine

# A hypothesis search (and shrink) is CPU bound: seconds alone, minutes on a loaded 2-core
# machine (it timed out at 120 s with two suites running beside other work). The timeout only
# catches a hang; no behaviour here depends on time.
pytestmark = pytest.mark.timeout(900)


def kit_failure(factory: Any) -> str:
    """Run the kit on ``factory``'s agent, expect it to fail, return the shrunk example."""
    return "\n".join(find_failure(agent_state_machine(factory)))


# -- broken hooks -------------------------------------------------------------------------------


def drops_second_result(kit: AgentKit) -> Agent:
    """An after_tool_call hook that drops the result of the batch's second call.

    The engine re-addresses any result a hook returns to the call it ran for, so the only way a
    hook can lose a result is by editing the history, which is what this one does.
    """
    dropping: set[str] = set()

    def after_tool_call(info: ToolCallInfo, result: ToolResultMessage) -> None:
        batch = next(m for m in reversed(agent.messages) if isinstance(m, AssistantMessage))
        if len(batch.tool_calls) > 1 and info.call.id == batch.tool_calls[1].id:
            dropping.add(info.call.id)

    def drop(event: object) -> None:
        # When the turn ends, its results are in the history: take the second one out.
        if isinstance(event, TurnEnd):
            for message in list(agent.messages):
                if isinstance(message, ToolResultMessage) and message.tool_call_id in dropping:
                    agent.messages.remove(message)

    agent = kit.agent(after_tool_call=after_tool_call)
    agent.subscribe(drop)
    return agent


def reorders_tool_calls(kit: AgentKit) -> Agent:
    """A callback on entering executing_tools that reverses the response's content (so its tool
    calls run, and are answered, in reverse order)."""

    def reverse(data: LoopData) -> None:
        if data.response is not None:
            content = list(reversed(data.response.content))
            data.response = data.response.model_copy(update={"content": content})

    agent = kit.agent()
    agent.machine.on_enter(State.EXECUTING_TOOLS, reverse)
    return agent


def skips_tool_results(kit: AgentKit) -> Agent:
    """A guard that sends the run back to awaiting_model when the response has tool calls, so
    they never get results."""

    def has_calls(data: LoopData) -> bool:
        return data.response is not None and bool(data.response.tool_calls)

    agent = kit.agent()
    agent.machine.add_transition(
        TransitionSpec(
            "model_replied", (State.AWAITING_MODEL,), State.AWAITING_MODEL, (has_calls,), "skip"
        )
    )
    return agent


def test_kit_catches_after_tool_call_dropping_the_second_result() -> None:
    report = kit_failure(drops_second_result)
    assert "have no result" in report or "before the results of" in report


def test_kit_catches_enter_callback_reordering_tool_calls() -> None:
    report = kit_failure(reorders_tool_calls)
    assert "out of order" in report


def test_kit_catches_guard_returning_to_awaiting_model_without_results(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Issue 31, case 9: the old engine (open calls answered only in the projected request,
    never in the stored history) put back by hand; the kit's stateful test catches it."""
    monkeypatch.setattr(Run, "answer_open_calls", lambda self: None)
    report = kit_failure(skips_tool_results)
    assert "before the results of" in report or "have no result" in report


def skips_into_a_user_state(kit: AgentKit) -> Agent:
    """A guarded branch on model_replied, before tool_calls, into a user state that asks the
    model again (so the response's calls are never run)."""

    async def asking(run: Run) -> str:
        return await run.request_model()

    agent = kit.agent()
    agent.machine.add_state("asking", asking)
    agent.machine.add_transition(
        TransitionSpec(
            "model_replied",
            (State.AWAITING_MODEL,),
            "asking",
            (lambda data: data.response is not None and len(data.response.tool_calls) > 1,),
            label="ask_instead",
            before="tool_calls",
        )
    )
    agent.machine.add_transition(
        TransitionSpec("model_replied", ("asking",), State.DONE, label="asked")
    )
    return agent


@pytest.mark.parametrize("factory", [skips_tool_results, skips_into_a_user_state])
def test_user_branch_before_tool_calls_keeps_every_call_answered_in_the_stored_history(
    factory: Any,
) -> None:
    """Issue 31, case 9: whichever state the user's branch enters, every call gets its result in
    the stored history (the kit checks it after every step)."""
    run_state_machine_as_test(agent_state_machine(factory), settings=FIND)


# -- correct hooks ------------------------------------------------------------------------------


def over_budget(data: LoopData) -> bool:
    """The budget: two turns per run."""
    return data.turns >= 2


def budget_and_audit(kit: AgentKit, audit: list[str]) -> Agent:
    agent = kit.agent()
    agent.machine.add_transition(
        TransitionSpec("tools_finished", (State.EXECUTING_TOOLS,), State.MAX_TURNS, (over_budget,))
    )
    for state in State:
        agent.machine.on_enter(state, lambda _data, s=state: audit.append(s.value))
    return agent


def test_kit_passes_a_budget_guard_and_an_audit_log() -> None:
    audits: list[list[str]] = []

    def factory(kit: AgentKit) -> Agent:
        audits.append([])
        return budget_and_audit(kit, audits[-1])

    def check(agent: Agent) -> None:
        log = audits[-1]
        # The audit log saw every state the agent entered, ending where the agent is.
        assert not log or log[-1] == agent.state.value, (log, agent.state)

    run_state_machine_as_test(agent_state_machine(factory, check=check), settings=FIND)
    assert any("max_turns" in log for log in audits), "the budget never ended a run"


def test_budget_guard_ends_a_long_run_in_max_turns() -> None:
    from statemachine_agent.testing import drive_run
    from statemachine_agent.testing._kit import ScriptPlayer, check_run

    audit: list[str] = []
    kit = AgentKit(ScriptPlayer())
    agent = budget_and_audit(kit, audit)
    call = {"type": "tool_use", "name": "act", "input": {"behaviour": "return"}}
    kit.model.load(
        [{"content": [{**call, "id": f"c{i}"}], "stop_reason": "tool_use"} for i in range(4)]
    )
    import asyncio

    report = asyncio.run(drive_run(agent, "go"))
    assert report.result is not None and report.result.state is State.MAX_TURNS
    assert report.result.turns == 2
    assert check_run(agent, report) == []
    assert audit == [
        "awaiting_model",
        "executing_tools",
        "awaiting_model",
        "executing_tools",
        "max_turns",
    ]
