"""Starting and steering durable runs: `run`, `abort`, `pending` and `send_decisions` from a
launched process, and `Client` (submit, status, result, abort, decide) from any process."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dbos import DBOS, DBOSClient, SetWorkflowID

from .. import _worker_registry as registry
from .._errors import UsageError
from .._hooks import Decision, PendingCall
from .._result import RunResult
from .._worker_registry import WorkerRecord
from . import _abort
from ._codec import decision_message, decode_pending, decode_result
from ._database import DatabaseUnavailableError, check_database_url, database
from ._names import (
    ABORT_ATTRIBUTE,
    APP_NAME,
    APP_VERSION,
    APPROVAL_TIMEOUT_SECONDS,
    DECISION_TOPIC,
    PENDING_EVENT,
    QUEUE_NAME,
    WORKFLOW_NAME,
)
from ._state import require_launched
from ._workflow import agent_workflow


async def run(
    prompt: str,
    *,
    run_id: str | None = None,
    max_turns: int | None = None,
    approval_timeout_seconds: float = APPROVAL_TIMEOUT_SECONDS,
) -> RunResult:
    """Run the factory's agent on ``prompt`` as a durable workflow in this process and wait.

    Args:
        prompt: the user input.
        run_id: the workflow id (default: a new one). Running an id again returns the recorded
            result without running anything.
        max_turns: the turn cap (default: the agent's).
        approval_timeout_seconds: how long each wait in ``awaiting_approval`` lasts before the
            run ends ``aborted`` (see the module docstring).

    Returns:
        The `RunResult`, the same an uninterrupted in-process run would give.

    Raises:
        UsageError: ``approval_timeout_seconds`` is negative, or `launch` was not called.
    """
    _check_timeout(approval_timeout_seconds)
    require_launched()
    with SetWorkflowID(run_id or uuid.uuid4().hex):
        handle = await DBOS.start_workflow_async(
            agent_workflow, prompt, max_turns, approval_timeout_seconds
        )
    return decode_result(await handle.get_result())


def _check_timeout(seconds: float) -> None:
    if not seconds >= 0:
        raise UsageError(f"approval_timeout_seconds must be 0 or more, not {seconds!r}")


async def abort(run_id: str, reason: str = "aborted by the caller") -> None:
    """Ask run ``run_id`` to stop (from a launched process; `Client.abort` from any other).

    The request is durable (the workflow attribute `ABORT_ATTRIBUTE`, no DBOS record of the
    run): the worker executing the run reads it within `ABORT_POLL_SECONDS` (at once when it is
    this process, once the run has executed a step here) and aborts the run
    as ``agent.abort()`` aborts an in-process one: a model request or tool call in flight is
    stopped under the usual grace rules (``abort_grace_seconds``), a sub-agent
    (`Agent.as_tool`) is aborted with it, and the run ends ``aborted`` with ``reason`` as its
    error, every call answered. A run that is answering for the last time ends ``done`` as
    usual. A run in ``awaiting_approval`` ends ``aborted`` at once, each pending call answered
    "not run" (as ``agent.abort()`` ends a waiting in-process run); so does one whose batch is
    about to defer calls. Sent while no worker runs the run, the abort is applied when a worker
    continues it, once the recovered run has replayed its recorded steps.

    Raises:
        UsageError: `launch` was not called in this process.
        dbos.error.DBOSNonExistentWorkflowError: no run has this id.
    """
    require_launched()
    # The message first: it raises for an unknown id (setting attributes would not).
    await DBOS.send_async(run_id, {"abort": reason}, topic=DECISION_TOPIC)
    await DBOS.update_workflow_attributes_async(run_id, {ABORT_ATTRIBUTE: reason}, merge=True)
    _abort.deliver(run_id, reason)  # a run executing here: at once


async def pending(run_id: str, *, wait_seconds: float = 0) -> tuple[PendingCall, ...]:
    """The calls run ``run_id`` waits for decisions on, in declaration order (from a launched
    process; `Client.pending` from any other). Empty when it is not in ``awaiting_approval``.

    Args:
        run_id: the run's id.
        wait_seconds: when the run has not waited for approval yet, wait up to this long for it
            to start (0: answer at once).

    Raises:
        UsageError: `launch` was not called in this process.
    """
    require_launched()
    data = await DBOS.get_event_async(run_id, PENDING_EVENT, timeout_seconds=wait_seconds)
    return decode_pending(data)


async def send_decisions(run_id: str, decisions: Mapping[str, Decision]) -> None:
    """Decide calls of run ``run_id``, which waits in ``awaiting_approval`` (from a launched
    process; `Client.send_decisions` from any other).

    Args:
        run_id: the run's id.
        decisions: ``{call_id: Approve() | Approve(arguments={...}) | Deny(reason)}`` for some
            or all pending calls (see `pending`), as for ``agent.run(decisions=...)``: approved
            calls run once, denied ones are answered ``Denied: <reason>``, the rest keep waiting.
            The message is durable: it reaches the run even if its worker is down and restarts
            later. When two processes decide the same call, the first decision to arrive counts.

    Raises:
        UsageError: no run has this id, it is not awaiting approval, a call id is not pending,
            or a decision is not `Approve` / `Deny`, or `launch` was not called in this process.
            Nothing is sent then.
    """
    calls = await pending(run_id)
    if not calls and await DBOS.get_workflow_status_async(run_id) is None:
        raise UsageError(f"no run with id {run_id!r}")
    message = decision_message(run_id, calls, decisions)
    await DBOS.send_async(run_id, message, topic=DECISION_TOPIC)


@dataclass(frozen=True)
class RunStatus:
    """Where a submitted run is.

    Attributes:
        run_id: the workflow id.
        status: DBOS's status: ``ENQUEUED``, ``PENDING``, ``SUCCESS``, ``ERROR``, ``CANCELLED``...
        executor_id: the worker that runs (or ran) it.
        result: the `RunResult` once it ended, else None.
        error: the workflow's error text when it ended in ``ERROR``.
        pending: the calls it waits for decisions on (``awaiting_approval``), else empty.
        worker: for a ``PENDING`` run, its worker's record in the worker registry (whether its
            process is alive, as far as the reading process can tell; see `launch`), or None
            when that worker never registered (or the run is not ``PENDING``).
    """

    run_id: str
    status: str
    executor_id: str | None
    result: RunResult | None
    error: str | None = None
    pending: tuple[PendingCall, ...] = ()
    worker: WorkerRecord | None = None


class Client:
    """Submit runs and read their status from any process (no agent code needed).

    Every method raises `DatabaseUnavailableError` when the database cannot be reached.

    Args:
        db: the system database URL the workers use (a worker creates it and its tables: a
            client never does).

    Raises:
        DatabaseUnavailableError: ``db`` is malformed, names a SQLite file that does not exist
            yet, or cannot be reached (one line saying what to create or start).
    """

    def __init__(self, db: str) -> None:
        self._db = db
        url = check_database_url(db)
        if url.get_backend_name() == "sqlite" and url.database not in (None, "", ":memory:"):
            path = Path(url.database)
            if not path.exists():  # DBOSClient would leave an empty file there
                raise DatabaseUnavailableError(
                    f"no SQLite file at {path} (--db {db}): start a worker with this --db "
                    "first (it creates the file and its tables), or fix the path"
                )
        with database(db, connecting=True):
            self._client = DBOSClient(system_database_url=db, application_name=APP_NAME)
        self._registry = registry.engine_for(db)

    def submit(
        self,
        prompt: str,
        *,
        run_id: str | None = None,
        max_turns: int | None = None,
        approval_timeout_seconds: float = APPROVAL_TIMEOUT_SECONDS,
    ) -> str:
        """Put a run on the queue; returns its id. Submitting an id again does nothing new.

        Raises:
            UsageError: ``approval_timeout_seconds`` is negative (see `run` for the arguments).
        """
        _check_timeout(approval_timeout_seconds)
        workflow_id = run_id or uuid.uuid4().hex
        options: Any = {
            "workflow_name": WORKFLOW_NAME,
            "queue_name": QUEUE_NAME,
            "workflow_id": workflow_id,
            "app_version": APP_VERSION,
        }
        with database(self._db):
            self._client.enqueue(options, prompt, max_turns, approval_timeout_seconds)
        return workflow_id

    def abort(self, run_id: str, reason: str = "aborted by the caller") -> None:
        """Ask run ``run_id`` to stop (see the module's `abort`)."""
        with database(self._db):
            self._client.send(run_id, {"abort": reason}, topic=DECISION_TOPIC)
            self._client.update_workflow_attributes(run_id, {ABORT_ATTRIBUTE: reason}, merge=True)

    def pending(self, run_id: str, *, wait_seconds: float = 0) -> tuple[PendingCall, ...]:
        """The calls run ``run_id`` waits for decisions on (see the module's `pending`).

        Args:
            run_id: the run's id.
            wait_seconds: when the run has not waited for approval yet, wait up to this long
                for it to start (0: answer at once).
        """
        with database(self._db):
            data = self._client.get_event(run_id, PENDING_EVENT, timeout_seconds=wait_seconds)
        return decode_pending(data)

    def send_decisions(self, run_id: str, decisions: Mapping[str, Decision]) -> None:
        """Decide calls of a run awaiting approval (see the module's `send_decisions`).

        Raises:
            UsageError: no run has this id, it is not awaiting approval, a call id is not
                pending, or a decision is not `Approve` / `Deny`. Nothing is sent then.
        """
        calls = self.pending(run_id)
        if not calls:
            self.status(run_id)  # no such run: says so
        message = decision_message(run_id, calls, decisions)
        with database(self._db):
            self._client.send(run_id, message, topic=DECISION_TOPIC)

    def status(self, run_id: str) -> RunStatus:
        """The run's status (and result once it ended).

        Raises:
            UsageError: no run has this id.
        """
        with database(self._db):
            statuses = self._client.list_workflows(workflow_ids=[run_id])
        if not statuses:
            raise UsageError(f"no run with id {run_id!r}")
        status = statuses[0]
        result = None
        if status.status == "SUCCESS" and isinstance(status.output, dict):
            result = decode_result(status.output)
        error = None if status.error is None else str(status.error)
        calls: tuple[PendingCall, ...] = ()
        worker = None
        if status.status == "PENDING":
            calls = self.pending(run_id)
            if status.executor_id is not None:
                with database(self._db):
                    worker = registry.lookup(self._registry, status.executor_id)
        return RunStatus(run_id, status.status, status.executor_id, result, error, calls, worker)

    def count(self, status: str, *, executor_id: str | None = None) -> int:
        """How many runs have DBOS status ``status`` (``ENQUEUED``, ``PENDING``, ``SUCCESS``,
        ``ERROR``...), optionally only those of worker ``executor_id``."""
        with database(self._db):
            found = self._client.list_workflows(
                status=status,
                name=WORKFLOW_NAME,
                executor_id=executor_id,
                load_input=False,
                load_output=False,
            )
        return len(found)

    def result(self, run_id: str, *, timeout_seconds: float | None = None) -> RunResult:
        """Wait for the run to end and return its result.

        Raises:
            TimeoutError: it did not end within ``timeout_seconds``.
            Exception: the workflow's own error when it ended in ``ERROR``.
        """
        with database(self._db):
            handle: Any = self._client.retrieve_workflow(run_id)
        if timeout_seconds is None:
            return decode_result(handle.get_result())
        outcome: list[Any] = []

        def wait() -> None:
            try:
                outcome.append(handle.get_result())
            except BaseException as exc:
                outcome.append(exc)

        waiter = threading.Thread(target=wait, daemon=True)
        waiter.start()
        waiter.join(timeout_seconds)
        if not outcome:
            raise TimeoutError(f"run {run_id!r} did not end within {timeout_seconds:g} s")
        if isinstance(outcome[0], BaseException):
            raise outcome[0]
        return decode_result(outcome[0])

    def close(self) -> None:
        """Release the database connections."""
        self._client.destroy()
        self._registry.dispose()
