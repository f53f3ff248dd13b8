"""Issue 33 repeated by a new user: what the retrial found, each case as a real process."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path
from typing import Any

import pytest

from statemachine_agent.session import read_session

from .test_cli_as_a_process import ANSI, CODE, call, cli, script

pexpect = pytest.importorskip(
    "pexpect", reason="pexpect is not installed (a dev dependency: pip install -e '.[dev]')"
)


def flat(text: str) -> str:
    return " ".join(text.split())


def _torn_log(folder: Path, tmp_path: Path, *, cut_after: str = "final_answer") -> Path:
    """A logged run whose process died writing the line after its ``cut_after`` state change:
    the log ends in that line's first half, with no newline."""
    log = tmp_path / "torn.jsonl"
    model = script(tmp_path, [call("c1", "read_file", path="hello.txt")], name="first.json")
    done = cli(
        "run", "Read it", "-w", str(folder), "-m", model, "--session", str(log), cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr
    lines = log.read_bytes().splitlines(keepends=True)
    last = next(i for i, line in enumerate(lines) if f'"label":"{cut_after}"'.encode() in line)
    following = lines[last + 1]
    log.write_bytes(b"".join(lines[: last + 1]) + following[: len(following) // 2])
    return log


# -- 1: check --fix handles a torn last line -----------------------------------------------------


def test_check_on_a_torn_log_names_check_fix_and_run_session(folder: Path, tmp_path: Path) -> None:
    log = _torn_log(folder, tmp_path)
    checked = cli("check", str(log), cwd=tmp_path)
    assert checked.returncode == 1
    said = flat(checked.stdout)
    assert "unreadable at the end of the log" in said
    assert f"statemachine-agent check {log} --fix" in said
    assert f'statemachine-agent run --session {log} "PROMPT"' in said


def test_check_fix_moves_a_torn_last_line_aside_and_closes_the_run_as_resume_would(
    folder: Path, tmp_path: Path
) -> None:
    log = _torn_log(folder, tmp_path)
    before = log.read_bytes()
    torn = before[before.rindex(b"\n") + 1 :]
    fixed = cli("check", str(log), "--fix", cwd=tmp_path)
    assert fixed.returncode == 0, fixed.stdout
    said = flat(fixed.stdout)
    assert f"Moved 1 unreadable line(s) of {log}" in said
    assert "recorded the end of the run the process died in as 'done'" in said
    assert f"✓ {log}: valid" in said
    assert (tmp_path / "torn.jsonl.unreadable").read_bytes() == torn + b"\n"  # nothing lost
    assert log.read_bytes().startswith(before[: len(before) - len(torn)])
    ends = [r.body["state"] for r in read_session(log).records if r.type == "run_end"]
    assert ends == ["done"]
    again = cli("check", str(log), "--fix", cwd=tmp_path)  # nothing left to do: nothing written
    assert again.returncode == 0 and "Moved" not in again.stdout and "Closed" not in again.stdout


def test_check_fix_closes_a_run_torn_mid_batch_as_aborted_answering_its_call(
    folder: Path, tmp_path: Path
) -> None:
    log = _torn_log(folder, tmp_path, cut_after="tool_calls")
    fixed = cli("check", str(log), "--fix", cwd=tmp_path)
    assert fixed.returncode == 0, fixed.stdout
    said = flat(fixed.stdout)
    assert "recorded the end of the run the process died in as 'aborted'" in said
    data = read_session(log)
    assert data.state is not None and data.state.value == "aborted" and not data.run_open


# -- 2: a usage error changes no file ------------------------------------------------------------


def test_run_without_a_prompt_on_a_finished_torn_log_refuses_before_changing_it(
    folder: Path, tmp_path: Path
) -> None:
    log = _torn_log(folder, tmp_path)
    before = log.read_bytes()
    model = script(tmp_path, name="second.json")
    refused = cli("run", "-w", str(folder), "-m", model, "--session", str(log), cwd=tmp_path)
    assert refused.returncode == 2
    assert "nothing to continue: the history ends with the model's answer; pass a prompt" in flat(
        refused.stderr
    )
    assert log.read_bytes() == before  # not repaired, not cut
    also = cli("run", "-w", str(folder), "-m", model, "--session", str(log), "--repair",
               cwd=tmp_path)  # fmt: skip
    assert also.returncode == 2 and log.read_bytes() == before
    assert not (tmp_path / "torn.jsonl.unreadable").exists()


def test_deciding_a_log_with_nothing_pending_refuses_before_changing_it(
    folder: Path, tmp_path: Path
) -> None:
    log = _torn_log(folder, tmp_path, cut_after="tool_calls")
    before = log.read_bytes()
    model = script(tmp_path, name="second.json")
    refused = cli("run", "-w", str(folder), "-m", model, "--session", str(log), "--approve",
                  "c1", cwd=tmp_path)  # fmt: skip
    assert refused.returncode == 2
    assert "is awaiting approval: there is nothing to decide" in flat(refused.stderr)
    assert log.read_bytes() == before


# -- 3: a failing command's last lines keep their indentation and the failing test's name -------

FAILING_TEST_FILE = """\
import unittest


class T(unittest.TestCase):
    def test_x(self):
        self.assertEqual(helper(), 2)


def helper():
    return 1
"""


def _unittest_run(folder: Path, tmp_path: Path) -> tuple[str, list[str]]:
    (folder / "test_m.py").write_text(FAILING_TEST_FILE)
    model = script(tmp_path, [call("r1", "run_command", command="python3 -m unittest test_m")])
    log = tmp_path / "run.jsonl"
    args = ["run", "Test", "-w", str(folder), "-m", model, "--yes", "--no-sandbox"]
    return str(log), [*args, "--session", str(log)]


def _shows_the_failure_indented(text: str) -> None:
    lines = text.replace("\r", "").splitlines()
    assert any(line.startswith("    FAIL: test_x (test_m.T.test_x)") for line in lines), text
    assert any(line.startswith('      File "') for line in lines), text  # frames stay indented
    assert "        self.assertEqual(helper(), 2)" in lines, text
    assert "    AssertionError: 1 != 2" in lines, text


def test_a_failing_tests_name_and_indented_traceback_show_in_a_terminal_and_in_replay(
    folder: Path, tmp_path: Path
) -> None:
    log, args = _unittest_run(folder, tmp_path)
    env = {**os.environ, "TERM": "xterm-256color", "COLUMNS": "100", "LINES": "30"}
    child = pexpect.spawn(
        sys.executable, ["-c", CODE, *args], cwd=str(tmp_path), env=env, encoding="utf-8",
        timeout=120, dimensions=(30, 100),
    )  # fmt: skip
    child.expect(pexpect.EOF)
    child.close()
    live = ANSI.sub("", child.before)
    assert child.exitstatus == 0, live
    assert "! run_command python3 -m unittest test_m — exit code 1" in live
    _shows_the_failure_indented(live)
    replay = cli("replay", log, cwd=tmp_path)
    assert replay.returncode == 0, replay.stderr
    assert "← ! run_command exit code 1" in replay.stdout
    _shows_the_failure_indented(replay.stdout)


def test_read_file_result_shows_its_first_lines_after_its_summary(
    folder: Path, tmp_path: Path
) -> None:
    (folder / "five.txt").write_text("one\n    two\nthree\nfour\nfive\n")
    model = script(tmp_path, [call("c1", "read_file", path="five.txt")])
    log = tmp_path / "run.jsonl"
    live = cli("run", "Read", "-w", str(folder), "-m", model, "--session", str(log), cwd=tmp_path)
    assert live.returncode == 0, live.stderr
    replay = cli("replay", str(log), cwd=tmp_path)
    for out in (live.stdout, replay.stdout):
        assert "read_file five.txt — lines 1-5 of 5" in out or "read_file lines 1-5 of 5" in out
        lines = out.splitlines()
        assert any(re.fullmatch(r" {4}\s*1\s+one", line) for line in lines), out
        assert any(re.fullmatch(r" {4}\s*2\s{5,}two", line) for line in lines), out  # indented
        assert any(
            re.fullmatch(r" {4}\s*3\s+three \(\+2 lines\)(  \[c1\])?", line) for line in lines
        ), out
        assert "four" not in out


# -- 4: Ctrl-C at a prompt is an interrupt, not a denial -----------------------------------------


def test_ctrl_c_at_a_prompt_result_starts_with_the_interrupt_not_denied(
    folder: Path, tmp_path: Path
) -> None:
    log = tmp_path / "run.jsonl"
    model = script(tmp_path, [call("w1", "write_file", path="after.txt", content="x")])
    env = {**os.environ, "TERM": "xterm-256color", "COLUMNS": "100", "LINES": "30"}
    child = pexpect.spawn(
        sys.executable, ["-c", CODE, "run", "Write", "-w", str(folder), "-m", model, "--session",
                         str(log)],
        cwd=str(tmp_path), env=env, encoding="utf-8", timeout=60, dimensions=(30, 100),
    )  # fmt: skip
    child.expect(r"y/n")
    child.sendintr()
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 130
    result = next(m for m in read_session(log).messages if m.role == "tool_result")
    assert result.is_error
    assert result.text.startswith(
        "Interrupted by the user (Ctrl-C) at the prompt asking permission to write after.txt"
    ), result.text
    assert "Denied" not in result.text


def test_a_hook_answering_interrupted_gives_its_reason_as_the_result_without_denied() -> None:
    from statemachine_agent import Agent, Deny, Interrupted, tool
    from statemachine_agent.models import ScriptedModel
    from statemachine_agent.testing.steps import call as step_call
    from statemachine_agent.testing.steps import text_response, tool_response

    @tool
    def act(n: int) -> str:
        """Act."""
        return f"did {n}"

    def hook(info: Any) -> Deny:
        n = info.arguments["n"]
        return Interrupted(f"asking about {n} was interrupted") if n == 1 else Deny(f"no {n}")

    model = ScriptedModel(
        [
            tool_response(step_call("act", {"n": 1}, id="a1"), step_call("act", {"n": 2}, id="a2")),
            text_response("ok"),
        ]
    )
    result = Agent(model, tools=[act], before_tool_call=hook).run_sync("Act twice")
    texts = {m.tool_call_id: m.text for m in result.messages if m.role == "tool_result"}
    assert texts == {"a1": "asking about 1 was interrupted", "a2": "Denied: no 2"}


# -- 5: calls awaiting approval are previewed as the prompt previews them ------------------------


def test_a_run_stopped_awaiting_approval_shows_each_pending_edits_diff(
    folder: Path, tmp_path: Path
) -> None:
    (folder / "code.py").write_text("def f():\n    return 1\n")
    model = script(
        tmp_path,
        [call("e1", "edit_file", path="code.py", old_text="return 1", new_text="return 2")],
    )
    log = tmp_path / "run.jsonl"
    done = cli("run", "Fix", "-w", str(folder), "-m", model, "--session", str(log), cwd=tmp_path)
    assert done.returncode == 4, done.stderr  # awaiting approval
    lines = done.stdout.splitlines()
    start = lines.index("Awaiting approval:")
    assert lines[start + 1].startswith('  e1: edit_file {"path": "code.py"')
    assert "      --- a/code.py" in lines and "      +++ b/code.py" in lines
    assert "      -    return 1" in lines and "      +    return 2" in lines
