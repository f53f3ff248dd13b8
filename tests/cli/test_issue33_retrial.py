"""Issue 33 repeated by a new user: what the retrial found, each case as a real process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from statemachine_agent.session import read_session

CODE = "from statemachine_agent.cli import main; main()"


def call(call_id: str, name: str, **args: Any) -> dict[str, Any]:
    return {"type": "tool_use", "id": call_id, "name": name, "input": args}


def script(tmp_path: Path, *batches: list[dict[str, Any]], name: str = "script.json") -> str:
    steps: list[dict[str, Any]] = [{"content": b, "stop_reason": "tool_use"} for b in batches]
    steps.append({"content": [{"type": "text", "text": "Done."}], "stop_reason": "end_turn"})
    path = tmp_path / name
    path.write_text(json.dumps(steps))
    return f"script:{path}"


def cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """The CLI as a process without a terminal (stdin closed, output piped)."""
    return subprocess.run(
        [sys.executable, "-c", CODE, *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        env={**os.environ, "COLUMNS": "100"},
        timeout=120,
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
