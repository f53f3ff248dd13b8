"""The agent loop's definition, on `transitions`: states with effects, guarded transitions with
actions. The definition is what runs.

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
return the next trigger. This module is the only importer of `transitions`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Literal, cast

from transitions import Machine, MachineError

from . import _compacting as cx
from . import _effects as fx
from ._errors import MachineDefinitionError
from ._hooks import INTERRUPTS
from ._limits import UsageLimits
from ._messages import (
    NO_USAGE,
    TRUNCATING_STOP_REASONS,
    AssistantMessage,
    StopReason,
    ToolResultMessage,
    Usage,
    is_known_stop_reason,
)
from ._states import TERMINAL_STATES, State, Trigger

if TYPE_CHECKING:
    from ._run import Run

__all__ = ["TERMINAL_STATES", "State", "Trigger"]  # re-exported for the modules that use them

MaxTokensPolicy = Literal["continue", "stop"]


@dataclass(slots=True)
class LoopData:
    """What the guards read. The run fills it in before each trigger.

    Attributes:
        response: the assistant message the model just returned (for ``model_replied``).
        results: the results of the last tool batch, in declaration order.
        queued_input: steering or follow-up messages are waiting to be delivered.
        continuations: ``pause_turn`` / ``max_tokens`` continuations used in this run.
        max_continuations: the cap on those continuations.
        max_tokens_policy: ``"continue"`` asks the model to go on; ``"stop"`` ends in ``done``.
        turns: completed turns in this run (a turn is one response plus its tool batch). At
            ``model_replied`` the response just received is not counted yet: its turn completes
            after its tool batch (``tools_finished`` sees it), or when the run goes on or ends
            without one.
        max_turns: the turn cap.
        keep_going: what the ``should_continue`` hook said after the last turn.
        terminate: a tool call of the last batch was denied with ``terminate=True``.
        final_result: the first result of the last batch marked ``terminate=True`` (a tool's or an
            ``after_tool_call`` hook's `ToolResult`): the run ends ``done`` with its text.
        hook_error: the ``should_continue`` hook raised (its error text).
        pending: calls of the last batch were deferred and wait for a decision.
        limits: the run's `UsageLimits` (None: none).
        requests: model requests sent in this run (a continued run keeps counting).
        tool_calls: tool calls run in this run (a continued run keeps counting).
        usage: tokens of this run's responses (a continued run keeps counting).
        final_turn: make one last request with tools disabled before ending at a limit.
        winding_down: that last request is the one in flight.
        output_expected: the agent has an ``output_type``: the run ends through its final result
            tool.
        output_failures: invalid final results (or text answers) in this run.
        output_retries: how many of them are sent back before the run fails.
        compaction: automatic compaction is on (``Agent(compaction=...)``).
        compacted: the history was compacted since the last response (no second compaction
            before the next request).
        overflow_retried: a "prompt is too long" answer already led to a compaction and a retry
            of this request.
        compaction_reason: why the machine is entering ``compacting`` (for its events).
    """

    response: AssistantMessage | None = None
    results: tuple[ToolResultMessage, ...] = ()
    queued_input: bool = False
    continuations: int = 0
    max_continuations: int = 3
    max_tokens_policy: MaxTokensPolicy = "continue"
    turns: int = 0
    max_turns: int = 50
    keep_going: bool = True
    terminate: bool = False
    final_result: ToolResultMessage | None = None
    hook_error: str | None = None
    pending: bool = False
    limits: UsageLimits | None = None
    requests: int = 0
    tool_calls: int = 0
    usage: Usage = NO_USAGE  # frozen: the shared zero (one less model per run)
    final_turn: bool = False
    winding_down: bool = False
    output_expected: bool = False
    output_failures: int = 0
    output_retries: int = 1
    compaction: bool = False
    compacted: bool = False
    overflow_retried: bool = False
    compaction_reason: str | None = None
    _fired: TransitionSpec | None = field(default=None, init=False, repr=False, compare=False)
    _raised_in: str | None = field(default=None, init=False, repr=False, compare=False)


Guard = Callable[[LoopData], bool]
"""A guard: a plain synchronous function of the loop's data."""
Effect = Callable[["Run"], Awaitable[str | None]]
"""A state's effect: an async function of the run returning the trigger to fire next (a terminal
state's returns None: the run ends)."""
Action = Callable[["Run"], None]
"""A transition's action: a synchronous function of the run, called when the transition fires."""


# -- guards ------------------------------------------------------------------------------------


def is_refusal(data: LoopData) -> bool:
    """The model refused (stop reason ``refusal``)."""
    return data.response is not None and data.response.stop_reason == StopReason.REFUSAL


def unknown_stop_reason(data: LoopData) -> bool:
    """The response holds tool calls but its stop reason is not one this library knows (a value
    a provider added later): its calls are not run, since nothing says they are complete."""
    return (
        data.response is not None
        and not is_known_stop_reason(data.response.stop_reason)
        and bool(data.response.tool_calls)
    )


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


def continuations_exhausted(data: LoopData) -> bool:
    """``pause_turn`` with no continuation left (``max_continuations``): the model is still
    working, so the run stops in ``max_turns`` rather than pretending it answered."""
    return (
        data.response is not None
        and data.response.stop_reason == StopReason.PAUSE_TURN
        and data.continuations >= data.max_continuations
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


def turns_used_up(data: LoopData) -> bool:
    """A run continued without a prompt already made ``max_turns`` turns (it keeps counting):
    it stops before any request."""
    return data.turns >= data.max_turns


def turn_limit_before_continuing(data: LoopData) -> bool:
    """The turn this response completes reaches the cap and the response would lead to another
    request (a continuation or queued input): the cap bounds every way a run goes on, not only
    tool batches."""
    return data.turns + 1 >= data.max_turns and (
        can_continue_pause_turn(data) or can_continue_max_tokens(data) or has_queued_input(data)
    )


def terminate_requested(data: LoopData) -> bool:
    """A permission hook denied a call with ``terminate=True``."""
    return data.terminate


def calls_pending(data: LoopData) -> bool:
    """Calls of the batch were deferred and wait for a person's decision."""
    return data.pending


def result_ends_run(data: LoopData) -> bool:
    """A result of the batch was marked ``terminate=True`` (and no call was denied with
    ``terminate=True``, which ends the run ``aborted`` instead)."""
    return data.final_result is not None and not data.terminate


def usage_limit_before_request(data: LoopData) -> bool:
    """A usage limit keeps the next request from being sent: ``max_requests`` is reached, or a
    token limit is exceeded (`UsageLimits.request_hit`)."""
    limits = data.limits
    return limits is not None and limits.request_hit(data.requests, data.usage) is not None


def usage_limit_on_reply(data: LoopData) -> bool:
    """A usage limit stops the run after this response: its tool batch would take the run past
    ``max_tool_calls`` or a token limit is exceeded (the batch is not run), or the response would
    lead to another request that a limit forbids (a continuation or queued input). A final
    answer is never stopped: the run ends ``done``."""
    limits, response = data.limits, data.response
    if limits is None or response is None:
        return False
    if has_tool_calls(data):
        wanted = len(response.tool_calls)
        return limits.calls_hit(data.tool_calls, data.usage, wanted) is not None
    if can_continue_pause_turn(data) or can_continue_max_tokens(data) or has_queued_input(data):
        return usage_limit_before_request(data)
    return False


def final_turn_wanted(data: LoopData) -> bool:
    """``final_turn`` is on, no final turn was made yet, and ``should_continue`` did not say
    stop: before ending at a limit, the run asks the model once more with tools disabled."""
    return data.final_turn and not data.winding_down and data.keep_going


def is_final_turn(data: LoopData) -> bool:
    """The response answers the final turn (tools disabled): the run ends at its limit."""
    return data.winding_down


def output_retries_exhausted(data: LoopData) -> bool:
    """More invalid final results (or text answers) than ``output_retries``."""
    return data.output_expected and data.output_failures > data.output_retries


def output_missing(data: LoopData) -> bool:
    """A typed result is expected but the model answered in text (no tool call)."""
    return data.output_expected and data.response is not None and not data.response.tool_calls


def can_retry_output(data: LoopData) -> bool:
    """The model answered in text instead of calling the final result tool, and a retry is
    left: it is asked again."""
    return output_missing(data) and data.output_failures < data.output_retries


def hook_failed(data: LoopData) -> bool:
    """The ``should_continue`` hook raised."""
    return data.hook_error is not None


# -- the definition ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class StateSpec:
    """A state and its effect.

    Attributes:
        name: the state's name (a `State` for the built-in ones).
        effect: what entering it does; None only for ``idle``.
        terminal: a run ends here, and so does its work (every call is answered).
        stops_run: ``run()`` returns here though the work goes on later (``awaiting_approval``);
            its effect returns None.
    """

    name: str
    effect: Effect | None = None
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
        action: called with the `Run` when the transition fires, before the dest's effect.
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
    action: Action | None = None
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

STATES: tuple[StateSpec, ...] = (
    StateSpec(_S.IDLE),
    StateSpec(_S.AWAITING_MODEL, fx.request_model),
    StateSpec(_S.EXECUTING_TOOLS, fx.run_tools),
    StateSpec(_S.AWAITING_APPROVAL, fx.await_decisions, stops_run=True),
    StateSpec(_S.COMPACTING, cx.compact_context),
    StateSpec(_S.DONE, fx.settle, terminal=True),
    StateSpec(_S.ABORTED, fx.settle, terminal=True),
    StateSpec(_S.MAX_TURNS, fx.settle, terminal=True),
    StateSpec(_S.FAILED, fx.settle, terminal=True),
)

# fmt: off
_TABLE: tuple[TransitionSpec, ...] = (
    # trigger              sources                dest                 guards                             label             action
    _T(Trigger.START,          (_S.IDLE, ENDED),        _S.MAX_TURNS,        (usage_limit_before_request,),     "usage_limit",    fx.note_usage_limit),
    _T(Trigger.START,          (_S.IDLE, ENDED),        _S.MAX_TURNS,        (turns_used_up,),                  "turn_limit",     fx.note_turn_limit_at_start),
    _T(Trigger.START,          (_S.IDLE, ENDED),        _S.AWAITING_MODEL,   (),                                "start"),
    _T(Trigger.MODEL_REPLIED,  (_S.AWAITING_MODEL,),  _S.MAX_TURNS,        (is_final_turn,),                  "final_answer_at_limit", fx.note_final_turn),
    _T(Trigger.MODEL_REPLIED,  (_S.AWAITING_MODEL,),  _S.DONE,             (is_refusal,),                     "refusal",        fx.answer_refused),
    _T(Trigger.MODEL_REPLIED,  (_S.AWAITING_MODEL,),  _S.DONE,             (unknown_stop_reason,),            "unknown_stop_reason", fx.answer_unknown_stop_reason),
    _T(Trigger.MODEL_REPLIED,  (_S.AWAITING_MODEL,),  _S.AWAITING_MODEL,   (final_turn_wanted, usage_limit_on_reply), "final_turn", fx.final_turn_at_usage_limit),
    _T(Trigger.MODEL_REPLIED,  (_S.AWAITING_MODEL,),  _S.MAX_TURNS,        (usage_limit_on_reply,),           "usage_limit",    fx.note_usage_limit),
    _T(Trigger.MODEL_REPLIED,  (_S.AWAITING_MODEL,),  _S.COMPACTING,       (cx.context_window_exceeded, cx.compaction_on, cx.turns_left), "context_window_compact", cx.answer_window_cut),
    _T(Trigger.MODEL_REPLIED,  (_S.AWAITING_MODEL,),  _S.DONE,             (cx.context_window_exceeded,),     "context_window", cx.note_context_window),
    _T(Trigger.MODEL_REPLIED,  (_S.AWAITING_MODEL,),  _S.EXECUTING_TOOLS,  (has_tool_calls,),                 "tool_calls"),
    _T(Trigger.MODEL_REPLIED,  (_S.AWAITING_MODEL,),  _S.AWAITING_MODEL,   (final_turn_wanted, turn_limit_before_continuing), "final_turn", fx.final_turn_at_turn_limit),
    _T(Trigger.MODEL_REPLIED,  (_S.AWAITING_MODEL,),  _S.MAX_TURNS,        (turn_limit_before_continuing,),   "turn_limit",     fx.note_turn_limit),
    _T(Trigger.MODEL_REPLIED,  (_S.AWAITING_MODEL,),  _S.AWAITING_MODEL,   (can_continue_pause_turn,),        "pause_turn",     fx.continue_paused),
    _T(Trigger.MODEL_REPLIED,  (_S.AWAITING_MODEL,),  _S.MAX_TURNS,        (continuations_exhausted,),        "continuation_limit", fx.note_continuation_limit),
    _T(Trigger.MODEL_REPLIED,  (_S.AWAITING_MODEL,),  _S.AWAITING_MODEL,   (can_continue_max_tokens,),        "max_tokens",     fx.continue_truncated),
    _T(Trigger.MODEL_REPLIED,  (_S.AWAITING_MODEL,),  _S.AWAITING_MODEL,   (has_queued_input,),               "queued_input",   fx.deliver_queued),
    _T(Trigger.MODEL_REPLIED,  (_S.AWAITING_MODEL,),  _S.AWAITING_MODEL,   (can_retry_output,),               "output_missing", fx.ask_for_output),
    _T(Trigger.MODEL_REPLIED,  (_S.AWAITING_MODEL,),  _S.FAILED,           (output_missing,),                 "output_invalid", fx.note_output_invalid),
    _T(Trigger.MODEL_REPLIED,  (_S.AWAITING_MODEL,),  _S.DONE,             (),                                "final_answer",   fx.note_final_answer),
    _T(Trigger.TOOLS_FINISHED, (_S.EXECUTING_TOOLS,), _S.AWAITING_APPROVAL,(calls_pending,),                  "deferred"),
    _T(Trigger.TOOLS_FINISHED, (_S.EXECUTING_TOOLS,), _S.DONE,             (result_ends_run,),                "terminating_result", fx.note_terminating_result),
    _T(Trigger.TOOLS_FINISHED, (_S.EXECUTING_TOOLS,), _S.FAILED,           (output_retries_exhausted,),       "output_invalid", fx.note_output_invalid),
    _T(Trigger.TOOLS_FINISHED, (_S.EXECUTING_TOOLS,), _S.AWAITING_MODEL,   (final_turn_wanted, turn_limit_reached), "final_turn", fx.final_turn_at_turn_limit),
    _T(Trigger.TOOLS_FINISHED, (_S.EXECUTING_TOOLS,), _S.MAX_TURNS,        (turn_limit_reached,),             "turn_limit",     fx.note_turn_limit),
    _T(Trigger.TOOLS_FINISHED, (_S.EXECUTING_TOOLS,), _S.ABORTED,          (terminate_requested,),            "terminated",     fx.note_terminated),
    _T(Trigger.TOOLS_FINISHED, (_S.EXECUTING_TOOLS,), _S.FAILED,           (hook_failed,),                    "hook_failed",    fx.note_hook_failed),
    _T(Trigger.TOOLS_FINISHED, (_S.EXECUTING_TOOLS,), _S.AWAITING_MODEL,   (final_turn_wanted, usage_limit_before_request), "final_turn", fx.final_turn_at_usage_limit),
    _T(Trigger.TOOLS_FINISHED, (_S.EXECUTING_TOOLS,), _S.MAX_TURNS,        (usage_limit_before_request,),     "usage_limit",    fx.note_usage_limit),
    _T(Trigger.TOOLS_FINISHED, (_S.EXECUTING_TOOLS,), _S.AWAITING_MODEL,   (),                                "next_turn",      fx.deliver_steering),
    _T(Trigger.DECIDED,        _APPROVAL,             _S.EXECUTING_TOOLS,  (),                                "decided"),
    _T(Trigger.COMPACT,        (_S.AWAITING_MODEL,),  _S.COMPACTING,       (cx.compaction_on,),               "compact"),
    _T(Trigger.COMPACTED,      (_S.COMPACTING,),      _S.AWAITING_MODEL,   (final_turn_wanted, usage_limit_before_request), "final_turn", fx.final_turn_at_usage_limit),
    _T(Trigger.COMPACTED,      (_S.COMPACTING,),      _S.MAX_TURNS,        (usage_limit_before_request,),     "usage_limit",    fx.note_usage_limit),
    _T(Trigger.COMPACTED,      (_S.COMPACTING,),      _S.AWAITING_MODEL,   (),                                "compacted"),
    _T(Trigger.ABORT,          (ACTIVE,),             _S.ABORTED,          (),                                "abort",          fx.note_abort),
    _T(Trigger.ABORT,          _APPROVAL,             _S.ABORTED,          (),                                "abort_pending",  fx.answer_pending),
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


class _Holder:
    """The object `transitions` drives (its model): ``state`` is the agent's state."""

    __slots__ = ("state",)

    def __init__(self, state: str = State.IDLE.value) -> None:
        self.state = state


@dataclass(frozen=True, slots=True)
class Fired:
    """A transition that happened (one object per branch and source, made when the definition
    is built: nothing is allocated per transition)."""

    trigger: str
    source: State | str
    dest: State | str
    label: str
    spec: TransitionSpec = field(repr=False, compare=False)
    dest_name: str = field(default="", repr=False, compare=False)
    action: Action | None = field(default=None, repr=False, compare=False)
    """The spec's action; a user's is checked (`checked_action`)."""


def _fired(trigger: str, source: str, spec: TransitionSpec) -> Fired:
    dest = str(spec.dest)
    return Fired(
        trigger,
        _BUILTIN.get(source, source),
        _BUILTIN.get(dest, dest),
        spec.name,
        spec,
        dest,
        checked_action(spec),
    )


_Callbacks = dict[str, tuple[tuple[Callable[[LoopData], None], ...], tuple[Any, ...]]]
_Branches = tuple[tuple[tuple[Guard, ...], Fired], ...]
_Pick = Callable[[LoopData], "Fired | None"]
_Compiled = dict[tuple[str, str], _Pick]


class _Definition:
    """A validated definition and the `transitions.Machine` built from it, never changed after.

    Every `LoopMachine` that has not changed the definition shares one (`_shared_definition`):
    `transitions` drives many models on one machine, each agent's `_Holder` being one of them
    (through ``Event.trigger(model, ...)``; holders are not registered with ``add_model``, which
    would bind about thirty convenience methods to each and keep every agent alive in
    ``machine.models``). A change builds a new definition for that `LoopMachine` only.
    """

    __slots__ = ("callbacks", "compiled", "complete", "groups", "machine", "specs", "states")

    def __init__(
        self,
        states: dict[str, StateSpec],
        specs: tuple[TransitionSpec, ...],
        callbacks: _Callbacks | None = None,
        groups: tuple[StateGroup, ...] = GROUPS,
        *,
        complete: bool = False,
    ) -> None:
        self.states = states
        self.specs = specs
        self.groups = groups
        self.callbacks: _Callbacks = callbacks or {}
        self.complete = complete  # validated whole (`validate_definition(complete=True)`)
        machine = Machine(
            model=None,
            states=[str(name) for name in states],
            initial=State.IDLE.value,
            auto_transitions=False,
            ignore_invalid_triggers=False,
        )
        for spec in specs:
            note = _noter(spec)
            for source in spec.sources:
                machine.add_transition(
                    str(spec.trigger),
                    str(source),
                    str(spec.dest),
                    conditions=[_checked_guard(guard, spec) for guard in spec.guards],
                    after=[note],
                )
        for name, (enter, exit_) in self.callbacks.items():
            for callback in enter:
                machine.get_state(name).add_callback(
                    "enter", _checked_callback(callback, "on_enter", name)
                )
            for callback in exit_:
                machine.get_state(name).add_callback(
                    "exit", _checked_callback(callback, "on_exit", name)
                )
        self.machine = machine
        self.compiled: _Compiled | None = (
            None
            if any(enter or exit_ for enter, exit_ in self.callbacks.values())
            else _compile(machine)
        )

    def changed(
        self,
        *,
        states: dict[str, StateSpec] | None = None,
        specs: Sequence[TransitionSpec] | None = None,
        callbacks: _Callbacks | None = None,
        groups: tuple[StateGroup, ...] | None = None,
    ) -> _Definition:
        """A new definition with the given parts replaced (not validated here)."""
        return _Definition(
            self.states if states is None else states,
            self.specs if specs is None else tuple(specs),
            self.callbacks if callbacks is None else callbacks,
            self.groups if groups is None else groups,
        )


_SHARED: list[_Definition] = []


def _shared_definition() -> _Definition:
    """The built-in definition, built and validated once per process."""
    if not _SHARED:
        states = {str(s.name): s for s in STATES}
        validate_definition(states.values(), TRANSITIONS, groups=GROUPS)
        _SHARED.append(_Definition(states, TRANSITIONS, complete=True))
    return _SHARED[0]


class LoopMachine:
    """The agent loop's state machine: a synchronous `transitions.Machine` over a definition
    (`STATES` and `TRANSITIONS` plus what a user added).

    Machines that keep the built-in definition share one `transitions.Machine` (an agent holds
    only its state); the first change (`add_transition`, `add_state`, `add_guard`, `on_enter`,
    `on_exit`) gives this machine a definition of its own, validated as it is made.

    Args:
        extra_transitions: transitions to add, each placed as `add_transition` places it.

    Raises:
        MachineDefinitionError: the definition is invalid (see `validate_definition`).
    """

    __slots__ = ("_definition", "_holder")

    def __init__(self, extra_transitions: Iterable[TransitionSpec] = ()) -> None:
        self._holder = _Holder()
        self._definition = _shared_definition()
        extra = tuple(extra_transitions)
        if extra:
            specs = list(TRANSITIONS)
            for spec in expand_groups(extra, GROUPS):
                specs = _placed(specs, spec)
            validate_definition(self.states.values(), specs, groups=GROUPS)
            self._definition = self._definition.changed(specs=specs)
            self._definition.complete = True

    @property
    def states(self) -> dict[str, StateSpec]:
        """The states by name (read only: change them with `add_state`)."""
        return self._definition.states

    @property
    def specs(self) -> list[TransitionSpec]:
        """The transitions, in the order they are tried (a copy: change them with
        `add_transition`)."""
        return list(self._definition.specs)

    @property
    def groups(self) -> dict[str, StateGroup]:
        """The state groups by name (`GROUPS`, with the states `add_state` added joined)."""
        return {g.name: g for g in self._definition.groups}

    @property
    def shared(self) -> bool:
        """The built-in definition, shared with every other machine that has not changed it."""
        return self._definition is _shared_definition()

    @property
    def state(self) -> State | str:
        """The current state (a `State`, or the name of a state a user added)."""
        name = self._holder.state
        return _BUILTIN.get(name, name)

    def check_complete(self) -> None:
        """Check that every state can be reached from ``idle`` and left (once per definition; a
        run does it before it starts, when every addition is known).

        Raises:
            MachineDefinitionError: naming each unreachable state (add a transition into it) or
                state with no way out.
        """
        definition = self._definition
        if not definition.complete:
            validate_definition(
                definition.states.values(), definition.specs, groups=definition.groups
            )
            definition.complete = True

    def is_terminal(self, state: str) -> bool:
        """``state`` ends a run."""
        return self._definition.states[state].terminal

    def stops_run(self, state: str) -> bool:
        """``run()`` returns in ``state`` (a terminal state, or ``awaiting_approval``)."""
        spec = self._definition.states[state]
        return spec.terminal or spec.stops_run

    def fire(self, trigger: str, data: LoopData) -> Fired:
        """Run ``trigger`` with the guards reading ``data``.

        Without enter/exit callbacks, the transition is picked from a table compiled from the
        `transitions` machine when it was built (the same branches in the same order, the same
        guards; the machine's state is set as its own ``trigger`` would): `transitions`'
        per-trigger bookkeeping and debug logging cost more than the rest of a turn. With
        callbacks, the library's own ``trigger`` runs them.

        Raises:
            MachineDefinitionError: no transition of ``trigger`` leaves the current state, or none of
                their guards passed (a hole in the definition, i.e. a bug).
        """
        compiled = self._definition.compiled
        if compiled is not None:
            source = self._holder.state
            pick = compiled.get((trigger, source))
            if pick is not None:
                fired = pick(data)
                if fired is not None:
                    self._holder.state = fired.dest_name
                    return fired
                raise MachineDefinitionError(
                    f"no guard of trigger {trigger!r} passed in state {source!r}"
                )
        return self.fire_library(trigger, data)

    def fire_library(self, trigger: str, data: LoopData) -> Fired:
        """`fire` through `transitions`' own ``trigger`` (what the compiled table must equal).

        Raises:
            MachineDefinitionError: as `fire`.
        """
        source = self._holder.state
        event = self._definition.machine.events.get(str(trigger))
        if event is None:
            raise MachineDefinitionError(f"unknown trigger {trigger!r}")
        data._fired = None
        try:
            moved = event.trigger(self._holder, data)
        except MachineError as exc:
            raise MachineDefinitionError(
                f"trigger {trigger!r} cannot leave state {source!r}"
            ) from exc
        except BaseException:
            # A guard or an enter/exit callback raised: the transition did not happen.
            self._holder.state = source
            raise
        spec, data._fired = data._fired, None
        if not moved or spec is None:
            raise MachineDefinitionError(
                f"no guard of trigger {trigger!r} passed in state {source!r}"
            )
        return _fired(str(trigger), source, spec)

    def add_state(self, name: str, effect: Effect) -> None:
        """Add a non-terminal state whose ``effect`` (an async function of the `Run` returning
        the next trigger) runs each time it is entered. Add the transitions into and out of it
        with `add_transition`. It joins each group with ``joins_added_states`` (``active``), so
        that group's transitions (``abort``, ``fail``) leave it like any active state.

        Raises:
            MachineDefinitionError: the name is taken (by a state or a group), or ``effect`` is
                not callable.
        """
        if name in self.states or name in self.groups:
            kind = "state" if name in self.states else "group"
            raise MachineDefinitionError(f"a {kind} named {name!r} already exists")
        if not callable(effect):
            raise MachineDefinitionError(f"state {name!r} needs an effect (an async function)")
        joined = {g.name for g in self._definition.groups if g.joins_added_states}
        groups = tuple(
            replace(g, states=(*g.states, name)) if g.name in joined else g
            for g in self._definition.groups
        )
        specs = [
            replace(s, sources=(*s.sources, name)) if joined & set(s.groups) else s
            for s in self.specs
        ]
        # Not validated yet: a new state has no way in until a transition enters it.
        self._definition = self._definition.changed(
            states={**self.states, name: StateSpec(name, effect)}, specs=specs, groups=groups
        )

    def add_transition(self, spec: TransitionSpec) -> None:
        """Add a transition. It goes before the branch labelled ``spec.before`` or after the one
        labelled ``spec.after`` (same trigger); with neither, before every existing branch of its
        trigger from the same sources (so later additions are tried first: say where instead).
        A group's name among ``spec.sources`` (``"active"``) stands for its members
        (`expand_groups`).

        A new state's transitions may be added in any order (out of it before into it): that
        every state can be reached and left is checked when a run starts (`check_complete`).

        A guard that raises ends the run ``failed`` with an error naming the guard and the
        exception (the transition does not happen; every call is answered), as for a raising
        hook; a `KeyboardInterrupt` (or `SystemExit`) in it ends the run ``aborted``, then
        propagates. The same holds for the transition's ``action`` and for
        `on_enter`/`on_exit` callbacks.

        Raises:
            MachineDefinitionError: the definition would become invalid (naming the offending
                specs: unknown states, a state with no effect, shadowed branches, ...); the
                machine is unchanged.
        """
        groups = self._definition.groups
        specs = _placed(self.specs, expand_groups((spec,), groups)[0])
        validate_definition(self.states.values(), specs, groups=groups, complete=False)
        self._definition = self._definition.changed(specs=specs)

    def add_guard(self, trigger: str, dest: str, guard: Guard) -> None:
        """Add ``guard`` to every transition of ``trigger`` into ``dest``.

        Raises:
            MachineDefinitionError: no such transition exists.
        """
        if not any(s.trigger == trigger and s.dest == dest for s in self.specs):
            raise MachineDefinitionError(f"no transition {trigger!r} -> {dest!r}")
        specs = [
            replace(s, guards=(*s.guards, guard)) if s.trigger == trigger and s.dest == dest else s
            for s in self.specs
        ]
        self._definition = self._definition.changed(specs=specs)

    def restore(self, state: str) -> None:
        """Put the machine in ``state`` without a transition (resuming a saved session).

        Raises:
            MachineDefinitionError: ``state`` is not ``idle``, terminal or ``awaiting_approval`` (a
                run cannot be resumed mid-flight).
        """
        spec = self.states.get(state, StateSpec(state))
        if state != State.IDLE and not (spec.terminal or spec.stops_run):
            raise MachineDefinitionError(f"cannot restore the mid-run state {state!r}")
        self._definition.machine.set_state(str(state), model=self._holder)

    def on_enter(self, state: str, callback: Callable[[LoopData], None]) -> None:
        """Call ``callback(data)`` each time ``state`` is entered (synchronously; no I/O). One
        that raises ends the run ``failed`` naming it, as a raising guard does (`add_transition`)."""
        self._add_callback(str(state), callback, 0)

    def on_exit(self, state: str, callback: Callable[[LoopData], None]) -> None:
        """Call ``callback(data)`` each time ``state`` is left (synchronously; no I/O). One that
        raises ends the run ``failed`` naming it, as a raising guard does (`add_transition`)."""
        self._add_callback(str(state), callback, 1)

    def _add_callback(self, state: str, callback: Callable[[LoopData], None], which: int) -> None:
        callbacks = dict(self._definition.callbacks)
        pair = list(callbacks.get(state, ((), ())))
        pair[which] = (*pair[which], callback)
        callbacks[state] = (pair[0], pair[1])
        self._definition = self._definition.changed(callbacks=callbacks)

    def state_callbacks(self, state: str) -> tuple[list[Any], list[Any]]:
        """The callbacks added with `on_enter` and `on_exit` for ``state``: ``(enter, exit)``."""
        enter, exit_ = self._definition.callbacks.get(str(state), ((), ()))
        return list(enter), list(exit_)


class CallbackFailed(Exception):
    """A user's guard, transition action or enter/exit callback raised: the run ends ``failed``
    with this text (naming it and the exception) as its error, as for a raising hook."""


_OWN_CALLABLES = frozenset(
    [*(g for s in TRANSITIONS for g in s.guards), *(s.action for s in TRANSITIONS if s.action)]
)
"""The built-in guards and actions: a bug in one propagates (as from an effect); a user's is
checked (`CallbackFailed`)."""


def _where(function: Callable[..., Any]) -> str:
    return str(getattr(function, "__qualname__", None) or getattr(function, "__name__", function))


def _checked(function: Callable[..., Any], where: str) -> Callable[..., Any]:
    """``function`` raising `CallbackFailed` for an exception, noting ``where`` an interrupt
    came from (on the `LoopData` or `Run` it gets, for `record_interrupt`)."""

    def checked(arg: Any, *args: Any) -> Any:
        try:
            return function(arg, *args)
        except Exception as exc:
            raise CallbackFailed(f"The {where} failed: {type(exc).__name__}: {exc}") from exc
        except INTERRUPTS:
            data = getattr(arg, "data", arg)  # a guard's LoopData, an action's Run
            if isinstance(data, LoopData):
                data._raised_in = f"the {where}"
            raise

    checked.__name__ = getattr(function, "__name__", "checked")
    checked.__qualname__ = _where(function)
    return checked


def _checked_guard(guard: Guard, spec: TransitionSpec) -> Guard:
    if guard in _OWN_CALLABLES:
        return guard
    where = f"guard {_where(guard)!r} of transition {spec.name!r} ({spec.trigger})"
    return _checked(guard, where)


def checked_action(spec: TransitionSpec) -> Action | None:
    """``spec``'s action, checked as a guard is when it is a user's (`CallbackFailed`)."""
    action = spec.action
    if action is None or action in _OWN_CALLABLES:
        return action
    return _checked(
        action, f"action {_where(action)!r} of transition {spec.name!r} ({spec.trigger})"
    )


def _checked_callback(callback: Any, which: str, state: str) -> Any:
    return _checked(callback, f"{which} callback {_where(callback)!r} of state {state!r}")


def _noter(spec: TransitionSpec) -> Callable[..., None]:
    """The ``after`` callback that tells `LoopMachine.fire_library` which spec fired."""

    def note(data: LoopData, *_args: Any) -> None:
        data._fired = spec

    note.spec = spec  # type: ignore[attr-defined]  # read by `_compile`
    return note


def _compile(machine: Machine) -> _Compiled | None:
    """The branches of each (trigger, source) in `transitions`' order: each one's guards (its
    conditions, all of which must be true) and the `Fired` it returns; None when a branch has a
    shape the table does not model (then the library's own trigger runs)."""
    table: dict[tuple[str, str], list[tuple[tuple[Guard, ...], Fired]]] = {}
    for trigger, event in machine.events.items():
        for source, transitions in event.transitions.items():
            branches = table.setdefault((trigger, source), [])
            for transition in transitions:
                if not all(c.target for c in transition.conditions):
                    return None  # a shape the table does not model: use the library's trigger
                spec = next(f.spec for f in transition.after if hasattr(f, "spec"))
                assert str(spec.dest) == str(transition.dest)
                guards = tuple(cast(Guard, c.func) for c in transition.conditions)
                branches.append((guards, _fired(trigger, source, spec)))
    return {key: _picker(tuple(branches)) for key, branches in table.items()}


def _picker(branches: _Branches) -> _Pick:
    """One function that tries ``branches`` in order: each one's guards in order, ``and``-ed
    (the first false one ends the branch, as `transitions` evaluates conditions), returning the
    first branch's `Fired` whose guards all pass, or None. The same steps as a loop over the
    branches, without the loop's own cost (nineteen guards a turn)."""
    namespace: dict[str, Any] = {}
    lines = ["def pick(data):"]
    for i, (guards, fired) in enumerate(branches):
        namespace[f"fired_{i}"] = fired
        calls = []
        for j, guard in enumerate(guards):
            namespace[f"guard_{i}_{j}"] = guard
            calls.append(f"guard_{i}_{j}(data)")
        if not calls:
            lines.append(f"    return fired_{i}")
            break
        lines.append(f"    if {' and '.join(calls)}:\n        return fired_{i}")
    else:
        lines.append("    return None")
    exec("\n".join(lines), namespace)
    return cast(_Pick, namespace["pick"])


def _placed(specs: list[TransitionSpec], spec: TransitionSpec) -> list[TransitionSpec]:
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
