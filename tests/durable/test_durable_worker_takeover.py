"""Issue 30, item 5 (as a fresh user ran it): ``statemachine-agent worker --db
sqlite:///runs.sqlite -w DIR -m script:steps.json --yes`` (no ``--executor-id``), a run submitted,
the worker SIGKILLed mid-run and the same command started again: the new worker came up with a
new executor id and the run stayed PENDING forever, ``status`` saying "the run is in progress".

Now each worker records itself in the database (executor id, host, pid, process start time); at
start it takes over the runs of the recorded workers of its host whose process is gone, never a
live worker's nor another host's; ``status`` says when a PENDING run's worker is not running or
cannot be checked, with the exact ``recover`` command. Every worker here is a real process,
every kill a real SIGKILL."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("dbos", reason="the durable tests need the dbos extra")

import sqlalchemy as sa
from throwaway_pg import ThrowawayPostgres
from worker_process import cli as _cli
from worker_process import recorded_steps as _recorded_steps

from statemachine_agent import State, ToolCallBlock
from statemachine_agent._protocol import assert_valid_history
from statemachine_agent._worker_registry import TABLE_NAME, engine_for
from statemachine_agent.durable import Client, Liveness

SAFETY_SECONDS = 60.0  # only ends a hung wait; nothing is asserted about time
FINAL_ANSWER = "Wrote both files."
ISSUE_DB = "sqlite:///runs.sqlite"  # as the issue wrote it: relative to the worker's folder


def _write(call_id: str, path: str, content: str, **extra: Any) -> dict[str, Any]:
    return {
        **extra,
        "content": [
            {
                "type": "tool_use",
                "id": call_id,
                "name": "write_file",
                "input": {"path": path, "content": content},
            }
        ],
        "stop_reason": "tool_use",
    }


def _script(*, hold_seconds: float) -> list[dict[str, Any]]:
    """Write one.txt, write two.txt (after ``hold_seconds``: a worker is killed while it waits),
    the final answer."""
    hold = {"delay_seconds": hold_seconds} if hold_seconds else {}
    return [
        _write("d1", "one.txt", "1"),
        _write("d2", "two.txt", "2", **hold),
        {"content": [{"type": "text", "text": FINAL_ANSWER}], "stop_reason": "end_turn"},
    ]


class Folder:
    """A user's folder: ``steps.json``, the workspace ``ws`` and the database the CLI's
    commands use (run from this folder)."""

    def __init__(self, root: Path, db: str = ISSUE_DB) -> None:
        self.root = root
        self.db = db
        self.workspace = root / "ws"
        self.workspace.mkdir()
        self.env = dict(os.environ)

    @property
    def client_db(self) -> str:
        """The database as this test process (another working folder) names it."""
        if self.db == ISSUE_DB:
            return f"sqlite:///{self.root / 'runs.sqlite'}"
        return self.db

    def script(self, steps: list[dict[str, Any]]) -> None:
        (self.root / "steps.json").write_text(json.dumps(steps))

    def worker(self, *extra: str) -> tuple[subprocess.Popen[str], str, list[str]]:
        """The issue's command (no --executor-id), started and waited for; returns the process,
        the executor id it chose and the lines it printed before it served (what it took
        over)."""
        command = [
            *_cli("worker", "--db", self.db, "-w", "ws", "-m", "script:steps.json"),
            *extra,
        ]
        worker = subprocess.Popen(
            command,
            cwd=self.root,
            env=self.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert worker.stdout is not None and worker.stderr is not None
        before: list[str] = []
        for line in worker.stdout:
            words = line.split()
            if words[:1] == ["worker"] and words[2:3] == ["serving"]:
                return worker, words[1], before
            before.append(line.rstrip("\n"))
        worker.wait(timeout=SAFETY_SECONDS)
        pytest.fail(f"the worker ended: {before} {worker.stderr.read()}")

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            _cli(*args),
            cwd=self.root,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=SAFETY_SECONDS,
        )
        assert done.returncode == 0, done.stderr
        return done

    def status(self, run_id: str) -> list[str]:
        return self.cli("status", "--db", self.db, run_id).stdout.splitlines()

    def submit(self, run_id: str) -> None:
        submitted = self.cli("submit", "--db", self.db, "--id", run_id, "Write two files.")
        assert submitted.stdout.strip() == run_id


@pytest.fixture
def workers() -> Iterator[list[subprocess.Popen[str]]]:
    """The worker processes a test starts: stopped (SIGTERM) at its end if still running."""
    started: list[subprocess.Popen[str]] = []
    yield started
    for worker in started:
        if worker.poll() is None:
            worker.send_signal(signal.SIGTERM)
    for worker in started:
        try:
            worker.wait(timeout=30)
        except subprocess.TimeoutExpired:
            worker.kill()
            worker.wait()


def _kill(worker: subprocess.Popen[str]) -> None:
    worker.send_signal(signal.SIGKILL)
    worker.wait(timeout=SAFETY_SECONDS)  # reaped: no zombie keeps its pid
    assert worker.returncode == -signal.SIGKILL


def _wait_for_step(folder: Folder, worker: subprocess.Popen[str], run_id: str, step: str) -> None:
    """Until the run's step ``step`` is recorded (polling the file; the deadline only ends a
    hung wait)."""
    db_file = folder.root / "runs.sqlite"
    deadline = time.monotonic() + SAFETY_SECONDS
    while step not in _recorded_steps(db_file, run_id):
        assert worker.poll() is None, worker.communicate()
        assert time.monotonic() < deadline, f"the run never recorded {step}"
        time.sleep(0.02)


def _registry(db: str, executor_id: str, **values: Any) -> dict[str, Any]:
    """The registry row of ``executor_id`` (after setting ``values`` in it, if any)."""
    engine = engine_for(db)
    table = sa.Table(TABLE_NAME, sa.MetaData(), autoload_with=engine)
    try:
        with engine.begin() as connection:
            if values:
                connection.execute(
                    sa.update(table).where(table.c.executor_id == executor_id).values(**values)
                )
            row = connection.execute(
                sa.select(table).where(table.c.executor_id == executor_id)
            ).one()
    finally:
        engine.dispose()
    return dict(row._mapping)


def _result(folder: Folder, run_id: str) -> Any:
    client = Client(folder.client_db)
    try:
        return client.result(run_id, timeout_seconds=SAFETY_SECONDS)
    finally:
        client.close()


def _run_status(folder: Folder, run_id: str) -> Any:
    client = Client(folder.client_db)
    try:
        return client.status(run_id)
    finally:
        client.close()


def _pending(folder: Folder, run_id: str) -> tuple[Any, ...]:
    """The calls ``run_id`` waits for decisions on, waiting until it waits."""
    client = Client(folder.client_db)
    try:
        return client.pending(run_id, wait_seconds=SAFETY_SECONDS)
    finally:
        client.close()


def _approve_each(folder: Folder, run_id: str) -> None:
    """Approve the run's two writes, each once it waits for it (polling its pending calls;
    the deadline only ends a hung wait)."""
    for call_id in ("d1", "d2"):
        deadline = time.monotonic() + SAFETY_SECONDS
        while [c.id for c in _pending(folder, run_id)] != [call_id]:
            assert time.monotonic() < deadline, f"{run_id} never waited for {call_id}"
            time.sleep(0.05)
        folder.cli("decide", "--db", folder.db, run_id, "--approve", call_id)


def _assert_done_once(folder: Folder, result: Any, run_id: str) -> None:
    assert (result.state, result.error, result.text) == (State.DONE, None, FINAL_ANSWER)
    calls = [b.id for m in result.messages for b in m.content if isinstance(b, ToolCallBlock)]
    assert calls == ["d1", "d2"]  # each script step answered once, none played again
    assert result.turns == 3
    assert_valid_history(result.messages)
    assert (folder.workspace / "one.txt").read_text() == "1"
    assert (folder.workspace / "two.txt").read_text() == "2"


# -- the issue's case ------------------------------------------------------------------------


def test_the_issue_command_started_again_takes_over_the_run_its_killed_predecessor_left(
    tmp_path: Path, workers: list[subprocess.Popen[str]]
) -> None:
    folder = Folder(tmp_path)
    folder.script(_script(hold_seconds=3600))  # the first worker is killed while it holds
    first, first_id, _ = folder.worker("--yes")
    workers.append(first)
    folder.submit("script-run")
    _wait_for_step(folder, first, "script-run", "tool:d1")
    _kill(first)

    # The dead worker's run: status says it is stalled and how to recover it now.
    assert folder.status("script-run") == [
        f"script-run: PENDING (workflow status; worker {first_id}); the run is in progress, "
        f"but stalled: worker {first_id} (pid {first.pid} on {os.uname().nodename}) is not "
        "running (its process is gone)",
        f"A worker started on {os.uname().nodename} takes its runs over; or hand them to the "
        f"live workers now: statemachine-agent recover --db {ISSUE_DB} {first_id}",
    ]

    folder.script(_script(hold_seconds=0))
    second, second_id, took = folder.worker("--yes")  # the same command: a new executor id
    workers.append(second)
    assert second_id != first_id
    assert took == [
        f"worker {second_id} took over 1 run(s) of gone worker(s) {first_id}: script-run"
    ]
    result = _result(folder, "script-run")

    _assert_done_once(folder, result, "script-run")
    steps = _recorded_steps(tmp_path / "runs.sqlite", "script-run")
    # Three model requests in the whole run, each tool call run once, all recorded once.
    assert (steps.count("model_request"), steps.count("tool:d1"), steps.count("tool:d2")) == (
        3,
        1,
        1,
    )
    assert folder.status("script-run") == [
        f"script-run: SUCCESS (workflow status; worker {second_id}); "
        "the run ended in state done after 3 turn(s)",
        FINAL_ANSWER,
    ]
    record = _registry(folder.client_db, first_id)
    assert (record["state"], record["taken_over_by"]) == ("gone", second_id)


# -- a live worker's runs are never taken ---------------------------------------------------


def test_a_worker_started_beside_a_live_one_does_not_take_its_runs(
    tmp_path: Path, workers: list[subprocess.Popen[str]]
) -> None:
    # Without --yes each write waits in awaiting_approval: a run held by a live worker, with no
    # timing involved.
    folder = Folder(tmp_path)
    folder.script(_script(hold_seconds=0))
    first, first_id, _ = folder.worker()
    workers.append(first)
    folder.submit("run-1")
    assert [c.id for c in _pending(folder, "run-1")] == ["d1"]

    second, second_id, took = folder.worker()  # launched: any takeover is done by now
    workers.append(second)
    assert (second_id != first_id, took) == (True, [])
    record = _registry(folder.client_db, first_id)
    assert (record["state"], record["taken_over_by"]) == ("serving", None)
    status = _run_status(folder, "run-1")
    assert (status.status, status.executor_id) == ("PENDING", first_id)
    assert status.worker is not None and status.worker.liveness is Liveness.ALIVE
    assert folder.status("run-1")[0] == (
        f"run-1: PENDING (workflow status; worker {first_id}); the run is in state "
        "awaiting_approval"
    )

    folder.submit("run-2")
    for run_id in ("run-1", "run-2"):
        _approve_each(folder, run_id)
        result = _result(folder, run_id)
        _assert_done_once(folder, result, run_id)
        steps = _recorded_steps(tmp_path / "runs.sqlite", run_id)
        assert (steps.count("model_request"), steps.count("tool:d1"), steps.count("tool:d2")) == (
            3,
            1,
            1,
        )
    assert _run_status(folder, "run-1").executor_id == first_id  # never handed over
    assert first.poll() is None and second.poll() is None


# -- a worker on another host: status says how to recover by hand ------------------------------


def test_status_of_a_run_whose_worker_is_on_another_host_prints_the_recover_command(
    tmp_path: Path, workers: list[subprocess.Popen[str]]
) -> None:
    folder = Folder(tmp_path)
    folder.script(_script(hold_seconds=0))
    first, first_id, _ = folder.worker()
    workers.append(first)
    folder.submit("far-run")
    assert [c.id for c in _pending(folder, "far-run")] == ["d1"]
    _kill(first)
    # As if it had run on another machine: this one cannot see its process.
    _registry(folder.client_db, first_id, hostname="far-host", host_key="far-host|x|y")

    assert folder.status("far-run")[:2] == [
        f"far-run: PENDING (workflow status; worker {first_id}); the run is in state "
        f"awaiting_approval, if worker {first_id} (pid {first.pid} on far-host) is alive: this "
        "machine cannot tell, it runs on another host",
        "If that worker is dead, hand its runs to the live workers: "
        f"statemachine-agent recover --db {ISSUE_DB} {first_id}",
    ]
    second, _second_id, took = folder.worker()
    workers.append(second)
    assert took == []
    assert _registry(folder.client_db, first_id)["state"] == "serving"  # not taken over
    assert _run_status(folder, "far-run").executor_id == first_id

    recovered = folder.cli("recover", "--db", ISSUE_DB, first_id)
    assert recovered.stdout.splitlines() == ["put 1 run(s) back on the queue", "far-run"]
    assert _registry(folder.client_db, first_id)["state"] == "gone"
    _approve_each(folder, "far-run")
    _assert_done_once(folder, _result(folder, "far-run"), "far-run")


@pytest.mark.parametrize("registry", ["no-record", "no-table"])
def test_status_of_a_run_whose_worker_never_registered_prints_the_recover_command(
    tmp_path: Path, workers: list[subprocess.Popen[str]], registry: str
) -> None:
    folder = Folder(tmp_path)
    folder.script(_script(hold_seconds=0))
    first, first_id, _ = folder.worker()
    workers.append(first)
    folder.submit("old-run")
    assert [c.id for c in _pending(folder, "old-run")] == ["d1"]
    _kill(first)
    engine = engine_for(folder.client_db)
    try:
        with engine.begin() as connection:  # a worker of a release without the registry
            verb = "DELETE FROM" if registry == "no-record" else "DROP TABLE"
            connection.execute(sa.text(f"{verb} {TABLE_NAME}"))
    finally:
        engine.dispose()

    assert folder.status("old-run")[:2] == [
        f"old-run: PENDING (workflow status; worker {first_id}); the run is in state "
        f"awaiting_approval, if worker {first_id} is alive: it is not in the worker registry, "
        "so whether it runs is unknown",
        "If that worker is dead, hand its runs to the live workers: "
        f"statemachine-agent recover --db {ISSUE_DB} {first_id}",
    ]


# -- a pid the kernel gave to another process is not the worker ---------------------------------


@pytest.fixture(params=["sqlite", "postgres"])
def database(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return ISSUE_DB
    server: ThrowawayPostgres = request.getfixturevalue("postgres")
    return server.url


def test_a_dead_worker_whose_pid_now_runs_another_process_is_taken_over(
    tmp_path: Path, workers: list[subprocess.Popen[str]], database: str
) -> None:
    folder = Folder(tmp_path, database)
    folder.script(_script(hold_seconds=0))
    first, first_id, _ = folder.worker()
    workers.append(first)
    folder.submit("reused-pid-run")
    assert [c.id for c in _pending(folder, "reused-pid-run")] == ["d1"]
    _kill(first)
    # The kernel gave the dead worker's pid to a live process (this one), started at another
    # time: the record's start time tells them apart.
    _registry(folder.client_db, first_id, pid=os.getpid())

    second, second_id, took = folder.worker()
    workers.append(second)
    assert took == [
        f"worker {second_id} took over 1 run(s) of gone worker(s) {first_id}: reused-pid-run"
    ]
    _approve_each(folder, "reused-pid-run")
    _assert_done_once(folder, _result(folder, "reused-pid-run"), "reused-pid-run")
    assert _run_status(folder, "reused-pid-run").executor_id == second_id
