"""Reading a session log back: parse its lines, rebuild the history, find the calls to repair.

Rebuilding is by tool-call id, not by line order: results are logged in completion order (the moment
each call finishes), so they are put back in declaration order directly after their assistant
message, before anything logged later (the tool-use protocol: results directly after their calls). Reading never writes; `SessionLog.open`
writes the repairs this module finds.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field, ValidationError

from .._errors import AgentError
from .._hooks import PendingCall
from .._limits import RunCounts
from .._machine import State
from .._messages import (
    HISTORY_ADAPTER,
    MESSAGE_ADAPTER,
    AssistantMessage,
    Message,
    TextBlock,
    ToolResultMessage,
    Usage,
    text_result,
)
from .._protocol import INCOMPLETE_STOP_REASONS, NO_RESULT
from ._errors import SessionCorruptError
from ._tally import RunTally

logger = logging.getLogger("statemachine_agent.session")

FORMAT = "statemachine-agent-session"
VERSION = 1

# The error text of a call whose result the log does not hold (the process died first); the same
# text the context projection gives any call without a result.
NO_RESULT_RECORDED = NO_RESULT

_BUILTIN_STATES = {state.value: state for state in State}

RECORD_TYPES = frozenset(
    {
        "header",
        "message",
        "tool_start",
        "tool_result",
        "state",
        "run_start",
        "run_end",
        "history",
        "pending",
        "decision",
        "trace",
        "child",
    }
)


@dataclass(frozen=True, slots=True)
class PausedSpan:
    """The span of a run that stopped in ``awaiting_approval``, as a session log's ``trace``
    line records it (W3C trace-context form), so the run that decides its calls in another
    process can link to it.

    Attributes:
        trace_id: the span's trace id, 32 lowercase hex digits.
        span_id: the span's id, 16 lowercase hex digits.
        trace_flags: the span's trace flags (1: sampled).
        call_ids: the ids of the calls the run left pending.
    """

    trace_id: str
    span_id: str
    trace_flags: int = 0
    call_ids: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class SessionTrace:
    """What a session log records for tracing (``statemachine_agent.otel``): the conversation id
    of its runs' spans and, while the log ends in ``awaiting_approval``, the paused run's span.

    Attributes:
        conversation_id: the ``gen_ai.conversation.id`` of the runs' spans.
        paused: the span of the run that stopped in ``awaiting_approval``, while no run started
            after it (None otherwise): what the run that decides its calls links to.
    """

    conversation_id: str
    paused: PausedSpan | None = None


@dataclass(frozen=True, slots=True)
class Record:
    """One readable line: its 1-based ``line`` number, ``type`` and parsed ``body`` (the JSON
    object), plus ``message`` for ``message`` and ``tool_result`` lines and ``messages`` for
    ``history`` lines, and ``inner`` for ``child`` lines (a sub-agent's record it wraps)."""

    line: int
    type: str
    body: dict[str, Any]
    message: Message | None = None
    messages: tuple[Message, ...] = ()
    inner: Record | None = None


@dataclass(slots=True)
class SessionData:
    """What a session log holds.

    Attributes:
        path: the log.
        header: the header line's object (None for an empty log).
        records: every readable line after the header, in file order.
        history: the rebuilt history in protocol order, without repairs (dangling calls unanswered).
        repairs: the error results the dangling calls need, in history order.
        messages: ``history`` with ``repairs`` in place: what a resumed agent starts from.
        state: the last state recorded (None when none was); a state a user added counts as a
            mid-run state (see ``state_name``).
        state_name: the name of the last state recorded, as written.
        run_open: a run started and never ended (the process died during it).
        corrupt: ``(line, reason)`` of unreadable complete lines (corruption; kept in the file).
        torn_tail: ``(line, reason)`` of an unreadable last line without its newline (a crash
            mid-write; at most one), dropped.
        valid_bytes: the file length without the torn last line.
        notes: other problems found while rebuilding (a result for an unknown call, a duplicate
            result, an unknown record type), each naming its line.
        pending: the calls waiting for a decision when the log ends in ``awaiting_approval``
            (their batch's assistant message ends ``history``).
        pending_results: the results that batch already has (held until every call is decided).
        trace: the last ``trace`` line's conversation id and paused span (`SessionTrace`;
            the paused span is dropped once a later run starts), or None for a log without
            one (one written untraced, or before the line existed).
        children: the runs of sub-agents (`Agent.as_tool`) logged inline as ``child`` lines,
            each rebuilt as its own `SessionData` (its ``records`` keep the file's line
            numbers), by the id of the call that ran it; a sub-agent's own sub-agents are in its
            ``children``. A call answered without a logged run (the process died before it
            started) has none.
        link: for a sub-agent run (one of ``children``), what its ``child`` lines carry
            besides the record: ``parent_run_id``, ``call_id``, ``tool_name``, ``run_id``.
        counts: what the last run counted toward its limits (`RunCounts`): its ``run_end``
            line's ``counts``; for a run the process died in (or a log written before runs
            recorded them), rebuilt from its lines: the counts it started from (a run continued
            without a prompt starts from the previous run's), plus a request per logged response
            (a turn unless it failed or was cut by an abort), its tokens, and its calls once its
            batch started. A resumed agent continues from them.
    """

    path: Path
    header: dict[str, Any] | None = None
    records: list[Record] = field(default_factory=list)
    history: list[Message] = field(default_factory=list)
    repairs: list[ToolResultMessage] = field(default_factory=list)
    messages: list[Message] = field(default_factory=list)
    state: State | None = None
    run_open: bool = False
    corrupt: list[tuple[int, str]] = field(default_factory=list)
    torn_tail: list[tuple[int, str]] = field(default_factory=list)
    valid_bytes: int = 0
    notes: list[str] = field(default_factory=list)
    state_name: str | None = None
    pending: list[PendingCall] = field(default_factory=list)
    pending_results: list[ToolResultMessage] = field(default_factory=list)
    counts: RunCounts = field(default_factory=RunCounts)
    trace: SessionTrace | None = None
    children: dict[str, SessionData] = field(default_factory=dict)
    link: dict[str, str] | None = None

    @property
    def usage(self) -> Usage:
        """Tokens of every response in the log (compacted ones included)."""
        total = Usage()
        seen: set[int] = set()
        for record in self.records:
            message = record.message
            if isinstance(message, AssistantMessage) and id(message) not in seen:
                seen.add(id(message))
                total = total + message.usage
        return total

    @property
    def state_path(self) -> list[str]:
        """The states the log went through, in order (``idle`` first when any is recorded)."""
        path: list[str] = []
        for record in self.records:
            if record.type == "state":
                if not path:
                    path.append(str(record.body.get("source")))
                path.append(str(record.body.get("dest")))
        return path


def _parse(line: int, raw: bytes) -> Record:
    """Parse one line. Raises ValueError saying what is wrong."""
    try:
        body = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"not valid JSON ({exc})") from None
    return _record_of(line, body)


def _record_of(line: int, body: Any) -> Record:
    """The record of one line's JSON value. Raises ValueError saying what is wrong."""
    if not isinstance(body, dict) or not isinstance(body.get("type"), str):
        raise ValueError("not a JSON object with a 'type'")
    kind = body["type"]
    if kind == "child":
        if not all(isinstance(body.get(k), str) for k in ("parent_run_id", "call_id", "run_id")):
            raise ValueError("not a valid 'child' line (parent_run_id, call_id, run_id: text)")
        inner = _record_of(line, body.get("record"))
        if inner.type in ("header", "child"):
            raise ValueError(f"not a valid 'child' line (it wraps a {inner.type!r} record)")
        return Record(line, kind, body, inner=inner)
    try:
        if kind in ("message", "tool_result"):
            message = MESSAGE_ADAPTER.validate_python(body.get("message"))
            if kind == "tool_result" and not isinstance(message, ToolResultMessage):
                raise ValueError("a 'tool_result' line holds no tool result")
            return Record(line, kind, body, message=message)
        if kind == "history":
            return Record(
                line, kind, body, messages=tuple(HISTORY_ADAPTER.validate_python(body["messages"]))
            )
        if kind in _BODIES:
            # Readers (replay, check, resume) use these fields as typed; a hand-edited line
            # that breaks them is unreadable, not a traceback later.
            _BODIES[kind].model_validate(body)
    except (ValidationError, KeyError) as exc:
        raise ValueError(f"not a valid {kind!r} line ({_short(exc)})") from None
    return Record(line, kind, body)


_LINE_START = b'{"type":"'
_HEADER_START = b'{"type":"header"'


def _could_be_ours(chunk: bytes, *, header: bool) -> bool:
    """Whether ``chunk`` can be the start of a line `SessionLog` wrote (its first key is
    ``type``): a torn line that cannot be is not dropped, as it is no crash of ours."""
    start = _HEADER_START if header else _LINE_START
    return chunk.startswith(start) or start.startswith(chunk)


class _StateBody(BaseModel):
    source: str
    dest: str
    trigger: str | None = None
    label: str | None = None


class _CountsBody(BaseModel):
    turns: int
    requests: int
    tool_calls: int
    usage: Usage = Usage()


class _RunEndBody(BaseModel):
    state: str
    turns: int | None = None
    usage: Usage | None = None
    stop_reason: str | None = None
    error: str | None = None
    counts: _CountsBody | None = None


_HEX = "^[0-9a-f]+$"


class _PausedBody(BaseModel):
    trace_id: str = Field(min_length=32, max_length=32, pattern=_HEX)
    span_id: str = Field(min_length=16, max_length=16, pattern=_HEX)
    trace_flags: int = Field(default=0, ge=0, le=255)
    call_ids: list[str] = []


class _TraceBody(BaseModel):
    conversation_id: str
    paused: _PausedBody | None = None


_BODIES: dict[str, type[BaseModel]] = {
    "state": _StateBody,
    "run_end": _RunEndBody,
    "trace": _TraceBody,
}


def session_trace(body: dict[str, Any]) -> SessionTrace:
    """The `SessionTrace` of a ``trace`` line's object (checked when the line was read)."""
    parsed = _TraceBody.model_validate(body)
    paused = parsed.paused
    return SessionTrace(
        parsed.conversation_id,
        None
        if paused is None
        else PausedSpan(
            paused.trace_id, paused.span_id, paused.trace_flags, tuple(paused.call_ids)
        ),
    )


def trace_line(trace: SessionTrace) -> dict[str, Any]:
    """The ``trace`` line's object for ``trace`` (what `session_trace` reads back)."""
    paused = trace.paused
    return {
        "type": "trace",
        "conversation_id": trace.conversation_id,
        "paused": None
        if paused is None
        else {
            "trace_id": paused.trace_id,
            "span_id": paused.span_id,
            "trace_flags": paused.trace_flags,
            "call_ids": list(paused.call_ids),
        },
    }


def _short(exc: Exception) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


def read_session(path: str | os.PathLike[str], *, strict: bool = True) -> SessionData:
    """Read a session log without changing it.

    An unreadable last line without its newline (a crash mid-write; each line is written whole,
    newline last) is dropped with a warning. Any complete unreadable line is corruption, wherever
    it is.

    Args:
        path: the JSONL log.
        strict: raise on corruption; with False, log a warning and keep everything else.

    Returns:
        The `SessionData` (empty when the file does not exist or is empty).

    Raises:
        SessionCorruptError: ``strict`` and a complete line is unreadable; it names each line and
            carries everything else, rebuilt.
        AgentError: the file is not a session log (its first line is no header; a lone torn
            header, a crash while creating the log, reads as an empty log), or a newer format
            version.
    """
    data = SessionData(Path(path))
    try:
        raw = data.path.read_bytes()
    except FileNotFoundError:
        return data
    chunks = raw.splitlines(keepends=True)
    offset = 0
    for number, chunk in enumerate(chunks, start=1):
        offset += len(chunk)
        if not chunk.strip():
            continue
        try:
            record = _parse(number, chunk)
        except ValueError as exc:
            # Each line is written whole with its newline last, so a crash mid-write leaves a
            # final chunk without one; any complete unreadable line is corruption, never cut.
            torn = number == len(chunks) and not chunk.endswith((b"\n", b"\r"))
            if data.header is None and not (torn and _could_be_ours(chunk, header=True)):
                raise AgentError(
                    f"{data.path} is not a session log: line {number} is not a session log "
                    f"header ({exc}); nothing was changed"
                ) from None
            if torn and _could_be_ours(chunk, header=False):
                data.torn_tail.append((number, str(exc)))
                logger.warning(
                    "session log %s: dropped 1 unreadable line at its end (line %d; a crash mid-write): %s",
                    data.path,
                    number,
                    exc,
                )
            else:
                data.corrupt.append((number, str(exc)))
            continue
        if record.type == "header":
            if data.header is not None or data.records:
                data.notes.append(f"line {number}: a second header")
                continue
            _check_header(data.path, record.body)
            data.header = record.body
            continue
        if data.header is None:
            raise AgentError(
                f"{data.path} is not a session log: line {number} comes before any header"
            )
        data.records.append(record)
    data.valid_bytes = len(raw) - (len(chunks[-1]) if data.torn_tail else 0)
    _rebuild(data)
    data.children = _children(data)
    if data.corrupt:
        if strict:
            raise SessionCorruptError(data.path, data.corrupt, data)
        for number, why in data.corrupt:
            logger.warning("session log %s: line %d skipped: %s", data.path, number, why)
    return data


_LINK_KEYS = ("parent_run_id", "call_id", "tool_name", "run_id")


def _children(data: SessionData) -> dict[str, SessionData]:
    """The sub-agent runs of ``data``'s ``child`` lines, nested, by the id of their call."""
    runs: dict[str, SessionData] = {}
    parents: dict[str, tuple[str, str]] = {}
    for record in data.records:
        if record.type != "child" or record.inner is None:
            continue
        run_id = str(record.body["run_id"])
        child = runs.get(run_id)
        if child is None:
            link = {k: str(record.body.get(k, "")) for k in _LINK_KEYS}
            child = runs[run_id] = SessionData(data.path, header=data.header, link=link)
            parents[run_id] = (link["parent_run_id"], link["call_id"])
        child.records.append(record.inner)
    top: dict[str, SessionData] = {}
    for run_id, child in runs.items():
        _rebuild(child)
        parent_run, call_id = parents[run_id]
        (runs[parent_run].children if parent_run in runs else top)[call_id] = child
    return top


def _check_header(path: Path, header: dict[str, Any]) -> None:
    if header.get("format") != FORMAT:
        raise AgentError(f"{path} is not a session log (header format {header.get('format')!r})")
    version = header.get("version")
    if not isinstance(version, int) or version > VERSION:
        raise AgentError(
            f"{path} is session log format version {version!r}; this library reads up to "
            f"{VERSION}. Upgrade statemachine-agent."
        )


def _rebuild(data: SessionData) -> None:
    """Fill ``history``, ``repairs``, ``messages``, ``state`` and ``run_open`` from the records."""
    spine: list[Message] = []  # user and assistant messages in log order
    results: dict[str, ToolResultMessage] = {}
    result_lines: dict[str, int] = {}
    deferred: dict[str, PendingCall] = {}  # the latest 'pending' line's calls
    tally = RunTally()
    for record in data.records:
        message = record.message
        tally.see(record)
        if record.type == "pending":
            deferred = {}
            for item in record.body.get("calls") or []:
                waiting_call = PendingCall(
                    str(item["id"]),
                    str(item["tool_name"]),
                    dict(item.get("arguments") or {}),
                    str(item.get("reason", "")),
                )
                deferred[waiting_call.id] = waiting_call
        elif record.type == "history":
            # A compaction: the history starts over from this line; results logged before it
            # belong to messages it replaced, except those of calls the new history still holds
            # (a batch waiting for decisions keeps its held results across a compaction).
            spine = [m for m in record.messages if not isinstance(m, ToolResultMessage)]
            kept = {c.id for m in spine if isinstance(m, AssistantMessage) for c in m.tool_calls}
            results = {i: r for i, r in results.items() if i in kept}
            result_lines = {i: n for i, n in result_lines.items() if i in kept}
            for m in record.messages:
                if isinstance(m, ToolResultMessage):
                    results[m.tool_call_id] = m
                    result_lines[m.tool_call_id] = record.line
        elif record.type == "decision" and record.body.get("decision") == "deny":
            # A denied call's result is held until its batch's other calls are decided; the
            # decision line is its record until then (the engine answers it "Denied: reason").
            call_id = str(record.body.get("call_id"))
            denied = deferred.get(call_id)
            if denied is not None and call_id not in result_lines:
                text = f"Denied: {record.body.get('reason')}"
                results[call_id] = ToolResultMessage(
                    tool_call_id=call_id,
                    tool_name=denied.tool_name,
                    content=[TextBlock(text=text)],
                    is_error=True,
                )
                result_lines[call_id] = record.line
        elif isinstance(message, ToolResultMessage):
            known = result_lines.get(message.tool_call_id)
            if known is None:
                results[message.tool_call_id] = message
                result_lines[message.tool_call_id] = record.line
            elif results[message.tool_call_id] != message:
                data.notes.append(
                    f"line {record.line}: a second, different result for call "
                    f"{message.tool_call_id!r} (line {known} kept)"
                )
        elif message is not None:
            spine.append(message)
        elif record.type == "state":
            dest = str(record.body.get("dest"))
            # A state a user added to the machine (`LoopMachine.add_state`) is a mid-run state:
            # a run is never at rest in one.
            data.state = _BUILTIN_STATES.get(dest, State.EXECUTING_TOOLS)
            data.state_name = dest
        elif record.type == "run_start":
            data.run_open = True
            if data.trace is not None and data.trace.paused is not None:
                # A run started after the pause: it decided (or dropped) the paused calls.
                data.trace = SessionTrace(data.trace.conversation_id)
        elif record.type == "run_end":
            data.run_open = False
        elif record.type == "trace":
            data.trace = session_trace(record.body)
        elif record.type not in RECORD_TYPES:
            data.notes.append(f"line {record.line}: unknown record type {record.type!r}")
    data.counts = tally.counts()
    used: set[str] = set()
    waiting = data.state is State.AWAITING_APPROVAL  # entered once the batch has run
    for index, message in enumerate(spine):
        data.history.append(message)
        data.messages.append(message)
        if (
            not isinstance(message, AssistantMessage)
            or message.stop_reason in INCOMPLETE_STOP_REASONS
        ):
            continue
        if waiting and index == len(spine) - 1 and message.tool_calls:
            # The batch waits for decisions: its results are held, its deferred calls pending.
            for call in message.tool_calls:
                result = results.get(call.id)
                if result is not None:
                    used.add(call.id)
                    data.pending_results.append(result)
                elif call.id in deferred:
                    data.pending.append(deferred[call.id])
                else:
                    data.pending.append(PendingCall(call.id, call.name, {}, NO_RESULT_RECORDED))
            continue
        for call in message.tool_calls:
            result = results.get(call.id)
            if result is not None:
                used.add(call.id)
                data.history.append(result)
                data.messages.append(result)
            else:
                repair = text_result(call, NO_RESULT_RECORDED, is_error=True)
                data.repairs.append(repair)
                data.messages.append(repair)
    for call_id in sorted(set(results) - used, key=lambda i: result_lines[i]):
        data.notes.append(
            f"line {result_lines[call_id]}: result for call {call_id!r}, which no logged "
            "assistant message holds (dropped)"
        )


def load_history(path: str | os.PathLike[str], *, strict: bool = True) -> list[Message]:
    """The repaired history of a session log (read only; see `read_session`)."""
    return read_session(path, strict=strict).messages
