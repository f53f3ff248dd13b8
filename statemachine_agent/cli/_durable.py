"""``statemachine-agent worker`` / ``submit`` / ``status`` / ``decide`` / ``recover``: durable
runs on DBOS.

A worker serves the queue of runs stored in the database (``--db``: a SQLite file URL or a
Postgres URL shared by many workers); ``submit`` puts a prompt on the queue from any machine;
``status`` shows where a run is (and the calls it waits for decisions on); ``decide`` approves or
denies them from any machine; ``recover`` hands a dead worker's runs back to the queue. Needs the
``dbos`` extra (``pip install 'statemachine-agent[dbos]'``).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import json
import shlex
import signal
import sys
import uuid
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from .._agent import Agent
from .._errors import UsageError
from .._hooks import Approve

if TYPE_CHECKING:  # imported on use: it needs the dbos extra
    from ..durable import RunStatus

DB_HELP = (
    "The system database: sqlite:////abs/path/runs.sqlite, or postgresql://user@host:port/db "
    "shared by all workers."
)


def _durable() -> Any:
    try:
        from .. import durable
    except ImportError as exc:
        raise click.ClickException(str(exc)) from exc
    return durable


class DatabaseProblem(click.ClickException):
    """The ``--db`` database cannot be used: one line (``Error: ...``) on stderr, exit code 2."""

    exit_code = 2


def _click_error(exc: UsageError) -> click.ClickException:
    """``exc`` as the CLI reports it: exit code 2 for a database problem, else 1."""
    from ..durable import DatabaseUnavailableError

    if isinstance(exc, DatabaseUnavailableError):
        return DatabaseProblem(str(exc))
    return click.ClickException(str(exc))


@contextlib.contextmanager
def _database_problems() -> Iterator[None]:
    """Report a `statemachine_agent.durable.DatabaseUnavailableError` as `DatabaseProblem`."""
    try:
        yield
    except UsageError as exc:
        from ..durable import DatabaseUnavailableError

        if not isinstance(exc, DatabaseUnavailableError):
            raise
        raise DatabaseProblem(str(exc)) from exc


def _reports_database_problems(command: Callable[..., None]) -> Callable[..., None]:
    """Wrap a command taking ``--db``: a database it cannot use is one line and exit code 2,
    never a traceback."""

    @functools.wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> None:
        with _database_problems():
            command(*args, **kwargs)

    return wrapper


def _workspace_factory(workspace: Path, model_spec: str, yes: bool, deny: bool) -> Any:
    from ..workspace import Permissions, Workspace
    from ._execute import build_agent
    from ._model_option import load_model

    ws = Workspace(workspace)

    def factory() -> Agent:
        return build_agent(
            ws,
            load_model(model_spec),
            permissions=Permissions(
                allow_all=yes,
                # Nobody is at a worker's terminal: a gated call waits for `decide`.
                defer=not deny,
                how_to_allow="The worker's operator can allow it with --yes, or run the worker "
                "without --deny-unapproved so such calls wait for `statemachine-agent decide`.",
            ),
        )

    return factory


@click.command("worker")
@click.option("--db", required=True, help=DB_HELP)
@click.option(
    "--factory",
    "factory_spec",
    default=None,
    metavar="MODULE:FUNCTION",
    help="A function that builds the Agent of each run (default: the workspace tools).",
)
@click.option(
    "--workspace",
    "-w",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("."),
    show_default=True,
    help="The folder the built-in workspace tools work in (without --factory).",
)
@click.option(
    "--model",
    "-m",
    "model_spec",
    default=None,
    metavar="NAME|script:FILE",
    help="Without --factory (then required): an Anthropic model name (needs ANTHROPIC_API_KEY), "
    "or script:FILE (for demos and tests: each run plays it from its first step; a recovered "
    "run continues after its last recorded step).",
)
@click.option(
    "--yes",
    is_flag=True,
    help="Without --factory: allow commands and writes. Without it (and without "
    "--deny-unapproved) each run_command, write_file and edit_file call waits in "
    "awaiting_approval for `statemachine-agent decide`.",
)
@click.option(
    "--deny-unapproved",
    is_flag=True,
    help="Without --factory: deny commands and writes at once (the model reads why) instead "
    "of making them wait for `decide`.",
)
@click.option(
    "--executor-id",
    default=None,
    help="This worker's id (default: a new one). A worker takes over at start the runs of "
    "dead workers on its host whatever their id; restarting one with its id works too.",
)
@click.option(
    "--concurrency",
    type=click.IntRange(min=1),
    default=4,
    show_default=True,
    help="The most runs this worker runs at once.",
)
@click.option(
    "--poll-seconds",
    type=click.FloatRange(min=0.01),
    default=1.0,
    show_default=True,
    help="How often the queue is polled.",
)
@_reports_database_problems
def worker_command(
    db: str,
    factory_spec: str | None,
    workspace: Path,
    model_spec: str | None,
    yes: bool,
    deny_unapproved: bool,
    executor_id: str | None,
    concurrency: int,
    poll_seconds: float,
) -> None:
    """Serve the queue of durable runs until SIGTERM or Ctrl-C.

    With the built-in workspace tools (no --factory), a run_command, write_file or edit_file
    call waits in awaiting_approval (`status` lists it, `decide` approves or denies it from any
    machine) unless --yes allows it or --deny-unapproved denies it.

    Each worker records itself in the database (executor id, host, pid, process start time).
    At start it takes over the unfinished runs of recorded workers whose process is gone: on
    this host (the pid ended, or now runs another process), or stopped cleanly on any host. A
    live worker's runs are never taken, nor those of a worker on another host (nothing here can
    tell whether it lives): `status` prints the `recover` command for those. Restarting a worker
    with the same --executor-id also recovers its runs.
    --factory MODULE:FUNCTION is imported as `python -m` would: from the working folder first.

    Exit codes: 0 stopped by SIGTERM or Ctrl-C, 2 bad options or a database it cannot use.
    """
    durable = _durable()
    durable.check_database_url(db)
    if yes and deny_unapproved:
        raise click.UsageError("--yes allows what --deny-unapproved denies: give one of them")
    if factory_spec is None:
        if model_spec is None:
            raise click.UsageError(
                "Give --factory MODULE:FUNCTION, or --model for the built-in workspace tools."
            )
        from ._model_option import load_model

        load_model(model_spec)  # a bad spec or a missing API key is reported now, not per run
        factory = _workspace_factory(workspace, model_spec, yes, deny_unapproved)
    elif deny_unapproved:
        raise click.UsageError(
            "--deny-unapproved is for the built-in workspace tools: with --factory, your "
            "factory's before_tool_call hook decides"
        )
    else:
        try:
            factory = durable.load_factory(factory_spec)
        except UsageError as exc:
            raise click.BadParameter(str(exc), param_hint="--factory") from exc
    worker_id = executor_id or f"worker-{uuid.uuid4().hex[:8]}"

    async def serve() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        takeover = await durable.launch(
            db,
            factory,
            executor_id=worker_id,
            concurrency=concurrency,
            poll_seconds=poll_seconds,
            register=True,
        )
        try:
            if takeover.executor_ids:
                gone = ", ".join(takeover.executor_ids)
                runs = "".join(f" {run_id}" for run_id in takeover.run_ids)
                click.echo(
                    f"worker {worker_id} took over {len(takeover.run_ids)} run(s) of gone "
                    f"worker(s) {gone}:{runs}".removesuffix(":")
                )
            click.echo(
                f"worker {worker_id} serving {durable.QUEUE_NAME} (concurrency {concurrency})"
            )
            sys.stdout.flush()
            await stop.wait()
        finally:
            durable.shutdown()

    asyncio.run(serve())


@click.command("submit")
@click.option("--db", required=True, help=DB_HELP)
@click.option("--id", "run_id", default=None, help="The run's id (default: a new one).")
@click.option("--max-turns", type=click.IntRange(min=1), default=None, help="The turn cap.")
@click.option(
    "--approval-timeout",
    "approval_timeout",
    type=click.FloatRange(min=0),
    default=None,
    metavar="SECONDS",
    help="How long the run waits for each decision on calls awaiting approval before it ends "
    "aborted (default: 7 days).",
)
@click.argument("prompt")
@_reports_database_problems
def submit_command(
    db: str,
    run_id: str | None,
    max_turns: int | None,
    approval_timeout: float | None,
    prompt: str,
) -> None:
    """Put PROMPT on the queue as a durable run; prints the run's id.

    Exit codes: 0 queued, 2 bad options or a database it cannot use (start a worker with the
    same --db first: it creates the database and its tables).
    """
    durable = _durable()
    if not prompt.strip():
        raise click.BadParameter("the prompt is empty", param_hint="PROMPT")
    timeout = durable.APPROVAL_TIMEOUT_SECONDS if approval_timeout is None else approval_timeout
    client = durable.Client(db)
    try:
        click.echo(
            client.submit(
                prompt, run_id=run_id, max_turns=max_turns, approval_timeout_seconds=timeout
            )
        )
    finally:
        client.close()


@click.command("status")
@click.option("--db", required=True, help=DB_HELP)
@click.option("--json", "as_json", is_flag=True, help="Print the status and result as JSON.")
@click.argument("run_id")
@_reports_database_problems
def status_command(db: str, as_json: bool, run_id: str) -> None:
    """Show where RUN_ID is (queued, running, or its result).

    The first line names the DBOS workflow status (ENQUEUED, PENDING, SUCCESS, ERROR...) and
    the run's state (done, failed, aborted, awaiting_approval...) apart: SUCCESS says the
    workflow ran to its end, the state says how the run ended.

    Exit codes: 0 the run exists (whatever its state), 1 no such run, 2 a database it cannot
    use (one line saying what to create or start).
    """
    durable = _durable()
    client = durable.Client(db)
    try:
        status = client.status(run_id)
    except UsageError as exc:
        raise _click_error(exc) from exc
    finally:
        client.close()
    result = status.result
    if as_json:
        data: dict[str, Any] = {
            "run_id": status.run_id,
            "status": status.status,
            "executor_id": status.executor_id,
            "error": status.error,
            "result": None if result is None else durable.encode_result(result),
            "pending": [dataclasses.asdict(call) for call in status.pending],
            "worker": None if status.worker is None else dataclasses.asdict(status.worker),
            "recover_command": recover_hint(db, status) and recover_line(db, status),
        }
        click.echo(json.dumps(data))
        return
    click.echo(status_line(status))
    hint = recover_hint(db, status)
    if hint:
        click.echo(hint)
    if result is not None:
        click.echo(result.error or result.text)
    elif status.error:
        click.echo(status.error)
    elif status.pending:
        from ._hints import pending_text

        hint = (
            f"Decide from any machine: statemachine-agent decide --db {db} {run_id} "
            "--approve ID | --deny ID:REASON | --all"
        )
        click.echo(pending_text(status.pending, hint))


def status_line(status: RunStatus) -> str:
    """The first line of ``status``: the DBOS workflow's status, then the run's state, each
    named, since they differ (a workflow that ran to its end is ``SUCCESS`` whatever state the
    run ended in). For a ``PENDING`` run it says whether its worker is alive (see `worker_note`).

    Args:
        status: the run's status (`statemachine_agent.durable.Client.status`).

    Returns:
        For example ``r1: SUCCESS (workflow status; worker w1); the run ended in state failed
        after 2 turn(s)``.
    """
    worker = "no worker yet" if status.executor_id is None else f"worker {status.executor_id}"
    line = f"{status.run_id}: {status.status} (workflow status; {worker})"
    result = status.result
    if result is not None:
        return f"{line}; the run ended in state {result.state} after {result.turns} turn(s)"
    if status.pending:
        return f"{line}; the run is in state awaiting_approval{worker_note(status)}"
    run_state = {
        "ENQUEUED": "the run has not started",
        "PENDING": "the run is in progress",
        "ERROR": "the workflow failed, so the run has no result",
    }.get(status.status)
    if run_state is None:
        return line
    if status.status == "PENDING":
        run_state += worker_note(status)
    return f"{line}; {run_state}"


def worker_note(status: RunStatus) -> str:
    """What is known of a ``PENDING`` run's worker, as a clause for `status_line` (empty when
    its process is alive on this host, or the run is not ``PENDING``)."""
    from ..durable import Liveness

    record = status.worker
    if status.status != "PENDING" or status.executor_id is None:
        return ""
    if record is None:
        return (
            f", if worker {status.executor_id} is alive: it is not in the worker registry, so "
            "whether it runs is unknown"
        )
    where = f"pid {record.pid} on {record.hostname}"
    if record.liveness is Liveness.ALIVE:
        return ""
    if record.liveness is Liveness.UNKNOWN:
        return (
            f", if worker {record.executor_id} ({where}) is alive: this machine cannot tell, "
            "it runs on another host"
        )
    how = {
        "stopped": "it stopped",
        "gone": f"its runs were handed over by {record.taken_over_by}",
        "taking-over": f"{record.taken_over_by} is taking its runs over",
    }.get(record.state, "its process is gone")
    return f", but stalled: worker {record.executor_id} ({where}) is not running ({how})"


def recover_line(db: str, status: RunStatus) -> str:
    """The command that hands the run's worker's runs to the live workers."""
    return shlex.join(["statemachine-agent", "recover", "--db", db, status.executor_id or ""])


def recover_hint(db: str, status: RunStatus) -> str:
    """The second line of ``status`` for a ``PENDING`` run whose worker is not known to be
    alive: how to hand its runs to the live workers (empty otherwise)."""
    from ..durable import Liveness

    if status.status != "PENDING" or status.executor_id is None:
        return ""
    record = status.worker
    command = recover_line(db, status)
    if record is None or record.liveness is Liveness.UNKNOWN:
        return f"If that worker is dead, hand its runs to the live workers: {command}"
    if record.liveness is Liveness.ALIVE:
        return ""
    return (
        f"A worker started on {record.hostname} takes its runs over; or hand them to the live "
        f"workers now: {command}"
    )


@click.command("decide")
@click.option("--db", required=True, help=DB_HELP)
@click.option(
    "--approve", multiple=True, metavar="ID", help="Approve this pending call. Repeatable."
)
@click.option("--all", "approve_all", is_flag=True, help="Approve every pending call.")
@click.option(
    "--deny",
    multiple=True,
    metavar="ID:REASON",
    help="Deny this pending call (the model reads REASON). Repeatable.",
)
@click.argument("run_id")
@_reports_database_problems
def decide_command(
    db: str, approve: Sequence[str], approve_all: bool, deny: Sequence[str], run_id: str
) -> None:
    """Decide the calls durable run RUN_ID waits for (`status` lists them), from any machine.

    The decisions are stored in the database and reach the run even while its worker is down:
    approved calls run once, denied ones get an error result with the reason, calls left
    undecided keep waiting. Exit codes: 0 sent, 1 nothing sent (no such run, it is not awaiting
    approval, or an id is not pending), 2 bad options or a database it cannot use.
    """
    from ._options import parse_decisions

    durable = _durable()
    if not approve and not approve_all and not deny:
        raise click.UsageError("say what to decide: --approve ID, --all, or --deny ID:REASON")
    client = durable.Client(db)
    try:
        if approve_all:
            approve = [*approve, *(c.id for c in client.pending(run_id))]
        decisions = parse_decisions(approve, deny)
        client.send_decisions(run_id, decisions)
    except UsageError as exc:
        raise _click_error(exc) from exc
    finally:
        client.close()
    summary = ", ".join(
        f"{cid}: {'approve' if isinstance(d, Approve) else 'deny'}" for cid, d in decisions.items()
    )
    click.echo(f"{run_id}: sent {len(decisions)} decision(s) ({summary})")


@click.command("recover")
@click.option("--db", required=True, help=DB_HELP)
@click.argument("executor_ids", nargs=-1, required=True)
@_reports_database_problems
def recover_command(db: str, executor_ids: Sequence[str]) -> None:
    """Hand the unfinished runs of dead workers EXECUTOR_IDS back to the queue, where the live
    workers take them over, and mark them gone in the worker registry. Only for workers known
    to be dead: a live worker's runs would run twice (a worker takes over the dead workers of
    its own host at start by itself; `status` prints this command for the others). Exit codes:
    0 done, 2 a database it cannot use."""
    durable = _durable()

    def no_agent() -> Agent:
        raise UsageError("the recover command runs no agent")

    async def recover() -> list[str]:
        await durable.launch(
            db, no_agent, executor_id=f"recover-{uuid.uuid4().hex[:8]}", serve_queue=False
        )
        try:
            ids: list[str] = durable.recover_executor(executor_ids)
            return ids
        finally:
            durable.shutdown()

    ids = asyncio.run(recover())
    click.echo(f"put {len(ids)} run(s) back on the queue")
    for run_id in ids:
        click.echo(run_id)
    sys.stdout.flush()
