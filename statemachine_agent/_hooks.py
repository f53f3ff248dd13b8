"""Hook signatures and the decisions a ``before_tool_call`` hook can return."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ._cancel import AbortSignal
from ._errors import UsageError
from ._messages import AssistantMessage, Message, ToolCallBlock, ToolResultMessage, Usage
from ._tools import Tool, ToolResult


@dataclass(frozen=True, slots=True)
class Allow:
    """Run the call; with ``arguments``, run it with these instead (they are validated again)."""

    arguments: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class Deny:
    """Do not run the call. The model reads ``reason``; ``terminate=True`` also ends the run in
    ``aborted`` once the batch has its results."""

    reason: str
    terminate: bool = False


@dataclass(frozen=True, slots=True)
class Interrupted(Deny):
    """A ``before_tool_call`` decision: the decision itself was interrupted (e.g. Ctrl-C at a
    permission prompt), so the call is not run. Unlike a `Deny` it is no refusal: the call's
    result is ``reason`` as given, without the ``Denied: `` a denial's reason gets (the model
    must not read it as the person's "no"). ``terminate`` as for `Deny`.
    """


@dataclass(frozen=True, slots=True)
class Defer:
    """Do not run the call yet: the run stops in ``awaiting_approval`` once the rest of the batch
    has run, until a person decides (``agent.run(decisions={call_id: Approve() | Deny(reason)})``,
    from this process or another that resumed the session log)."""

    reason: str


@dataclass(frozen=True, slots=True)
class Approve:
    """A decision on a deferred call: run it (with ``arguments`` instead, when given; they are
    validated again)."""

    arguments: dict[str, Any] | None = None


Decision = Approve | Deny
"""A person's decision on a deferred call: `Approve` it, or `Deny` it (``Deny(reason,
terminate=True)`` answers every pending call and ends the run ``aborted``)."""


def check_decisions(
    waiting: Sequence[str], decisions: Mapping[str, object], *, of: str = ""
) -> None:
    """Refuse ``decisions`` for the pending calls ``waiting`` (their ids, in declaration order)
    unless each names a pending call and is `Approve` or `Deny`.

    Args:
        waiting: the ids of the calls awaiting approval.
        decisions: ``{call_id: decision}``.
        of: names the run in the messages (e.g. `` of run 'r1'``).

    Raises:
        UsageError: no decision, an id that is not pending, or a value that is not a decision.
    """
    pending = ", ".join(waiting)
    if not decisions:
        raise UsageError(f"no decision given; pending: {pending}")
    unknown = [cid for cid in decisions if cid not in waiting]
    if unknown:
        raise UsageError(
            f"no pending call{of} has id {', '.join(map(repr, unknown))} (pending: {pending}); "
            "a call is decided once"
        )
    wrong = [cid for cid, d in decisions.items() if not isinstance(d, Approve | Deny)]
    if wrong:
        raise UsageError(f"decisions must be Approve() or Deny(reason); got one for {wrong}")


@dataclass(frozen=True, slots=True)
class PendingCall:
    """A deferred call waiting for a decision.

    Attributes:
        id: the tool-call id (the key of its decision).
        tool_name: the tool.
        arguments: the arguments the model sent.
        reason: why it was deferred.
    """

    id: str
    tool_name: str
    arguments: dict[str, Any]
    reason: str


@dataclass(frozen=True, slots=True)
class ToolCallInfo:
    """What a tool hook sees.

    Attributes:
        call: the tool call as the model sent it.
        tool: the registered tool.
        arguments: the validated arguments. ``before_tool_call`` gets its own copy: arguments it
            changes in place are validated again before the call, like arguments it returns.
        deps: the ``deps`` object given to the `Agent`.
        signal: the run's abort signal: a slow hook (a permission prompt) can stop waiting when
            ``signal.aborted`` turns true (``await signal.wait()``).
    """

    call: ToolCallBlock
    tool: Tool
    arguments: dict[str, Any]
    deps: Any = None
    signal: AbortSignal = field(default_factory=AbortSignal, repr=False)


@dataclass(frozen=True, slots=True)
class TurnInfo:
    """What ``should_continue`` sees after each turn.

    Attributes:
        turn: turns completed in this run.
        message: the turn's assistant message.
        tool_results: the results of its tool batch.
        usage: tokens used by the run so far.
        messages: the whole history.
        signal: the run's abort signal (a slow hook can stop waiting when it is set).
    """

    turn: int
    message: AssistantMessage
    tool_results: tuple[ToolResultMessage, ...]
    usage: Usage
    messages: Sequence[Message] = field(repr=False)
    signal: AbortSignal = field(default_factory=AbortSignal, repr=False)


BeforeToolCall = Callable[
    [ToolCallInfo],
    "Allow | Deny | Defer | dict[str, Any] | Awaitable[Allow | Deny | Defer | dict[str, Any] | None]"
    " | None",
]
"""Return None or `Allow()` to run the call, a dict or `Allow(arguments)` to change its arguments,
`Deny(reason)` to refuse it, `Defer(reason)` to wait for a person's decision. Sync or async."""

AfterToolCall = Callable[
    [ToolCallInfo, ToolResultMessage],
    "ToolResultMessage | ToolResult | Awaitable[ToolResultMessage | ToolResult | None] | None",
]
"""Return a `ToolResultMessage` to replace the result (a call whose tool asked to end the run
still ends it), a `ToolResult` to replace it and decide with its ``terminate`` whether the run ends
after this batch, or None to keep it. Sync or async."""

ShouldContinue = Callable[[TurnInfo], "bool | Awaitable[bool]"]
"""Return False to end the run in ``max_turns`` after this turn. Sync or async."""

TransformContext = Callable[..., "list[Message] | Awaitable[list[Message]]"]
"""``transform_context(messages)`` or ``transform_context(messages, signal)``: rewrite the history
sent with each request (the stored history is unchanged). A hook that takes a second parameter gets
the run's `AbortSignal`. Sync or async."""


INTERRUPTS = (KeyboardInterrupt, SystemExit)
"""What a tool or a hook may raise to stop the process: the run records it and aborts, every
call is answered, then it propagates (`record_interrupt`)."""


def record_interrupt(signal: AbortSignal, exc: BaseException, where: str) -> str:
    """The one rule for a `KeyboardInterrupt` (or `SystemExit`) raised in a tool or a hook
    (``before_tool_call``, ``after_tool_call``, ``should_continue``, ``transform_context``):
    abort the run with a reason naming ``where`` it was raised, so running calls get the grace
    period (``abort_grace_seconds``) and every call is answered; the caller re-raises it once the
    run has ended ``aborted``. Returns the reason (also the run's error).

    Args:
        signal: the run's abort signal.
        exc: the interrupt.
        where: where it was raised, e.g. ``"the before_tool_call hook (call toolu_1)"``.
    """
    reason = f"{type(exc).__name__} raised in {where}"
    signal.set(reason)
    return reason
