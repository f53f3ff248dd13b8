"""Events an agent emits while it runs (``agent.subscribe(callback)`` or ``agent.events()``).

Plain frozen dataclasses (cheap on the hot path); ``event_to_dict`` gives their JSON shape. Pairs
always match: each ``ToolExecutionStart`` has one ``ToolExecutionEnd``, each ``TurnStart`` one
``TurnEnd``, each ``RunStart`` one ``RunEnd``.

Every event carries ``run_id`` (the run that emitted it, as in ``RunResult.run_id``) and ``seq``
(1 for the run's ``run_start``, then one more per event of that run): both are stamped when the
event is emitted, so a gap in ``seq`` shows a consumer that it missed events.

``parent`` is None for the events of the agent's own runs. A sub-agent's events (`Agent.as_tool`)
reach the parent agent's subscribers too, unchanged but for ``parent``: a `ParentRef` naming the
parent's run and the tool call that runs the sub-agent (``run_id`` and ``seq`` stay the
sub-agent run's own). A consumer of one agent's own run filters on ``event.parent is None``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar, get_args

from pydantic import BaseModel

from ._accounting import ContextUsage
from ._dataclasses import fast_init
from ._hooks import PendingCall
from ._jsonable import jsonable
from ._messages import AssistantMessage, Message, ToolCallBlock, ToolResultMessage

if TYPE_CHECKING:
    from ._result import RunResult


SLOW_SUBSCRIBER_SECONDS = 0.02
"""A subscriber that takes longer than this on one event is logged (once) at warning level."""


@dataclass(frozen=True, slots=True)
class ParentRef:
    """Where a sub-agent's event comes from: the parent's run and the tool call running it.

    Attributes:
        run_id: the parent run's id (``RunResult.run_id`` of the parent).
        call_id: the id of the parent's tool call that runs the sub-agent.
        tool_name: the name of that tool.
    """

    run_id: str
    call_id: str
    tool_name: str = ""


@dataclass(frozen=True, slots=True)
class EventBase:
    """What every event carries: ``run_id`` and ``seq`` (stamped when emitted; not compared),
    and ``parent``: None for an agent's own run, a `ParentRef` for a sub-agent's event passed on
    to the parent agent's subscribers (see the module docstring)."""

    run_id: str = field(default="", compare=False, kw_only=True)
    seq: int = field(default=0, compare=False, kw_only=True)
    parent: ParentRef | None = field(default=None, compare=False, kw_only=True)

    if not TYPE_CHECKING:

        def __getattr__(self, name: str) -> Any:
            # Only for an empty slot: the events' __init__ leaves these three unset when given
            # their defaults (`fast_init`'s ``unset``), and `Run.emit` stamps two of them.
            if name in _UNSET_DEFAULTS:
                return _UNSET_DEFAULTS[name]
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")


_UNSET_DEFAULTS: dict[str, Any] = {f.name: f.default for f in dataclasses.fields(EventBase)}
"""What an event's empty ``run_id``, ``seq`` and ``parent`` read as: `EventBase`'s defaults."""

# `Run.emit` stamps each event through its slots: frozen for subscribers, not for its emitter.
SET_RUN_ID = EventBase.__dict__["run_id"].__set__
SET_SEQ = EventBase.__dict__["seq"].__set__


@dataclass(frozen=True, slots=True)
class RunStart(EventBase):
    """A run began (``prompt`` is None when continuing)."""

    type: ClassVar[str] = "run_start"
    prompt: Message | None


@dataclass(frozen=True, slots=True)
class RunEnd(EventBase):
    """A run reached a terminal state."""

    type: ClassVar[str] = "run_end"
    result: RunResult


@dataclass(frozen=True, slots=True)
class TurnStart(EventBase):
    """A turn began: a model request is about to be sent (``turn`` counts from 1 in the run)."""

    type: ClassVar[str] = "turn_start"
    turn: int


@dataclass(frozen=True, slots=True)
class TurnEnd(EventBase):
    """A turn ended: the response and the results of its tool batch (empty when none ran), and
    the context the history now uses (``context``, see `ContextUsage`)."""

    type: ClassVar[str] = "turn_end"
    turn: int
    message: AssistantMessage | None
    tool_results: tuple[ToolResultMessage, ...]
    context: ContextUsage | None = None


@dataclass(frozen=True, slots=True)
class MessageStart(EventBase):
    """The model began streaming a response (``response_id``: the provider's id of it, when it
    gives one)."""

    type: ClassVar[str] = "message_start"
    model: str | None = None
    response_id: str | None = None


@dataclass(frozen=True, slots=True)
class MessageDelta(EventBase):
    """A piece of a streamed response. ``kind`` is ``text``, ``thinking`` or ``tool_call``
    (for a tool call, ``delta`` is a fragment of its JSON arguments)."""

    type: ClassVar[str] = "message_delta"
    index: int
    kind: str
    delta: str
    tool_name: str | None = None


@dataclass(frozen=True, slots=True)
class MessageEnd(EventBase):
    """A message was appended to the history (a response, a user message or a tool result)."""

    type: ClassVar[str] = "message_end"
    message: Message


@dataclass(frozen=True, slots=True)
class ToolExecutionStart(EventBase):
    """A tool call began (its permission hook, then the tool)."""

    type: ClassVar[str] = "tool_execution_start"
    call: ToolCallBlock


@dataclass(frozen=True, slots=True)
class ToolExecutionUpdate(EventBase):
    """A running tool reported progress through ``ToolContext.progress``."""

    type: ClassVar[str] = "tool_execution_update"
    call_id: str
    update: Any


@dataclass(frozen=True, slots=True)
class ToolExecutionEnd(EventBase):
    """A tool call finished (in completion order; results enter the history in declaration order)."""

    type: ClassVar[str] = "tool_execution_end"
    call: ToolCallBlock
    result: ToolResultMessage


@dataclass(frozen=True, slots=True)
class StateChanged(EventBase):
    """The machine moved: ``source`` -> ``dest`` by ``trigger`` (the branch is ``label``)."""

    type: ClassVar[str] = "state_changed"
    source: str
    dest: str
    trigger: str
    label: str


@dataclass(frozen=True, slots=True)
class ModelRetry(EventBase):
    """A failed model request will be retried after ``delay_seconds``."""

    type: ClassVar[str] = "model_retry"
    attempt: int
    delay_seconds: float
    error: str


@dataclass(frozen=True, slots=True)
class ApprovalRequested(EventBase):
    """The run stopped in ``awaiting_approval``: ``calls`` wait for a decision."""

    type: ClassVar[str] = "approval_requested"
    calls: tuple[PendingCall, ...]


@dataclass(frozen=True, slots=True)
class CallDecided(EventBase):
    """A person decided on a deferred call (``decision`` is ``"approve"`` or ``"deny"``)."""

    type: ClassVar[str] = "call_decided"
    call_id: str
    decision: str
    reason: str | None = None
    arguments: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class CompactionStart(EventBase):
    """Automatic compaction began: the ``messages`` oldest messages are being summarized
    (``reason``: ``"threshold"``, ``"context_window"`` or ``"prompt_too_long"``)."""

    type: ClassVar[str] = "compaction_start"
    reason: str
    tokens_before: int
    messages: int


@dataclass(frozen=True, slots=True)
class CompactionEnd(EventBase):
    """Automatic compaction ended: ``messages_cut`` messages became one summary message (0
    when nothing could be cut); tokens as `ContextUsage.tokens` before and after."""

    type: ClassVar[str] = "compaction_end"
    reason: str
    tokens_before: int
    tokens_after: int
    messages_cut: int


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
    | CompactionStart
    | CompactionEnd
)


def _plain(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return jsonable(value, exclude_none=True)
    if _is_own_dataclass(value):
        return event_to_dict(value)
    if isinstance(value, list | tuple):
        return [_plain(item) for item in value]
    return jsonable(value)  # a tool's progress update, a person's arguments: anything


def _is_own_dataclass(value: Any) -> bool:
    """An event, a `PendingCall`, a `ContextUsage`... (a user's dataclass is data: `jsonable`)."""
    return (
        dataclasses.is_dataclass(value)
        and not isinstance(value, type)
        and type(value).__module__.startswith("statemachine_agent.")
    )


def event_to_dict(event: Any) -> dict[str, Any]:
    """The JSON-ready shape of an event: ``{"type": ..., "run_id": ..., "seq": ..., **fields}``.

    Every field is JSON-ready (``json.dumps(..., allow_nan=False)`` never fails), whatever a tool
    sent as progress: data goes through pydantic's serialization (a date becomes its ISO text, a
    model or dataclass a dict), NaN and infinities become None, and a value pydantic cannot
    serialize becomes a marker naming its type, ``"<unserializable _thread.lock>"``.

    ``parent`` is present only for a sub-agent's event (``{"run_id", "call_id", "tool_name"}``).

    A ``run_end`` event's ``result`` is the outcome without the history (``state``, ``turns``,
    ``usage``, ``stop_reason``, ``error``, ``refusal``, ``text``, ``new_messages``: how many
    messages the run added, each already sent as a ``message_end`` event), so its size does not
    grow with the session.
    """
    out: dict[str, Any] = {"type": event.type} if hasattr(event, "type") else {}
    for f in dataclasses.fields(event):
        value = getattr(event, f.name)
        if value is None and f.name == "parent":
            continue  # an agent's own event: the shape it always had
        out[f.name] = _result_summary(value) if isinstance(event, RunEnd) else _plain(value)
    return out


def _result_summary(value: Any) -> Any:
    from ._result import RunResult  # the result module imports the messages, not the events

    if not isinstance(value, RunResult):
        return _plain(value)
    return {
        "run_id": value.run_id,
        "state": value.state.value,
        "turns": value.turns,
        "usage": value.usage.model_dump(mode="json"),
        "stop_reason": None if value.stop_reason is None else str(value.stop_reason),
        "error": value.error,
        "refusal": value.refusal,
        "text": value.text,
        "new_messages": len(value.new_messages),
    }


for _event_class in get_args(Event):
    fast_init(_event_class, unset=tuple(_UNSET_DEFAULTS))


EventT = TypeVar("EventT", bound=EventBase)


def stamped(cls: type[EventT]) -> Callable[..., EventT]:
    """A function building ``cls`` events already stamped, for `Run`'s own events.

    ``build(run, *fields)`` returns the event ``cls(*fields)`` would be once `Run.emit` stamped
    it with ``run.id`` and ``next(run.seqs)`` (the run's next sequence number): the same class
    (exactly ``cls``), fields, equality, ``repr`` and pickles, ``parent`` None, frozen. It
    costs less: ``cls(...)`` and the stamps write each field through its slot descriptor's
    ``__set__`` (a method-wrapper call each), while ``build`` writes the slots with plain
    stores on a private writable subclass of ``cls`` (no ``__setattr__`` of its own, so each
    store goes straight to the slot) and then sets the object's class to ``cls``, once: the
    figures are in benchmarks/README.md, "Why the code is shaped this way".

    Args:
        cls: an event class (a frozen, slotted `EventBase` dataclass).

    Returns:
        ``build(run, *fields)``: ``run`` has ``id`` (str) and ``seqs`` (an iterator of ints, a
        `Run`'s); ``fields`` positional, in ``cls``'s field order, with ``cls``'s defaults; a
        wrong number of them raises `TypeError` as ``cls(...)`` does.

    Raises:
        TypeError: a field of ``cls`` has a default factory (no event has one).
    """
    return _builder(cls, stamp=True)


def drafted(cls: type[EventT]) -> Callable[..., EventT]:
    """A function building drafts of ``cls`` events, for the events `Run.emit` stamps: those
    built where the run is not at hand (a response's stream, a tool batch).

    ``build(*fields)`` returns a draft: an object of ``cls``'s private writable subclass
    (`DRAFTS` maps it to ``cls``) holding ``fields`` as ``cls(*fields)`` would, written as
    `stamped`'s ``build`` writes it, but left writable: `Run.emit` stores the stamps plainly
    and sets its class to ``cls``, once. Stamping an event that is already ``cls`` goes through
    its slot descriptors (a method-wrapper call per field), and setting the class here and
    again there would cost twice: the figures are in benchmarks/README.md. A draft is for
    `Run.emit` only, which makes it the event every subscriber receives.

    Args:
        cls: an event class (a frozen, slotted `EventBase` dataclass).

    Returns:
        ``build(*fields)``: ``fields`` positional, in ``cls``'s field order, with ``cls``'s
        defaults; a wrong number of them raises `TypeError` as ``cls(...)`` does.

    Raises:
        TypeError: a field of ``cls`` has a default factory (no event has one).
    """
    return _builder(cls, stamp=False)


def _builder(cls: type[EventT], *, stamp: bool) -> Callable[..., EventT]:
    """`stamped`'s (``stamp``: built stamped, then given ``cls``) or `drafted`'s function
    (a draft, left writable) for ``cls``."""
    writable = _WRITABLE.get(cls)
    if writable is None:
        writable = _WRITABLE[cls] = type(
            f"_Writable{cls.__name__}",
            (cls,),
            {
                "__slots__": (),  # the same layout as ``cls``: its class can be set to ``cls``
                "__setattr__": object.__setattr__,
                "__delattr__": object.__delattr__,  # (both, or the store is not the plain one)
                "__init__": object.__init__,
                "__module__": cls.__module__,
            },
        )
        DRAFTS[writable] = cls
    params = ["_run"] if stamp else []  # (the generated names start with _: no field's does)
    stores = ["    _event.run_id = _run.id", "    _event.seq = next(_run.seqs)"] if stamp else []
    namespace: dict[str, Any] = {"_new": writable, "_cls": cls}
    for f in dataclasses.fields(cls):
        if f.kw_only:
            continue  # run_id, seq (stamped above, or left unset) and parent (left unset)
        if f.default_factory is not dataclasses.MISSING:
            raise TypeError(f"stamped() takes no default factory ({cls.__name__}.{f.name})")
        if f.default is dataclasses.MISSING:
            params.append(f.name)
        else:
            namespace[f"_default_{f.name}"] = f.default
            params.append(f"{f.name}=_default_{f.name}")
        stores.append(f"    _event.{f.name} = {f.name}")
    head = [f"def build({', '.join(params)}):", "    _event = _new()"]
    given = ["    _event.__class__ = _cls"] if stamp else []  # (a draft is given it when emitted)
    source = "\n".join([*head, *stores, *given, "    return _event"])
    exec(source, namespace)
    build: Callable[..., EventT] = namespace["build"]
    kind = "stamped" if stamp else "drafted"
    build.__qualname__ = build.__name__ = f"{kind}_{cls.__name__}"
    build.__module__ = __name__
    return build


_WRITABLE: dict[type[Any], type[Any]] = {}
"""Each event class's private writable subclass (one per class, made by its first builder)."""

DRAFTS: dict[type[Any], type[Any]] = {}
"""Each private writable subclass's event class: a draft (`drafted`) of that type is given it
when `Run.emit` stamps it."""


# The events `Run` builds itself, each built stamped: ``NEW_TURN_START(run, turn)``.
NEW_RUN_START = stamped(RunStart)
NEW_RUN_END = stamped(RunEnd)
NEW_TURN_START = stamped(TurnStart)
NEW_TURN_END = stamped(TurnEnd)
NEW_MESSAGE_END = stamped(MessageEnd)
NEW_STATE_CHANGED = stamped(StateChanged)

# The events built where the run is not at hand, built as drafts: `Run.emit` stamps them.
NEW_MESSAGE_START = drafted(MessageStart)
NEW_MESSAGE_DELTA = drafted(MessageDelta)
NEW_TOOL_EXECUTION_START = drafted(ToolExecutionStart)
NEW_TOOL_EXECUTION_END = drafted(ToolExecutionEnd)
