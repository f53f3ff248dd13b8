"""The machine: DESIGN section 1 as data, validated up front."""

from __future__ import annotations

from typing import Any

import pytest

from statemachine_agent import (
    TERMINAL_STATES,
    AssistantMessage,
    LoopData,
    LoopMachine,
    MachineDefinitionError,
    State,
    TextBlock,
    ToolCallBlock,
    TransitionSpec,
)
from statemachine_agent._machine import TRANSITIONS, validate_definition


def reply(stop_reason: str, *, calls: int = 0) -> AssistantMessage:
    content = [TextBlock(text="t")] + [
        ToolCallBlock(id=f"c{i}", name="f", input={}) for i in range(calls)
    ]
    return AssistantMessage(content=content, stop_reason=stop_reason)


def machine_at(state: State) -> LoopMachine:
    machine = LoopMachine()
    machine._holder.state = state.value  # test set-up only
    return machine


@pytest.mark.parametrize(
    ("response", "queued", "dest", "label"),
    [
        (reply("refusal", calls=1), False, State.DONE, "refusal"),
        (reply("end_turn", calls=1), False, State.EXECUTING_TOOLS, "tool_calls"),
        (reply("max_tokens", calls=1), False, State.EXECUTING_TOOLS, "tool_calls"),
        (reply("pause_turn"), False, State.AWAITING_MODEL, "pause_turn"),
        (reply("max_tokens"), False, State.AWAITING_MODEL, "max_tokens"),
        (reply("end_turn"), True, State.AWAITING_MODEL, "queued_input"),
        (reply("end_turn"), False, State.DONE, "final_answer"),
        (reply("stop_sequence"), False, State.DONE, "final_answer"),
        (reply("unknown_reason"), False, State.DONE, "final_answer"),
    ],
)
def test_model_replied_branches(
    response: AssistantMessage, queued: bool, dest: State, label: str
) -> None:
    fired = machine_at(State.AWAITING_MODEL).fire(
        "model_replied", LoopData(response=response, queued_input=queued)
    )
    assert (fired.dest, fired.label) == (dest, label)


def test_pause_turn_at_the_continuation_cap_stops_in_max_turns() -> None:
    data = LoopData(response=reply("pause_turn"), continuations=3, max_continuations=3)
    fired = machine_at(State.AWAITING_MODEL).fire("model_replied", data)
    assert (fired.dest, fired.label) == (State.MAX_TURNS, "continuation_limit")


@pytest.mark.parametrize(
    ("data", "dest"),
    [
        (LoopData(turns=5, max_turns=5), State.MAX_TURNS),
        (LoopData(keep_going=False), State.MAX_TURNS),
        (LoopData(terminate=True), State.ABORTED),
        (LoopData(), State.AWAITING_MODEL),
    ],
)
def test_tools_finished_branches(data: LoopData, dest: State) -> None:
    assert machine_at(State.EXECUTING_TOOLS).fire("tools_finished", data).dest is dest


def test_start_from_idle_and_every_terminal_state() -> None:
    for state in (State.IDLE, *TERMINAL_STATES):
        assert machine_at(state).fire("start", LoopData()).dest is State.AWAITING_MODEL


def test_abort_and_fail_sources() -> None:
    for state in (State.AWAITING_MODEL, State.EXECUTING_TOOLS):
        assert machine_at(state).fire("abort", LoopData()).dest is State.ABORTED
    assert machine_at(State.AWAITING_MODEL).fire("fail", LoopData()).dest is State.FAILED
    with pytest.raises(MachineDefinitionError):
        machine_at(State.DONE).fire("abort", LoopData())


def test_definition_is_valid_and_invalid_ones_are_refused() -> None:
    validate_definition(State, TRANSITIONS)
    without_fail = [t for t in TRANSITIONS if t.dest != State.FAILED]
    with pytest.raises(MachineDefinitionError, match="'failed' is unreachable"):
        validate_definition(State, without_fail)
    without_start = [t for t in TRANSITIONS if t.trigger != "start"]
    with pytest.raises(MachineDefinitionError, match="no way out"):
        validate_definition(State, without_start)


def test_user_guards_callbacks_and_transitions() -> None:
    machine = LoopMachine()
    entered: list[str] = []
    machine.on_enter(State.EXECUTING_TOOLS, lambda data: entered.append("tools"))
    machine.add_guard("tools_finished", State.AWAITING_MODEL, lambda data: data.turns < 2)
    machine.fire("start", LoopData())
    machine.fire("model_replied", LoopData(response=reply("tool_use", calls=1)))
    assert entered == ["tools"]
    # The added guard fails, so no tools_finished transition passes: a hole is reported.
    with pytest.raises(MachineDefinitionError, match="no guard"):
        machine.fire("tools_finished", LoopData(turns=3))
    machine.add_transition(
        TransitionSpec(
            "tools_finished",
            (State.EXECUTING_TOOLS,),
            State.DONE,
            label="budget",
            after="next_turn",
        )
    )
    assert machine.fire("tools_finished", LoopData(turns=3)).label == "budget"


# -- the compiled dispatch takes the library's transition (issue "Engine cost") ------------------

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from statemachine_agent import ToolResultMessage, UsageLimits  # noqa: E402
from statemachine_agent._guards import NECESSARY  # noqa: E402

_STOP_REASONS = [
    "end_turn",
    "tool_use",
    "max_tokens",
    "model_context_window_exceeded",
    "pause_turn",
    "refusal",
    "stop_sequence",
    "some_new_reason",
]


@st.composite
def loop_data(draw: st.DrawFn) -> LoopData:
    calls = draw(st.integers(0, 2))
    response = None
    if draw(st.booleans()):
        content: list[object] = [TextBlock(text="t")]
        content += [ToolCallBlock(id=f"c{i}", name="x", input={}) for i in range(calls)]
        response = AssistantMessage(
            content=content, stop_reason=draw(st.sampled_from(_STOP_REASONS))
        )
    final = None
    if draw(st.booleans()):
        final = ToolResultMessage(tool_call_id="c0", tool_name="x", content=[TextBlock(text="r")])
    return LoopData(
        response=response,
        queued_input=draw(st.booleans()),
        continuations=draw(st.integers(0, 4)),
        max_continuations=draw(st.integers(0, 3)),
        max_tokens_policy=draw(st.sampled_from(["continue", "stop"])),
        turns=draw(st.integers(0, 4)),
        max_turns=draw(st.integers(1, 4)),
        keep_going=draw(st.booleans()),
        terminate=draw(st.booleans()),
        final_result=final,
        hook_error=draw(st.sampled_from([None, "hook failed"])),
        pending=draw(st.booleans()),
        limits=draw(
            st.sampled_from(
                [None, UsageLimits(), UsageLimits(max_requests=1), UsageLimits(max_tool_calls=1)]
            )
        ),
        requests=draw(st.integers(0, 2)),
        tool_calls=draw(st.integers(0, 2)),
        final_turn=draw(st.booleans()),
        winding_down=draw(st.booleans()),
        output_expected=draw(st.booleans()),
        output_failures=draw(st.integers(0, 3)),
        output_retries=draw(st.integers(0, 2)),
        compaction=draw(st.booleans()),
    )


@settings(max_examples=400, deadline=None)
@given(
    state=st.sampled_from(list(State)),
    trigger=st.sampled_from(
        ["start", "model_replied", "tools_finished", "abort", "fail", "decided"]
    ),
    data=loop_data(),
)
def test_compiled_dispatch_takes_the_same_transition_as_the_library(
    state: State, trigger: str, data: LoopData
) -> None:
    """For every state, trigger and guard outcome, the table compiled from the `transitions`
    machine and the library's own ``trigger`` agree: the same branch, or the same refusal."""
    compiled, library = machine_at(state), machine_at(state)
    assert compiled._definition.compiled, "the fast path is in use"

    def outcome(fire: Any) -> tuple[str, str] | str:
        try:
            fired = fire(trigger, data)
        except MachineDefinitionError as exc:
            return type(exc).__name__
        return (str(fired.dest), fired.label)

    assert outcome(compiled.fire) == outcome(library.fire_library)
    assert compiled.state == library.state


@settings(max_examples=400, deadline=None)
@given(data=loop_data())
def test_a_guard_is_false_when_its_necessary_condition_is(data: LoopData) -> None:
    """The compiled pick calls a guard of `NECESSARY` only when its condition holds: without
    it, the guard is false."""
    for guard, condition in NECESSARY.items():
        if not eval(condition, {"data": data}):
            assert not guard(data), (guard.__name__, condition, data)


def test_callbacks_run_in_the_compiled_engine_in_the_library_order() -> None:
    """Issue 35: one engine for transitions and enter/exit callbacks (the compiled table runs
    them, in the order `transitions`' own trigger does: the source's exit, then the dest's
    enter)."""
    machine, library = LoopMachine(), LoopMachine()
    seen: list[str] = []
    for m, tag in ((machine, "compiled"), (library, "library")):
        m.on_enter(State.AWAITING_MODEL, lambda data, tag=tag: seen.append(f"{tag} enter"))
        m.on_exit(State.IDLE, lambda data, tag=tag: seen.append(f"{tag} exit"))
    assert machine._definition.compiled is not None
    machine.fire("start", LoopData())
    library.fire_library("start", LoopData())
    assert seen == ["compiled exit", "compiled enter", "library exit", "library enter"]
    assert machine.state is library.state is State.AWAITING_MODEL


def test_agents_share_one_definition_until_one_changes_its_own() -> None:
    """Machines with the built-in definition share one `transitions.Machine`; a change (here a
    callback and a guard) gives that machine its own, and the others neither see it nor move
    with it."""
    first, second, third = LoopMachine(), LoopMachine(), LoopMachine()
    assert first._definition is second._definition is third._definition
    assert first.shared and second.shared
    entered: list[str] = []
    second.on_enter(State.AWAITING_MODEL, lambda data: entered.append("second"))
    third.add_guard("start", State.AWAITING_MODEL, lambda data: False)
    assert first.shared and not second.shared and not third.shared
    assert first._definition is not second._definition is not third._definition
    first.fire("start", LoopData())
    assert entered == []  # second's callback is not on the shared machine
    assert first.state is State.AWAITING_MODEL and second.state is State.IDLE
    second.fire("start", LoopData())
    assert entered == ["second"] and second.state is State.AWAITING_MODEL
    with pytest.raises(MachineDefinitionError):
        third.fire("start", LoopData())  # its own guard refuses
    assert LoopMachine().fire("start", LoopData()).dest is State.AWAITING_MODEL


def test_a_callback_added_to_one_machine_reaches_no_other_machine() -> None:
    """`on_enter` / `on_exit` copy the callbacks they change: the shared definition keeps none,
    so a fresh machine lists none and one that makes its own definition later starts without
    them."""
    first, second = LoopMachine(), LoopMachine()
    entered: list[str] = []
    second.on_enter(State.AWAITING_MODEL, lambda data: entered.append("second enters"))
    second.on_exit(State.IDLE, lambda data: entered.append("second leaves idle"))
    assert first.state_callbacks(State.AWAITING_MODEL) == ([], [])
    assert first.state_callbacks(State.IDLE) == ([], [])
    assert LoopMachine().state_callbacks(State.AWAITING_MODEL) == ([], [])
    assert first._definition.callbacks == {}
    third = LoopMachine()
    third.add_guard("start", State.AWAITING_MODEL, lambda data: True)  # a definition of its own
    assert third._definition.callbacks == {}
    assert third.fire("start", LoopData()).dest is State.AWAITING_MODEL
    assert first.fire("start", LoopData()).dest is State.AWAITING_MODEL
    assert entered == []
    second.fire("start", LoopData())
    assert entered == ["second leaves idle", "second enters"]


def test_extra_transitions_of_one_machine_leave_the_shared_definition_alone() -> None:
    budget = TransitionSpec(
        "tools_finished",
        (State.EXECUTING_TOOLS,),
        State.DONE,
        (lambda data: data.turns > 2,),
        label="budget",
        before="next_turn",
    )
    own = LoopMachine([budget])
    assert not own.shared
    assert budget in own.specs and len(own.specs) == len(TRANSITIONS) + 1
    fresh = LoopMachine()
    assert fresh.shared
    assert fresh.specs == list(TRANSITIONS)
    assert "budget" not in [s.label for s in fresh.specs]
