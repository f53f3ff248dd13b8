"""``statemachine-agent replay`` and ``statemachine-agent check``."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from statemachine_agent import Agent, tool
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
