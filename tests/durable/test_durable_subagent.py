"""Issue 37, item 3: under DBOS a sub-agent's model requests and tool calls are steps of the
parent's workflow, named under the call's id; a worker SIGKILLed inside the sub-agent is
relaunched and nothing completed runs again, at either level."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("dbos", reason="the durable tests need the dbos extra")

from durable_subagents import STEPS_AT_THE_KILL, check_recovered_tree, side_lines, worker_env
from worker_process import own_steps

from statemachine_agent.durable import decode_result

HERE = Path(__file__).resolve().parent
CHILD = HERE / "durable_subagent_child.py"
SAFETY_SECONDS = 60.0  # only ends a hung wait; nothing is asserted about time


def test_sub_agent_steps_belong_to_the_parent_workflow_and_survive_a_worker_kill(
    tmp_path: Path,
) -> None:
    db_file = tmp_path / "runs.sqlite"
    db = f"sqlite:///{db_file}"
    side = tmp_path / "side-effects.txt"
    run_id = "subagent-run"
    worker = subprocess.Popen(
        [sys.executable, str(CHILD), db, run_id],
        env=worker_env(side, slow_seconds=60),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        # Kill inside the sub-agent, its wait_here call running (each step before it recorded:
        # a tool runs after its tool_start step, a request after the calls before it).
        deadline = time.monotonic() + SAFETY_SECONDS
        while "wait" not in side_lines(side):
            assert worker.poll() is None, worker.communicate()
            assert time.monotonic() < deadline, "the worker never reached the kill point"
            time.sleep(0.01)
        before = own_steps(db_file, run_id)
        worker.send_signal(signal.SIGKILL)
    finally:
        worker.kill()
        worker.wait()
    # The sub-agent's requests and calls are the parent workflow's steps, under the call's id.
    assert before == STEPS_AT_THE_KILL

    relaunch = subprocess.run(
        [sys.executable, str(CHILD), db, run_id],
        env=worker_env(side, slow_seconds=0),
        capture_output=True,
        text=True,
        timeout=SAFETY_SECONDS,
    )
    assert relaunch.returncode == 0, relaunch.stderr
    result = decode_result(json.loads(relaunch.stdout.strip().splitlines()[-1]))
    check_recovered_tree(result, side_lines(side), before, own_steps(db_file, run_id))
