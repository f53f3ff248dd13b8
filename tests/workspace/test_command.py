"""run_command: exit codes, output cap, timeout and abort killing the whole process group
(issue 6, case 3)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from pathlib import Path

from statemachine_agent import Agent, State, ToolExecutionStart, ToolResultMessage
from statemachine_agent.models import ScriptedModel
from statemachine_agent.testing import assert_valid_history
from statemachine_agent.workspace import MAX_OUTPUT_CHARS, Permissions, workspace_tools

from .conftest import run_calls, script_for


def live_members(pgid: int) -> list[int]:
    """Processes of group ``pgid`` that are not zombies (from /proc)."""
    alive = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        state, group = fields[0], int(fields[2])
        if group == pgid and state not in ("Z", "X"):
            alive.append(int(entry))
    return alive


def survivors_after_settling(pgid: int) -> list[int]:
    """SIGKILLed processes take a moment to be gone: poll a little before judging."""
    for _ in range(50):
        alive = live_members(pgid)
        if not alive:
            return []
        time.sleep(0.1)
    return live_members(pgid)


def test_exit_code_and_merged_output(workspace: Path) -> None:
    _, results = run_calls(
        workspace, [("run_command", {"command": "echo out; echo err >&2; ls src; exit 3"})]
    )
    result = results[0]
    assert not result.is_error
    assert result.text == "out\nerr\nmath.py\n[exit code 3]"
    assert result.details["exit_code"] == 3


def test_command_runs_in_the_root_without_stdin(workspace: Path) -> None:
    _, results = run_calls(workspace, [("run_command", {"command": "pwd; cat; echo end"})])
    assert results[0].text == f"{workspace.resolve()}\nend\n[exit code 0]"


def test_long_output_is_cut_with_a_note(workspace: Path) -> None:
    command = "python3 -c \"print('x' * 200000); print('LAST')\""
    _, results = run_calls(workspace, [("run_command", {"command": command})])
    text = results[0].text
    assert "[... output cut:" in text
    assert text.rstrip().endswith("LAST\n[exit code 0]")
    assert len(text) < MAX_OUTPUT_CHARS + 500


def test_timeout_kills_the_whole_group(workspace: Path) -> None:
    command = "sleep 300 & sleep 300"
    _, results = run_calls(
        workspace, [("run_command", {"command": command, "timeout_seconds": 0.5})]
    )
    result = results[0]
    assert result.is_error and "Timed out after 0.5 s" in result.text
    assert result.details["timed_out"] is True
    assert survivors_after_settling(result.details["pid"]) == []


def test_background_leftovers_are_stopped(workspace: Path) -> None:
    _, results = run_calls(workspace, [("run_command", {"command": "sleep 300 & echo started"})])
    result = results[0]
    assert "started" in result.text and "[exit code 0]" in result.text
    assert "Background processes" in result.text
    assert survivors_after_settling(result.details["pid"]) == []


async def test_case3_abort_kills_the_process_group_and_skips_the_rest(workspace: Path) -> None:
    calls = [
        ("run_command", {"command": "sh -c 'sleep 300 & touch running; sleep 300'"}),
        ("write_file", {"path": "after.txt", "content": "should not exist"}),
    ]
    agent = Agent(
        ScriptedModel(script_for(calls)),
        tools=workspace_tools(workspace),
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


async def test_cancelling_the_task_kills_the_group(workspace: Path) -> None:
    agent = Agent(
        ScriptedModel(script_for([("run_command", {"command": "echo $$ > pid.txt; sleep 300"})])),
        tools=workspace_tools(workspace),
        before_tool_call=Permissions(allow_all=True),
    )
    task = asyncio.ensure_future(agent.run("go"))
    pid_file = workspace / "pid.txt"
    while not pid_file.exists() or not pid_file.read_text().strip():  # noqa: ASYNC110 (a file)
        await asyncio.sleep(0.05)
    pgid = int(pid_file.read_text())
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    assert agent.state is State.ABORTED
    assert_valid_history(agent.messages)
    assert survivors_after_settling(pgid) == []
