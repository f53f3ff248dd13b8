"""run_command: exit codes, output cap, timeout and abort killing the whole process group
(issue 6, case 3), with and without the sandbox (issue 18, deliverable 3)."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

from statemachine_agent import Agent, State, ToolExecutionStart, ToolResultMessage
from statemachine_agent.models import ScriptedModel
from statemachine_agent.testing import assert_valid_history
from statemachine_agent.workspace import (
    MAX_OUTPUT_CHARS,
    Permissions,
    SandboxMode,
    workspace_tools,
)

from ._procs import pids_running, still_alive_after_settling, survivors_after_settling
from .conftest import run_calls, script_for

# Each test runs twice (the `mode` fixture): unsandboxed, and inside bubblewrap (issue 18).


def test_exit_code_and_merged_output(workspace: Path, mode: SandboxMode) -> None:
    _, results = run_calls(
        workspace,
        [("run_command", {"command": "echo out; echo err >&2; ls src; exit 3"})],
        sandbox=mode,
    )
    result = results[0]
    assert not result.is_error
    assert result.text == "out\nerr\nmath.py\n[exit code 3]"
    assert result.details["exit_code"] == 3


def test_command_runs_in_the_root_without_stdin(workspace: Path, mode: SandboxMode) -> None:
    _, results = run_calls(
        workspace, [("run_command", {"command": "pwd; cat; echo end"})], sandbox=mode
    )
    assert results[0].text == f"{workspace.resolve()}\nend\n[exit code 0]"


def test_long_output_is_cut_with_a_note(workspace: Path, mode: SandboxMode) -> None:
    command = "python3 -c \"print('x' * 200000); print('LAST')\""
    _, results = run_calls(workspace, [("run_command", {"command": command})], sandbox=mode)
    text = results[0].text
    assert "[... output cut:" in text
    assert text.rstrip().endswith("LAST\n[exit code 0]")
    assert len(text) < MAX_OUTPUT_CHARS + 500


def test_timeout_kills_the_whole_group(workspace: Path, mode: SandboxMode) -> None:
    command = "sleep 300 & sleep 300"
    _, results = run_calls(
        workspace, [("run_command", {"command": command, "timeout_seconds": 0.5})], sandbox=mode
    )
    result = results[0]
    assert result.is_error and "Timed out after 0.5 s" in result.text
    assert result.details["timed_out"] is True
    assert survivors_after_settling(result.details["pid"]) == []


def test_background_leftovers_are_stopped(workspace: Path, mode: SandboxMode) -> None:
    command = "sleep 300.75 & echo started"
    _, results = run_calls(workspace, [("run_command", {"command": command})], sandbox=mode)
    result = results[0]
    assert result.text.startswith("started\n")
    assert result.text.endswith("[exit code 0]")
    if mode == "off":
        # The leftover held the output open: it got DRAIN_SECONDS, then was stopped.
        assert "Background processes" in result.text
    # (In the sandbox, the PID namespace ends with the shell: leftovers die with it at once.)
    assert survivors_after_settling(result.details["pid"]) == []
    assert still_alive_after_settling(pids_running("sleep", "300.75")) == []


def test_non_utf8_output_is_replaced_not_fatal(workspace: Path, mode: SandboxMode) -> None:
    command = r"printf 'caf\351 ok\n'; exit 4"
    _, results = run_calls(workspace, [("run_command", {"command": command})], sandbox=mode)
    assert results[0].text == "caf\ufffd ok\n[exit code 4]"
    assert results[0].details["exit_code"] == 4


async def test_abort_kills_the_process_group_and_skips_the_rest(
    workspace: Path, mode: SandboxMode
) -> None:
    calls = [
        ("run_command", {"command": "sh -c 'sleep 300 & touch running; sleep 300'"}),
        ("write_file", {"path": "after.txt", "content": "should not exist"}),
    ]
    agent = Agent(
        ScriptedModel(script_for(calls)),
        tools=workspace_tools(workspace, sandbox=mode),
        before_tool_call=Permissions(allow_all=True),
        tool_execution="sequential",
    )
    marker = workspace / "running"
    watchers: list[asyncio.Task[None]] = []

    async def abort_once_running() -> None:
        # Abort once the group really runs (a marker file, not a guessed delay).
        while not marker.exists():  # noqa: ASYNC110 (a file)
            await asyncio.sleep(0.02)
        agent.abort("test abort")

    def on_event(event: object) -> None:
        if isinstance(event, ToolExecutionStart) and event.call.name == "run_command":
            watchers.append(asyncio.ensure_future(abort_once_running()))

    agent.subscribe(on_event)
    result = await agent.run("go")
    await asyncio.gather(*watchers)
    assert result.state is State.ABORTED
    assert_valid_history(result.messages)
    results = [m for m in result.messages if isinstance(m, ToolResultMessage)]
    first, second = results
    # The tool's own interruption text: it returned by itself within the grace period (the
    # engine would otherwise have cancelled it and written its generic "Interrupted" text).
    assert first.is_error and "whole process group was killed" in first.text
    assert first.details["aborted"] is True
    assert survivors_after_settling(first.details["pid"]) == []
    assert second.is_error and second.text.startswith("Not run")
    assert not (workspace / "after.txt").exists()


async def test_cancelling_the_task_kills_the_group(workspace: Path, mode: SandboxMode) -> None:
    agent = Agent(
        ScriptedModel(script_for([("run_command", {"command": "touch started; sleep 300.5"})])),
        tools=workspace_tools(workspace, sandbox=mode),
        before_tool_call=Permissions(allow_all=True),
    )
    task = asyncio.ensure_future(agent.run("go"))
    # By command line, not `echo $$`: inside the sandbox's PID namespace $$ is not the host PID.
    while not (pids := pids_running("sleep", "300.5")):  # noqa: ASYNC110 (polling /proc)
        await asyncio.sleep(0.05)
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    assert agent.state is State.ABORTED
    assert_valid_history(agent.messages)
    assert still_alive_after_settling(pids) == []
