"""The worker registry of durable runs: which worker process serves under which executor id.

DBOS (without its Conductor service) does not notice a dead worker: the runs it left stay
PENDING under its executor id until a worker with that id starts again. A worker started with a
new id (the CLI's default) would never take them. So each worker records itself in a small table
of its own in the system database, ``statemachine_agent_workers``:

- the executor id, the host (its name, ``/etc/machine-id`` and PID namespace), the boot
  (``/proc/sys/kernel/random/boot_id``), the pid and the process's start time (field 22 of
  ``/proc/<pid>/stat``, clock ticks since boot; `proc(5)`), so a pid the kernel reused for
  another process is not mistaken for the worker;
- its state: ``serving``, ``stopped`` (it ended cleanly; runs it was running stay PENDING, as
  DBOS leaves them), ``taking-over`` (another worker is recovering its runs) or ``gone`` (its
  runs were taken over).

A worker can only tell whether a process on its own host is alive (same host name, machine id
and PID namespace). On the same host a process is gone when the host rebooted since it
registered, its pid is not running (or is a zombie), or the pid runs a process with another
start time. Elsewhere, or without ``/proc`` (not Linux), liveness is unknown: nothing takes such
a worker's runs over automatically, and ``statemachine-agent status`` prints the ``recover``
command to run once you know it is dead.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

import sqlalchemy as sa
from sqlalchemy.engine import Engine

TABLE_NAME = "statemachine_agent_workers"
"""The registry table, in the system database next to DBOS's own tables."""

_metadata = sa.MetaData()
_workers = sa.Table(
    TABLE_NAME,
    _metadata,
    sa.Column("executor_id", sa.String(255), primary_key=True),
    sa.Column("hostname", sa.Text, nullable=False),
    sa.Column("host_key", sa.Text, nullable=False),
    sa.Column("boot_id", sa.Text, nullable=False),
    sa.Column("pid", sa.Integer, nullable=False),
    sa.Column("start_ticks", sa.BigInteger, nullable=True),
    sa.Column("state", sa.String(32), nullable=False),
    sa.Column("registered_at", sa.Float, nullable=False),
    sa.Column("ended_at", sa.Float, nullable=True),
    sa.Column("taken_over_by", sa.Text, nullable=True),
)


class Liveness(StrEnum):
    """Whether a registered worker's process runs, as seen from this process."""

    ALIVE = "alive"
    """Its process runs on this host."""
    GONE = "gone"
    """Its process ended (it ran on this host, or it was stopped or taken over)."""
    UNKNOWN = "unknown"
    """It ran on another host (or a host without ``/proc``): this process cannot tell."""


@dataclass(frozen=True)
class Host:
    """Where a process runs, as far as liveness goes.

    Attributes:
        hostname: the host's name (`socket.gethostname`).
        key: the host name, ``/etc/machine-id`` and PID namespace together: two processes
            with the same key see each other's pids.
        boot_id: this boot of the host (empty without ``/proc``).
    """

    hostname: str
    key: str
    boot_id: str


def _read(path: str) -> str:
    try:
        return Path(path).read_text().strip()
    except OSError:
        return ""


def this_host() -> Host:
    """The `Host` of this process."""
    hostname = socket.gethostname()
    try:
        namespace = os.readlink("/proc/self/ns/pid")
    except OSError:
        namespace = ""
    key = "|".join((hostname, _read("/etc/machine-id"), namespace))
    return Host(hostname, key, _read("/proc/sys/kernel/random/boot_id"))


def process_start(pid: int) -> int | None:
    """The start time of process ``pid`` in clock ticks since boot (``/proc/<pid>/stat`` field
    22, `proc(5)`); None when no such process runs, it is a zombie, or there is no ``/proc``."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # "pid (comm) state ppid ...": comm may hold spaces and parentheses; fields restart after
    # the last ")" at field 3 (state).
    fields = stat.rpartition(")")[2].split()
    if len(fields) < 20 or fields[0] in ("Z", "X"):
        return None
    return int(fields[19])


@dataclass(frozen=True)
class WorkerRecord:
    """A registered worker.

    Attributes:
        executor_id: its DBOS executor id.
        hostname: the name of the host it runs (ran) on.
        pid: its process id there.
        state: ``serving``, ``stopped``, ``taking-over`` or ``gone`` (see the module docstring).
        taken_over_by: the worker (or ``recover`` command) that took its runs over, if any.
        liveness: whether its process runs, as seen from the process that read the record.
    """

    executor_id: str
    hostname: str
    pid: int
    state: str
    taken_over_by: str | None
    liveness: Liveness


def engine_for(db: str) -> Engine:
    """A SQLAlchemy engine on the system database ``db`` with the driver DBOS uses (psycopg 3
    for Postgres)."""
    url = sa.make_url(db)
    if url.get_backend_name() == "postgresql":
        url = url.set(drivername="postgresql+psycopg")
    return sa.create_engine(url, pool_pre_ping=True)


def _liveness(row: sa.Row[tuple[object, ...]], host: Host) -> Liveness:
    if row.state in ("stopped", "gone"):
        return Liveness.GONE
    if row.host_key != host.key or not host.boot_id:
        return Liveness.UNKNOWN
    if row.boot_id != host.boot_id:
        return Liveness.GONE  # the host rebooted since it registered
    if row.start_ticks is None:
        return Liveness.UNKNOWN
    started = process_start(int(row.pid))
    return Liveness.ALIVE if started == row.start_ticks else Liveness.GONE


def _record(row: sa.Row[tuple[object, ...]], host: Host) -> WorkerRecord:
    return WorkerRecord(
        executor_id=str(row.executor_id),
        hostname=str(row.hostname),
        pid=int(row.pid),
        state=str(row.state),
        taken_over_by=None if row.taken_over_by is None else str(row.taken_over_by),
        liveness=_liveness(row, host),
    )


def _no_table(exc: sa.exc.DBAPIError) -> bool:
    """``exc`` says the registry table does not exist (no worker registered yet)."""
    text = str(exc.orig)
    return "no such table" in text or ("does not exist" in text and TABLE_NAME in text)


def lookup(engine: Engine, executor_id: str) -> WorkerRecord | None:
    """The registered worker ``executor_id`` (None when it never registered, or the database
    has no registry yet)."""
    try:
        with engine.connect() as connection:
            row = connection.execute(
                sa.select(_workers).where(_workers.c.executor_id == executor_id)
            ).first()
    except sa.exc.DBAPIError as exc:
        if _no_table(exc):
            return None
        raise
    return None if row is None else _record(row, this_host())


def register(engine: Engine, executor_id: str, *, waiting_seconds: float = 30.0) -> None:
    """Record this process as worker ``executor_id`` (creating the table if needed), state
    ``serving``.

    A worker restarted under the id of a worker whose runs another worker is taking over right
    now waits (up to ``waiting_seconds``) until that takeover is done, so the two do not recover
    the same runs at once.
    """
    _metadata.create_all(engine, checkfirst=True)
    host = this_host()
    pid = os.getpid()
    values = {
        "hostname": host.hostname,
        "host_key": host.key,
        "boot_id": host.boot_id,
        "pid": pid,
        "start_ticks": process_start(pid),
        "state": "serving",
        "registered_at": time.time(),
        "ended_at": None,
        "taken_over_by": None,
    }
    deadline = time.monotonic() + waiting_seconds
    while True:
        with engine.begin() as connection:
            row = connection.execute(
                sa.select(_workers.c.state).where(_workers.c.executor_id == executor_id)
            ).first()
            if row is None:
                connection.execute(sa.insert(_workers).values(executor_id=executor_id, **values))
                return
            if row.state != "taking-over" or time.monotonic() >= deadline:
                connection.execute(
                    sa.update(_workers)
                    .where(_workers.c.executor_id == executor_id)
                    .values(**values)
                )
                return
        time.sleep(0.1)


def unregister(engine: Engine, executor_id: str) -> None:
    """Mark worker ``executor_id`` (this process) ``stopped``."""
    with engine.begin() as connection:
        connection.execute(
            sa.update(_workers)
            .where(_workers.c.executor_id == executor_id, _workers.c.pid == os.getpid())
            .values(state="stopped", ended_at=time.time())
        )


def claim_dead(engine: Engine, taker: str) -> list[str]:
    """Claim the registered workers whose process is gone: those on this host (see the module
    docstring) and those that stopped cleanly, on any host; never ``taker`` itself, a live
    worker, or a worker on another host that did not stop (its liveness is unknown). Each is
    marked ``taking-over`` by ``taker`` only if its record did not change since it was read (a
    worker restarted under that id meanwhile is alive). Finish with `mark_gone` once their runs
    are recovered.

    Returns:
        The executor ids claimed.
    """
    host = this_host()
    claimed: list[str] = []
    with engine.connect() as connection:
        rows = connection.execute(
            sa.select(_workers).where(
                _workers.c.executor_id != taker,
                sa.or_(
                    _workers.c.state == "stopped",
                    sa.and_(_workers.c.state == "serving", _workers.c.host_key == host.key),
                ),
            )
        ).fetchall()
    for row in rows:
        if _liveness(row, host) is not Liveness.GONE:
            continue
        with engine.begin() as connection:
            done = connection.execute(
                sa.update(_workers)
                .where(
                    _workers.c.executor_id == row.executor_id,
                    _workers.c.pid == row.pid,
                    _workers.c.boot_id == row.boot_id,
                    _workers.c.registered_at == row.registered_at,
                    _workers.c.state == row.state,
                )
                .values(state="taking-over", taken_over_by=taker)
            )
        if done.rowcount == 1:
            claimed.append(str(row.executor_id))
    return claimed


def mark_gone(engine: Engine, executor_ids: Sequence[str], taker: str) -> None:
    """Mark workers ``executor_ids`` ``gone``, their runs taken over by ``taker``: those
    ``taker`` claimed (`claim_dead`), or any not gone yet when ``taker`` is the ``recover``
    command (whoever runs it says they are dead). Ids never registered are left alone."""
    if not executor_ids:
        return
    try:
        with engine.begin() as connection:
            connection.execute(
                sa.update(_workers)
                .where(
                    _workers.c.executor_id.in_(list(executor_ids)),
                    _workers.c.state != "gone",
                    sa.or_(_workers.c.state != "taking-over", _workers.c.taken_over_by == taker),
                )
                .values(state="gone", taken_over_by=taker, ended_at=time.time())
            )
    except sa.exc.DBAPIError as exc:
        if _no_table(exc):
            return
        raise
