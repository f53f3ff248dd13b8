"""The agent loop's definition, as data: states (`StateSpec`), groups of states (`StateGroup`) and
guarded transitions (`TransitionSpec`), validated before a machine is built
(`validate_definition`). The definition is what runs (`_machine` builds the engine from it).

The table names its effects and actions (`EffectName`, `ActionName`) rather than importing
them: the run layer binds each name to its function (`_machine.bind_steps`), and a machine
resolves every name when it builds a definition, so an unbound name is an error before any run.
The guards (`_guards`) are plain functions of `LoopData`, below this module.

The driver (`_run`) is a generic loop: fire a trigger, run the transition's
action, then the entered state's effect, which returns the next trigger. Nothing else decides.

States and their effects (`STATES`):

==================  ================================================================================
``idle``            constructed, no run yet (no effect: a run starts with ``start``)
``awaiting_model``  `request_model`: send the projected history, stream the response
``executing_tools`` `run_tools`: run the response's tool batch
``done``, ``aborted``, ``max_turns``, ``failed``: terminal; `settle` answers every call still
                    without a result and ends the run
==================  ================================================================================

Groups (`GROUPS`): ``active`` (``awaiting_model``, ``executing_tools``, ``compacting`` and every
state a user adds: ``abort`` and ``fail`` leave each) and ``ended`` (the terminal states: ``start``
leaves each, as it leaves ``idle``). A row's sources may name a group: it leaves every member
(`expand_groups`), and a diagram draws it once from the group's composite state.

Transitions (`TRANSITIONS`), tried top to bottom per trigger and source; the first whose guards all
pass fires. Failure paths: a provider failure (``fail``), an abort or cancelled task (``abort``, from
any active state), a bug escaping a tool, hook or model (``fail``), a terminating denial
(``tools_finished [terminate_requested]``), the turn cap (``turn_limit``), the ``pause_turn``
continuation cap (``continuation_limit``), a usage limit (``usage_limit``: before a request is
sent and after each response, see `UsageLimits`); with ``final_turn`` on, a turn or usage
limit first leads to one more request with tools disabled (``final_turn``), whose answer ends the
run in ``max_turns`` (``final_answer_at_limit``); with an ``output_type``, a text answer is sent
back (``output_missing``) and too many invalid final results fail the run (``output_invalid``); a
response with tool calls and an unknown stop reason
(``unknown_stop_reason``: its calls are not run). A result marked ``terminate=True`` ends the run
``done`` (``terminating_result``).

The protocol holds on every path: a terminal state's effect answers each call of the last response
that has no result ("Not run: the run ended in state S by transition 'T'."), in declaration order,
so a user's transition to a terminal state keeps rules 1-5 of `_protocol`. A
user's branch on ``model_replied`` that leads elsewhere than ``executing_tools`` (into
``awaiting_model`` or a state of its own) has the response's calls answered in the stored history
("Not run: the run took the branch 'B' into state S ...") before the next message or request
(`Run.answer_open_calls`).

Extending it (`LoopMachine.add_transition`, `add_state`, `add_guard`) is validated when it happens:
unknown states, a transition into a non-terminal state with no effect, a transition that an earlier
unguarded one of the same trigger and source shadows (or that shadows built-in branches). Whether
every state can be reached and left is checked when a run starts, once every addition is known
(so a new state's transitions may be added in any order). Guards are plain synchronous functions of `LoopData`;
actions are synchronous functions of the `Run`; effects are async functions of the `Run` that
return the next trigger.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any

from ._errors import MachineDefinitionError
from ._guards import (
    Guard,
    LoopData,
    calls_pending,
    can_continue_max_tokens,
    can_continue_pause_turn,
    can_retry_output,
    compaction_on,
    context_window_exceeded,
    continuations_exhausted,
    final_turn_wanted,
    has_queued_input,
    has_tool_calls,
    hook_failed,
    is_final_turn,
    is_refusal,
    output_missing,
    output_retries_exhausted,
    result_ends_run,
    terminate_requested,
    turn_limit_before_continuing,
    turn_limit_reached,
    turns_left,
    turns_used_up,
    unknown_stop_reason,
    usage_limit_before_request,
    usage_limit_on_reply,
)
from ._states import TERMINAL_STATES, State, Trigger

Effect = Callable[[Any], Awaitable[str | None]]
"""A state's effect: an async function of the `Run` returning the trigger to fire next (a
terminal state's returns None: the run ends). The built-in effects type the run as `RunLike`
(`_run_protocol`); a user's may take the `Run` itself."""
Action = Callable[[Any], None]
"""A transition's action: a synchronous function of the `Run`, called when the transition fires."""


class EffectName(StrEnum):
    """The built-in states' effects, by name (bound to functions by the run layer)."""

    REQUEST_MODEL = "request_model"
    RUN_TOOLS = "run_tools"
    AWAIT_DECISIONS = "await_decisions"
    COMPACT_CONTEXT = "compact_context"
    SETTLE = "settle"


class ActionName(StrEnum):
    """The built-in transitions' actions, by name (bound to functions by the run layer)."""

    ANSWER_PENDING = "answer_pending"
    ANSWER_REFUSED = "answer_refused"
    ANSWER_UNKNOWN_STOP_REASON = "answer_unknown_stop_reason"
    ASK_FOR_OUTPUT = "ask_for_output"
    CONTINUE_PAUSED = "continue_paused"
    CONTINUE_TRUNCATED = "continue_truncated"
    DELIVER_QUEUED = "deliver_queued"
    DELIVER_STEERING = "deliver_steering"
    FINAL_TURN_AT_TURN_LIMIT = "final_turn_at_turn_limit"
    FINAL_TURN_AT_USAGE_LIMIT = "final_turn_at_usage_limit"
    NOTE_ABORT = "note_abort"
    NOTE_CONTINUATION_LIMIT = "note_continuation_limit"
    NOTE_FINAL_ANSWER = "note_final_answer"
    NOTE_FINAL_TURN = "note_final_turn"
    NOTE_HOOK_FAILED = "note_hook_failed"
    NOTE_OUTPUT_INVALID = "note_output_invalid"
    NOTE_TERMINATED = "note_terminated"
    NOTE_TERMINATING_RESULT = "note_terminating_result"
    NOTE_TURN_LIMIT = "note_turn_limit"
    NOTE_TURN_LIMIT_AT_START = "note_turn_limit_at_start"
    NOTE_USAGE_LIMIT = "note_usage_limit"
    ANSWER_WINDOW_CUT = "answer_window_cut"
    NOTE_CONTEXT_WINDOW = "note_context_window"


@dataclass(frozen=True, slots=True)
class StateSpec:
    """A state and its effect.

    Attributes:
        name: the state's name (a `State` for the built-in ones).
        effect: what entering it does (an async function of the run returning the next
            trigger), or the `EffectName` of a built-in one (bound to its function by the run
            layer: `bind_steps`); None only for ``idle``.
        terminal: a run ends here, and so does its work (every call is answered).
        stops_run: ``run()`` returns here though the work goes on later (``awaiting_approval``);
            its effect returns None.
    """

    name: str
    effect: Effect | str | None = None
    terminal: bool = False
    stops_run: bool = False


@dataclass(frozen=True, slots=True)
class TransitionSpec:
    """One guarded transition: the first spec of a trigger and source whose guards all pass wins.

    Attributes:
        trigger: the event name (``start``, ``model_replied``, ...).
        sources: the states it leaves from.
        dest: the state it enters.
        guards: all must be true.
        label: the branch's name (diagrams, events, the session log, "not run" results); defaults
            to its guards' names, else ``trigger->dest``.
        action: called with the `Run` when the transition fires, before the dest's effect: a
            function, or the `ActionName` of a built-in action (bound by the run layer).
        before: place it before the branch of the same trigger with this label.
        after: place it after the branch of the same trigger with this label. With neither, it
            goes before every existing branch of its trigger that leaves one of its sources (and
            last when there is none).
        groups: the `StateGroup` names its sources were written with (``sources`` holds their
            members, expanded when the spec enters a machine): the branch leaves every member,
            including states that join the group later, and a diagram draws it once from the
            group's composite. Write a group's name among ``sources`` rather than setting this.
    """

    trigger: str
    sources: tuple[str, ...]
    dest: str
    guards: tuple[Guard, ...] = ()
    label: str = ""
    action: Action | str | None = None
    before: str | None = None
    after: str | None = None
    groups: tuple[str, ...] = ()

    @property
    def name(self) -> str:
        """The label, or a name made from the guards (or ``trigger->dest``)."""
        if self.label:
            return self.label
        if self.guards:
            return "_and_".join(getattr(g, "__name__", "guard") for g in self.guards)
        return f"{self.trigger}->{self.dest}"


@dataclass(frozen=True, slots=True)
class StateGroup:
    """A named set of states that rows of the table leave from as one source.

    A row whose ``sources`` name the group leaves from each member (the engine fires it from
    every one; `expand_groups`), and a diagram draws the group as a composite state with that
    row's edge drawn once from the composite.

    Attributes:
        name: the group's name, distinct from every state's name (``active``).
        states: its members, in the order the rows' sources list them.
        description: what its members share (shown in diagrams' legends and docstrings).
        joins_added_states: a state added with `LoopMachine.add_state` becomes a member, so the
            group's rows (``abort``, ``fail``) leave it too.
    """

    name: str
    states: tuple[str, ...]
    description: str = ""
    joins_added_states: bool = False


_S = State
_BUILTIN: dict[str, State] = {state.value: state for state in State}
ACTIVE = "active"
"""The group of states where a run is working: ``abort`` and ``fail`` leave each."""
ENDED = "ended"
"""The group of terminal states: a run ended there, and ``start`` begins the next run."""

GROUPS: tuple[StateGroup, ...] = (
    StateGroup(
        ACTIVE,
        (_S.AWAITING_MODEL, _S.EXECUTING_TOOLS, _S.COMPACTING),
        "a run is working: abort and fail leave each state",
        joins_added_states=True,
    ),
    StateGroup(
        ENDED, tuple(sorted(TERMINAL_STATES)), "a run ended: start begins the next run from each"
    ),
)
_APPROVAL = (_S.AWAITING_APPROVAL,)
_T = TransitionSpec
_E = EffectName
_A = ActionName

STATES: tuple[StateSpec, ...] = (
    StateSpec(_S.IDLE),
    StateSpec(_S.AWAITING_MODEL, _E.REQUEST_MODEL),
    StateSpec(_S.EXECUTING_TOOLS, _E.RUN_TOOLS),
    StateSpec(_S.AWAITING_APPROVAL, _E.AWAIT_DECISIONS, stops_run=True),
    StateSpec(_S.COMPACTING, _E.COMPACT_CONTEXT),
    StateSpec(_S.DONE, _E.SETTLE, terminal=True),
    StateSpec(_S.ABORTED, _E.SETTLE, terminal=True),
    StateSpec(_S.MAX_TURNS, _E.SETTLE, terminal=True),
    StateSpec(_S.FAILED, _E.SETTLE, terminal=True),
)

# fmt: off
_TABLE: tuple[TransitionSpec, ...] = (
    # trigger              sources                dest                 guards                             label             action
    _T(Trigger.START,          (_S.IDLE, ENDED),        _S.MAX_TURNS,        (usage_limit_before_request,),     "usage_limit",    _A.NOTE_USAGE_LIMIT),
    _T(Trigger.START,          (_S.IDLE, ENDED),        _S.MAX_TURNS,        (turns_used_up,),                  "turn_limit",     _A.NOTE_TURN_LIMIT_AT_START),
    _T(Trigger.START,          (_S.IDLE, ENDED),        _S.AWAITING_MODEL,   (),                                "start"),
    _T(Trigger.MODEL_REPLIED,  (_S.AWAITING_MODEL,),  _S.MAX_TURNS,        (is_final_turn,),                  "final_answer_at_limit", _A.NOTE_FINAL_TURN),
    _T(Trigger.MODEL_REPLIED,  (_S.AWAITING_MODEL,),  _S.DONE,             (is_refusal,),                     "refusal",        _A.ANSWER_REFUSED),
    _T(Trigger.MODEL_REPLIED,  (_S.AWAITING_MODEL,),  _S.DONE,             (unknown_stop_reason,),            "unknown_stop_reason", _A.ANSWER_UNKNOWN_STOP_REASON),
    _T(Trigger.MODEL_REPLIED,  (_S.AWAITING_MODEL,),  _S.AWAITING_MODEL,   (final_turn_wanted, usage_limit_on_reply), "final_turn", _A.FINAL_TURN_AT_USAGE_LIMIT),
    _T(Trigger.MODEL_REPLIED,  (_S.AWAITING_MODEL,),  _S.MAX_TURNS,        (usage_limit_on_reply,),           "usage_limit",    _A.NOTE_USAGE_LIMIT),
    _T(Trigger.MODEL_REPLIED,  (_S.AWAITING_MODEL,),  _S.COMPACTING,       (context_window_exceeded, compaction_on, turns_left), "context_window_compact", _A.ANSWER_WINDOW_CUT),
    _T(Trigger.MODEL_REPLIED,  (_S.AWAITING_MODEL,),  _S.DONE,             (context_window_exceeded,),     "context_window", _A.NOTE_CONTEXT_WINDOW),
    _T(Trigger.MODEL_REPLIED,  (_S.AWAITING_MODEL,),  _S.EXECUTING_TOOLS,  (has_tool_calls,),                 "tool_calls"),
    _T(Trigger.MODEL_REPLIED,  (_S.AWAITING_MODEL,),  _S.AWAITING_MODEL,   (final_turn_wanted, turn_limit_before_continuing), "final_turn", _A.FINAL_TURN_AT_TURN_LIMIT),
    _T(Trigger.MODEL_REPLIED,  (_S.AWAITING_MODEL,),  _S.MAX_TURNS,        (turn_limit_before_continuing,),   "turn_limit",     _A.NOTE_TURN_LIMIT),
    _T(Trigger.MODEL_REPLIED,  (_S.AWAITING_MODEL,),  _S.AWAITING_MODEL,   (can_continue_pause_turn,),        "pause_turn",     _A.CONTINUE_PAUSED),
    _T(Trigger.MODEL_REPLIED,  (_S.AWAITING_MODEL,),  _S.MAX_TURNS,        (continuations_exhausted,),        "continuation_limit", _A.NOTE_CONTINUATION_LIMIT),
    _T(Trigger.MODEL_REPLIED,  (_S.AWAITING_MODEL,),  _S.AWAITING_MODEL,   (can_continue_max_tokens,),        "max_tokens",     _A.CONTINUE_TRUNCATED),
    _T(Trigger.MODEL_REPLIED,  (_S.AWAITING_MODEL,),  _S.AWAITING_MODEL,   (has_queued_input,),               "queued_input",   _A.DELIVER_QUEUED),
    _T(Trigger.MODEL_REPLIED,  (_S.AWAITING_MODEL,),  _S.AWAITING_MODEL,   (can_retry_output,),               "output_missing", _A.ASK_FOR_OUTPUT),
    _T(Trigger.MODEL_REPLIED,  (_S.AWAITING_MODEL,),  _S.FAILED,           (output_missing,),                 "output_invalid", _A.NOTE_OUTPUT_INVALID),
    _T(Trigger.MODEL_REPLIED,  (_S.AWAITING_MODEL,),  _S.DONE,             (),                                "final_answer",   _A.NOTE_FINAL_ANSWER),
    _T(Trigger.TOOLS_FINISHED, (_S.EXECUTING_TOOLS,), _S.AWAITING_APPROVAL,(calls_pending,),                  "deferred"),
    _T(Trigger.TOOLS_FINISHED, (_S.EXECUTING_TOOLS,), _S.DONE,             (result_ends_run,),                "terminating_result", _A.NOTE_TERMINATING_RESULT),
    _T(Trigger.TOOLS_FINISHED, (_S.EXECUTING_TOOLS,), _S.FAILED,           (output_retries_exhausted,),       "output_invalid", _A.NOTE_OUTPUT_INVALID),
    _T(Trigger.TOOLS_FINISHED, (_S.EXECUTING_TOOLS,), _S.AWAITING_MODEL,   (final_turn_wanted, turn_limit_reached), "final_turn", _A.FINAL_TURN_AT_TURN_LIMIT),
    _T(Trigger.TOOLS_FINISHED, (_S.EXECUTING_TOOLS,), _S.MAX_TURNS,        (turn_limit_reached,),             "turn_limit",     _A.NOTE_TURN_LIMIT),
    _T(Trigger.TOOLS_FINISHED, (_S.EXECUTING_TOOLS,), _S.ABORTED,          (terminate_requested,),            "terminated",     _A.NOTE_TERMINATED),
    _T(Trigger.TOOLS_FINISHED, (_S.EXECUTING_TOOLS,), _S.FAILED,           (hook_failed,),                    "hook_failed",    _A.NOTE_HOOK_FAILED),
    _T(Trigger.TOOLS_FINISHED, (_S.EXECUTING_TOOLS,), _S.AWAITING_MODEL,   (final_turn_wanted, usage_limit_before_request), "final_turn", _A.FINAL_TURN_AT_USAGE_LIMIT),
    _T(Trigger.TOOLS_FINISHED, (_S.EXECUTING_TOOLS,), _S.MAX_TURNS,        (usage_limit_before_request,),     "usage_limit",    _A.NOTE_USAGE_LIMIT),
    _T(Trigger.TOOLS_FINISHED, (_S.EXECUTING_TOOLS,), _S.AWAITING_MODEL,   (),                                "next_turn",      _A.DELIVER_STEERING),
    _T(Trigger.DECIDED,        _APPROVAL,             _S.EXECUTING_TOOLS,  (),                                "decided"),
    _T(Trigger.COMPACT,        (_S.AWAITING_MODEL,),  _S.COMPACTING,       (compaction_on,),               "compact"),
    _T(Trigger.COMPACTED,      (_S.COMPACTING,),      _S.AWAITING_MODEL,   (final_turn_wanted, usage_limit_before_request), "final_turn", _A.FINAL_TURN_AT_USAGE_LIMIT),
    _T(Trigger.COMPACTED,      (_S.COMPACTING,),      _S.MAX_TURNS,        (usage_limit_before_request,),     "usage_limit",    _A.NOTE_USAGE_LIMIT),
    _T(Trigger.COMPACTED,      (_S.COMPACTING,),      _S.AWAITING_MODEL,   (),                                "compacted"),
    _T(Trigger.ABORT,          (ACTIVE,),             _S.ABORTED,          (),                                "abort",          _A.NOTE_ABORT),
    _T(Trigger.ABORT,          _APPROVAL,             _S.ABORTED,          (),                                "abort_pending",  _A.ANSWER_PENDING),
    _T(Trigger.FAIL,           (ACTIVE,),             _S.FAILED,           (),                                "fail"),
)
# fmt: on


def expand_groups(
    specs: Iterable[TransitionSpec], groups: Iterable[StateGroup] = GROUPS
) -> tuple[TransitionSpec, ...]:
    """``specs`` with each group name among their sources replaced by the group's members (in
    place, duplicates dropped) and recorded in `TransitionSpec.groups`; other specs unchanged.

    Raises:
        MachineDefinitionError: a spec names a group in ``groups`` it was not written with (set
            by hand: name the group among its sources instead).
    """
    members = {g.name: tuple(map(str, g.states)) for g in groups}
    out = []
    for spec in specs:
        unknown = [g for g in spec.groups if g not in members]
        if unknown:
            raise MachineDefinitionError(
                f"transition {spec.name!r} names unknown group(s) {', '.join(map(repr, unknown))}"
                f" (the groups: {', '.join(map(repr, members))})"
            )
        named = [str(s) for s in spec.sources if str(s) in members]
        if not named:
            out.append(spec)
            continue
        sources: list[str] = []
        for source in map(str, spec.sources):
            for state in members.get(source, (source,)):
                if state not in sources:
                    sources.append(state)
        written = (*spec.groups, *(g for g in named if g not in spec.groups))
        out.append(replace(spec, sources=_builtin_names(sources), groups=written))
    return tuple(out)


def _builtin_names(names: Iterable[str]) -> tuple[str, ...]:
    """Names as `State` members where they are built-in states (specs compare equal as written)."""
    return tuple(_BUILTIN.get(name, name) for name in names)


TRANSITIONS: tuple[TransitionSpec, ...] = expand_groups(_TABLE)
"""The built-in transitions, in the order they are tried (the table with its groups expanded)."""


def validate_definition(
    states: Iterable[StateSpec | State | str],
    transitions: Iterable[TransitionSpec],
    initial: str = State.IDLE,
    groups: Iterable[StateGroup] = GROUPS,
    *,
    complete: bool = True,
) -> None:
    """Check a machine definition before it is built.

    Args:
        states: the states (specs, or names of built-in states).
        transitions: the transitions, groups expanded (`expand_groups`).
        initial: the state a machine starts in.
        groups: the definition's `StateGroup` s (default: the built-in `GROUPS`).
        complete: the definition is whole: also check that every state can be reached and left
            (False while a user is still adding transitions: see `LoopMachine.add_transition`).

    Raises:
        MachineDefinitionError: listing every problem: a transition naming an unknown state, a
            transition into a non-terminal state that has no effect, a transition that can never
            fire because an earlier unguarded one of the same trigger and source shadows it, a
            state unreachable from ``initial``, a state with no way out; a group naming an
            unknown state or named like a state, a transition of a group that does not leave
            every member of it.
    """
    specs_by_name = {str(s.name): s for s in (_as_state_spec(x) for x in states)}
    specs = list(transitions)
    initial = str(initial)
    problems: list[str] = _group_problems(specs_by_name, specs, tuple(groups))
    edges: dict[str, set[str]] = {name: set() for name in specs_by_name}
    for spec in specs:
        for name in map(str, (*spec.sources, spec.dest)):
            if name not in specs_by_name:
                problems.append(
                    f"transition {spec.name!r} ({spec.trigger}) names unknown state {name!r}"
                )
        dest = specs_by_name.get(str(spec.dest))
        if dest is not None and not dest.terminal and dest.effect is None:
            problems.append(
                f"transition {spec.name!r} enters {str(spec.dest)!r}, a state with no effect (add "
                "the state with an effect: an async function of the run returning the next trigger)"
            )
        for source in spec.sources:
            edges.setdefault(str(source), set()).add(str(spec.dest))
    problems += _shadowing(specs)
    if not complete:
        if problems:
            raise MachineDefinitionError("invalid state machine:\n" + "\n".join(problems))
        return
    reached = {initial}
    frontier = [initial]
    while frontier:
        for nxt in edges.get(frontier.pop(), ()):
            if nxt not in reached:
                reached.add(nxt)
                frontier.append(nxt)
    problems += [
        f"state {n!r} is unreachable from {initial!r} (add a transition into it)"
        for n in specs_by_name
        if n not in reached
    ]
    problems += [
        f"state {n!r} has no way out (no transition leaves it)"
        for n in specs_by_name
        if not edges.get(n)
    ]
    if problems:
        raise MachineDefinitionError("invalid state machine:\n" + "\n".join(problems))


def _group_problems(
    states: dict[str, StateSpec], specs: Sequence[TransitionSpec], groups: tuple[StateGroup, ...]
) -> list[str]:
    """What is wrong with the groups: unknown members, a name shared with a state, a spec of a
    group that does not leave each member (the table's rows are checked against the groups)."""
    problems = []
    members = {g.name: [str(m) for m in g.states] for g in groups}
    for name, states_of in members.items():
        if name in states:
            problems.append(f"group {name!r} has the name of a state (rename one of them)")
        problems += [
            f"group {name!r} names unknown state {m!r}" for m in states_of if m not in states
        ]
    for spec in specs:
        sources = set(map(str, spec.sources))
        for group in spec.groups:
            if group not in members:
                problems.append(f"transition {spec.name!r} names unknown group {group!r}")
                continue
            missing = [m for m in members[group] if m not in sources]
            if missing:
                problems.append(
                    f"transition {spec.name!r} ({spec.trigger}) is a transition of group "
                    f"{group!r} but does not leave {', '.join(map(repr, missing))}"
                )
    return problems


def _shadowing(specs: Sequence[TransitionSpec]) -> list[str]:
    """Branches that can never fire: after an unguarded branch of the same trigger and source."""
    problems = []
    first_unguarded: dict[tuple[str, str], TransitionSpec] = {}
    hidden: dict[tuple[str, str], list[str]] = {}
    for spec in specs:
        for source in spec.sources:
            key = (str(spec.trigger), str(source))
            if key in first_unguarded:
                hidden.setdefault(key, []).append(spec.name)
            elif not spec.guards:
                first_unguarded[key] = spec
    for (trigger, source), names in hidden.items():
        blocker = first_unguarded[(trigger, source)]
        problems.append(
            f"transition {blocker.name!r} ({trigger} from {source!r}) has no guard, so the "
            f"branches after it can never fire: {', '.join(repr(n) for n in names)} (give it a "
            "guard, or place it after them with after=...)"
        )
    return problems


def _as_state_spec(state: StateSpec | State | str) -> StateSpec:
    if isinstance(state, StateSpec):
        return state
    builtin = {s.name: s for s in STATES}
    return builtin.get(str(state), StateSpec(str(state)))


@dataclass(frozen=True, slots=True)
class Fired:
    """A transition that happened (one object per branch and source, made when the definition
    is built: nothing is allocated per transition), with what firing it does, bound: the enter
    and exit callbacks, the action and the dest's effect."""

    trigger: str
    source: State | str
    dest: State | str
    label: str
    spec: TransitionSpec = field(repr=False, compare=False)
    dest_name: str = field(default="", repr=False, compare=False)
    action: Action | None = field(default=None, repr=False, compare=False)
    """The spec's action, bound; a user's is checked (`CallbackFailed`)."""
    effect: Effect | None = field(default=None, repr=False, compare=False)
    """The dest's effect, bound (None: ``idle``)."""
    stops: bool = field(default=False, repr=False, compare=False)
    """The dest stops the run: a terminal state, or one like ``awaiting_approval``."""
    callbacks: tuple[Callable[[LoopData], None], ...] = field(default=(), repr=False, compare=False)
    """The source's exit callbacks then the dest's enter callbacks, checked (`on_exit`,
    `on_enter`): run when the transition fires, before its action."""


def placed(specs: list[TransitionSpec], spec: TransitionSpec) -> list[TransitionSpec]:
    """``specs`` with ``spec`` inserted where its ``before``/``after`` say (see `add_transition`).

    Raises:
        MachineDefinitionError: ``before``/``after`` names no branch of the trigger, or both given.
    """
    if spec.before and spec.after:
        raise MachineDefinitionError(f"transition {spec.name!r}: give before= or after=, not both")
    same = [i for i, s in enumerate(specs) if s.trigger == spec.trigger]
    anchor = spec.before or spec.after
    if anchor is None:
        sources = set(map(str, spec.sources))
        rivals = [i for i in same if sources & set(map(str, specs[i].sources))]
        index = rivals[0] if rivals else len(specs)
    else:
        matches = [i for i in same if specs[i].name == anchor]
        if not matches:
            labels = ", ".join(repr(specs[i].name) for i in same) or "none"
            raise MachineDefinitionError(
                f"transition {spec.name!r}: no {spec.trigger!r} branch is labelled {anchor!r} "
                f"(its branches: {labels})"
            )
        index = matches[0] if spec.before else matches[-1] + 1
    return [*specs[:index], spec, *specs[index:]]
