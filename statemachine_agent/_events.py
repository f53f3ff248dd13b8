"""Events an agent emits while it runs (``agent.subscribe(callback)`` or ``agent.events()``).

Plain frozen dataclasses (cheap on the hot path); ``event_to_dict`` gives their JSON shape. Pairs
always match: each ``ToolExecutionStart`` has one ``ToolExecutionEnd``, each ``TurnStart`` one
``TurnEnd``, each ``RunStart`` one ``RunEnd``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from pydantic import BaseModel

from ._hooks import PendingCall
from ._messages import AssistantMessage, Message, ToolCallBlock, ToolResultMessage

if TYPE_CHECKING:
    from ._result import RunResult


@dataclass(frozen=True, slots=True)
class RunStart:
    """A run began (``prompt`` is None when continuing)."""

    type: ClassVar[str] = "run_start"
    prompt: Message | None


@dataclass(frozen=True, slots=True)
class RunEnd:
    """A run reached a terminal state."""

    type: ClassVar[str] = "run_end"
    result: RunResult


@dataclass(frozen=True, slots=True)
class TurnStart:
    """A turn began: a model request is about to be sent (``turn`` counts from 1 in the run)."""

    type: ClassVar[str] = "turn_start"
    turn: int


@dataclass(frozen=True, slots=True)
class TurnEnd:
    """A turn ended: the response and the results of its tool batch (empty when none ran)."""

    type: ClassVar[str] = "turn_end"
    turn: int
    message: AssistantMessage | None
    tool_results: tuple[ToolResultMessage, ...]


@dataclass(frozen=True, slots=True)
class MessageStart:
    """The model began streaming a response."""

    type: ClassVar[str] = "message_start"
    model: str | None = None


@dataclass(frozen=True, slots=True)
class MessageDelta:
    """A piece of a streamed response. ``kind`` is ``text``, ``thinking`` or ``tool_call``
    (for a tool call, ``delta`` is a fragment of its JSON arguments)."""

    type: ClassVar[str] = "message_delta"
    index: int
    kind: str
    delta: str
    tool_name: str | None = None


@dataclass(frozen=True, slots=True)
class MessageEnd:
    """A message was appended to the history (a response, a user message or a tool result)."""

    type: ClassVar[str] = "message_end"
    message: Message


@dataclass(frozen=True, slots=True)
class ToolExecutionStart:
    """A tool call began (its permission hook, then the tool)."""

    type: ClassVar[str] = "tool_execution_start"
    call: ToolCallBlock


@dataclass(frozen=True, slots=True)
class ToolExecutionUpdate:
    """A running tool reported progress through ``ToolContext.progress``."""

    type: ClassVar[str] = "tool_execution_update"
    call_id: str
    update: Any


@dataclass(frozen=True, slots=True)
class ToolExecutionEnd:
    """A tool call finished (in completion order; results enter the history in declaration order)."""

    type: ClassVar[str] = "tool_execution_end"
    call: ToolCallBlock
    result: ToolResultMessage


@dataclass(frozen=True, slots=True)
class StateChanged:
    """The machine moved: ``source`` -> ``dest`` by ``trigger`` (the branch is ``label``)."""

    type: ClassVar[str] = "state_changed"
    source: str
    dest: str
    trigger: str
    label: str


@dataclass(frozen=True, slots=True)
class ModelRetry:
    """A failed model request will be retried after ``delay_seconds``."""

    type: ClassVar[str] = "model_retry"
    attempt: int
    delay_seconds: float
    error: str


@dataclass(frozen=True, slots=True)
class ApprovalRequested:
    """The run stopped in ``awaiting_approval``: ``calls`` wait for a decision."""

    type: ClassVar[str] = "approval_requested"
    calls: tuple[PendingCall, ...]


@dataclass(frozen=True, slots=True)
class CallDecided:
    """A person decided on a deferred call (``decision`` is ``"approve"`` or ``"deny"``)."""

    type: ClassVar[str] = "call_decided"
    call_id: str
    decision: str
    reason: str | None = None
    arguments: dict[str, Any] | None = None


Event = (
    RunStart
    | RunEnd
    | TurnStart
    | TurnEnd
    | MessageStart
    | MessageDelta
    | MessageEnd
    | ToolExecutionStart
    | ToolExecutionUpdate
    | ToolExecutionEnd
    | StateChanged
    | ModelRetry
    | ApprovalRequested
    | CallDecided
)


def _plain(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json", exclude_none=True)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return event_to_dict(value)
    if isinstance(value, list | tuple):
        return [_plain(item) for item in value]
    return value


def event_to_dict(event: Any) -> dict[str, Any]:
    """The JSON-ready shape of an event: ``{"type": ..., **fields}``."""
    out: dict[str, Any] = {"type": event.type} if hasattr(event, "type") else {}
    for f in dataclasses.fields(event):
        out[f.name] = _plain(getattr(event, f.name))
    return out
