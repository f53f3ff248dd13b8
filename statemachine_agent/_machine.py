"""The agent loop's states and guarded transitions (DESIGN section 1), on `transitions`.

This module is the only importer of `transitions`. The definition is data (`TRANSITIONS`), so it can
be validated up front (every state reachable from ``idle``, no dead ends) and rendered as a diagram
without running anything. Guards are plain synchronous functions of `LoopData`; all I/O happens in
the engine's driver loop between triggers, never in a callback here.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Literal

from transitions import Machine, MachineError
from transitions.core import Condition

from ._errors import MachineDefinitionError
from ._messages import TRUNCATING_STOP_REASONS, AssistantMessage, StopReason


class State(StrEnum):
    """The states of an agent (DESIGN section 1)."""

    IDLE = "idle"
    AWAITING_MODEL = "awaiting_model"
    EXECUTING_TOOLS = "executing_tools"
    DONE = "done"
    ABORTED = "aborted"
    MAX_TURNS = "max_turns"
    FAILED = "failed"


TERMINAL_STATES: frozenset[State] = frozenset(
    {State.DONE, State.ABORTED, State.MAX_TURNS, State.FAILED}
)
"""States that end a run (not the agent: ``start`` leaves each of them)."""

MaxTokensPolicy = Literal["continue", "stop"]

_STATES: dict[str, State] = {state.value: state for state in State}


@dataclass(slots=True)
class LoopData:
    """What the guards read. The engine fills it in before each trigger.

    Attributes:
        response: the assistant message the model just returned (for ``model_replied``).
        queued_input: steering or follow-up messages are waiting to be injected.
        continuations: ``pause_turn`` / ``max_tokens`` continuations used in this run.
        max_continuations: the cap on those continuations.
        max_tokens_policy: ``"continue"`` asks the model to go on; ``"stop"`` ends in ``done``.
        turns: completed turns in this run (a turn is one response plus its tool batch).
        max_turns: the turn cap.
        keep_going: what the ``should_continue`` hook said after the last turn.
        terminate: a tool result of the last batch asked to end the run (terminating denial).
    """

    response: AssistantMessage | None = None
    queued_input: bool = False
    continuations: int = 0
    max_continuations: int = 3
    max_tokens_policy: MaxTokensPolicy = "continue"
    turns: int = 0
    max_turns: int = 50
    keep_going: bool = True
    terminate: bool = False


Guard = Callable[[LoopData], bool]


def is_refusal(data: LoopData) -> bool:
    """The model refused (stop reason ``refusal``)."""
    return data.response is not None and data.response.stop_reason == StopReason.REFUSAL


def has_tool_calls(data: LoopData) -> bool:
    """The response holds at least one tool call to run. A response cut by a limit
    (``max_tokens``) under ``max_tokens_policy="stop"`` is not acted on: its calls are answered
    as not run and the run ends (no further request)."""
    response = data.response
    return (
        response is not None
        and bool(response.tool_calls)
        and not (
            response.stop_reason in TRUNCATING_STOP_REASONS and data.max_tokens_policy == "stop"
        )
    )


def can_continue_pause_turn(data: LoopData) -> bool:
    """``pause_turn`` with continuations left: send the paused content back as it is."""
    return (
        data.response is not None
        and data.response.stop_reason == StopReason.PAUSE_TURN
        and data.continuations < data.max_continuations
    )


def can_continue_max_tokens(data: LoopData) -> bool:
    """A truncated response, policy ``continue`` and continuations left: ask the model to go on."""
    return (
        data.response is not None
        and data.response.stop_reason in TRUNCATING_STOP_REASONS
        and data.max_tokens_policy == "continue"
        and data.continuations < data.max_continuations
    )


def has_queued_input(data: LoopData) -> bool:
    """Steering or follow-up input is waiting."""
    return data.queued_input


def turn_limit_reached(data: LoopData) -> bool:
    """The turn cap is reached, or ``should_continue`` said stop."""
    return data.turns >= data.max_turns or not data.keep_going


def turn_limit_before_continuing(data: LoopData) -> bool:
    """The turn cap is reached and the response would lead to another request (a continuation
    or queued input): the cap bounds every way a run goes on, not only tool batches."""
    return data.turns >= data.max_turns and (
        can_continue_pause_turn(data) or can_continue_max_tokens(data) or has_queued_input(data)
    )


def terminate_requested(data: LoopData) -> bool:
    """A permission hook denied a call with ``terminate=True``."""
    return data.terminate


@dataclass(frozen=True, slots=True)
class TransitionSpec:
    """One guarded transition: the first spec of a trigger whose guards all pass wins.

    Attributes:
        trigger: the event name (``start``, ``model_replied``, ...).
        sources: the states it leaves from.
        dest: the state it enters.
        guards: all must be true.
        label: a short name of the branch, for diagrams and for the engine.
    """

    trigger: str
    sources: tuple[State, ...]
    dest: State
    guards: tuple[Guard, ...] = ()
    label: str = ""


_RUN_START_SOURCES = (State.IDLE, *sorted(TERMINAL_STATES))
_ACTIVE = (State.AWAITING_MODEL, State.EXECUTING_TOOLS)

TRANSITIONS: tuple[TransitionSpec, ...] = (
    TransitionSpec("start", _RUN_START_SOURCES, State.AWAITING_MODEL, label="start"),
    TransitionSpec("model_replied", (State.AWAITING_MODEL,), State.DONE, (is_refusal,), "refusal"),
    TransitionSpec(
        "model_replied",
        (State.AWAITING_MODEL,),
        State.EXECUTING_TOOLS,
        (has_tool_calls,),
        "tool_calls",
    ),
    TransitionSpec(
        "model_replied",
        (State.AWAITING_MODEL,),
        State.MAX_TURNS,
        (turn_limit_before_continuing,),
        "turn_limit",
    ),
    TransitionSpec(
        "model_replied",
        (State.AWAITING_MODEL,),
        State.AWAITING_MODEL,
        (can_continue_pause_turn,),
        "pause_turn",
    ),
    TransitionSpec(
        "model_replied",
        (State.AWAITING_MODEL,),
        State.AWAITING_MODEL,
        (can_continue_max_tokens,),
        "max_tokens",
    ),
    TransitionSpec(
        "model_replied",
        (State.AWAITING_MODEL,),
        State.AWAITING_MODEL,
        (has_queued_input,),
        "queued_input",
    ),
    TransitionSpec("model_replied", (State.AWAITING_MODEL,), State.DONE, label="final_answer"),
    TransitionSpec(
        "tools_finished",
        (State.EXECUTING_TOOLS,),
        State.MAX_TURNS,
        (turn_limit_reached,),
        "turn_limit",
    ),
    TransitionSpec(
        "tools_finished",
        (State.EXECUTING_TOOLS,),
        State.ABORTED,
        (terminate_requested,),
        "terminated",
    ),
    TransitionSpec(
        "tools_finished", (State.EXECUTING_TOOLS,), State.AWAITING_MODEL, label="next_turn"
    ),
    TransitionSpec("abort", _ACTIVE, State.ABORTED, label="abort"),
    TransitionSpec("fail", (State.AWAITING_MODEL,), State.FAILED, label="fail"),
)


def validate_definition(
    states: Iterable[State], transitions: Iterable[TransitionSpec], initial: State = State.IDLE
) -> None:
    """Check a machine definition before it is built.

    Raises:
        MachineDefinitionError: a state is unreachable from ``initial``, a state has no way out, or
            a transition names an unknown state. The message lists every problem.
    """
    states = list(states)
    specs = list(transitions)
    known = set(states)
    problems: list[str] = []
    edges: dict[State, set[State]] = {state: set() for state in states}
    for spec in specs:
        for state in (*spec.sources, spec.dest):
            if state not in known:
                problems.append(f"transition {spec.trigger!r} names unknown state {state!r}")
        for source in spec.sources:
            edges.setdefault(source, set()).add(spec.dest)
    reached = {initial}
    frontier = [initial]
    while frontier:
        for nxt in edges.get(frontier.pop(), ()):
            if nxt not in reached:
                reached.add(nxt)
                frontier.append(nxt)
    problems += [
        f"state {s.value!r} is unreachable from {initial.value!r}"
        for s in states
        if s not in reached
    ]
    problems += [
        f"state {s.value!r} is a dead end (no transition leaves it)"
        for s in states
        if not edges.get(s)
    ]
    if problems:
        raise MachineDefinitionError("invalid state machine:\n" + "\n".join(problems))


class _Holder:
    """The object `transitions` drives; its ``state`` attribute is the agent's state."""

    def __init__(self) -> None:
        self.state = State.IDLE.value
        self.fired = ""


@dataclass(frozen=True, slots=True)
class Fired:
    """A transition that happened."""

    trigger: str
    source: State
    dest: State
    label: str


@dataclass(slots=True)
class _Extras:
    enter: dict[State, list[Callable[[LoopData], None]]] = field(default_factory=dict)


class LoopMachine:
    """The agent loop's state machine: a synchronous `transitions.Machine` over `TRANSITIONS`.

    Args:
        extra_transitions: transitions to add; each is tried before the built-in ones of its trigger.

    Raises:
        MachineDefinitionError: the definition has an unreachable state or a dead end.
    """

    def __init__(self, extra_transitions: Iterable[TransitionSpec] = ()) -> None:
        self.specs: list[TransitionSpec] = [*extra_transitions, *TRANSITIONS]
        validate_definition(State, self.specs)
        self._holder = _Holder()
        self._machine = Machine(
            model=self._holder,
            states=[state.value for state in State],
            initial=State.IDLE.value,
            auto_transitions=False,
            ignore_invalid_triggers=False,
        )
        for spec in self.specs:
            self._add(spec)

    def _add(self, spec: TransitionSpec, *, first: bool = False) -> None:
        label = spec.label or f"{spec.trigger}->{spec.dest.value}"

        def note(*_args: Any) -> None:
            self._holder.fired = label

        for source in spec.sources:
            self._machine.add_transition(
                spec.trigger,
                source.value,
                spec.dest.value,
                conditions=list(spec.guards),
                after=[note],
            )
            if first:
                bucket = self._machine.events[spec.trigger].transitions[source.value]
                bucket.insert(0, bucket.pop())

    @property
    def state(self) -> State:
        """The current state."""
        return _STATES[self._holder.state]

    def fire(self, trigger: str, data: LoopData) -> Fired:
        """Run ``trigger`` with the guards reading ``data``.

        Raises:
            MachineDefinitionError: no transition of ``trigger`` leaves the current state, or none of
                their guards passed (a hole in the definition, i.e. a bug).
        """
        source = self.state
        self._holder.fired = ""
        event = self._machine.events.get(trigger)
        if event is None:
            raise MachineDefinitionError(f"unknown trigger {trigger!r}")
        try:
            moved = event.trigger(self._holder, data)
        except MachineError as exc:
            raise MachineDefinitionError(
                f"trigger {trigger!r} cannot leave state {source.value!r}"
            ) from exc
        if not moved:
            raise MachineDefinitionError(
                f"no guard of trigger {trigger!r} passed in state {source.value!r}"
            )
        return Fired(trigger, source, _STATES[self._holder.state], self._holder.fired)

    def add_transition(self, spec: TransitionSpec) -> None:
        """Add a transition, tried before the built-in ones of its trigger.

        Raises:
            MachineDefinitionError: the definition would become invalid.
        """
        validate_definition(State, [spec, *self.specs])
        self.specs.insert(0, spec)
        self._add(spec, first=True)

    def add_guard(self, trigger: str, dest: State, guard: Guard) -> None:
        """Add ``guard`` to every transition of ``trigger`` into ``dest``.

        Raises:
            MachineDefinitionError: no such transition exists.
        """
        found = False
        for source_transitions in self._machine.events[trigger].transitions.values():
            for transition in source_transitions:
                if transition.dest == dest.value:
                    transition.conditions.append(Condition(guard))
                    found = True
        if not found:
            raise MachineDefinitionError(f"no transition {trigger!r} -> {dest.value!r}")
        self.specs = [
            TransitionSpec(s.trigger, s.sources, s.dest, (*s.guards, guard), s.label)
            if s.trigger == trigger and s.dest == dest
            else s
            for s in self.specs
        ]

    def restore(self, state: State) -> None:
        """Put the machine in ``state`` without a transition (resuming a saved session).

        Raises:
            MachineDefinitionError: ``state`` is not ``idle`` or terminal (a run cannot be resumed
                mid-flight).
        """
        if state is not State.IDLE and state not in TERMINAL_STATES:
            raise MachineDefinitionError(f"cannot restore the mid-run state {state.value!r}")
        self._machine.set_state(state.value, model=self._holder)

    def on_enter(self, state: State, callback: Callable[[LoopData], None]) -> None:
        """Call ``callback(data)`` each time ``state`` is entered (synchronously; no I/O)."""
        self._machine.get_state(state.value).add_callback("enter", callback)

    def on_exit(self, state: State, callback: Callable[[LoopData], None]) -> None:
        """Call ``callback(data)`` each time ``state`` is left (synchronously; no I/O)."""
        self._machine.get_state(state.value).add_callback("exit", callback)

    # Added for the diagram renderer (issue 5): user callbacks are drawn by name.
    def state_callbacks(self, state: State) -> tuple[list[Any], list[Any]]:
        """The callbacks added with `on_enter` and `on_exit` for ``state``: ``(enter, exit)``."""
        machine_state = self._machine.get_state(state.value)
        return list(machine_state.on_enter), list(machine_state.on_exit)
