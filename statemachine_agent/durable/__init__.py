"""Durable agent runs on DBOS Transact: runs that survive a dead worker and spread over many.

Install the extra: ``pip install 'statemachine-agent[dbos]'``. A run is a DBOS workflow whose body
is the ordinary engine (the same table, effects and `Run` driver); only its two I/O seams are
steps:

- each model request (`Run.send`) is one step, named ``model_request``;
- each tool call (the execution part of a `BatchRun`, after the checks and the permission hooks)
  is one step, named ``tool:<call id>``, preceded, for a tool that is not idempotent, by a
  ``tool_start:<call id>`` step that records which worker started it.

Nothing else is recorded a turn: a turn with one idempotent call is two DBOS records, three
with a call that is not idempotent (the last request, the final answer, adds one per run).

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

Aborts:
    `abort` / `Client.abort` (CLI ``statemachine-agent abort``) set the run's DBOS workflow
    attribute `ABORT_TOPIC` (durable, sent from any process, no record in the run). The worker
    executing the run reads the attributes of its runs every `ABORT_POLL_SECONDS` (one query
    for all of them, outside any workflow, so no record) and sets the run's abort signal:
    the run stops as after ``agent.abort()``, a model request or tool call in flight under the
    usual grace rules, a sub-agent with it. A run waiting in ``awaiting_approval`` is woken by
    the abort's message on `DECISION_TOPIC`. The abort is applied only once the run executes a
    step for real (a recovered run first replays its recorded steps), and each step records
    whether the run was aborted by its end, so a replay stops where the original did.

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

try:
    import dbos  # noqa: F401
    import sqlalchemy  # noqa: F401
except ImportError as exc:  # pragma: no cover - depends on the installation
    raise ImportError(
        "statemachine_agent.durable needs DBOS Transact: pip install 'statemachine-agent[dbos]' "
        f"({exc})"
    ) from exc

from .._worker_registry import Liveness, WorkerRecord
from ._abort import ABORT_POLL_SECONDS
from ._client import Client, RunStatus, abort, pending, run, send_decisions

# Private names kept importable from here, as before the package split (tests read them): how
# a model request's outcome is recorded in its ``model_request`` step.
from ._codec import decode_outcome as _decode_outcome  # noqa: F401
from ._codec import decode_result, encode_result
from ._codec import encode_outcome as _encode_outcome  # noqa: F401
from ._database import DatabaseUnavailableError, check_database_url, explain_database_error
from ._names import (
    ABORT_TOPIC,
    APP_NAME,
    APP_VERSION,
    APPROVAL_TIMEOUT_SECONDS,
    DECISION_TOPIC,
    PENDING_EVENT,
    QUEUE_NAME,
    WORKFLOW_NAME,
)
from ._state import AgentFactory
from ._steps import (
    STEP_RETRY_INTERVAL_SECONDS,
    DurableBatch,
    DurableRun,
    PositionedModel,
    ToolStepFailed,
)
from ._worker import Takeover, launch, load_factory, recover_executor, shutdown
from ._workflow import agent_workflow, drive

__all__ = [
    "ABORT_POLL_SECONDS",
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
