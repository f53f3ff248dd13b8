"""``statemachine-agent run`` in a real pseudo-terminal (pexpect): Ctrl-C (issue 6, case 5)."""

from __future__ import annotations

import json
import os
import re
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from statemachine_agent.cli import main
from statemachine_agent.session import load_history, read_session
from statemachine_agent.testing import assert_valid_history

pexpect = pytest.importorskip(
    "pexpect", reason="pexpect is not installed (a dev dependency: pip install -e '.[dev]')"
)

HIDE_CURSOR, SHOW_CURSOR = "\x1b[?25l", "\x1b[?25h"
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def spawn(args: list[str], cwd: Path) -> pexpect.spawn:
    env = {**os.environ, "TERM": "xterm-256color", "COLUMNS": "100", "LINES": "30"}
    env.pop("NO_COLOR", None)
    code = "from statemachine_agent.cli import main; main()"
    return pexpect.spawn(
        sys.executable,
        ["-c", code, *args],
        cwd=str(cwd),
        env=env,
        encoding="utf-8",
        timeout=60,
        dimensions=(30, 100),
    )


def long_command_script(tmp_path: Path) -> Path:
    """A batch: a long command, then a write (which needs permission unless --yes)."""
    script = tmp_path / "script.json"
    calls = [
        {"type": "tool_use", "id": "t1", "name": "run_command", "input": {"command": "touch started && sleep 300"}},
        {"type": "tool_use", "id": "t2", "name": "write_file",
         "input": {"path": "after.txt", "content": "x"}},
    ]  # fmt: skip
    steps = [
        {
            "content": [{"type": "text", "text": "Running a long command."}, *calls],
            "stop_reason": "tool_use",
        },
        {"content": [{"type": "text", "text": "never"}], "stop_reason": "end_turn"},
    ]
    script.write_text(json.dumps(steps))
    return script


def run_args(tmp_path: Path, *extra: str) -> list[str]:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    script = long_command_script(tmp_path)
    return [
        "run", "Wait a long time", "--workspace", str(workspace), "--model", f"script:{script}",
        "--session", str(tmp_path / "run.jsonl"), *extra,
    ]  # fmt: skip


def assert_aborted_cleanly(child: pexpect.spawn, tmp_path: Path) -> list[str]:
    """The run ended aborted (exit 130), the terminal is restored, the logged history is valid.
    Returns the texts of the tool results."""
    child.expect(pexpect.EOF)
    child.close()
    output = child.before or ""
    assert child.exitstatus == 130, output
    assert "aborted · 1 turn" in ANSI.sub("", output)
    # How to continue, as a command line (not the engine's Python advice).
    flat = " ".join(ANSI.sub("", output).split())
    assert f"statemachine-agent run --session {tmp_path / 'run.jsonl'} --max-turns 50" in flat
    # The terminal is restored: the cursor the live view hid is shown again.
    assert output.rfind(SHOW_CURSOR) > output.rfind(HIDE_CURSOR)
    history = load_history(tmp_path / "run.jsonl")
    assert_valid_history(history)
    assert read_session(tmp_path / "run.jsonl").state.value == "aborted"
    results = [m for m in history if m.role == "tool_result"]
    assert len(results) == 2
    return [r.text for r in results]


def test_ctrl_c_during_a_long_command_aborts_cleanly(tmp_path: Path) -> None:
    child = spawn(run_args(tmp_path, "--yes"), tmp_path)
    child.expect("run_command touch started")  # its spinner
    started = tmp_path / "ws" / "started"
    while not started.exists():  # the command is really running (not being spawned)
        time.sleep(0.05)
    child.sendintr()
    command, _write = assert_aborted_cleanly(child, tmp_path)
    assert "process group was killed" in command
    # replay shows the interrupted call's summary, not its first line "(no output)".
    replay = CliRunner().invoke(main, ["replay", str(tmp_path / "run.jsonl")])
    assert "← ✗ run_command interrupted, process group killed" in replay.output


def test_ctrl_c_at_a_permission_prompt_aborts_cleanly(tmp_path: Path) -> None:
    child = spawn(run_args(tmp_path, "--allow", "run_command"), tmp_path)
    child.expect("Allow the agent to write after.txt")
    child.sendintr()
    command, write = assert_aborted_cleanly(child, tmp_path)
    assert "process group was killed" in command
    # Issue 33, case 2: an interrupt, not the person's "no".
    assert "Interrupted by the user (Ctrl-C)" in write and "declined" not in write.replace(
        "did not decline", ""
    )
    assert not (tmp_path / "ws" / "after.txt").exists()
