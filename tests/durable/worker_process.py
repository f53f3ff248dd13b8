"""The CLI as a process, and a ``statemachine-agent worker`` started and waited for (shared by
the durable tests that run workers)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from dbos import DBOSClient

from statemachine_agent.durable import APP_NAME


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


def recorded_steps(db: Path | str, run_id: str) -> list[str]:
    """The names of the run's steps whose output DBOS recorded, in the workflow's order, DBOS's
    own operations (``DBOS.*``) included, read through DBOS's public client
    (`DBOSClient.list_workflow_steps`), never its tables. ``db``: a SQLite file (not created
    yet: no steps) or a database URL."""
    if isinstance(db, Path):
        if not db.exists():
            return []
        db = f"sqlite:///{db}"
    client = DBOSClient(system_database_url=db, application_name=APP_NAME)
    try:
        steps = client.list_workflow_steps(run_id, load_output=False)
    finally:
        client.destroy()
    return [step["function_name"] for step in sorted(steps, key=lambda s: s["function_id"])]


def own_steps(db: Path | str, run_id: str) -> list[str]:
    """`recorded_steps` without DBOS's own operations (``DBOS.recv``, ``DBOS.sleep``, ...)."""
    return [name for name in recorded_steps(db, run_id) if not name.startswith("DBOS.")]
