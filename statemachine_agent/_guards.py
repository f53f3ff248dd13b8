"""The loop's data and its guards: `LoopData` (what the run fills in before each trigger) and the
plain synchronous functions of it that the transition table (`_definition`) names as guards.

Guards read only `LoopData`: no I/O, no run, no agent. A guard's docstring says the rule it
checks; the table's labels say which branch it selects.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from ._limits import LimitHit, UsageLimits, calls_to_run
from ._messages import (
    NO_USAGE,
    TRUNCATING_STOP_REASONS,
    AssistantMessage,
    StopReason,
    ToolResultMessage,
    Usage,
    is_known_stop_reason,
)

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
        limit_hit: the usage limit that stopped the run (set by the ``usage_limit`` branches'
            action), None while none has.
        requests: model requests sent in this run (a continued run keeps counting).
        tool_calls: tool calls batches took in, in this run (``max_tool_calls``, see
            `calls_to_run`; a continued run keeps counting).
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
    limit_hit: LimitHit | None = None
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
    # The spec `LoopMachine.fire_library` saw fire (a `TransitionSpec`), and where a user's
    # callable raised an interrupt (for `record_interrupt`).
    fired: Any = field(default=None, init=False, repr=False, compare=False)
    raised_in: str | None = field(default=None, init=False, repr=False, compare=False)


Guard = Callable[[LoopData], bool]
"""A guard: a plain synchronous function of the loop's data."""

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
        and not (  # the policy first: it is read without a model field read (see `_messages`)
            data.max_tokens_policy == "stop" and response.stop_reason in TRUNCATING_STOP_REASONS
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
    ``max_tool_calls`` (counting the calls that would run, `calls_to_run`) or a token limit is
    exceeded (the batch is not run), or the response would
    lead to another request that a limit forbids (a continuation or queued input). A final
    answer is never stopped: the run ends ``done``."""
    limits, response = data.limits, data.response
    if limits is None or response is None:
        return False
    if has_tool_calls(data):
        return batch_limit_hit(data) is not None
    if can_continue_pause_turn(data) or can_continue_max_tokens(data) or has_queued_input(data):
        return usage_limit_before_request(data)
    return False


def batch_limit_hit(data: LoopData) -> LimitHit | None:
    """The usage limit that keeps the response's tool batch from running, if any: a token
    limit exceeded, or ``max_tool_calls`` that the calls which would run take the run past
    (`calls_to_run`: not a truncated call, and none of a response cut by the context window,
    which `context_window_exceeded` ends or compacts without running them)."""
    limits, response = data.limits, data.response
    if limits is None or response is None:
        return None
    calls = () if context_window_exceeded(data) else response.tool_calls
    return limits.calls_hit(data.tool_calls, data.usage, calls_to_run(calls))


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


# -- compaction's guards ----------------------------------------------------------------------


# An enum member read from its class goes through the slow attribute hook of ``EnumType``
# (it defines ``__getattr__``) on Python 3.11; a module global is read directly
# (benchmarks/README.md).
_CONTEXT_WINDOW_EXCEEDED = StopReason.MODEL_CONTEXT_WINDOW_EXCEEDED


def context_window_exceeded(data: LoopData) -> bool:
    """The response was cut by the context window (stop reason
    ``model_context_window_exceeded``): it is not continued like ``max_tokens`` (a continuation
    cannot fit)."""
    response = data.response
    return response is not None and response.stop_reason == _CONTEXT_WINDOW_EXCEEDED


def compaction_on(data: LoopData) -> bool:
    """Automatic compaction is configured (``Agent(compaction=...)``)."""
    return data.compaction


def turns_left(data: LoopData) -> bool:
    """The turn this response completes leaves the run under its turn cap: going on after a
    context-window stop is bounded like every other way a run goes on."""
    return data.turns + 1 < data.max_turns


# -- what the compiled pick tests before calling a guard ---------------------------------------

NECESSARY: dict[Guard, str] = {
    is_final_turn: "data.winding_down",
    final_turn_wanted: "data.final_turn",
    has_queued_input: "data.queued_input",
    terminate_requested: "data.terminate",
    calls_pending: "data.pending",
    result_ends_run: "data.final_result is not None",
    usage_limit_before_request: "data.limits is not None",
    usage_limit_on_reply: "data.limits is not None",
    output_retries_exhausted: "data.output_expected",
    output_missing: "data.output_expected",
    can_retry_output: "data.output_expected",
    hook_failed: "data.hook_error is not None",
    compaction_on: "data.compaction",
}
"""For these guards, a condition without which the guard is false (a Python expression reading
attributes of ``data``, each one the guard itself tests first): the compiled pick
(`_machine`) tests it before calling the guard, so on a turn where the field says no (no limits,
no final turn, no queued input...) the branch costs an attribute read instead of a call."""
