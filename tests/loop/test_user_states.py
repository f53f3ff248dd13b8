"""States, transitions, guards and callbacks a user adds to the machine: how they may be added,
what an unreachable state or a raising guard or callback does to a run."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from statemachine_agent import (
    Agent,
    LoopData,
    MachineDefinitionError,
    State,
    TransitionSpec,
    tool,
)
from statemachine_agent.models import ScriptedModel
from statemachine_agent.session import check_session
from statemachine_agent.testing import assert_valid_history
from statemachine_agent.testing.steps import call, text_response, tool_response


@tool
def lookup(key: str) -> str:
    """Look a key up."""
    return f"value of {key}"


def _broken_guard(data: LoopData) -> bool:
    return bool(data.response.missing_attribute)  # type: ignore[union-attr]


def _broken_callback(data: LoopData) -> None:
    raise AttributeError("'LoopData' object has no attribute 'nag_count'")


def _broken_action(run: Any) -> None:
    raise AttributeError("'Run' object has no attribute 'nag_count'")


async def _nag(run: Any) -> str:
    return str(await run.request_model())


def _agent_with(where: str, tmp_path: Path) -> tuple[Agent, ScriptedModel, str]:
    """An agent whose user addition raises at ``where``, with a session log; the text its error
    must start with."""
    model = ScriptedModel(
        [
            tool_response(call("lookup", {"key": "k"}, id="c1")),
            tool_response(call("lookup", {"key": "k2"}, id="c2")),
            text_response("done"),
        ]
    )
    agent = Agent(model, tools=[lookup], session=tmp_path / "run.jsonl")
    machine = agent.machine
    into_nagging = TransitionSpec(
        "model_replied",
        (State.AWAITING_MODEL,),
        "nagging",
        (_has_calls,),
        label="nag",
        before="tool_calls",
    )
    out = TransitionSpec("model_replied", ("nagging",), State.EXECUTING_TOOLS, label="nagged")
    if where == "guard":
        machine.add_transition(replace(into_nagging, dest=State.DONE, guards=(_broken_guard,)))
        return agent, model, "The guard '_broken_guard' of transition 'nag' (model_replied) failed"
    if where == "start_guard":  # from idle, where no `fail` transition leads
        machine.add_transition(
            TransitionSpec("start", (State.IDLE,), State.DONE, (_broken_guard,), label="early")
        )
        return agent, model, "The guard '_broken_guard' of transition 'early' (start) failed"
    machine.add_state("nagging", _nag)
    machine.add_transition(into_nagging)
    if where == "action":
        machine.add_transition(replace(out, action=_broken_action))
        return (
            agent,
            model,
            "The action '_broken_action' of transition 'nagged' (model_replied) failed",
        )
    machine.add_transition(out)
    if where == "on_enter":
        machine.on_enter("nagging", _broken_callback)
        return agent, model, "The on_enter callback '_broken_callback' of state 'nagging' failed"
    if where == "on_exit":
        machine.on_exit("nagging", _broken_callback)
        return agent, model, "The on_exit callback '_broken_callback' of state 'nagging' failed"
    raise AssertionError(where)


def _has_calls(data: LoopData) -> bool:
    return data.response is not None and bool(data.response.tool_calls)


@pytest.mark.parametrize("where", ["guard", "start_guard", "on_enter", "on_exit", "action"])
def test_a_raising_guard_or_user_callback_ends_the_run_failed_naming_it_every_call_answered(
    where: str, tmp_path: Path
) -> None:
    agent, _, named = _agent_with(where, tmp_path)
    result = agent.run_sync("go")  # a result, not an exception
    agent.close()
    assert result.state is State.FAILED and agent.state is State.FAILED
    assert result.error is not None and result.error.startswith(named), result.error
    assert "AttributeError: " in result.error
    assert_valid_history(result.messages)  # every call answered
    assert check_session(tmp_path / "run.jsonl")[1] == []
    # the agent is usable afterwards: a fresh definition-free run would go on from ``failed``
    assert agent.machine.stops_run(str(agent.state))


def test_a_keyboard_interrupt_in_a_guard_aborts_the_run_answers_every_call_then_propagates(
    tmp_path: Path,
) -> None:
    def interrupting(data: LoopData) -> bool:
        raise KeyboardInterrupt

    model = ScriptedModel([tool_response(call("lookup", {"key": "k"}, id="c1"))])
    agent = Agent(model, tools=[lookup], session=tmp_path / "run.jsonl")
    agent.machine.add_transition(
        TransitionSpec(
            "model_replied",
            (State.AWAITING_MODEL,),
            State.DONE,
            (interrupting,),
            label="nag",
            before="tool_calls",
        )
    )
    errors: list[str | None] = []
    agent.subscribe(lambda e: errors.append(e.result.error) if e.type == "run_end" else None)
    with pytest.raises(KeyboardInterrupt):
        agent.run_sync("go")
    agent.close()
    assert agent.state is State.ABORTED
    assert errors == [
        "KeyboardInterrupt raised in the guard "
        "'test_a_keyboard_interrupt_in_a_guard_aborts_the_run_answers_every_call_then_propagates"
        ".<locals>.interrupting' of transition 'nag' (model_replied)"
    ]
    assert_valid_history(agent.messages)
    assert check_session(tmp_path / "run.jsonl")[1] == []


def test_a_new_states_transitions_may_be_added_in_any_order() -> None:
    model = ScriptedModel([text_response("first"), text_response("second")])
    agent = Agent(model)
    machine = agent.machine
    machine.add_state("nagging", _nag)
    # out of it first, then into it: the definition is complete only after both
    machine.add_transition(
        TransitionSpec("model_replied", ("nagging",), State.DONE, label="nagged")
    )
    machine.add_transition(
        TransitionSpec(
            "model_replied",
            (State.AWAITING_MODEL,),
            "nagging",
            (lambda d: d.requests == 1,),
            label="nag",
        )
    )
    result = agent.run_sync("go")
    assert result.state is State.DONE and len(model.requests) == 2
    assert [s.label for s in agent.machine.specs if "nag" in s.label] == ["nag", "nagged"]


def test_a_state_left_unreachable_is_refused_when_the_run_starts_saying_how_to_fix_it() -> None:
    agent = Agent(ScriptedModel([text_response("never")]))
    agent.machine.add_state("nagging", _nag)
    agent.machine.add_transition(
        TransitionSpec("model_replied", ("nagging",), State.DONE, label="nagged")
    )
    with pytest.raises(
        MachineDefinitionError,
        match=r"state 'nagging' is unreachable from 'idle' \(add a transition into it\)",
    ):
        agent.run_sync("go")
    assert agent.state is State.IDLE and agent.messages == []  # nothing started
