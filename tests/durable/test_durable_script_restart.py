"""Issue 30, item 5: a ``script:FILE`` worker SIGKILLed mid-run and started again continues the
script after its last recorded step (it used to play it from step 1 and fail on a reused
tool-call id), and ``status`` names the workflow status and the run state apart (it printed
"SUCCESS ..., state failed")."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("dbos", reason="the durable tests need the dbos extra")

from click.testing import CliRunner
from dbos import DBOS
from worker_process import cli as _cli
from worker_process import recorded_steps as _recorded_steps
from worker_process import start_worker

from statemachine_agent import (
    Agent,
    AssistantMessage,
    Compaction,
    ModelError,
    State,
    TextBlock,
    ToolCallBlock,
    UserMessage,
)
from statemachine_agent._protocol import assert_valid_history
from statemachine_agent.cli._durable import status_command
from statemachine_agent.durable import Client, decode_result, launch, run, shutdown
from statemachine_agent.models import FunctionModel, ScriptedModel
from statemachine_agent.testing.steps import text_response

SAFETY_SECONDS = 60.0  # only ends a hung wait; nothing is asserted about time
WORKER = "script-worker"
FINAL_ANSWER = "Wrote both files."
OVERLOADED = {"error": {"type": "overloaded_error", "message": "Overloaded"}, "status_code": 529}


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


def _script(*, first_overloaded: bool, hold_seconds: float) -> list[dict[str, Any]]:
    """The script: (an overload the engine retries,) write one.txt, write two.txt (after
    ``hold_seconds``: the first worker is killed while it waits), the final answer."""
    steps = [OVERLOADED] if first_overloaded else []
    hold = {"delay_seconds": hold_seconds} if hold_seconds else {}
    return [
        *steps,
        _write("d1", "one.txt", "1"),
        _write("d2", "two.txt", "2", **hold),
        {"content": [{"type": "text", "text": FINAL_ANSWER}], "stop_reason": "end_turn"},
    ]


def _status_lines(db: str, run_id: str, env: dict[str, str]) -> list[str]:
    status = subprocess.run(
        _cli("status", "--db", db, run_id),
        env=env,
        capture_output=True,
        text=True,
        timeout=SAFETY_SECONDS,
    )
    assert status.returncode == 0, status.stderr
    return status.stdout.splitlines()


@pytest.mark.parametrize("first_overloaded", [False, True], ids=["plain", "retried-overload"])
def test_a_script_worker_killed_mid_run_continues_after_its_last_recorded_step(
    tmp_path: Path, first_overloaded: bool
) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    script = tmp_path / "steps.json"
    # The first worker holds step "write two.txt" for an hour: it is killed while it waits.
    script.write_text(json.dumps(_script(first_overloaded=first_overloaded, hold_seconds=3600)))
    db_file = tmp_path / "runs.sqlite"
    db = f"sqlite:///{db_file}"
    env = dict(os.environ)
    options = ("-w", str(workspace), "-m", f"script:{script}", "--yes")
    run_id = "script-run"

    first = start_worker(db, WORKER, env, *options)
    try:
        submitted = subprocess.run(
            _cli("submit", "--db", db, "--id", run_id, "Write two files."),
            env=env,
            capture_output=True,
            text=True,
            timeout=SAFETY_SECONDS,
        )
        assert (submitted.returncode, submitted.stdout.strip()) == (0, run_id), submitted.stderr
        # Kill once the first tool call's result is recorded: the run is asking for step
        # "write two.txt", which the script holds.
        deadline = time.monotonic() + SAFETY_SECONDS
        while "tool:d1" not in _recorded_steps(db_file, run_id):
            assert first.poll() is None, first.communicate()
            assert time.monotonic() < deadline, "the run never reached the kill point"
            time.sleep(0.02)
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=SAFETY_SECONDS)
    finally:
        first.kill()
        first.wait()
    assert first.returncode == -signal.SIGKILL
    assert _recorded_steps(db_file, run_id).count("model_request") == 1
    host = os.uname().nodename
    assert _status_lines(db, run_id, env) == [
        f"{run_id}: PENDING (workflow status; worker {WORKER}); the run is in progress, but "
        f"stalled: worker {WORKER} (pid {first.pid} on {host}) is not running (its process is "
        "gone)",
        f"A worker started on {host} takes its runs over; or hand them to the live workers "
        f"now: statemachine-agent recover --db {db} {WORKER}",
    ]

    # The same script without the hold (each run reads the script when it starts).
    script.write_text(json.dumps(_script(first_overloaded=first_overloaded, hold_seconds=0)))
    second = start_worker(db, WORKER, env, *options)  # same id: DBOS recovers the run
    try:
        client = Client(db)
        try:
            result = client.result(run_id, timeout_seconds=SAFETY_SECONDS)
        finally:
            client.close()
        lines = _status_lines(db, run_id, env)
    finally:
        second.send_signal(signal.SIGTERM)
        second.wait(timeout=SAFETY_SECONDS)
    assert second.returncode == 0, second.stderr.read() if second.stderr else ""

    assert (result.state, result.error, result.text) == (State.DONE, None, FINAL_ANSWER)
    calls = [b.id for m in result.messages for b in m.content if isinstance(b, ToolCallBlock)]
    assert calls == ["d1", "d2"]  # each script step answered once, none played again
    assert result.turns == 3
    # Three model requests in the whole run, each recorded once (the overload and its retry
    # are one request).
    assert _recorded_steps(db_file, run_id).count("model_request") == 3
    assert (workspace / "one.txt").read_text() == "1"
    assert (workspace / "two.txt").read_text() == "2"
    assert_valid_history(result.messages)
    assert lines == [
        f"{run_id}: SUCCESS (workflow status; worker {WORKER}); "
        "the run ended in state done after 3 turn(s)",
        FINAL_ANSWER,
    ]


# -- status: the workflow status and the run state, each named ---------------------------------


def _down(messages: list[Any], request: Any) -> Any:
    raise ModelError("the provider is down for good")


def _failing_agent() -> Agent:
    return Agent(FunctionModel(_down), model_retries=0)


async def test_status_names_a_successful_workflow_apart_from_a_failed_run(
    tmp_path: Path,
) -> None:
    db = f"sqlite:///{tmp_path / 'runs.sqlite'}"
    await launch(db, _failing_agent, executor_id="status-worker", serve_queue=False)
    try:
        result = await run("Go.", run_id="failed-run")
    finally:
        shutdown()
    assert result.state == State.FAILED

    client = Client(db)
    try:
        client.submit("Go.", run_id="queued-run")  # no worker serves the queue now
    finally:
        client.close()
    runner = CliRunner()
    failed = runner.invoke(status_command, ["--db", db, "failed-run"])
    queued = runner.invoke(status_command, ["--db", db, "queued-run"])

    assert failed.exit_code == 0, failed.output
    assert failed.output.splitlines() == [
        "failed-run: SUCCESS (workflow status; worker status-worker); "
        "the run ended in state failed after 0 turn(s)",
        result.error,
    ]
    assert queued.exit_code == 0, queued.output
    assert queued.output.splitlines() == [
        "queued-run: ENQUEUED (workflow status; no worker yet); the run has not started"
    ]


# -- a replayed request whose outcome was an error still moves the script -------------------------

TOO_LONG = {
    "error": {
        "type": "invalid_request_error",
        "message": "prompt is too long: 300000 tokens > 200000 maximum",
    },
    "status_code": 400,
}
AFTER_COMPACTION = "Answered after compaction."


async def test_a_replayed_error_request_still_moves_the_script_past_its_step(
    tmp_path: Path,
) -> None:
    # The run goes on after a recorded error: "prompt is too long" -> compaction -> a second
    # request. Replayed, the first request is not asked again, yet the script must stand after
    # the error's step (recorded with it) so the second request plays the answer, not the error.
    models: list[ScriptedModel] = []

    def factory() -> Agent:
        model = ScriptedModel([TOO_LONG, text_response(AFTER_COMPACTION)])
        models.append(model)
        return Agent(
            model,
            messages=[
                UserMessage("old question"),
                AssistantMessage(content=[TextBlock(text="old")]),
            ],
            compaction=Compaction(threshold=10**9, keep_recent=0, summarize=lambda old: "s"),
        )

    await launch(
        f"sqlite:///{tmp_path / 'runs.sqlite'}",
        factory,
        executor_id="position-worker",
        serve_queue=False,
    )
    try:
        first = await run("Go.", run_id="too-long-run")
        steps = await DBOS.list_workflow_steps_async("too-long-run")
        requests = [s["function_id"] for s in steps if s["function_name"] == "model_request"]
        # Replay the error request from the database; run the rest again.
        handle = await DBOS.fork_workflow_async("too-long-run", requests[0] + 1)
        again = decode_result(await handle.get_result())
    finally:
        shutdown()

    assert (first.state, first.error, first.text) == (State.DONE, None, AFTER_COMPACTION)
    assert len(requests) == 2
    assert (again.state, again.error, again.text) == (State.DONE, None, AFTER_COMPACTION)
    replayed = models[-1]
    assert len(models) == 2 and replayed is not models[0]
    # Asked once (the request after compaction), standing after both steps of the script.
    assert (len(replayed.requests), replayed.calls, replayed.remaining) == (1, 2, 0)
