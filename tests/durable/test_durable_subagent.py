"""Issue 37, item 3: under DBOS a sub-agent's model requests and tool calls are steps of the
parent's workflow, named under the call's id; a worker SIGKILLed inside the sub-agent is
relaunched and nothing completed runs again, at either level."""

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

from durable_subagents import CHILD_ANSWER, PARENT_ANSWER

from statemachine_agent import State, ToolResultMessage
from statemachine_agent.durable import decode_result
from statemachine_agent.testing import assert_valid_history

HERE = Path(__file__).resolve().parent
CHILD = HERE / "durable_subagent_child.py"
SAFETY_SECONDS = 60.0  # only ends a hung wait; nothing is asserted about time


def _env(side: Path, slow_seconds: float) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(HERE), env.get("PYTHONPATH", "")])
    env["SMA_SIDE_FILE"] = str(side)
    env["SMA_SLOW_SECONDS"] = str(slow_seconds)
    return env


def _steps(db_file: Path, run_id: str) -> list[str]:
    """The run's recorded step names, in the workflow's order (read straight from the file)."""
    import sqlite3

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
    return [row[0] for row in rows if not row[0].startswith("DBOS.")]  # not DBOS's own


def _lines(side: Path) -> list[str]:
    return side.read_text(encoding="utf-8").splitlines() if side.exists() else []


def test_sub_agent_steps_belong_to_the_parent_workflow_and_survive_a_worker_kill(
    tmp_path: Path,
) -> None:
    db_file = tmp_path / "runs.sqlite"
    db = f"sqlite:///{db_file}"
    side = tmp_path / "side-effects.txt"
    run_id = "subagent-run"
    worker = subprocess.Popen(
        [sys.executable, str(CHILD), db, run_id],
        env=_env(side, slow_seconds=60),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        # Kill inside the sub-agent, its wait_here call running (each step before it recorded:
        # a tool runs after its tool_start step, a request after the calls before it).
        deadline = time.monotonic() + SAFETY_SECONDS
        while "wait" not in _lines(side):
            assert worker.poll() is None, worker.communicate()
            assert time.monotonic() < deadline, "the worker never reached the kill point"
            time.sleep(0.01)
        before = _steps(db_file, run_id)
        worker.send_signal(signal.SIGKILL)
    finally:
        worker.kill()
        worker.wait()
    # The sub-agent's requests and calls are the parent workflow's steps, under the call's id.
    assert before == [
        "model_request",
        "p1/model_request",
        "p1/tool_start:c1",
        "p1/tool:c1",
        "p1/model_request",
        "p1/tool_start:c2",
    ]

    relaunch = subprocess.run(
        [sys.executable, str(CHILD), db, run_id],
        env=_env(side, slow_seconds=0),
        capture_output=True,
        text=True,
        timeout=SAFETY_SECONDS,
    )
    assert relaunch.returncode == 0, relaunch.stderr
    result = decode_result(json.loads(relaunch.stdout.strip().splitlines()[-1]))
    assert result.state == State.DONE
    assert result.text == PARENT_ANSWER
    research = next(m for m in result.messages if isinstance(m, ToolResultMessage))
    assert research.text == CHILD_ANSWER and not research.is_error
    lines = _lines(side)
    # Nothing completed ran again: 1 parent request before the kill and 1 after; the
    # sub-agent's 2 before and 1 after; note once; wait_here (in flight, not idempotent) once.
    assert lines.count("parent_model") == 2
    assert lines.count("child_model") == 3
    assert lines.count("note") == 1
    assert lines.count("wait") == 1
    after = _steps(db_file, run_id)
    assert after[: len(before)] == before
    assert after[len(before) :] == ["p1/tool:c2", "p1/model_request", "model_request"]
    # The sub-agent's in-flight call (not idempotent) was answered "no result", not re-run.
    assert "c2 answered: error" in lines
    assert_valid_history(result.messages)
