"""Hook signatures and the decisions a ``before_tool_call`` hook can return."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ._messages import AssistantMessage, Message, ToolCallBlock, ToolResultMessage, Usage
from ._tools import Tool


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
        arguments: the validated arguments.
        deps: the ``deps`` object given to the `Agent`.
    """

    call: ToolCallBlock
    tool: Tool
    arguments: dict[str, Any]
    deps: Any = None


@dataclass(frozen=True, slots=True)
class TurnInfo:
    """What ``should_continue`` sees after each turn.

    Attributes:
        turn: turns completed in this run.
        message: the turn's assistant message.
        tool_results: the results of its tool batch.
        usage: tokens used by the run so far.
        messages: the whole history.
    """

    turn: int
    message: AssistantMessage
    tool_results: tuple[ToolResultMessage, ...]
    usage: Usage
    messages: Sequence[Message] = field(repr=False)


BeforeToolCall = Callable[
    [ToolCallInfo],
    "Allow | Deny | Defer | dict[str, Any] | Awaitable[Allow | Deny | Defer | dict[str, Any] | None]"
    " | None",
]
"""Return None or `Allow()` to run the call, a dict or `Allow(arguments)` to change its arguments,
`Deny(reason)` to refuse it, `Defer(reason)` to wait for a person's decision. Sync or async."""

AfterToolCall = Callable[
    [ToolCallInfo, ToolResultMessage],
    "ToolResultMessage | Awaitable[ToolResultMessage | None] | None",
]
"""Return a `ToolResultMessage` to replace the result, or None to keep it. Sync or async."""

ShouldContinue = Callable[[TurnInfo], "bool | Awaitable[bool]"]
"""Return False to end the run in ``max_turns`` after this turn. Sync or async."""

TransformContext = Callable[[list[Message]], "list[Message] | Awaitable[list[Message]]"]
"""Rewrite the history sent with each request (the stored history is unchanged). Sync or async."""
