"""A worker process: loading the agent factory, `launch` and `shutdown` of DBOS, the worker
registry, and taking over the runs of dead workers (`recover_executor`)."""

from __future__ import annotations

import asyncio
import importlib
import logging
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy.exc
from dbos import DBOS

from .. import _worker_registry as registry
from .._errors import UsageError
from .._importing import working_folder_first
from . import _abort
from ._database import check_database_url, database, use_wal
from ._names import APP_NAME, APP_VERSION, QUEUE_NAME
from ._state import AgentFactory, process, require_launched

logger = logging.getLogger("statemachine_agent")


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


@dataclass(frozen=True)
class Takeover:
    """What a worker took over when it started (`launch` with ``register=True``).

    Attributes:
        executor_ids: the dead workers whose runs it took over.
        run_ids: their runs, put back on the queue (this and the other live workers run them).
    """

    executor_ids: tuple[str, ...] = ()
    run_ids: tuple[str, ...] = ()


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
    if process.factory is not None:
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
    with database(db):
        use_wal(db)
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
    process.factory = factory
    process.launched = (db, executor_id)
    process.incarnation = uuid.uuid4().hex
    DBOS(config=config)
    if not serve_queue:
        DBOS.listen_queues([])
    try:
        with database(db, connecting=True, creating=True):
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
            process.registered = (executor_id, engine)
            return await asyncio.to_thread(_take_over, engine, executor_id)
    except BaseException:
        shutdown()
        if engine is not None and process.registered is None:
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


def shutdown() -> None:
    """Stop DBOS in this process (runs in progress stay PENDING and are recovered later: by
    this worker started again under its executor id, or, for a worker launched with
    ``register=True``, which is marked ``stopped`` in the registry, by the next registered
    worker that starts)."""
    process.factory = None
    process.launched = None
    process.watches.clear()
    _abort.poller.stop()
    DBOS.destroy()
    if process.registered is not None:
        executor_id, engine = process.registered
        process.registered = None
        try:
            registry.unregister(engine, executor_id)
        finally:
            engine.dispose()


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
    require_launched()
    handles = DBOS._recover_pending_workflows(list(executor_ids))
    if process.launched is not None:
        db, taker = process.launched
        engine = registry.engine_for(db)
        try:
            registry.mark_gone(engine, executor_ids, taker)
        finally:
            engine.dispose()
    return [handle.get_workflow_id() for handle in handles]
