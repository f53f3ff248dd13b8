"""The system database: checking its URL, explaining a failure to reach it in one line, and
SQLite's WAL mode."""

from __future__ import annotations

import contextlib
import logging
import os
import re
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import sqlalchemy.exc
from dbos import error as dbos_error
from sqlalchemy.engine import URL, make_url

from .._errors import UsageError


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
    """Holds back the records of the ``dbos`` logger (see `database`)."""

    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def filter(self, record: logging.LogRecord) -> bool:
        self.records.append(record)
        return False


@contextlib.contextmanager
def database(db: str, *, connecting: bool = False, creating: bool = False) -> Iterator[None]:
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


def use_wal(db: str) -> None:
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
