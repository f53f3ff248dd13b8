"""``statemachine-agent replay`` and ``statemachine-agent check``."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from statemachine_agent import Agent, ToolResult, tool
from statemachine_agent.cli import main
from statemachine_agent.models import ScriptedModel
from statemachine_agent.testing.steps import call, text_response, tool_response


@tool
def echo(text: str) -> str:
    """Echo the text."""
    return text


def logged_session(path: Path) -> Path:
    model = ScriptedModel(
        [
            tool_response(call("echo", {"text": "hi"}, id="e1"), text="Echoing."),
            text_response("said hi", usage={"input_tokens": 12, "output_tokens": 4}),
        ]
    )
    Agent(model, tools=[echo], session=path).run_sync("say hi")
    return path


def test_replay_prints_the_transcript_state_path_and_usage(tmp_path: Path) -> None:
    log = logged_session(tmp_path / "s.jsonl")
    out = CliRunner().invoke(main, ["replay", str(log)])
    assert out.exit_code == 0, out.output
    text = out.output
    for expected in (
        "model scripted",
        "user › say hi",
        "assistant › Echoing.",
        'echo({"text": "hi"})',
        "← ✓ echo hi",
        "assistant › said hi",
        "state path idle → awaiting_model → executing_tools → awaiting_model → done",
        "usage 12 in / 4 out",
        "run ended: done",
    ):
        assert expected in text, expected


def test_check_passes_a_clean_log(tmp_path: Path) -> None:
    log = logged_session(tmp_path / "s.jsonl")
    out = CliRunner().invoke(main, ["check", str(log)])
    assert out.exit_code == 0, out.output
    assert "valid" in out.output and "state done" in out.output


def test_check_lists_every_violation_with_its_line(tmp_path: Path) -> None:
    log = logged_session(tmp_path / "s.jsonl")
    lines = log.read_text().splitlines()
    # Drop the result of e1 and everything after it (a crash mid-batch), corrupt line 4, and
    # leave a torn line at the end.
    cut = next(i for i, line in enumerate(lines) if '"tool_call_id":"e1"' in line)
    kept = lines[:cut]
    kept[3] = "{oops"
    log.write_text("\n".join(kept) + '\n{"type":"state","sou')
    out = CliRunner().invoke(main, ["check", str(log)])
    assert out.exit_code == 1
    text = out.output
    assert "4 violation(s)" in text
    assert "line 4: unreadable" in text
    assert f"line {cut + 1}: unreadable at the end of the log" in text
    assert "call 'e1' (echo) has no recorded result" in text
    assert "the last run never ended" in text


def test_check_reports_results_and_states_that_do_not_add_up(tmp_path: Path) -> None:
    log = logged_session(tmp_path / "s.jsonl")
    stray = {
        "type": "tool_result",
        "message": {"role": "tool_result", "tool_call_id": "zz", "tool_name": "echo"},
    }
    jump = {"type": "state", "source": "executing_tools", "dest": "done", "trigger": "x"}
    with log.open("a") as f:
        f.write(json.dumps(stray) + "\n" + json.dumps(jump) + "\n")
    out = CliRunner().invoke(main, ["check", str(log)])
    assert out.exit_code == 1
    assert "result for call 'zz', which no logged assistant message holds" in out.output
    assert "a state change from 'executing_tools', but the state was 'done'" in out.output


def test_replay_and_check_refuse_a_file_that_is_not_a_log(tmp_path: Path) -> None:
    other = tmp_path / "x.jsonl"
    other.write_text('{"type": "run_start"}\n')
    for command in ("replay", "check"):
        out = CliRunner().invoke(main, [command, str(other)])
        assert out.exit_code == 1 and "not a session log" in out.output


@tool
def run_command(command: str) -> ToolResult:
    """A stand-in for the workspace tool: the call was interrupted by an abort."""
    return ToolResult(
        "(no output)\n[Interrupted: the run was aborted; the command's whole process group was "
        "killed. It may have partly completed.]",
        is_error=True,
        details={"summary": "interrupted, process group killed"},
    )


@tool
def report(topic: str) -> str:
    """Several lines and no summary."""
    return f"\n{topic}: first line\nsecond\nthird"


def test_replay_shows_a_results_summary_or_its_first_line_and_how_many_follow(
    tmp_path: Path,
) -> None:
    log = tmp_path / "s.jsonl"
    model = ScriptedModel(
        [
            tool_response(call("run_command", {"command": "sleep 300"}, id="r1")),
            tool_response(call("report", {"topic": "status"}, id="p1")),
            text_response("ok"),
        ]
    )
    Agent(model, tools=[run_command, report], session=log).run_sync("go")
    out = CliRunner().invoke(main, ["replay", str(log)])
    assert out.exit_code == 0, out.output
    assert "← ✗ run_command interrupted, process group killed  [r1]" in out.output
    # Issue 33, case 1: a result's first lines (three), as the live view shows them.
    assert "← ✓ report status: first line\n    second\n    third  [p1]" in out.output
    assert "(no output)" not in out.output


def test_replay_of_a_stopped_run_says_how_to_continue_it(tmp_path: Path) -> None:
    log = tmp_path / "s.jsonl"
    model = ScriptedModel([tool_response(call("echo", {"text": "hi"}, id="e1"))])
    assert Agent(model, tools=[echo], session=log, max_turns=1).run_sync("go").turns == 1
    out = CliRunner().invoke(main, ["replay", str(log)])
    assert out.exit_code == 0, out.output
    text = " ".join(out.output.split())
    assert "the max_turns limit (1) was reached" in text
    assert "await agent.run" not in text
    assert f"to continue it: statemachine-agent run --session {log} --max-turns N" in text


def test_replay_and_check_report_a_run_end_with_a_bad_usage_as_unreadable(tmp_path: Path) -> None:
    log = logged_session(tmp_path / "s.jsonl")
    lines = log.read_text().splitlines()
    end = json.loads(lines[-1])
    assert end["type"] == "run_end"
    lines[-1] = json.dumps({**end, "usage": "lots"})  # hand-edited
    log.write_text("\n".join(lines) + "\n")
    out = CliRunner().invoke(main, ["replay", str(log)])
    assert out.exception is None or isinstance(out.exception, SystemExit), out.output
    assert out.exit_code == 0, out.output
    assert f"line {len(lines)} unreadable" in out.output
    assert "Traceback" not in out.output
    check = CliRunner().invoke(main, ["check", str(log)])
    assert check.exit_code == 1
    assert f"line {len(lines)}: unreadable: not a valid 'run_end' line" in check.output
    lines[-1] = json.dumps({**end, "state": ["done"]})
    log.write_text("\n".join(lines) + "\n")
    check = CliRunner().invoke(main, ["check", str(log)])
    assert f"line {len(lines)}: unreadable" in check.output


def test_a_state_line_without_its_states_is_unreadable(tmp_path: Path) -> None:
    log = logged_session(tmp_path / "s.jsonl")
    lines = log.read_text().splitlines()
    lines[3] = json.dumps({"type": "state", "dest": 5})
    log.write_text("\n".join(lines) + "\n")
    check = CliRunner().invoke(main, ["check", str(log)])
    assert check.exit_code == 1
    assert "line 4: unreadable: not a valid 'state' line" in check.output
    assert "Traceback" not in check.output
