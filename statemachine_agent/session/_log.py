"""`SessionLog`: the append-only JSONL writer, attached to an agent by subscribing to its events.

One JSON object per line, each written whole and flushed before the event that caused it is
passed on (``fsync=True`` also syncs it to disk, on a thread of its own):

- ``header``: ``format``, ``version``, ``created_at`` (ISO 8601, UTC), ``model`` (its name only,
  never its client or key), ``tools`` (names);
- ``message``: a message appended to the history (prompt, response, result, injected input);
- ``tool_start``: ``call_id`` and ``name`` of a tool call the moment it starts (so a replay can
  draw each call from its start to its end);
- ``tool_result``: a result the moment its call finished (completion order, before the batch
  completes); the same result appended later is not logged again. ``"repair": true`` marks the
  error result a resume gave a call the log had no result for;
- ``state``: ``source``, ``dest``, ``trigger``, ``label`` of each transition;
- ``run_start`` (``continued``: true for a run without a prompt, which goes on counting from the
  last run) / ``run_end`` (``state``, ``turns``, ``usage``, ``stop_reason``, ``error``, and
  ``counts``: turns, requests, tool calls and tokens the run counted toward its limits, which a
  resumed agent continues from);
- ``history``: the whole history replaced (``reason``: ``initial``, ``compaction``, ``replaced``);
- ``trace`` (written by ``statemachine_agent.otel`` for an instrumented agent): the
  ``conversation_id`` of the runs' spans and, for a run that stopped in ``awaiting_approval``,
  ``paused``: its span (``trace_id``, ``span_id``, ``trace_flags``) and pending ``call_ids``,
  so a run resumed from the log in another process links to it (`SessionTrace`). A log
  without the line (untraced, or older) reads as before.

Every line after the header carries ``time`` (Unix seconds).
"""

from __future__ import annotations

import json
import logging
import os
import sys
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

from .._errors import UsageError
from .._events import (
    ApprovalRequested,
    CallDecided,
    Event,
    MessageEnd,
    RunEnd,
    RunStart,
    StateChanged,
    ToolExecutionEnd,
    ToolExecutionStart,
    event_to_dict,
)
from .._execution import awaits_decision
from .._limits import RunCounts
from .._machine import State
from .._messages import HISTORY_ADAPTER, MESSAGE_ADAPTER, Message, ToolResultMessage
from .._states import RUN_STOPS
from ._read import FORMAT, VERSION, SessionData, SessionTrace, read_session, trace_line

if sys.platform != "win32":
    import fcntl

if TYPE_CHECKING:
    from .._agent import Agent

logger = logging.getLogger("statemachine_agent.session")

RECOVERED = "the process ended during this run; recovered from the session log"


class SessionLog:
    """An append-only session log.

    ``SessionLog(path)`` starts a new log (the file must not hold one yet);
    `SessionLog.open` continues an existing one. Pass either to ``Agent(..., session=...)``, or a
    path (a new log). `Agent.resume` opens and attaches in one step.

    While open for writing, the log holds an exclusive advisory lock on its file (``flock``; the
    system releases it when the process dies, and `close` or the log being collected releases it
    too), so two agents never interleave lines in one log.

    Args:
        path: the JSONL file.
        fsync: also sync the lines to disk (survives power loss). Each line is still written and
            flushed, in order, before its event is passed on (so a killed process loses nothing
            recorded); the ``os.fsync`` calls run on a thread of the log's own, never on the
            event loop's, each covering every line written before it. A power loss keeps a
            prefix of the log: every line up to the last completed sync. `sync` waits for it;
            `close` syncs the last lines first.

    Attributes:
        errors: one text per line that could not be written (each also logged at error level);
            empty while the log is complete.
        trace: what the log records for tracing, kept current as lines are written (see
            `SessionData.trace`): the paused run's span is dropped once another run starts.
    """

    def __init__(self, path: str | os.PathLike[str], *, fsync: bool = False) -> None:
        self.path = Path(path)
        self.fsync = fsync
        self.data: SessionData | None = None
        self._file: BinaryIO | None = None
        self._has_header = False
        self._lock = threading.Lock()
        self._unsubscribe: Callable[[], None] | None = None
        self._syncer: _Syncer | None = None
        self._release: weakref.finalize[Any, SessionLog] | None = None
        self.errors: list[str] = []
        # Results written when their call finished, not yet appended to the history.
        self._early: set[str] = set()
        # The same, for each sub-agent run whose events reach the log (by its run id).
        self._child_early: dict[str, set[str]] = {}
        self.trace: SessionTrace | None = None

    # -- opening ------------------------------------------------------------------------------

    @classmethod
    def open(
        cls, path: str | os.PathLike[str], *, fsync: bool = False, strict: bool = True
    ) -> SessionLog:
        """Open a log to continue it: read it, drop a torn last line, and write the repairs.

        Each call with no recorded result gets the `NO_RESULT_RECORDED` error result, and a run
        the process died in is closed as ``aborted``; both are written to the log, so opening it
        again adds nothing. A missing or empty file is a new log.

        Raises:
            SessionCorruptError: ``strict`` and a complete line is unreadable (see
                `read_session`); the file is left as it was.
            AgentError: the file is not a session log; the file is left as it was.
            UsageError: another agent has the log open.
        """
        log = cls(path, fsync=fsync)
        # Lock before reading, so no other writer changes the file between reading and cutting.
        log._open_file()
        try:
            log._read_and_repair(strict)
        except BaseException:
            log.close()  # a failed open leaves the file unlocked (another agent may open it)
            raise
        return log

    def _read_and_repair(self, strict: bool) -> None:
        """`open`'s reading and repairs, on the locked file."""
        assert self._file is not None
        data = read_session(self.path, strict=strict)
        self.data = data
        self.trace = data.trace
        self._has_header = data.header is not None
        fd = self._file.fileno()
        if data.torn_tail:
            # Cut the torn last line so the next line does not glue onto it.
            os.ftruncate(fd, data.valid_bytes)
        if data.valid_bytes and os.pread(fd, 1, data.valid_bytes - 1) != b"\n":
            self._file.write(b"\n")  # a complete last line missing its newline
            self._file.flush()
        for child in _open_children(data):  # a sub-agent's run the crash cut, deepest first
            link = child.link or {}
            for body in _repairs(child):
                self._write({"type": "child", **link, "record": body})
        for body in _repairs(data):
            self._write(body)

    @property
    def messages(self) -> list[Message]:
        """The history the log held when opened, repaired (empty for a new log)."""
        return list(self.data.messages) if self.data is not None else []

    @property
    def state(self) -> State:
        """The state to resume in: the last one recorded (``aborted`` for a run the process died
        in; ``idle`` for a new log)."""
        state = self.data.state if self.data is not None else None
        if state is None or (state is not State.IDLE and state not in RUN_STOPS):
            return State.IDLE if state is None else State.ABORTED
        return state

    @property
    def counts(self) -> RunCounts:
        """What the last run counted toward its limits (see `SessionData.counts`): a resumed
        agent's run continued without a prompt goes on from them."""
        return self.data.counts if self.data is not None else RunCounts()

    def _open_file(self) -> None:
        """Open the file for appending and take its lock.

        Raises:
            UsageError: another `SessionLog` (in this process or another) holds the lock.
        """
        if self._file is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            file = self.path.open("a+b")  # readable too: `open` checks the last byte
            if sys.platform != "win32":
                try:
                    fcntl.flock(file.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    file.close()
                    raise UsageError(
                        f"session log {self.path} is in use by another agent (an open "
                        "SessionLog holds its lock); close that one first"
                    ) from None
            self._file = file
            if self.fsync:
                self._syncer = _Syncer(file.fileno(), self.path, self.errors)
            # A log dropped unclosed (its agent collected) still syncs, closes and unlocks.
            self._release = weakref.finalize(self, _release, file, self._syncer)

    # -- attaching ----------------------------------------------------------------------------

    def attach(self, agent: Agent) -> None:
        """Write the header (for a new log) and log the agent's events from now on.

        An agent constructed with no history takes the log's (and its state); one constructed
        with a history different from the log's has it written as a ``history`` line.

        Raises:
            UsageError: a new `SessionLog` on a file that already holds a log, or the log is
                already attached to an agent.
        """
        if self._unsubscribe is not None:
            raise UsageError(f"session log {self.path} is already attached to an agent")
        if self.data is None and self.path.exists() and self.path.stat().st_size > 0:
            raise UsageError(
                f"session log {self.path} already exists; continue it with "
                "Agent.resume(path, model=..., tools=...) or choose a new path"
            )
        self._open_file()
        if not self._has_header:
            self._write_header(agent)
        logged = self.messages
        if not agent.messages and (logged or self.state is not State.IDLE):
            data = self.data
            pending = None
            if data is not None and data.pending:
                pending = (data.pending, data.pending_results)
                self._early.update(r.tool_call_id for r in data.pending_results)
            agent.restore(logged, self.state, pending=pending, counts=self.counts)
        elif list(agent.messages) != logged:
            reason = "replaced" if logged else "initial"
            self.record_history(agent.messages, reason=reason)
        log = weakref.ref(self)  # the agent holds the log; the log holds no cycle back to it

        def record(event: Event) -> None:
            target = log()
            if target is not None:
                target.record(event)

        self._unsubscribe = agent.subscribe(record)

    def detach(self) -> None:
        """Stop logging the agent's events."""
        if self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None

    def close(self) -> None:
        """Detach, sync the last lines (with ``fsync``) and close the file, releasing its lock
        (lines recorded afterwards are dropped with a warning)."""
        self.detach()
        with self._lock:
            if self._release is not None:
                self._release()
            self._file = None

    def sync(self, timeout_seconds: float | None = None) -> bool:
        """Wait until every line written so far is synced to disk (with ``fsync``; without it,
        return at once).

        Returns:
            False if ``timeout_seconds`` passed first.
        """
        syncer = self._syncer
        return True if syncer is None else syncer.wait(timeout_seconds)

    def __enter__(self) -> SessionLog:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- writing ------------------------------------------------------------------------------

    def _write_header(self, agent: Agent) -> None:
        name = getattr(agent.model, "name", None)
        self._write(
            {
                "type": "header",
                "format": FORMAT,
                "version": VERSION,
                "created_at": datetime.now(UTC).isoformat(timespec="seconds"),
                # The name only: the model object may hold a client and its API key.
                "model": name if isinstance(name, str) else None,
                "model_class": type(agent.model).__name__,
                "tools": sorted(agent.tools),
            },
            stamp=False,
        )
        self._has_header = True

    def record(self, event: Event) -> None:
        """Log ``event`` if it matters (the subscriber `attach` installs). A failure is logged at
        error level and kept in ``errors``; the agent's run goes on."""
        try:
            self._record(event)
        except Exception as exc:
            self.errors.append(f"a {event.type} event was not logged: {exc!r}")
            logger.exception(
                "session log %s: a %s event was NOT logged; the log is incomplete",
                self.path,
                event.type,
            )

    def _record(self, event: Event) -> None:
        parent = event.parent
        if parent is not None:  # a sub-agent's event: a ``child`` line wrapping its record
            early = self._child_early.setdefault(event.run_id, set())
            inner = self._body(event, early)
            if inner is not None:
                self._write(
                    {
                        "type": "child",
                        "parent_run_id": parent.run_id,
                        "call_id": parent.call_id,
                        "tool_name": parent.tool_name,
                        "run_id": event.run_id,
                        "record": inner,
                    }
                )
            if isinstance(event, RunEnd):
                self._child_early.pop(event.run_id, None)
            return
        body = self._body(event, self._early)
        if body is not None:
            self._write(body)
        if isinstance(event, RunStart) and self.trace is not None and self.trace.paused is not None:
            self.trace = SessionTrace(self.trace.conversation_id)  # decided by this run

    def _body(self, event: Event, early: set[str]) -> dict[str, Any] | None:
        """The line ``event`` is logged as (None: not logged); ``early`` holds the ids of
        results written when their call finished."""
        if isinstance(event, ToolExecutionEnd):
            # A result is written the moment its call finishes (completion order), so a crash
            # keeps it; its message_end (in declaration order, once appended) is not written again.
            finished = event.result
            if awaits_decision(finished):
                return None
            early.add(finished.tool_call_id)
            return {"type": "tool_result", "message": _dump(finished)}
        elif isinstance(event, MessageEnd):
            message = event.message
            if isinstance(message, ToolResultMessage):
                if message.tool_call_id in early:
                    early.discard(message.tool_call_id)
                    return None
                return {"type": "tool_result", "message": _dump(message)}
            return {"type": "message", "message": _dump(message)}
        elif isinstance(event, ToolExecutionStart):
            return {"type": "tool_start", "call_id": event.call.id, "name": event.call.name}
        elif isinstance(event, StateChanged):
            return {
                "type": "state",
                "source": event.source,
                "dest": event.dest,
                "trigger": event.trigger,
                "label": event.label,
            }
        elif isinstance(event, RunStart):
            # A run without a prompt continues the last one's counts (`RunCounts`).
            return {"type": "run_start", "continued": event.prompt is None}
        elif isinstance(event, ApprovalRequested | CallDecided):
            body = event_to_dict(event)
            body.pop("parent", None)
            body["type"] = "pending" if isinstance(event, ApprovalRequested) else "decision"
            return body
        elif isinstance(event, RunEnd):
            result = event.result
            return {
                "type": "run_end",
                "state": result.state.value,
                "turns": result.turns,
                "usage": result.usage.model_dump(mode="json"),
                "stop_reason": None if result.stop_reason is None else str(result.stop_reason),
                "error": result.error,
                "counts": result.counts.to_json(),
            }
        return None

    def record_trace(self, trace: SessionTrace) -> None:
        """Log a ``trace`` line (the tracing of the agent's runs: see `SessionTrace`); `trace`
        is then ``trace``. Like every line, a failure to write it is kept in ``errors``, never
        raised."""
        self.trace = trace
        self._write(trace_line(trace))

    def record_history(
        self, messages: Sequence[Message], *, reason: str, summary: str | None = None
    ) -> None:
        """Log that the history was replaced by ``messages`` (a compaction, or a new start)."""
        body: dict[str, Any] = {
            "type": "history",
            "reason": reason,
            "messages": HISTORY_ADAPTER.dump_python(list(messages), mode="json"),
        }
        if summary is not None:
            body["summary"] = summary
        self._write(body)

    def _write(self, body: dict[str, Any], *, stamp: bool = True) -> None:
        """Append ``body`` as one line. A failure is logged at error level and kept in
        ``errors``, never raised: the agent's run goes on, but the loss is not silent."""
        if stamp:
            body["time"] = round(time.time(), 6)
        try:
            line = _encode(body)
            with self._lock:
                if self._file is None:
                    logger.warning(
                        "session log %s is closed; dropped a %s line", self.path, body["type"]
                    )
                    return
                self._file.write(line)  # one whole line per write: a crash tears at most the last
                self._file.flush()
                if self._syncer is not None:
                    self._syncer.wrote()  # synced on the syncer's thread, in order
        except Exception as exc:
            self.errors.append(f"a {body.get('type')} line was not written: {exc!r}")
            logger.exception(
                "session log %s: a %s line was NOT written; the log is incomplete",
                self.path,
                body.get("type"),
            )


class _Syncer:
    """Syncs one file to disk on a thread of its own, one ``os.fsync`` per line written, in
    order, so the loop never waits for the disk."""

    def __init__(self, fd: int, path: Path, errors: list[str]) -> None:
        self._fd = fd
        self._path = path
        self._errors = errors  # the log's list (no reference to the log itself)
        self._cond = threading.Condition()
        self._written = 0
        self._synced = 0
        self._stopping = False
        self._thread: threading.Thread | None = None

    def wrote(self) -> None:
        """A line was written: sync it soon."""
        with self._cond:
            self._written += 1
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._work, name=f"fsync {self._path.name}", daemon=True
                )
                self._thread.start()
            self._cond.notify_all()

    def _work(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._synced < self._written or self._stopping)
                if self._synced == self._written:
                    return  # stopping, and everything is synced
                target = self._synced + 1  # one sync per line
            try:
                os.fsync(self._fd)
            except Exception as exc:
                self._errors.append(f"lines were not synced to disk: {exc!r}")
                logger.exception("session log %s: os.fsync failed", self._path)
            with self._cond:
                self._synced = target
                self._cond.notify_all()

    def wait(self, timeout_seconds: float | None = None) -> bool:
        """Wait until every line written so far is synced; False on timeout."""
        with self._cond:
            target = self._written
            return self._cond.wait_for(lambda: self._synced >= target, timeout_seconds)

    def stop(self) -> None:
        """Sync what is left and end the thread."""
        with self._cond:
            self._stopping = True
            thread = self._thread
            self._cond.notify_all()
        if thread is not None and thread is not threading.current_thread():
            thread.join()


def _open_children(data: SessionData) -> list[SessionData]:
    """The sub-agent runs of ``data`` with a call or a run left open, deepest first."""
    found: list[SessionData] = []
    for child in data.children.values():
        found += _open_children(child)
        if child.repairs or child.run_open:
            found.append(child)
    return found


def _repairs(data: SessionData) -> list[dict[str, Any]]:
    """The lines that close what a crash left open in ``data`` (updated to match): an error
    result for each call without one, and the end of a run that never ended."""
    lines: list[dict[str, Any]] = [
        {"type": "tool_result", "repair": True, "message": _dump(repair)} for repair in data.repairs
    ]
    if data.run_open and data.state in RUN_STOPS:
        # The process died between the run's last state change and its end: the run did
        # end, in that state; only its end line is missing.
        lines.append(
            {
                "type": "run_end",
                "state": data.state.value,
                "error": None,
                "counts": data.counts.to_json(),
            }
        )
        data.run_open = False
    elif data.run_open:
        source = data.state_name or (data.state or State.IDLE).value
        lines.append(
            {
                "type": "state",
                "source": source,
                "dest": State.ABORTED.value,
                "trigger": "resume",
                "label": "recovered",
            }
        )
        lines.append(
            {
                "type": "run_end",
                "state": State.ABORTED.value,
                "error": RECOVERED,
                "counts": data.counts.to_json(),
            }
        )
        data.state, data.run_open = State.ABORTED, False
    return lines


def _release(file: BinaryIO, syncer: _Syncer | None) -> None:
    """Sync (with ``fsync``), close the file and so release its lock."""
    if syncer is not None:
        syncer.stop()
    file.close()


def _encode(body: dict[str, Any]) -> bytes:
    """One JSON line. Non-ASCII text stays readable; a str UTF-8 cannot encode (a lone surrogate,
    as ``os`` gives for a file name that is not UTF-8) is written escaped, ``\\udce9``, which
    reads back as the same str."""
    try:
        text = json.dumps(body, ensure_ascii=False, separators=(",", ":"))
        return text.encode() + b"\n"
    except UnicodeEncodeError:
        return json.dumps(body, ensure_ascii=True, separators=(",", ":")).encode() + b"\n"


def _dump(message: Message) -> Any:
    return MESSAGE_ADAPTER.dump_python(message, mode="json")


def attach_session(agent: Agent, session: str | os.PathLike[str] | SessionLog) -> SessionLog:
    """Attach ``session`` (a `SessionLog`, or a path for a new log) to ``agent``; return it."""
    if isinstance(session, SessionLog):
        session.attach(agent)
        return session
    log = SessionLog(session)
    try:
        log.attach(agent)
    except BaseException:
        log.close()  # the log made here is released at once, not when it is collected
        raise
    return log
