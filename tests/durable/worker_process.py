"""The CLI as a process, and a ``statemachine-agent worker`` started and waited for (shared by
the durable tests that run workers)."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path


def cli(*args: str) -> list[str]:
    """The command line running the CLI with this interpreter."""
    return [sys.executable, "-m", "statemachine_agent", *args]


def start_worker(
    db: str,
    worker_id: str,
    env: dict[str, str],
    *options: str,
    cwd: Path | None = None,
    launcher: Sequence[str] | None = None,
) -> subprocess.Popen[str]:
    """Start ``statemachine-agent worker --db DB --executor-id ID OPTIONS`` and return once it
    says it serves the queue (DBOS launched and recovered).

    Args:
        cwd: the worker's working folder (default: this process's).
        launcher: the command line that starts the CLI (default: `cli`'s).
    """
    command = [*(launcher or cli()), "worker", "--db", db, "--executor-id", worker_id]
    worker = subprocess.Popen(
        [*command, "--poll-seconds", "0.1", *options],
        env=env,
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert worker.stdout is not None and worker.stderr is not None
    line = worker.stdout.readline()
    stderr = ""
    if not line:  # stdout closed: the worker is ending; say why
        worker.wait(timeout=60)
        stderr = worker.stderr.read()
    assert line.startswith(f"worker {worker_id} serving"), (line, stderr)
    return worker


def recorded_steps(db_file: Path, run_id: str) -> list[str]:
    """The names of the run's steps whose output DBOS recorded, in order (read from the file)."""
    if not db_file.exists():
        return []
    try:
        with sqlite3.connect(f"file:{db_file}?mode=ro", uri=True, timeout=5) as con:
            rows = con.execute(
                "SELECT function_name FROM operation_outputs WHERE workflow_uuid = ? "
                "ORDER BY function_id",
                (run_id,),
            ).fetchall()
    except sqlite3.OperationalError:  # not created yet
        return []
    return [row[0] for row in rows]
