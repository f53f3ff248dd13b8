"""Case 3 of issue 33: the durable set-up as the README documents it, each command run as a
process.

- ``--factory myapp.agents:make_agent`` resolves from the working folder, as ``python -m`` would,
  also when the CLI is the installed ``statemachine-agent`` script (whose ``sys.path`` lacks the
  working folder; ``python -P`` starts it the same way);
- a database a command cannot use (a role or database missing on a throwaway Postgres, a closed
  port, a SQLite path in a missing folder) is one ``Error:`` line naming the URL's role or
  database and what to create, exit code 2, no traceback, never the URL's password;
- the built-in worker without ``--yes`` defers a gated call (``awaiting_approval``, shown by
  ``status``, decided by ``decide`` from another process), and ``--deny-unapproved`` denies it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("dbos", reason="the durable tests need the dbos extra")

import psycopg  # the Postgres driver DBOS uses (installed with it)
from throwaway_pg import INSTALL_HINT, ThrowawayPostgres, _free_port, bin_dir
from worker_process import cli, start_worker

from statemachine_agent import State, ToolResultMessage
from statemachine_agent.durable import Client

SAFETY_SECONDS = 60.0  # only ends a hung wait; nothing is asserted about time
PASSWORD = "s3cret-Pw"  # must never be printed


def _run(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        cli(*args), cwd=cwd, capture_output=True, text=True, timeout=SAFETY_SECONDS, check=False
    )


def _stop(worker: subprocess.Popen[str]) -> None:
    worker.send_signal(signal.SIGTERM)
    try:
        worker.wait(timeout=SAFETY_SECONDS)
    finally:
        worker.kill()
        worker.wait()


# -- (a) the factory resolves from the working folder ---------------------------------------------

FACTORY_SOURCE = """
from statemachine_agent import Agent
from statemachine_agent.models import FunctionModel


def make_agent() -> Agent:
    return Agent(FunctionModel(lambda messages, request: "hello from myapp"))
"""


def _installed_script() -> list[str]:
    script = Path(sys.executable).parent / "statemachine-agent"
    if not script.exists():
        pytest.skip(f"no installed statemachine-agent script next to {sys.executable}")
    return [str(script)]


LAUNCHERS = {
    # python -P: no working folder on sys.path, as in the installed console script
    "python -P -m": lambda: [sys.executable, "-P", "-m", "statemachine_agent"],
    "statemachine-agent script": _installed_script,
}


@pytest.mark.parametrize("launcher", sorted(LAUNCHERS))
def test_factory_resolves_from_the_working_folder_as_python_m_would(
    tmp_path: Path, launcher: str
) -> None:
    project = tmp_path / "project"
    (project / "myapp").mkdir(parents=True)
    (project / "myapp" / "__init__.py").write_text("")
    (project / "myapp" / "agents.py").write_text(FACTORY_SOURCE)
    command = LAUNCHERS[launcher]()
    db = f"sqlite:///{tmp_path / 'runs.sqlite'}"
    env = dict(os.environ)  # PYTHONPATH names this checkout only, never the project folder
    assert str(project) not in env.get("PYTHONPATH", "")

    elsewhere = subprocess.run(
        [*command, "worker", "--db", db, "--factory", "myapp.agents:make_agent"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=SAFETY_SECONDS,
        check=False,
    )
    assert elsewhere.returncode == 2
    assert "No module named 'myapp'" in elsewhere.stderr
    assert f"from the working folder {tmp_path}" in elsewhere.stderr
    assert "Traceback" not in elsewhere.stderr

    worker = start_worker(
        db,
        "factory-worker",
        env,
        "--factory",
        "myapp.agents:make_agent",
        cwd=project,
        launcher=command,
    )
    try:
        submitted = _run("submit", "--db", db, "--id", "r-factory", "Hello?")
        assert (submitted.returncode, submitted.stdout.strip()) == (0, "r-factory")
        client = Client(db)
        try:
            result = client.result("r-factory", timeout_seconds=SAFETY_SECONDS)
        finally:
            client.close()
    finally:
        _stop(worker)
    assert (result.state, result.text) == (State.DONE, "hello from myapp")


def test_factory_in_the_working_folder_wins_over_a_same_named_package_on_sys_path(
    tmp_path: Path,
) -> None:
    # python -m puts the working folder FIRST on sys.path: a `myapp` elsewhere on the path
    # (PYTHONPATH here; an installed package alike) does not shadow the project's own.
    project, other = tmp_path / "project", tmp_path / "other"
    for root, said in ((project, "hello from myapp"), (other, "hello from the other myapp")):
        (root / "myapp").mkdir(parents=True)
        (root / "myapp" / "__init__.py").write_text("")
        (root / "myapp" / "agents.py").write_text(FACTORY_SOURCE.replace("hello from myapp", said))
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(other), env.get("PYTHONPATH")]))
    db = f"sqlite:///{tmp_path / 'runs.sqlite'}"
    worker = start_worker(
        db,
        "shadow-worker",
        env,
        "--factory",
        "myapp.agents:make_agent",
        cwd=project,
        launcher=LAUNCHERS["python -P -m"](),
    )
    try:
        submitted = _run("submit", "--db", db, "--id", "r-shadow", "Hello?")
        assert (submitted.returncode, submitted.stdout.strip()) == (0, "r-shadow")
        client = Client(db)
        try:
            result = client.result("r-shadow", timeout_seconds=SAFETY_SECONDS)
        finally:
            client.close()
    finally:
        _stop(worker)
    assert (result.state, result.text) == (State.DONE, "hello from myapp")


# -- (b) a database a command cannot use: one line, exit code 2 ------------------------------------

COMMANDS = {
    "worker": ("worker", "--model", "script:{script}"),
    "submit": ("submit", "Hello?"),
    "status": ("status", "r1"),
    "decide": ("decide", "r1", "--all"),
    "recover": ("recover", "worker-1"),
}


@pytest.fixture(scope="module")
def server() -> Iterator[ThrowawayPostgres]:
    """One throwaway server for the module, with a role that may not create databases."""
    binaries = bin_dir()
    if binaries is None:
        pytest.skip(
            f"no PostgreSQL binaries (initdb, pg_ctl) on PATH or in /usr/lib/postgresql: "
            f"{INSTALL_HINT}"
        )
    pg = ThrowawayPostgres(binaries)
    try:
        pg.start()
        maintenance = pg.url.rsplit("/", 1)[0] + "/postgres"
        with psycopg.connect(maintenance, autocommit=True) as conn:
            conn.execute("CREATE ROLE nocreate LOGIN")
        yield pg
    finally:
        pg.stop()


def _one_error_line(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert done.stdout == ""
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("Error: ")
    assert PASSWORD not in done.stderr
    return lines[0]


def _command(name: str, db: str, tmp_path: Path) -> list[str]:
    script = tmp_path / "script.json"
    script.write_text(json.dumps([{"content": [{"type": "text", "text": "hi"}]}]))
    first, *rest = COMMANDS[name]
    return [first, "--db", db, *(arg.format(script=script) for arg in rest)]


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_a_missing_postgres_role_is_one_line_naming_the_role_to_create(
    tmp_path: Path, server: ThrowawayPostgres, command: str
) -> None:
    db = f"postgresql://agents:{PASSWORD}@127.0.0.1:{server.port}/agents"
    line = _one_error_line(_run(*_command(command, db, tmp_path), cwd=tmp_path))
    assert f'the Postgres server at 127.0.0.1:{server.port} has no role "agents"' in line
    assert "createuser --createdb agents" in line
    assert 'CREATE ROLE "agents" LOGIN CREATEDB;' in line
    assert f"postgresql://agents:***@127.0.0.1:{server.port}/agents" in line


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_a_closed_port_is_one_line_naming_host_and_port(tmp_path: Path, command: str) -> None:
    port = _free_port()  # nothing listens there
    db = f"postgresql://agents:{PASSWORD}@127.0.0.1:{port}/agents"
    line = _one_error_line(_run(*_command(command, db, tmp_path), cwd=tmp_path))
    assert f"no Postgres server accepts connections at 127.0.0.1:{port}" in line
    assert "start the server, or fix the host and port" in line


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_a_missing_database_is_one_line_naming_the_database_to_create(
    tmp_path: Path, server: ThrowawayPostgres, command: str
) -> None:
    # The worker creates a missing database when its role may: "nocreate" may not.
    role = "nocreate" if command in ("worker", "recover") else "postgres"
    db = f"postgresql://{role}:{PASSWORD}@127.0.0.1:{server.port}/missing_{command}"
    line = _one_error_line(_run(*_command(command, db, tmp_path), cwd=tmp_path))
    assert f"createdb -O {role} missing_{command}" in line
    if role == "nocreate":
        assert f'role "nocreate" may not create database "missing_{command}"' in line
        assert 'ALTER ROLE "nocreate" CREATEDB;' in line
    else:
        assert f'has no database "missing_{command}"' in line
        assert "start a worker with this --db first" in line


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_a_sqlite_path_in_a_missing_folder_is_one_line_naming_the_folder(
    tmp_path: Path, command: str
) -> None:
    folder = tmp_path / "no-such-folder"
    db = f"sqlite:///{folder / 'runs.sqlite'}"
    line = _one_error_line(_run(*_command(command, db, tmp_path), cwd=tmp_path))
    assert str(folder / "runs.sqlite") in line
    if command in ("worker", "recover"):  # they create the file
        assert f"its folder {folder} does not exist; create it (mkdir -p {folder})" in line
    else:  # a client never creates it
        assert "start a worker with this --db first" in line
    assert not folder.exists()


def test_a_database_without_tables_tells_to_start_a_worker_first(
    tmp_path: Path, server: ThrowawayPostgres
) -> None:
    maintenance = server.url.rsplit("/", 1)[0] + "/postgres"
    with psycopg.connect(maintenance, autocommit=True) as conn:
        conn.execute("CREATE DATABASE empty_db")
    db = f"postgresql://postgres:{PASSWORD}@127.0.0.1:{server.port}/empty_db"
    line = _one_error_line(_run("status", "--db", db, "r1", cwd=tmp_path))
    assert 'database "empty_db" has no DBOS tables yet' in line
    assert "start a worker with this --db first" in line


# -- (c) the built-in worker defers gated calls --------------------------------------------------


def _gated_script(tmp_path: Path, call: dict[str, object]) -> Path:
    script = tmp_path / "script.json"
    script.write_text(
        json.dumps(
            [
                {"content": [{"type": "tool_use", **call}], "stop_reason": "tool_use"},
                {"content": [{"type": "text", "text": "Finished."}], "stop_reason": "end_turn"},
            ]
        )
    )
    return script


def test_the_builtin_worker_defers_a_gated_call_until_decide_approves_it(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    command = "echo ran >> ran.txt"
    call = {"id": "c1", "name": "run_command", "input": {"command": command}}
    script = _gated_script(tmp_path, call)
    db = f"sqlite:///{tmp_path / 'runs.sqlite'}"
    worker = start_worker(
        db, "defer-worker", dict(os.environ), "-w", str(workspace), "-m", f"script:{script}"
    )
    try:
        submitted = _run("submit", "--db", db, "--id", "r-defer", "Run it.")
        assert submitted.returncode == 0, submitted.stderr
        client = Client(db)
        try:
            calls = client.pending("r-defer", wait_seconds=SAFETY_SECONDS)  # once it waits
            assert [(c.id, c.tool_name, c.arguments) for c in calls] == [
                ("c1", "run_command", {"command": command})
            ]
            assert not (workspace / "ran.txt").exists()
            status = _run("status", "--db", db, "r-defer")
            assert status.returncode == 0, status.stderr
            lines = status.stdout.splitlines()
            assert lines[0] == (
                "r-defer: PENDING (workflow status; worker defer-worker); "
                "the run is in state awaiting_approval"
            )
            assert lines[1] == "Awaiting approval:"
            assert lines[2].startswith(f"  c1: run_command {json.dumps({'command': command})} (")
            as_json = json.loads(_run("status", "--db", db, "--json", "r-defer").stdout)
            assert [p["id"] for p in as_json["pending"]] == ["c1"]

            decided = _run("decide", "--db", db, "r-defer", "--approve", "c1")
            assert decided.returncode == 0, decided.stderr
            result = client.result("r-defer", timeout_seconds=SAFETY_SECONDS)
        finally:
            client.close()
    finally:
        _stop(worker)
    assert (result.state, result.text) == (State.DONE, "Finished.")
    assert (workspace / "ran.txt").read_text() == "ran\n"  # the call ran once
    results = [m for m in result.messages if isinstance(m, ToolResultMessage)]
    assert [(r.tool_call_id, r.is_error) for r in results] == [("c1", False)]
    final = _run("status", "--db", db, "r-defer")
    assert final.stdout.splitlines()[0] == (
        "r-defer: SUCCESS (workflow status; worker defer-worker); "
        "the run ended in state done after 2 turn(s)"
    )


def test_the_builtin_worker_with_deny_unapproved_denies_gated_calls(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    call = {"id": "w1", "name": "write_file", "input": {"path": "out.txt", "content": "x\n"}}
    script = _gated_script(tmp_path, call)
    db = f"sqlite:///{tmp_path / 'runs.sqlite'}"
    worker = start_worker(
        db,
        "deny-worker",
        dict(os.environ),
        "-w",
        str(workspace),
        "-m",
        f"script:{script}",
        "--deny-unapproved",
    )
    try:
        submitted = _run("submit", "--db", db, "--id", "r-deny", "Write it.")
        assert submitted.returncode == 0, submitted.stderr
        client = Client(db)
        try:
            result = client.result("r-deny", timeout_seconds=SAFETY_SECONDS)
        finally:
            client.close()
    finally:
        _stop(worker)
    assert (result.state, result.text) == (State.DONE, "Finished.")
    assert not (workspace / "out.txt").exists()
    results = [m for m in result.messages if isinstance(m, ToolResultMessage)]
    assert [(r.tool_call_id, r.is_error) for r in results] == [("w1", True)]
    assert "The worker's operator can allow it with --yes" in results[0].text


def test_yes_and_deny_unapproved_together_are_refused(tmp_path: Path) -> None:
    script = _gated_script(tmp_path, {"id": "c1", "name": "list_files", "input": {}})
    db = f"sqlite:///{tmp_path / 'runs.sqlite'}"
    done = _run(
        "worker", "--db", db, "-m", f"script:{script}", "--yes", "--deny-unapproved", cwd=tmp_path
    )
    assert done.returncode == 2
    assert "--yes allows what --deny-unapproved denies: give one of them" in done.stderr
    assert not (tmp_path / "runs.sqlite").exists()
