"""``statemachine-agent demo`` (issue 6, case 4)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

from click.testing import CliRunner

from statemachine_agent import ToolResultMessage
from statemachine_agent.cli import main
from statemachine_agent.demo import PROJECT, demo_script
from statemachine_agent.session import load_history, read_session
from statemachine_agent.testing import assert_valid_history


def unittest_in(folder: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "unittest", "-v"],
        cwd=folder,
        capture_output=True,
        text=True,
        check=False,
    )


def test_demo_ends_done_and_fixes_the_failing_test(tmp_path: Path) -> None:
    before = tmp_path / "before"
    shutil.copytree(PROJECT, before, ignore=shutil.ignore_patterns("__pycache__"))
    failing = unittest_in(before)
    assert failing.returncode != 0
    assert "FAILED (failures=2)" in failing.stderr

    result = CliRunner().invoke(
        main, ["demo", "--into", str(tmp_path / "demo"), "--delay", "0"], catch_exceptions=False
    )
    assert result.exit_code == 0, result.output
    workspace, session = tmp_path / "demo" / "project", tmp_path / "demo" / "session.jsonl"
    assert "done · 6 turns" in result.output
    assert str(workspace) in result.output and str(session) in result.output

    passing = unittest_in(workspace)
    assert passing.returncode == 0, passing.stderr
    assert "OK" in passing.stderr

    # The session log: a valid history in which the tests really failed, then passed.
    history = load_history(session)
    assert_valid_history(history)
    runs = [m for m in history if isinstance(m, ToolResultMessage) and m.tool_name == "run_command"]
    assert [m.details["exit_code"] for m in runs] == [1, 0]
    assert "FAILED (failures=2)" in runs[0].text
    assert "OK" in runs[1].text
    assert read_session(session).state.value == "done"
    check = CliRunner().invoke(main, ["check", str(session)])
    assert check.exit_code == 0, check.output


def test_demo_refuses_a_used_folder(tmp_path: Path) -> None:
    (tmp_path / "project").mkdir()
    result = CliRunner().invoke(main, ["demo", "--into", str(tmp_path), "--delay", "0"])
    assert result.exit_code == 2
    assert "exists already" in result.output


def test_demo_refuses_a_folder_holding_an_old_session_log(tmp_path: Path) -> None:
    # project/ was removed but the old log stayed: the demo must not continue that session.
    old = tmp_path / "session.jsonl"
    old.write_text('{"type":"header"}\n')
    result = CliRunner().invoke(main, ["demo", "--into", str(tmp_path), "--delay", "0"])
    assert result.exit_code == 2
    assert "session.jsonl exists already" in result.output
    assert old.read_text() == '{"type":"header"}\n'
    assert not (tmp_path / "project").exists()


def test_demo_script_matches_the_bundled_project() -> None:
    prompt, steps = demo_script()
    assert prompt
    edits = [
        block["input"]
        for step in steps
        for block in step["content"]
        if block.get("name") == "edit_file"
    ]
    (edit,) = edits
    assert (PROJECT / edit["path"]).read_text().count(edit["old_text"]) == 1
    assert json.loads(json.dumps(steps)) == steps
