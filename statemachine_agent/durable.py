"""Durable agent runs on DBOS Transact: runs that survive a dead worker and spread over many.

Install the extra: ``pip install 'statemachine-agent[dbos]'``. A run is a DBOS workflow whose body
is the ordinary engine (the same table, effects and `Run` driver); only its two I/O seams are
steps:

- each model request (`Run.send`) is one step, named ``model_request``;
- each tool call (the execution part of a `BatchRun`, after the checks and the permission hooks)
  is one step, named ``tool:<call id>``, preceded, for a tool that is not idempotent, by a
  ``tool_start:<call id>`` step that records which worker started it.

Everything else the body does (the transitions, the history, the hooks) is computed from the step
outputs, so recovery replays it to the same place: completed steps are not executed again. Steps
are started in declaration order even in a parallel batch (a call starts its step once the call
before it has started its own), so a step's position never depends on timing, and the call id in
each step name makes DBOS refuse a replay that would not line up.

A model whose answers depend on how many requests it was asked (`ScriptedModel`, the CLI's
``script:FILE``; see `PositionedModel`) is moved past the replayed requests, so a recovered run
continues its script after the last recorded step.

A call in flight when its worker died (started, no result recorded) is run again on recovery only
when its tool is ``@tool(idempotent=True)``; otherwise it is answered with the session log's
"no result recorded ... may or may not have run" text (`_protocol.NO_RESULT`).
DBOS's own step retries are off for tools unless the tool sets ``step_retries``.

Where the database is:
    ``sqlite:////abs/path/runs.sqlite`` (a file, no server; one process) or
    ``postgresql://user@host:port/db`` (workers on many machines share one queue).

Approvals:
    A run that reaches ``awaiting_approval`` (a ``before_tool_call`` hook returned `Defer`, or a
    tool ``requires_approval``) does not end: its workflow publishes the pending calls (DBOS event
    `PENDING_EVENT`, read with `pending` / `Client.pending` / ``statemachine-agent status``) and
    waits for decisions with DBOS's durable messages (``DBOS.recv`` on `DECISION_TOPIC`). Send
    them from any process with `send_decisions` / `Client.send_decisions` (CLI ``statemachine-agent
    decide``): approved calls run once, each as a tool step; denied ones get the in-process
    ``Denied: <reason>`` result; calls left undecided keep waiting. A worker that dies while the
    run waits loses nothing: on recovery the run replays to the same wait, and a decision sent
    meanwhile is already there. The wait is bounded by ``approval_timeout_seconds`` (per wait,
    a durable deadline that survives restarts; default `APPROVAL_TIMEOUT_SECONDS`, 7 days): when
    no decision comes in time, the run ends ``aborted`` as ``agent.abort()`` ends a waiting
    in-process run (each pending call answered "not run", the error says no decision came), so
    the workflow ends and its history is valid. `abort` also reaches a waiting run. The result
    is that of the in-process engine after ``agent.run(decisions=...)`` with the same decisions,
    except that ``new_messages`` and ``usage`` cover the whole durable run (from the prompt).

Recovery:
    When a worker process starts (`launch`), DBOS recovers the runs that were PENDING under its
    executor id: restart a dead worker with the same ``executor_id`` and its runs continue. A dead
    worker that will not come back is taken over with `recover_executor` (CLI
    ``statemachine-agent recover``): its PENDING runs go back to the queue they came from, and the
    live workers dequeue them under the queue's limits. DBOS (without Conductor) detects no dead
    worker: call it only for a worker you know is dead, since a live worker's runs would run
    twice. A worker launched with ``register=True`` (the CLI's ``worker``) records itself in
    the worker registry (executor id, host, pid, process start time) and, at start, does this
    by itself for the recorded workers whose process it can see is gone (same host) or that
    stopped cleanly; `Client.status` tells whether a PENDING run's worker is alive
    (`RunStatus.worker`). Workers must run the same package version and agent factory: the
    application version is pinned to the package version (`APP_VERSION`), so DBOS recovers runs
    across restarts of the same release, never across releases.

Example::

    import asyncio
    from statemachine_agent import Agent
    from statemachine_agent.durable import launch, run, shutdown
    from statemachine_agent.models import FunctionModel

    def make_agent() -> Agent:
        return Agent(FunctionModel(lambda messages, request: "hello"))

    async def main() -> None:
        await launch("sqlite:////tmp/runs.sqlite", make_agent)
        try:
            result = await run("Say hello", run_id="greeting-1")
            print(result.state, result.text)
        finally:
            shutdown()

    asyncio.run(main())
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import importlib
import logging
import os
import re
import sqlite3
import threading
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from pydantic import BaseModel

try:
    import sqlalchemy.exc
    from dbos import DBOS, DBOSClient, SetWorkflowID, StepOptions
    from dbos import error as dbos_error
    from sqlalchemy.engine import URL, make_url
except ImportError as exc:  # pragma: no cover - depends on the installation
    raise ImportError(
        "statemachine_agent.durable needs DBOS Transact: pip install 'statemachine-agent[dbos]' "
        f"({exc})"
    ) from exc

from . import __version__
from . import _worker_registry as registry
from ._agent import Agent
from ._conversation import as_user as _as_user
from ._errors import ToolStepFailed, UsageError
from ._execution import BatchRun, _Slot
from ._hooks import Approve, Decision, Deny, PendingCall, check_decisions
from ._importing import working_folder_first
from ._limits import LimitHit, RunCounts
from ._messages import HISTORY_ADAPTER, AssistantMessage, Message, ToolResultMessage, Usage
from ._messages import text_result as _text_result
from ._protocol import NO_RESULT
from ._responses import RequestAborted, RequestFailed
from ._result import RunResult
from ._run import Run
from ._states import State, Trigger
from ._tools import Tool
from ._worker_registry import Liveness, WorkerRecord
from .models._base import ModelRequest

APP_NAME = "statemachine-agent"
"""The DBOS application name every worker and client uses."""
APP_VERSION = f"statemachine-agent-{__version__}"
"""The pinned DBOS application version: runs are recovered by workers of the same release."""
QUEUE_NAME = "statemachine-agent-runs"
"""The DBOS queue `submit` puts runs on and workers serve."""
WORKFLOW_NAME = "statemachine_agent.durable.agent_run"
"""The registered name of the run workflow."""
ABORT_TOPIC = "statemachine-agent.abort"
"""The DBOS message topic of an abort request (see `abort`)."""
DECISION_TOPIC = "statemachine-agent.decisions"
"""The DBOS message topic a run in ``awaiting_approval`` waits on (see `send_decisions`); an
abort is sent there too, so it also reaches a waiting run."""
PENDING_EVENT = "statemachine-agent.pending"
"""The DBOS event holding the calls a run waits for decisions on (empty when it is not
waiting; see `pending`)."""
APPROVAL_TIMEOUT_SECONDS = 7 * 24 * 3600.0
"""How long a run waits for decisions by default (7 days) before it ends ``aborted``."""

STEP_RETRY_INTERVAL_SECONDS = 1.0
"""The first wait before DBOS runs a failed call of a tool with ``step_retries`` again (it
doubles each time)."""

AgentFactory = Callable[[], Agent]

logger = logging.getLogger("statemachine_agent")

_factory: AgentFactory | None = None
_incarnation = ""  # a fresh id per launch: a step started under another one was in flight


# -- serialising step outputs (JSON text: always picklable) -----------------------------------


def _dump(message: Message) -> str:
    return HISTORY_ADAPTER.dump_json([message]).decode()


def _load(text: str) -> Message:
    return HISTORY_ADAPTER.validate_json(text)[0]


def _encode_outcome(outcome: AssistantMessage | RequestAborted | RequestFailed) -> dict[str, str]:
    if isinstance(outcome, RequestFailed):
        too_long = {"prompt_too_long": "yes"} if outcome.prompt_too_long else {}
        return {"kind": "failed", "error": outcome.message, **too_long}
    if isinstance(outcome, RequestAborted):
        return {"kind": "aborted", "message": _dump(outcome.partial)}
    return {"kind": "response", "message": _dump(outcome)}


def _decode_outcome(data: dict[str, str]) -> AssistantMessage | RequestAborted | RequestFailed:
    if data["kind"] == "failed":
        return RequestFailed(data["error"], prompt_too_long="prompt_too_long" in data)
    message = _load(data["message"])
    assert isinstance(message, AssistantMessage)
    return RequestAborted(message) if data["kind"] == "aborted" else message


def _encode_pending(call: PendingCall) -> dict[str, Any]:
    return dataclasses.asdict(call)


def _decode_pending(data: Sequence[dict[str, Any]] | None) -> tuple[PendingCall, ...]:
    return tuple(PendingCall(**call) for call in data or ())


def _encode_decision(decision: Decision) -> dict[str, Any]:
    if isinstance(decision, Approve):
        return {"decision": "approve", "arguments": decision.arguments}
    return {"decision": "deny", "reason": decision.reason, "terminate": decision.terminate}


def _decode_decision(data: dict[str, Any]) -> Decision:
    if data["decision"] == "approve":
        return Approve(data["arguments"])
    if data["decision"] == "deny":
        return Deny(str(data["reason"]), bool(data["terminate"]))
    raise ValueError(f"unknown decision {data['decision']!r}")


def encode_result(result: RunResult) -> dict[str, Any]:
    """A `RunResult` as JSON-ready data (what the workflow returns): every field of it.

    Returns:
        A dict with one key per `RunResult` field: ``state``, ``messages`` and
        ``new_messages`` (lists of message dicts), ``turns``, ``usage``, ``stop_reason``,
        ``error``, ``refusal``, ``pending`` (a list of `PendingCall` dicts), ``final_text``,
        ``run_id``, ``output`` (the text answer, or a typed output's JSON: see
        `decode_result`), ``counts`` (`RunCounts.to_json`) and ``limit_exceeded`` (the
        `LimitHit`'s fields, or None).
    """
    output = result.output
    if isinstance(output, BaseModel):
        output = output.model_dump(mode="json")
    limit = result.limit_exceeded
    return {
        "state": str(result.state),
        "messages": HISTORY_ADAPTER.dump_python(result.messages, mode="json"),
        "new_messages": HISTORY_ADAPTER.dump_python(result.new_messages, mode="json"),
        "turns": result.turns,
        "usage": result.usage.model_dump(mode="json"),
        "stop_reason": result.stop_reason,
        "error": result.error,
        "refusal": result.refusal,
        "pending": [_encode_pending(call) for call in result.pending],
        "final_text": result.final_text,
        "run_id": result.run_id,
        "output": output,
        "counts": result.counts.to_json(),
        "limit_exceeded": None if limit is None else dataclasses.asdict(limit),
    }


def decode_result(
    data: Mapping[str, Any], *, output_type: type[BaseModel] | None = None
) -> RunResult:
    """The `RunResult` back from `encode_result`'s data.

    Data written before a field was encoded (a run recorded by an older release) reads back
    with that field's default: no pending calls, no final text, an empty run id, no output, zero
    counts (`RunCounts`), no exceeded limit.

    Args:
        data: what `encode_result` returned.
        output_type: the agent's ``output_type``: a typed output is validated back into it (the
            equal instance). Without it, ``output`` is the output's JSON (a dict); a text answer
            is its text either way.

    Raises:
        KeyError: a field every release encodes (``state``, ``messages``, ...) is missing.
        pydantic.ValidationError: ``output`` does not validate as ``output_type``.
    """
    output = data.get("output")
    if output_type is not None and isinstance(output, dict):
        output = output_type.model_validate(output)
    counts = data.get("counts")
    limit = data.get("limit_exceeded")
    return RunResult(
        state=State(data["state"]),
        messages=HISTORY_ADAPTER.validate_python(data["messages"]),
        new_messages=HISTORY_ADAPTER.validate_python(data["new_messages"]),
        turns=data["turns"],
        usage=Usage.model_validate(data["usage"]),
        stop_reason=data["stop_reason"],
        error=data["error"],
        refusal=data["refusal"],
        pending=_decode_pending(data.get("pending")),
        final_text=data.get("final_text"),
        run_id=data.get("run_id") or "",
        output=output,
        counts=RunCounts() if counts is None else RunCounts.from_json(counts),
        limit_exceeded=None if limit is None else LimitHit(**limit),
    )


# -- the durable run: the engine with its I/O recorded as steps --------------------------------

_POSITION_KEY = "model_position"


@runtime_checkable
class PositionedModel(Protocol):
    """A model whose next response depends on how many requests it was asked, such as
    `ScriptedModel` (a script plays step ``n`` for request ``n``).

    A durable run records ``calls`` after each ``model_request`` step; when DBOS replays a
    recorded step (a restarted or recovering worker), the model is not asked, so the run calls
    ``seek(calls)`` with the recorded value and the next request plays the step that follows
    the recorded history. The count is recorded rather than read from the history because one
    request step may play several steps (an error, then its retries) and a compaction request
    adds no assistant message. A factory should build such a model per run, as the CLI's
    ``script:FILE`` worker does: a model shared by runs on one worker moves for all of them.

    Attributes:
        calls: the requests played so far (over every run that used this model).
    """

    calls: int

    def seek(self, calls: int) -> None:
        """Continue as if ``calls`` requests had been asked."""


def _current_incarnation() -> str:
    return _incarnation


class DurableBatch(BatchRun):
    """A `BatchRun` whose tool executions are DBOS steps, started in declaration order."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._order = {id(slot): i for i, slot in enumerate(self._slots)}
        self._started: list[asyncio.Future[None]] = []

    async def run(self) -> None:
        """Run the batch (see `BatchRun.run`)."""
        loop = asyncio.get_running_loop()
        self._started = [loop.create_future() for _ in self._slots]
        await super().run()

    def _release(self, index: int) -> None:
        # Call ``index`` has started its steps (or will start none): the next call may start its
        # own once every earlier call has done so too.
        own = self._started[index]
        if own.done():
            return
        if index == 0 or self._started[index - 1].done():
            own.set_result(None)
        else:
            self._started[index - 1].add_done_callback(
                lambda _f: None if own.done() else own.set_result(None)
            )

    async def _process(self, slot: _Slot) -> None:
        try:
            await super()._process(slot)
        finally:
            self._release(self._order[id(slot)])

    async def _execute(self, slot: _Slot, tool: Tool, kwargs: dict[str, Any]) -> ToolResultMessage:
        index = self._order[id(slot)]
        call = slot.call
        try:
            if index > 0:
                await asyncio.shield(self._started[index - 1])
            marker = _incarnation
            if not tool.idempotent:
                marker = await DBOS.run_step_async(
                    {"name": f"tool_start:{call.id}"}, _current_incarnation
                )
        except BaseException:
            self._release(index)
            raise
        execute = super()._execute

        async def tool_call() -> str:
            if marker != _incarnation:
                # Started by a worker that died before the result was recorded.
                result = _text_result(call, NO_RESULT, is_error=True)
            else:
                result = await execute(slot, tool, kwargs)
                if tool.step_retries and result.is_error:
                    raise ToolStepFailed(_dump(result))
            return _dump(result)

        options: StepOptions = {"name": f"tool:{call.id}"}
        if tool.step_retries:
            options["retries_allowed"] = True
            options["max_attempts"] = tool.step_retries + 1
            options["interval_seconds"] = STEP_RETRY_INTERVAL_SECONDS
        slot.started = True
        # The step's position is taken synchronously when it starts: release the next call now.
        self._release(index)
        try:
            text = await DBOS.run_step_async(options, tool_call)
        except dbos_error.DBOSMaxStepRetriesExceeded as exc:
            failures = [e for e in exc.errors if isinstance(e, ToolStepFailed)]
            if not failures:
                raise
            text = failures[-1].result
        result = _load(text)
        assert isinstance(result, ToolResultMessage)
        return result


class DurableRun(Run):
    """A `Run` whose model requests and tool calls are DBOS steps (see the module docstring).

    Only meaningful inside the workflow (`run`, `submit`); outside one, DBOS runs the steps as
    plain functions.
    """

    async def send(
        self, request: ModelRequest
    ) -> AssistantMessage | RequestAborted | RequestFailed:
        """Send the request as a ``model_request`` step: on replay, the recorded outcome."""
        send = super().send
        model = self.settings.model
        positioned = model if isinstance(model, PositionedModel) else None
        asked = False

        async def model_request() -> dict[str, str]:
            nonlocal asked
            asked = True
            try:
                outcome = await send(request)
            except Exception as exc:  # a bug in a model: the run fails with it, recorded
                outcome = RequestFailed(f"The model request failed: {type(exc).__name__}: {exc}")
            data = _encode_outcome(outcome)
            if positioned is not None:
                data[_POSITION_KEY] = str(positioned.calls)
            return data

        data = await DBOS.run_step_async({"name": "model_request"}, model_request)
        if not asked and positioned is not None and _POSITION_KEY in data:
            # Replayed from the database: the model was not asked, so its position is where
            # the recorded step left it (an error and its retries may have played several).
            positioned.seek(int(data[_POSITION_KEY]))
        return _decode_outcome(data)

    async def _build_request(self) -> ModelRequest:
        # Before each model request, a durable check for an abort sent from any process: the
        # message is received (and recorded) here, so a replay sees it at the same place.
        request = await super()._build_request()
        if not self.signal.aborted:
            reason = await DBOS.recv_async(ABORT_TOPIC, timeout_seconds=0)
            if reason is not None:
                self.signal.set(str(reason))
        return request

    batch_class = DurableBatch


async def drive(
    agent: Agent,
    prompt: str,
    *,
    max_turns: int | None = None,
    approval_timeout_seconds: float = APPROVAL_TIMEOUT_SECONDS,
) -> RunResult:
    """Run ``agent`` on ``prompt`` with a `DurableRun` (inside a workflow: durably), waiting in
    ``awaiting_approval`` for decisions sent with `send_decisions` (see the module docstring).

    Returns:
        The result ``agent.run(decisions=...)`` gives for the last decisions in process, with
        ``new_messages`` and ``usage`` covering the whole run (from the prompt).

    Raises:
        AgentBusyError: the agent is already running.
        UsageError: the prompt is empty.
    """
    user = _as_user(prompt)
    start = len(agent.messages)
    result = await _drive(agent, user, Trigger.START, max_turns=max_turns)
    usage = result.usage
    while result.state is State.AWAITING_APPROVAL:
        message = await _wait_for_decisions(result.pending, approval_timeout_seconds)
        if message is None:  # no decision in time: end as an abort of the waiting run does
            reason = (
                f"No decision came within approval_timeout_seconds={approval_timeout_seconds:g}; "
                "the calls awaiting approval were not run."
            )
            result = await _drive(agent, None, Trigger.ABORT, abort_reason=reason)
        elif "abort" in message:
            result = await _drive(agent, None, Trigger.ABORT, abort_reason=str(message["abort"]))
        else:
            decisions = _applicable(message, result.pending)
            if not decisions:
                continue  # nothing this run can use: wait again
            result = await _drive(agent, None, Trigger.DECIDED, decisions=decisions)
        usage = usage + result.usage
    return dataclasses.replace(result, new_messages=result.messages[start:], usage=usage)


async def _drive(
    agent: Agent,
    user: Any,
    first: str,
    *,
    max_turns: int | None = None,
    decisions: Mapping[str, Decision] | None = None,
    abort_reason: str | None = None,
) -> RunResult:
    """One `DurableRun` from trigger ``first``: ``start`` (with the prompt), ``decided`` (the
    calls awaiting approval, with ``decisions``) or ``abort`` (a waiting run, with
    ``abort_reason``), claimed as ``agent.run()`` claims it."""
    if max_turns is not None and not agent.is_running:
        agent.max_turns = max_turns
    # A continued run keeps counting, as agent.run(decisions=...) does.
    return await agent.claim(
        first, user, decisions=decisions, run_class=DurableRun, abort_reason=abort_reason
    )


async def _wait_for_decisions(
    calls: Sequence[PendingCall], timeout_seconds: float
) -> dict[str, Any] | None:
    """Publish the pending calls and wait durably for a message on `DECISION_TOPIC` (None when
    none came within ``timeout_seconds``)."""
    await DBOS.set_event_async(PENDING_EVENT, [_encode_pending(c) for c in calls])
    message = await DBOS.recv_async(DECISION_TOPIC, timeout_seconds=timeout_seconds)
    await DBOS.set_event_async(PENDING_EVENT, [])
    if message is None:
        return None
    if not isinstance(message, dict):
        logger.warning("a durable run ignored a message that is not a decision: %r", message)
        return {}
    return message


def _applicable(message: dict[str, Any], calls: Sequence[PendingCall]) -> dict[str, Decision]:
    """The decisions of ``message`` for calls still waiting. A call is decided once: a decision
    for a call already decided (another process was quicker) or unknown is dropped, logged."""
    waiting = {call.id for call in calls}
    decisions: dict[str, Decision] = {}
    for call_id, data in dict(message.get("decisions") or {}).items():
        try:
            decision = _decode_decision(data)
        except (KeyError, TypeError, ValueError) as exc:
            logger.warning("a durable run ignored a malformed decision for %s: %s", call_id, exc)
            continue
        if call_id in waiting:
            decisions[call_id] = decision
        else:
            logger.warning(
                "a durable run ignored a decision for %s: no such call is pending", call_id
            )
    return decisions


@DBOS.workflow(name=WORKFLOW_NAME)
async def agent_workflow(
    prompt: str,
    max_turns: int | None = None,
    approval_timeout_seconds: float = APPROVAL_TIMEOUT_SECONDS,
) -> dict[str, Any]:
    """The run workflow: a fresh agent from the worker's factory, driven durably."""
    if _factory is None:
        raise UsageError("no agent factory: call statemachine_agent.durable.launch() first")
    result = await drive(
        _factory(),
        prompt,
        max_turns=max_turns,
        approval_timeout_seconds=approval_timeout_seconds,
    )
    return encode_result(result)


# -- processes: launching, running, submitting, recovering -------------------------------------


def load_factory(spec: str) -> AgentFactory:
    """The agent factory named ``module:attribute`` (a callable that returns an `Agent`).

    The module is found as ``python -m`` finds one: the current working folder is put at the
    front of ``sys.path`` first (and stays there, so the module's own later imports work), so
    ``myapp.agents:make_agent`` resolves from the folder that holds ``myapp`` whether the CLI was
    started as ``statemachine-agent`` (whose ``sys.path`` lacks the working folder) or as
    ``python -m statemachine_agent``.

    Raises:
        UsageError: the spec is malformed, the module cannot be imported (the message names the
            folder it was looked for in), or the attribute is missing or not callable.
    """
    module_name, sep, attribute = spec.partition(":")
    if not sep or not module_name or not attribute:
        raise UsageError(
            f"the agent factory {spec!r} must be 'module:function', e.g. myapp.agents:make_agent"
        )
    folder = working_folder_first()
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        parts = module_name.split(".")
        own = {".".join(parts[: i + 1]) for i in range(len(parts))}
        if exc.name in own:  # the factory's module (or a package above it) is not there
            raise UsageError(
                f"cannot import {module_name!r} for the agent factory: {exc}; it is looked up "
                f"from the working folder {folder} and sys.path: start the command from the "
                f"folder that holds {parts[0]!r} (or add that folder to PYTHONPATH)"
            ) from exc
        raise UsageError(f"cannot import {module_name!r} for the agent factory: {exc}") from exc
    factory = getattr(module, attribute, None)
    if not callable(factory):
        raise UsageError(f"{spec!r}: {module_name} has no callable {attribute!r}")
    return factory  # type: ignore[no-any-return]


class DatabaseUnavailableError(UsageError):
    """The system database (``--db``) cannot be used: a malformed URL, a Postgres server that
    refuses the connection (no server at the host and port, an unknown role, a missing
    database, a refused password) or a SQLite file that cannot be opened or has no tables yet.

    The message is one line: what is wrong, the URL with its password hidden (never the
    password itself), and what to create or start (e.g. ``createuser --createdb agents``).
    """


_URL_HELP = "use sqlite:////abs/path/runs.sqlite or postgresql://user@host:port/database"


def _hide_password(text: str) -> str:
    """``text`` with the password of any ``scheme://user:password@`` in it replaced by ***."""
    return re.sub(r"(://[^/:@\s]*:)[^@/\s]*@", r"\1***@", text)


def check_database_url(db: str) -> URL:
    """The parsed system-database URL, checked before anything connects.

    Args:
        db: ``sqlite:////abs/path.sqlite`` (``sqlite:///rel.sqlite`` is relative to the working
            folder) or ``postgresql://user[:password]@host[:port]/database``.

    Returns:
        The URL as SQLAlchemy (which DBOS uses) parses it.

    Raises:
        DatabaseUnavailableError: the URL cannot be parsed, names another kind of database, or
            a Postgres URL names no database.
    """
    try:
        url = make_url(db)
    except (sqlalchemy.exc.ArgumentError, ValueError) as exc:
        raise DatabaseUnavailableError(
            f"--db {_hide_password(db)!r} is not a database URL: {_URL_HELP}"
        ) from exc
    shown = url.render_as_string(hide_password=True)
    backend = url.get_backend_name()
    if backend == "postgres":
        fixed = url.set(drivername="postgresql").render_as_string(hide_password=True)
        raise DatabaseUnavailableError(f"--db {shown}: write postgresql://, as in {fixed}")
    if backend not in ("sqlite", "postgresql"):
        raise DatabaseUnavailableError(f"--db {shown}: {backend!r} is not supported: {_URL_HELP}")
    if backend == "sqlite" and not url.database:
        raise DatabaseUnavailableError(f"--db {shown} names no SQLite file: {_URL_HELP}")
    if backend == "postgresql" and not url.database:
        raise DatabaseUnavailableError(
            f"--db {shown} names no database: add /DATABASE at its end (a worker creates it)"
        )
    return url


def _messages(exc: BaseException) -> str:
    """The texts of ``exc`` and of the errors it wraps (a driver's error under SQLAlchemy's)."""
    texts: list[str] = []
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        texts.append(str(current))
        orig = getattr(current, "orig", None)
        if isinstance(orig, BaseException) and id(orig) not in seen:
            seen.add(id(orig))
            texts.append(str(orig))
        current = current.__cause__ or current.__context__
    return "\n".join(texts)


_CONNECTION_ERRORS: tuple[type[BaseException], ...] = (
    sqlalchemy.exc.OperationalError,
    sqlalchemy.exc.InterfaceError,
    sqlite3.OperationalError,
)


def explain_database_error(
    db: str, exc: BaseException, *, creating: bool = False
) -> DatabaseUnavailableError | None:
    """One clear line for an error met while connecting to the system database ``db``.

    Recognises (from the server's or the driver's own words; Postgres's are English unless
    the server sets another ``lc_messages``): an unknown role, a missing database, a refused
    password or host, a closed port, an unknown host, a SQLite file that cannot be opened, a
    database without the DBOS tables. Any other connection failure gets the driver's first
    line. The password of the URL is never in the message.

    Args:
        db: the system-database URL the error came from.
        exc: the error raised (by DBOS, SQLAlchemy or the driver).
        creating: the error came from a worker's launch, which creates a missing database (so
            a missing one means the role may not create it).

    Returns:
        The error to raise instead, or None when ``exc`` is no database-connection problem.
    """
    try:
        url = check_database_url(db)
    except DatabaseUnavailableError as bad_url:
        return bad_url
    text = _messages(exc)
    shown = url.render_as_string(hide_password=True)
    where = f"(--db {shown})"
    role = url.username or os.environ.get("PGUSER") or "postgres"
    name = url.database or ""
    server = f"{url.host or 'localhost'}:{url.port or 5432}"
    worker_first = "start a worker with this --db first (it creates the database and its tables)"
    if url.get_backend_name() == "sqlite":
        path = Path(name)
        if "unable to open database file" in text:
            folder = path.parent
            if not folder.is_dir():
                return DatabaseUnavailableError(
                    f"cannot open the SQLite file {path} {where}: its folder {folder} does not "
                    f"exist; create it (mkdir -p {folder}) or give another path"
                )
            return DatabaseUnavailableError(
                f"cannot open the SQLite file {path} {where}: this user cannot create or write "
                f"files in {folder}; give a path in a writable folder"
            )
        if "no such table" in text:
            return DatabaseUnavailableError(
                f"{path} has no DBOS tables yet {where}: {worker_first}"
            )
        if "file is not a database" in text:
            return DatabaseUnavailableError(
                f"{path} is not a SQLite database {where}: give the path of the runs database"
            )
    found = re.search(r'role "([^"]+)" does not exist', text)
    if found:
        missing = found.group(1)
        return DatabaseUnavailableError(
            f'the Postgres server at {server} has no role "{missing}" {where}: create it, e.g. '
            f'`createuser --createdb {missing}` or in psql `CREATE ROLE "{missing}" LOGIN '
            f'CREATEDB;` (CREATEDB lets the first worker create database "{name}"; without it, '
            f"`createdb -O {missing} {name}`)"
        )
    found = re.search(r'database "([^"]+)" does not exist', text)
    if (found and creating) or "permission denied to create database" in text:
        return DatabaseUnavailableError(
            f'role "{role}" may not create database "{name}" on the Postgres server at {server} '
            f"{where}: create it for the role (`createdb -O {role} {name}`) or let the role "
            f'create databases (`ALTER ROLE "{role}" CREATEDB;`)'
        )
    if found:
        return DatabaseUnavailableError(
            f'the Postgres server at {server} has no database "{found.group(1)}" {where}: '
            f"{worker_first}, or create it: `createdb -O {role} {found.group(1)}`"
        )
    if "password authentication failed" in text or "no password supplied" in text:
        return DatabaseUnavailableError(
            f'the Postgres server at {server} refused the password of role "{role}" {where}: '
            f"put the right one in the URL (user:PASSWORD@host), or set it with "
            f"`ALTER ROLE \"{role}\" PASSWORD '...';`"
        )
    if "no pg_hba.conf entry" in text:
        return DatabaseUnavailableError(
            f'the Postgres server at {server} does not let role "{role}" connect from this '
            f"host {where}: add a pg_hba.conf line for it (then reload the server)"
        )
    if re.search(r"Connection refused|No such file or directory\s+Is the server", text):
        return DatabaseUnavailableError(
            f"no Postgres server accepts connections at {server} {where}: start the server, "
            "or fix the host and port in the URL"
        )
    if re.search(r"failed to resolve host|could not translate host name|Name or service", text):
        return DatabaseUnavailableError(
            f"cannot find the host {url.host!r} {where}: fix the host in the URL"
        )
    if re.search(r"timeout expired|timed out", text):
        return DatabaseUnavailableError(
            f"the Postgres server at {server} did not answer {where}: check the host, the port "
            "and any firewall between"
        )
    if re.search(r'relation "[^"]*" does not exist', text):
        return DatabaseUnavailableError(
            f'database "{name}" has no DBOS tables yet {where}: {worker_first}'
        )
    if isinstance(exc, (*_CONNECTION_ERRORS, dbos_error.DBOSInitializationError)):
        first = next((line for line in str(getattr(exc, "orig", None) or exc).splitlines()), "")
        password = url.password
        if password:
            first = first.replace(str(password), "***")
        return DatabaseUnavailableError(f"cannot use the database {where}: {_hide_password(first)}")
    return None


class _HeldRecords(logging.Filter):
    """Holds back the records of the ``dbos`` logger (see `_database`)."""

    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def filter(self, record: logging.LogRecord) -> bool:
        self.records.append(record)
        return False


@contextlib.contextmanager
def _database(db: str, *, connecting: bool = False, creating: bool = False) -> Iterator[None]:
    """Turn a failure to reach database ``db`` into a `DatabaseUnavailableError`.

    With ``connecting``, DBOS's own log records are held back meanwhile: when the failure is
    explained they are dropped (DBOS logs the full traceback of a failed connection, which the
    one-line error replaces), otherwise they are logged afterwards. ``creating``: see
    `explain_database_error`.
    """
    dbos_logger = logging.getLogger("dbos")
    held = _HeldRecords()
    if connecting:
        dbos_logger.addFilter(held)
    explained: DatabaseUnavailableError | None = None
    try:
        yield
    except DatabaseUnavailableError:
        raise
    except Exception as exc:
        explained = explain_database_error(db, exc, creating=creating)
        if explained is None:
            raise
        raise explained from exc
    finally:
        dbos_logger.removeFilter(held)
        if explained is None:
            for record in held.records:
                dbos_logger.handle(record)


@dataclass(frozen=True)
class Takeover:
    """What a worker took over when it started (`launch` with ``register=True``).

    Attributes:
        executor_ids: the dead workers whose runs it took over.
        run_ids: their runs, put back on the queue (this and the other live workers run them).
    """

    executor_ids: tuple[str, ...] = ()
    run_ids: tuple[str, ...] = ()


_registered: tuple[str, Any] | None = None  # (executor id, registry engine) of this worker
_launched: tuple[str, str] | None = None  # (db, executor id) of this process


async def launch(
    db: str,
    factory: AgentFactory,
    *,
    executor_id: str = "local",
    concurrency: int | None = None,
    serve_queue: bool = True,
    poll_seconds: float = 1.0,
    log_level: str = "WARNING",
    register: bool = False,
) -> Takeover:
    """Start DBOS in this process: runs can be started here, and with ``serve_queue`` this
    process is a worker of the queue. Runs PENDING under ``executor_id`` are recovered now.
    Call it on the event loop the runs should use (they run on it).

    Args:
        db: the system database URL: ``sqlite:////abs/path.sqlite`` or
            ``postgresql://user@host:port/db`` (created, with its tables, if missing).
        factory: builds the agent of each run (called once per run, also on recovery: it must
            build the same agent every time).
        executor_id: this worker's id; restart a dead worker with its id to recover its runs.
        concurrency: the most runs this worker takes from the queue at once (None: no limit).
        serve_queue: take runs from the queue (False: only runs started in this process).
        poll_seconds: how often the queue is polled.
        log_level: DBOS's log level.
        register: record this process in the worker registry (the table
            ``statemachine_agent_workers`` in ``db``: executor id, host, pid and the process's
            start time) and take over the runs of registered workers whose process is gone:
            those on this host whose pid no longer runs the process that registered, and those
            that stopped cleanly (`shutdown`) with runs left PENDING. A live worker's runs, and
            those of a worker on another host that did not stop (nothing here can tell whether
            it lives), are never taken: ``statemachine-agent status`` prints the ``recover``
            command for them. The CLI's ``worker`` registers.

    Returns:
        What this worker took over (empty without ``register``).

    Raises:
        UsageError: DBOS is already launched in this process (one per process).
        DatabaseUnavailableError: ``db`` is malformed or cannot be reached or created (one
            line saying what to create or start; see `explain_database_error`).
    """
    global _factory, _incarnation, _registered, _launched
    if _factory is not None:
        raise UsageError("DBOS is already launched in this process; call shutdown() first")
    check_database_url(db)
    config: Any = {
        "name": APP_NAME,
        "system_database_url": db,
        "executor_id": executor_id,
        "application_version": APP_VERSION,
        "log_level": log_level,
        "notification_listener_polling_interval_sec": 0.05,
    }
    with _database(db):
        _use_wal(db)
    engine = registry.engine_for(db) if register else None
    registered = False
    if engine is not None:
        # Before DBOS recovers this id's runs: a worker taking over a dead one under the same
        # id sees the record change and leaves it (a fresh Postgres database does not exist
        # yet, and holds no record: register after the launch creates it).
        try:
            await asyncio.to_thread(registry.register, engine, executor_id)
            registered = True
        except sqlalchemy.exc.OperationalError:
            pass
        except sqlalchemy.exc.SQLAlchemyError as exc:  # e.g. no right to create the table
            _no_registry(engine, exc)
            engine = None
    _factory = factory
    _launched = (db, executor_id)
    _incarnation = uuid.uuid4().hex
    DBOS(config=config)
    if not serve_queue:
        DBOS.listen_queues([])
    try:
        with _database(db, connecting=True, creating=True):
            DBOS.launch()
            await DBOS.register_queue_async(
                QUEUE_NAME, worker_concurrency=concurrency, polling_interval_sec=poll_seconds
            )
            if engine is not None and not registered:
                try:
                    await asyncio.to_thread(registry.register, engine, executor_id)
                except sqlalchemy.exc.SQLAlchemyError as exc:
                    _no_registry(engine, exc)
                    engine = None
            if engine is None:
                return Takeover()
            _registered = (executor_id, engine)
            return await asyncio.to_thread(_take_over, engine, executor_id)
    except BaseException:
        shutdown()
        if engine is not None and _registered is None:
            engine.dispose()
        raise


def _no_registry(engine: Any, exc: BaseException) -> None:
    """Go on without the worker registry (it cannot be written): say what is lost."""
    engine.dispose()
    logger.warning(
        "this worker is not recorded in the worker registry (%s: %s): the runs of dead "
        "workers are not taken over at start; use `statemachine-agent recover`",
        registry.TABLE_NAME,
        str(exc).splitlines()[0],
    )


def _take_over(engine: Any, executor_id: str) -> Takeover:
    """Recover the runs of the registered workers whose process is gone (see `launch`)."""
    dead = registry.claim_dead(engine, executor_id)
    if not dead:
        return Takeover()
    run_ids = recover_executor(dead)
    logger.info(
        "worker %s took over %d run(s) of gone worker(s) %s",
        executor_id,
        len(run_ids),
        ", ".join(dead),
    )
    return Takeover(tuple(dead), tuple(run_ids))


def _use_wal(db: str) -> None:
    """Put a SQLite system database in WAL mode (kept in the file): one sync per checkpoint
    instead of a rollback journal created and deleted per write, and readers (``status`` from
    another process) do not block the worker."""
    prefix = "sqlite:///"
    if not db.startswith(prefix):
        return
    import sqlite3

    path = db.removeprefix(prefix).split("?", 1)[0]
    if not path or path == ":memory:":
        return
    connection = sqlite3.connect(path, timeout=30)
    try:
        connection.execute("PRAGMA journal_mode=WAL")
    finally:
        connection.close()


def shutdown() -> None:
    """Stop DBOS in this process (runs in progress stay PENDING and are recovered later: by
    this worker started again under its executor id, or, for a worker launched with
    ``register=True``, which is marked ``stopped`` in the registry, by the next registered
    worker that starts)."""
    global _factory, _registered, _launched
    _factory = None
    _launched = None
    DBOS.destroy()
    if _registered is not None:
        executor_id, engine = _registered
        _registered = None
        try:
            registry.unregister(engine, executor_id)
        finally:
            engine.dispose()


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
    _require_launched()
    with SetWorkflowID(run_id or uuid.uuid4().hex):
        handle = await DBOS.start_workflow_async(
            agent_workflow, prompt, max_turns, approval_timeout_seconds
        )
    return decode_result(await handle.get_result())


def _require_launched() -> None:
    if _factory is None:
        raise UsageError(
            "DBOS is not launched in this process: call statemachine_agent.durable.launch(...) "
            "first, or use statemachine_agent.durable.Client from a process that is not a worker"
        )


def _check_timeout(seconds: float) -> None:
    if not seconds >= 0:
        raise UsageError(f"approval_timeout_seconds must be 0 or more, not {seconds!r}")


async def abort(run_id: str, reason: str = "aborted by the caller") -> None:
    """Ask run ``run_id`` to stop (from a launched process; `Client.abort` from any other).

    The run notices before its next model request: it ends ``aborted`` with ``reason`` as its
    error, every call answered; a tool batch that is running finishes first. A run that is
    answering for the last time ends ``done`` as usual. A run in ``awaiting_approval`` ends
    ``aborted`` at once, each pending call answered "not run" (as ``agent.abort()`` ends a
    waiting in-process run); so does one whose batch is about to defer calls.

    Raises:
        UsageError: `launch` was not called in this process.
        dbos.error.DBOSNonExistentWorkflowError: no run has this id.
    """
    _require_launched()
    await DBOS.send_async(run_id, reason, topic=ABORT_TOPIC)
    await DBOS.send_async(run_id, {"abort": reason}, topic=DECISION_TOPIC)


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
    _require_launched()
    data = await DBOS.get_event_async(run_id, PENDING_EVENT, timeout_seconds=wait_seconds)
    return _decode_pending(data)


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
    message = _decision_message(run_id, calls, decisions)
    await DBOS.send_async(run_id, message, topic=DECISION_TOPIC)


def _decision_message(
    run_id: str, calls: Sequence[PendingCall], decisions: Mapping[str, Decision]
) -> dict[str, Any]:
    """``decisions`` as the message a waiting run reads, checked against its pending calls."""
    if not calls:
        raise UsageError(f"run {run_id!r} is not awaiting approval: there is nothing to decide")
    check_decisions([call.id for call in calls], decisions, of=f" of run {run_id!r}")
    return {"decisions": {cid: _encode_decision(d) for cid, d in decisions.items()}}


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
        with _database(db, connecting=True):
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
        with _database(self._db):
            self._client.enqueue(options, prompt, max_turns, approval_timeout_seconds)
        return workflow_id

    def abort(self, run_id: str, reason: str = "aborted by the caller") -> None:
        """Ask run ``run_id`` to stop (see the module's `abort`)."""
        with _database(self._db):
            self._client.send(run_id, reason, topic=ABORT_TOPIC)
            self._client.send(run_id, {"abort": reason}, topic=DECISION_TOPIC)

    def pending(self, run_id: str, *, wait_seconds: float = 0) -> tuple[PendingCall, ...]:
        """The calls run ``run_id`` waits for decisions on (see the module's `pending`).

        Args:
            run_id: the run's id.
            wait_seconds: when the run has not waited for approval yet, wait up to this long
                for it to start (0: answer at once).
        """
        with _database(self._db):
            data = self._client.get_event(run_id, PENDING_EVENT, timeout_seconds=wait_seconds)
        return _decode_pending(data)

    def send_decisions(self, run_id: str, decisions: Mapping[str, Decision]) -> None:
        """Decide calls of a run awaiting approval (see the module's `send_decisions`).

        Raises:
            UsageError: no run has this id, it is not awaiting approval, a call id is not
                pending, or a decision is not `Approve` / `Deny`. Nothing is sent then.
        """
        calls = self.pending(run_id)
        if not calls:
            self.status(run_id)  # no such run: says so
        message = _decision_message(run_id, calls, decisions)
        with _database(self._db):
            self._client.send(run_id, message, topic=DECISION_TOPIC)

    def status(self, run_id: str) -> RunStatus:
        """The run's status (and result once it ended).

        Raises:
            UsageError: no run has this id.
        """
        with _database(self._db):
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
                with _database(self._db):
                    worker = registry.lookup(self._registry, status.executor_id)
        return RunStatus(run_id, status.status, status.executor_id, result, error, calls, worker)

    def count(self, status: str, *, executor_id: str | None = None) -> int:
        """How many runs have DBOS status ``status`` (``ENQUEUED``, ``PENDING``, ``SUCCESS``,
        ``ERROR``...), optionally only those of worker ``executor_id``."""
        with _database(self._db):
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
        with _database(self._db):
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


def recover_executor(executor_ids: Sequence[str]) -> list[str]:
    """Take over the runs of dead workers: their PENDING runs go back to their queue, where live
    workers dequeue them (finished steps are replayed, the rest runs). Call it in a launched
    process (`launch`, ``serve_queue=False`` is enough), only for workers known to be dead.
    Registered workers among them are marked ``gone`` in the worker registry (see `launch`).

    Uses DBOS's recovery for a list of executors (``DBOS._recover_pending_workflows``, the same
    call DBOS Conductor makes; DBOS 3.4 has no public one). It is idempotent: a run that a live
    worker has dequeued since is not put back.

    Returns:
        The ids of the runs put back on the queue.

    Raises:
        UsageError: `launch` was not called in this process.
    """
    _require_launched()
    handles = DBOS._recover_pending_workflows(list(executor_ids))
    if _launched is not None:
        db, taker = _launched
        engine = registry.engine_for(db)
        try:
            registry.mark_gone(engine, executor_ids, taker)
        finally:
            engine.dispose()
    return [handle.get_workflow_id() for handle in handles]


__all__ = [
    "ABORT_TOPIC",
    "APPROVAL_TIMEOUT_SECONDS",
    "APP_NAME",
    "APP_VERSION",
    "DECISION_TOPIC",
    "PENDING_EVENT",
    "QUEUE_NAME",
    "STEP_RETRY_INTERVAL_SECONDS",
    "WORKFLOW_NAME",
    "AgentFactory",
    "Client",
    "DatabaseUnavailableError",
    "DurableBatch",
    "DurableRun",
    "Liveness",
    "PositionedModel",
    "RunStatus",
    "Takeover",
    "ToolStepFailed",
    "WorkerRecord",
    "abort",
    "agent_workflow",
    "check_database_url",
    "decode_result",
    "drive",
    "encode_result",
    "explain_database_error",
    "launch",
    "load_factory",
    "pending",
    "recover_executor",
    "run",
    "send_decisions",
    "shutdown",
]
