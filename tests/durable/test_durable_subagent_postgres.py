"""Issue 37, item 3 on PostgreSQL: a real worker process SIGKILLed while a sub-agent's tool call
runs, another real worker (another executor id) takes the run over, and nothing completed runs
again at either level; the protocol is kept at both levels. The test learns that the call runs
from a named pipe the tool writes to (an event, no polling)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("dbos", reason="the durable tests need the dbos extra")

from durable_subagents import STEPS_AT_THE_KILL, check_recovered_tree, side_lines, worker_env
from throwaway_pg import ThrowawayPostgres
from worker_process import own_steps

from statemachine_agent.durable import Client

HERE = Path(__file__).resolve().parent
WORKER = HERE / "durable_subagent_worker.py"
SAFETY_SECONDS = 60.0  # only ends a hung wait; nothing is asserted about time
RUN_ID = "pg-subagent-run"


@pytest.fixture
def workers() -> Iterator[list[subprocess.Popen[str]]]:
    """The worker processes a test starts: killed at its end if still running."""
    started: list[subprocess.Popen[str]] = []
    yield started
    for worker in started:
        if worker.poll() is None:
            worker.kill()
        worker.wait(timeout=SAFETY_SECONDS)


def _start(db: str, executor_id: str, env: dict[str, str]) -> tuple[subprocess.Popen[str], str]:
    """A worker process, returned once it serves, with the run ids it took over."""
    worker = subprocess.Popen(
        [sys.executable, str(WORKER), db, executor_id],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert worker.stdout is not None and worker.stderr is not None
    line = worker.stdout.readline()
    if not line:
        worker.wait(timeout=SAFETY_SECONDS)
        pytest.fail(f"worker {executor_id} ended: {worker.stderr.read()}")
    prefix = f"worker {executor_id} serving; took over:"
    assert line.startswith(prefix), line
    return worker, line[len(prefix) :].strip()


def test_a_worker_killed_inside_a_sub_agent_on_postgres_is_taken_over_by_another_worker(
    tmp_path: Path, postgres: ThrowawayPostgres, workers: list[subprocess.Popen[str]]
) -> None:
    db = postgres.url
    side = tmp_path / "side-effects.txt"
    fifo = tmp_path / "ready.fifo"
    os.mkfifo(fifo)
    first, took = _start(db, "pg-worker-a", worker_env(side, 3600, fifo))
    workers.append(first)
    assert took == ""
    client = Client(db)
    try:
        assert client.submit("Research otters.", run_id=RUN_ID) == RUN_ID
        # Inside the sub-agent, its wait_here call running: the tool says so through the pipe.
        with fifo.open(encoding="utf-8") as ready:
            assert ready.readline() == "wait\n"
        before = own_steps(db, RUN_ID)
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=SAFETY_SECONDS)
        assert first.returncode == -signal.SIGKILL
        # The sub-agent's requests and calls are the parent workflow's steps, under the call id.
        assert before == STEPS_AT_THE_KILL

        second, took = _start(db, "pg-worker-b", worker_env(side, 0))
        workers.append(second)
        assert took == RUN_ID  # the gone worker's run, taken over by this one
        result = client.result(RUN_ID, timeout_seconds=SAFETY_SECONDS)
        status = client.status(RUN_ID)
    finally:
        client.close()

    assert status.executor_id == "pg-worker-b"
    check_recovered_tree(result, side_lines(side), before, own_steps(db, RUN_ID))
