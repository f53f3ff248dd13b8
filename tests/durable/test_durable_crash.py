"""Cases 1 and 3 of issue 12: a worker SIGKILLed mid-batch on SQLite, relaunched; the in-flight
call is re-run only when its tool is idempotent. A worker SIGKILLed while its run waits in
``awaiting_approval``, restarted; a decision sent from a third process continues the run."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("dbos", reason="the durable tests need the dbos extra")

from durable_agents import FAST_RESULT, FINAL_ANSWER, SLOW_RESULT
from worker_process import cli as _cli
from worker_process import recorded_steps, start_worker

from statemachine_agent import RunResult, State, ToolResultMessage
from statemachine_agent._protocol import NO_RESULT, assert_valid_history
from statemachine_agent.durable import Client, decode_result

HERE = Path(__file__).resolve().parent
CHILD = HERE / "durable_child.py"
SAFETY_SECONDS = 60.0  # only ends a hung wait; nothing is asserted about time


def _env(side: Path, *, idempotent: bool, slow_seconds: float) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(HERE), env.get("PYTHONPATH", "")])
    env["SMA_SIDE_FILE"] = str(side)
    env["SMA_SLOW_IDEMPOTENT"] = "1" if idempotent else "0"
    env["SMA_SLOW_SECONDS"] = str(slow_seconds)
    return env


def _lines(side: Path) -> list[str]:
    return side.read_text(encoding="utf-8").splitlines() if side.exists() else []


def _relaunch(db: str, run_id: str, side: Path, *, idempotent: bool) -> RunResult:
    """Start the child process again on ``db`` (no slow tool now): it recovers run ``run_id``
    and prints its result, returned decoded."""
    relaunch = subprocess.run(
        [sys.executable, str(CHILD), db, run_id],
        env=_env(side, idempotent=idempotent, slow_seconds=0),
        capture_output=True,
        text=True,
        timeout=SAFETY_SECONDS,
    )
    assert relaunch.returncode == 0, relaunch.stderr
    return decode_result(json.loads(relaunch.stdout.strip().splitlines()[-1]))


def _kill_mid_batch(db_file: Path, side: Path, run_id: str, *, idempotent: bool) -> None:
    """Run ``run_id`` in a worker and SIGKILL it once both tools appended their line and fast's
    result is recorded (slow's is not)."""
    db = f"sqlite:///{db_file}"
    child = subprocess.Popen(
        [sys.executable, str(CHILD), db, run_id],
        env=_env(side, idempotent=idempotent, slow_seconds=60),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        # Kill once both tools have appended their line and fast's result is recorded.
        deadline = time.monotonic() + SAFETY_SECONDS
        while not (
            sorted(_lines(side)) == ["fast", "slow"]
            and "tool:call_fast" in recorded_steps(db_file, run_id)
        ):
            assert child.poll() is None, child.communicate()
            assert time.monotonic() < deadline, "the child never reached the kill point"
            time.sleep(0.01)
        assert "tool:call_slow" not in recorded_steps(db_file, run_id)
        child.send_signal(signal.SIGKILL)
    finally:
        child.kill()
        child.wait()


@pytest.mark.parametrize(
    "idempotent", [False, True], ids=["slow-not-idempotent", "slow-idempotent"]
)
def test_sqlite_worker_killed_mid_batch(tmp_path: Path, idempotent: bool) -> None:
    db_file = tmp_path / "runs.sqlite"
    db = f"sqlite:///{db_file}"
    side = tmp_path / "side-effects.txt"
    run_id = "crash-run"
    _kill_mid_batch(db_file, side, run_id, idempotent=idempotent)
    result = _relaunch(db, run_id, side, idempotent=idempotent)

    assert result.state == State.DONE
    assert result.text == FINAL_ANSWER
    results = {m.tool_name: m for m in result.messages if isinstance(m, ToolResultMessage)}
    assert results["fast"].content[0].text == FAST_RESULT  # type: ignore[union-attr]
    lines = _lines(side)
    assert lines.count("fast") == 1  # fast's recorded step was not run again
    if idempotent:
        assert lines.count("slow") == 2
        assert results["slow"].content[0].text == SLOW_RESULT  # type: ignore[union-attr]
        assert not results["slow"].is_error
    else:
        assert lines.count("slow") == 1
        assert results["slow"].content[0].text == NO_RESULT  # type: ignore[union-attr]
        assert results["slow"].is_error
    assert result.turns == 2
    assert_valid_history(result.messages)


def test_an_abort_sent_while_the_worker_is_dead_stops_the_recovered_idempotent_call_rerunning(
    tmp_path: Path,
) -> None:
    # The worker dies while its idempotent slow call runs; a Client.abort is sent while no
    # worker runs the run. The relaunched worker replays the recorded steps; the slow call's
    # step is then its first step run for real: the abort must reach the run before the tool
    # runs again (it is answered, not re-run), and the run ends aborted.
    db_file = tmp_path / "runs.sqlite"
    db = f"sqlite:///{db_file}"
    side = tmp_path / "side-effects.txt"
    run_id = "crash-abort-run"
    _kill_mid_batch(db_file, side, run_id, idempotent=True)
    client = Client(db)
    try:
        client.abort(run_id, "stop after the crash")
    finally:
        client.close()
    result = _relaunch(db, run_id, side, idempotent=True)
    assert (result.state, result.error) == (State.ABORTED, "stop after the crash")
    lines = _lines(side)
    assert (lines.count("fast"), lines.count("slow")) == (1, 1)  # nothing ran again
    results = {m.tool_name: m for m in result.messages if isinstance(m, ToolResultMessage)}
    assert results["fast"].content[0].text == FAST_RESULT  # type: ignore[union-attr]
    assert results["slow"].is_error
    assert result.text != FINAL_ANSWER
    assert_valid_history(result.messages)


# -- case 3: killed while awaiting approval, decided from a third process ------------------------


def _start_worker(db: str, env: dict[str, str]) -> subprocess.Popen[str]:
    return start_worker(db, "approval-worker", env, "--factory", "durable_agents:approval_agent")


def _stop(worker: subprocess.Popen[str], sig: int) -> None:
    worker.send_signal(sig)
    worker.wait(timeout=SAFETY_SECONDS)


@pytest.mark.parametrize("database", ["sqlite", "postgres"])
def test_killed_while_awaiting_approval_then_approved_from_a_third_process(
    tmp_path: Path, database: str, request: pytest.FixtureRequest
) -> None:
    from durable_agents import DEPLOY_CALL

    from statemachine_agent.durable import Client

    if database == "postgres":
        db = request.getfixturevalue("postgres").url  # skipped, saying why, without binaries
    else:
        db = f"sqlite:///{tmp_path / 'runs.sqlite'}"
    side = tmp_path / "side-effects.txt"
    env = _env(side, idempotent=False, slow_seconds=0)
    run_id = "approval-run"

    first = _start_worker(db, env)
    try:
        submitted = subprocess.run(
            _cli("submit", "--db", db, "--id", run_id, "Deploy to prod."),
            env=env,
            capture_output=True,
            text=True,
            timeout=SAFETY_SECONDS,
        )
        assert submitted.returncode == 0, submitted.stderr
        client = Client(db)
        try:
            deadline = time.monotonic() + SAFETY_SECONDS
            while not client.status(run_id).pending:
                assert first.poll() is None, first.communicate()
                assert time.monotonic() < deadline, "the run never reached awaiting_approval"
                time.sleep(0.05)
        finally:
            client.close()
        assert _lines(side) == ["check prod"]  # the batch's other call ran; deploy waits
        _stop(first, signal.SIGKILL)
    finally:
        first.kill()
        first.wait()

    # While no worker runs, the run is still waiting: status says so from another process.
    status = subprocess.run(
        _cli("status", "--db", db, run_id),
        env=env,
        capture_output=True,
        text=True,
        timeout=SAFETY_SECONDS,
    )
    assert status.returncode == 0, status.stderr
    # ... and that its worker is gone, with the command that hands the run to a live worker.
    host = os.uname().nodename
    assert status.stdout.splitlines()[:4] == [
        f"{run_id}: PENDING (workflow status; worker approval-worker); "
        "the run is in state awaiting_approval, but stalled: worker approval-worker "
        f"(pid {first.pid} on {host}) is not running (its process is gone)",
        f"A worker started on {host} takes its runs over; or hand them to the live workers "
        f"now: statemachine-agent recover --db {db} approval-worker",
        "Awaiting approval:",
        f'  {DEPLOY_CALL}: deploy {{"target": "prod"}} (deploy requires approval)',
    ]

    second = _start_worker(db, env)  # the same executor id: DBOS recovers the run at launch
    try:
        decided = subprocess.run(  # the third process
            _cli("decide", "--db", db, run_id, "--approve", DEPLOY_CALL),
            env=env,
            capture_output=True,
            text=True,
            timeout=SAFETY_SECONDS,
        )
        assert decided.returncode == 0, decided.stderr
        assert decided.stdout.strip() == f"{run_id}: sent 1 decision(s) ({DEPLOY_CALL}: approve)"
        client = Client(db)
        try:
            result = client.result(run_id, timeout_seconds=SAFETY_SECONDS)
            status_after = client.status(run_id)
        finally:
            client.close()
    finally:
        _stop(second, signal.SIGTERM)
    assert second.returncode == 0

    assert status_after.executor_id == "approval-worker"
    assert status_after.pending == ()
    assert result.state == State.DONE
    assert result.text == "Settled: check: prod is healthy; deploy: deployed to prod"
    assert _lines(side) == ["check prod", "deploy prod"]  # each tool ran exactly once
    assert result.turns == 2
    assert_valid_history(result.messages)
