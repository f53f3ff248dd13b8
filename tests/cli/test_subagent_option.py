"""Issue 37, item 4: ``statemachine-agent run --subagent NAME=MODEL`` gives the run's agent a
sub-agent tool that reads the workspace; its activity shows indented under the parent's call,
its events carry ``parent`` in the ``--json`` lines, a session log records it, and bad values are
usage errors naming ``--subagent``. Each case runs the CLI as a process (script models for parent
and child, no network)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from statemachine_agent import State, ToolResultMessage
from statemachine_agent.cli._view import NESTED_INDENT
from statemachine_agent.session import read_session

CODE = "from statemachine_agent.cli import main; main()"
CHILD_ANSWER = "hello.txt says hello."


def cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """The CLI as a process without a terminal (stdin closed, output piped)."""
    env = {**os.environ, "COLUMNS": "120"}
    env.pop("ANTHROPIC_API_KEY", None)  # a model name must be refused, never reach the network
    return subprocess.run(
        [sys.executable, "-c", CODE, *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        env=env,
        timeout=120,
    )


def _write(path: Path, steps: list[dict[str, Any]]) -> str:
    path.write_text(json.dumps(steps))
    return f"script:{path}"


def _call(call_id: str, name: str, **args: Any) -> dict[str, Any]:
    return {
        "content": [{"type": "tool_use", "id": call_id, "name": name, "input": args}],
        "stop_reason": "tool_use",
    }


def _answer(text: str) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": text}], "stop_reason": "end_turn"}


@pytest.fixture
def scripts(tmp_path: Path) -> tuple[str, str]:
    """The parent's script (one call of ``reader``, then an answer) and the child's (it reads
    ``hello.txt``, then answers `CHILD_ANSWER`)."""
    parent = _write(
        tmp_path / "parent.json",
        [_call("p1", "reader", prompt="What does hello.txt say?"), _answer("It says hello.")],
    )
    child = _write(
        tmp_path / "child.json",
        [_call("k1", "read_file", path="hello.txt"), _answer(CHILD_ANSWER)],
    )
    return parent, child


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" "))


def _line(output: str, text: str) -> str:
    return next(line for line in output.splitlines() if text in line)


def _run_with_reader(
    folder: Path, tmp_path: Path, parent: str, child: str, *more: str
) -> subprocess.CompletedProcess[str]:
    """``run Look`` in ``folder`` with the parent's script and a ``reader`` sub-agent on the
    child's, no sandbox, and ``more`` options."""
    return cli(
        "run", "Look", "-w", str(folder), "-m", parent, "--subagent", f"reader={child}",
        "--no-sandbox", *more, cwd=tmp_path,
    )  # fmt: skip


def _tool_result(session: Path, call_id: str) -> ToolResultMessage:
    messages = read_session(session).messages
    return next(
        m for m in messages if isinstance(m, ToolResultMessage) and m.tool_call_id == call_id
    )


def test_run_with_a_subagent_shows_its_activity_indented_under_the_parents_call(
    folder: Path, tmp_path: Path, scripts: tuple[str, str]
) -> None:
    parent, child = scripts
    session = tmp_path / "run.jsonl"
    done = _run_with_reader(folder, tmp_path, parent, child, "--session", str(session))
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    # The child's lines sit one level in (4 spaces), under the parent's call of it.
    assert NESTED_INDENT == 4
    header = _line(out, "↳ reader (call p1)")
    assert _indent(header) == 4
    assert _indent(_line(out, "✓ read_file hello.txt")) == 4
    assert _indent(_line(out, CHILD_ANSWER)) == 4
    assert "done · 2 turns" in _line(out, "↳ reader: ")
    lines = out.splitlines()
    child_moves = [n for n, line in enumerate(lines) if "→" in line and _indent(line) == 4]
    assert len(child_moves) == 4  # idle → awaiting_model → executing_tools → awaiting_model → done
    assert lines.index(header) < child_moves[0]
    # The parent's own lines stay the parent's: its call answered, its run done.
    assert _indent(_line(out, "✓ reader")) == 0
    assert _indent(_line(out, "It says hello.")) == 0
    assert lines[-2].startswith("done · 2 turns")  # the final line, before the log's name
    # No permission was asked for (no terminal, no --yes): the child's answer is the result.
    result = _tool_result(session, "p1")
    assert not result.is_error
    assert result.text == CHILD_ANSWER
    assert read_session(session).state is State.DONE


def test_run_json_lines_carry_the_childs_events_with_their_parent(
    folder: Path, tmp_path: Path, scripts: tuple[str, str]
) -> None:
    parent, child = scripts
    done = _run_with_reader(folder, tmp_path, parent, child, "--json")
    assert done.returncode == 0, done.stderr
    events = [json.loads(line) for line in done.stdout.splitlines()]
    parent_run = events[0]["run_id"]
    nested = [e for e in events if e.get("parent")]
    assert nested[0]["type"] == "run_start"
    assert nested[-1]["type"] == "run_end" and nested[-1]["result"]["state"] == "done"
    refs = {
        (e["parent"]["run_id"], e["parent"]["call_id"], e["parent"]["tool_name"]) for e in nested
    }
    assert refs == {(parent_run, "p1", "reader")}
    assert all(e["run_id"] != parent_run for e in nested)
    assert any(
        e["type"] == "tool_execution_end" and e["call"]["name"] == "read_file" for e in nested
    )
    # The parent's own events carry no parent, and its run ends done with the child's answer.
    own = [e for e in events if not e.get("parent")]
    assert own[-1]["type"] == "run_end" and own[-1]["result"]["state"] == "done"
    reader_end = next(e for e in own if e["type"] == "tool_execution_end")
    assert reader_end["call"]["name"] == "reader"
    assert reader_end["result"]["content"] == [{"type": "text", "text": CHILD_ANSWER}]
    assert not reader_end["result"]["is_error"]
    # In order: the child's events come between the parent's start and end of the call.
    start = next(
        i for i, e in enumerate(events) if e in own and e["type"] == "tool_execution_start"
    )
    end = events.index(reader_end)
    assert all(start < events.index(e) < end for e in nested)


def test_run_session_log_records_the_subagent_as_child_lines_and_check_passes(
    folder: Path, tmp_path: Path, scripts: tuple[str, str]
) -> None:
    parent, child = scripts
    session = tmp_path / "run.jsonl"
    done = _run_with_reader(folder, tmp_path, parent, child, "--session", str(session))
    assert done.returncode == 0, done.stderr
    lines = [json.loads(line) for line in session.read_text().splitlines()]
    nested = [line for line in lines if line["type"] == "child"]
    assert nested and {(x["call_id"], x["tool_name"]) for x in nested} == {("p1", "reader")}
    assert "reader" in lines[0]["tools"]
    data = read_session(session)
    assert set(data.children) == {"p1"}
    assert data.children["p1"].state is State.DONE
    checked = cli("check", str(session), cwd=tmp_path)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "valid" in checked.stdout


def test_continue_and_approve_hints_repeat_the_subagent_flag(
    folder: Path, tmp_path: Path, scripts: tuple[str, str]
) -> None:
    _parent, child = scripts
    flag = f"reader={child}"
    # Stopped at max_turns: the continue hint repeats --subagent.
    looping = _write(tmp_path / "loop.json", [_call("p1", "list_files")] * 3)
    stopped = cli(
        "run", "Look", "-w", str(folder), "-m", looping, "--subagent", flag, "--max-turns", "1",
        "--no-sandbox", "--session", str(tmp_path / "a.jsonl"), cwd=tmp_path,
    )  # fmt: skip
    assert stopped.returncode == 3, stopped.stdout + stopped.stderr
    hint = " ".join(_line(stopped.stdout, "To continue").split())
    assert f"--subagent {flag}" in hint or f"--subagent '{flag}'" in hint
    # Awaiting approval: the approve hint repeats it, and `approve` takes it.
    writing = _write(
        tmp_path / "write.json",
        [_call("w1", "write_file", path="new.txt", content="x\n"), _answer("Wrote it.")],
    )
    session = tmp_path / "b.jsonl"
    waiting = cli(
        "run", "Write", "-w", str(folder), "-m", writing, "--subagent", flag, "--no-sandbox",
        "--session", str(session), cwd=tmp_path,
    )  # fmt: skip
    assert waiting.returncode == 4, waiting.stdout + waiting.stderr
    approve_hint = _line(waiting.stdout, "To decide: statemachine-agent approve")
    assert f"--subagent {flag}" in approve_hint
    then = _write(tmp_path / "then.json", [_answer("Wrote it.")])
    approved = cli(
        "approve", str(session), "--call", "w1", "-w", str(folder), "-m", then,
        "--subagent", flag, cwd=tmp_path,
    )  # fmt: skip
    assert approved.returncode == 0, approved.stdout + approved.stderr
    assert (folder / "new.txt").read_text() == "x\n"


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("reader", "give NAME=MODEL"),
        ("reader=", "give NAME=MODEL"),
        ("bad name={child}", "the sub-agent's name 'bad name' must be 1-64 letters"),
        ("=" + "{child}", "the sub-agent's name '' must be 1-64 letters"),
        ("read_file={child}", "a tool named 'read_file' exists already"),
        ("run_command={child}", "a tool named 'run_command' exists already"),
        ("reader=script:{missing}", "cannot read the script"),
        ("reader={child_path}", "is a file, not a model name"),
        ("reader=claude-sonnet-4-5", "needs an Anthropic API key"),
    ],
    ids=[
        "no_equals", "no_model", "bad_name", "empty_name", "clash_read_file",
        "clash_run_command", "missing_script", "a_file_not_a_model", "no_api_key",
    ],
)  # fmt: skip
def test_bad_subagent_values_are_usage_errors_naming_the_option(
    folder: Path, tmp_path: Path, scripts: tuple[str, str], value: str, message: str
) -> None:
    parent, child = scripts
    spec = value.format(
        child=child, missing=tmp_path / "nope.json", child_path=child.removeprefix("script:")
    )
    refused = cli(
        "run", "Look", "-w", str(folder), "-m", parent, "--subagent", spec, "--no-sandbox",
        cwd=tmp_path,
    )  # fmt: skip
    assert refused.returncode == 2, refused.stdout + refused.stderr
    error = " ".join(refused.stderr.split())
    assert "Invalid value for --subagent" in error, error
    assert message in error, error
    assert "Traceback" not in refused.stderr


def test_two_subagents_with_one_name_are_refused(
    folder: Path, tmp_path: Path, scripts: tuple[str, str]
) -> None:
    parent, child = scripts
    refused = cli(
        "run", "Look", "-w", str(folder), "-m", parent, "--subagent", f"reader={child}",
        "--subagent", f"reader={child}", "--no-sandbox", cwd=tmp_path,
    )  # fmt: skip
    assert refused.returncode == 2
    error = " ".join(refused.stderr.split())
    assert "Invalid value for --subagent" in error
    assert "a tool named 'reader' exists already" in error


def test_a_file_given_as_subagent_model_suggests_the_subagent_script_form(
    folder: Path, tmp_path: Path, scripts: tuple[str, str]
) -> None:
    parent, child = scripts
    path = child.removeprefix("script:")
    refused = cli(
        "run", "Look", "-w", str(folder), "-m", parent, "--subagent", f"reader={path}",
        "--no-sandbox", cwd=tmp_path,
    )  # fmt: skip
    assert refused.returncode == 2
    assert f"--subagent reader=script:{path}" in " ".join(refused.stderr.split())


def test_the_subagent_only_reads_its_write_and_command_calls_are_refused(
    folder: Path, tmp_path: Path
) -> None:
    parent = _write(
        tmp_path / "parent.json",
        [_call("p1", "reader", prompt="Try to change things."), _answer("It could not.")],
    )
    child = _write(
        tmp_path / "child.json",
        [
            _call("k1", "write_file", path="new.txt", content="x\n"),
            _call("k2", "run_command", command="touch made.txt"),
            _call("k3", "edit_file", path="hello.txt", old_text="hello", new_text="bye"),
            _answer("I can only read."),
        ],
    )
    session = tmp_path / "run.jsonl"
    done = cli(
        "run", "Go", "-w", str(folder), "-m", parent, "--subagent", f"reader={child}", "--yes",
        "--no-sandbox", "--session", str(session), cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    data = read_session(session)
    results = {
        m.tool_call_id: m for m in data.children["p1"].messages if isinstance(m, ToolResultMessage)
    }
    assert set(results) == {"k1", "k2", "k3"}
    assert all(result.is_error for result in results.values())
    # Even with --yes (which allows the parent's writes), nothing was changed.
    assert sorted(p.name for p in folder.iterdir()) == ["hello.txt"]
    assert (folder / "hello.txt").read_text() == "hello\n"
    assert _tool_result(session, "p1").text == "I can only read."
