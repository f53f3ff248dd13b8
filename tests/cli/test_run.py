"""``statemachine-agent run`` with scripted models (click's CliRunner: no terminal)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from statemachine_agent import HISTORY_ADAPTER
from statemachine_agent.cli import main
from statemachine_agent.session import load_history
from statemachine_agent.testing import assert_valid_history


def tool_step(call_id: str, name: str, **args: Any) -> dict[str, Any]:
    return {
        "content": [{"type": "tool_use", "id": call_id, "name": name, "input": args}],
        "stop_reason": "tool_use",
    }


def answer(text: str) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": text}], "stop_reason": "end_turn"}


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    root.mkdir()
    (root / "hello.txt").write_text("hello\n")
    return root


def write_script(tmp_path: Path, steps: list[dict[str, Any]]) -> str:
    path = tmp_path / "script.json"
    path.write_text(json.dumps(steps))
    return f"script:{path}"


def flat(text: str) -> str:
    """``text`` with line wrapping undone (rich wraps at the console width)."""
    return " ".join(text.split())


def invoke(*args: str) -> Any:
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def test_run_with_a_script_ends_done(folder: Path, tmp_path: Path) -> None:
    model = write_script(
        tmp_path,
        [
            tool_step("t1", "read_file", path="hello.txt"),
            tool_step("t2", "run_command", command="echo made > made.txt"),
            answer("All done."),
        ],
    )
    result = invoke("run", "Say hello", "--workspace", str(folder), "--model", model, "--yes")
    assert result.exit_code == 0, result.output
    assert "All done." in result.output
    assert "read_file hello.txt" in result.output
    assert "done · 3 turns" in result.output
    assert (folder / "made.txt").read_text() == "made\n"


def test_json_lines_and_denial_without_a_terminal(folder: Path, tmp_path: Path) -> None:
    model = write_script(
        tmp_path, [tool_step("t1", "run_command", command="touch x"), answer("Could not.")]
    )
    result = invoke("run", "Touch x", "-w", str(folder), "-m", model, "--json")
    assert result.exit_code == 0
    events = [json.loads(line) for line in result.stdout.splitlines()]
    assert events[0]["type"] == "run_start"
    assert events[-1]["type"] == "run_end"
    assert events[-1]["result"]["state"] == "done"
    ends = [e for e in events if e["type"] == "tool_execution_end"]
    assert ends[0]["result"]["is_error"] is True
    assert "no interactive terminal" in ends[0]["result"]["content"][0]["text"]
    history = HISTORY_ADAPTER.validate_python(events[-1]["result"]["messages"])
    assert_valid_history(history)
    assert not (folder / "x").exists()


def test_allow_rule_permits_a_command_prefix(folder: Path, tmp_path: Path) -> None:
    model = write_script(
        tmp_path, [tool_step("t1", "run_command", command="touch allowed"), answer("ok")]
    )
    result = invoke("run", "go", "-w", str(folder), "-m", model, "--allow", "run_command:touch")
    assert result.exit_code == 0
    assert (folder / "allowed").exists()


def test_exit_codes_by_terminal_state(folder: Path, tmp_path: Path) -> None:
    looping = write_script(
        tmp_path,
        [tool_step(f"t{i}", "list_files") for i in range(3)] + [answer("never")],
    )
    result = invoke("run", "loop", "-w", str(folder), "-m", looping, "--max-turns", "2")
    assert result.exit_code == 3
    assert "max_turns · 2 turns" in result.output
    exhausted = write_script(tmp_path, [tool_step("t1", "list_files")])
    result = invoke("run", "fail", "-w", str(folder), "-m", exhausted)
    assert result.exit_code == 1
    assert "failed · 1 turn" in result.output
    assert "ScriptedModel has no step 2" in flat(result.output)


def test_model_name_without_api_key_says_how_to_set_it(
    folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    result = invoke("run", "hi", "-w", str(folder), "-m", "claude-sonnet-4-5")
    assert result.exit_code == 2
    assert "ANTHROPIC_API_KEY is not set" in flat(result.output)
    assert "export ANTHROPIC_API_KEY=" in flat(result.output)


def test_unreadable_script_is_a_usage_error(folder: Path, tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"not": "steps"}')
    result = invoke("run", "hi", "-w", str(folder), "-m", f"script:{bad}")
    assert result.exit_code == 2
    assert "must hold a JSON list of steps" in flat(result.output)
    result = invoke("run", "hi", "-w", str(folder), "-m", "script:/nonexistent.json", "--yes")
    assert result.exit_code == 2


def test_session_log_and_system_prompt(folder: Path, tmp_path: Path) -> None:
    model = write_script(tmp_path, [tool_step("t1", "list_files"), answer("Listed.")])
    system = tmp_path / "system.txt"
    system.write_text("Be brief.")
    session = tmp_path / "run.jsonl"
    result = invoke(
        "run", "list", "-w", str(folder), "-m", model, "--session", str(session),
        "--system", str(system),
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert f"Session log: {session}" in flat(result.output)
    history = load_history(session)
    assert_valid_history(history)
    assert history[-1].text == "Listed."
    # A second run continues the same session.
    model = write_script(tmp_path, [answer("Again.")])
    result = invoke("run", "again", "-w", str(folder), "-m", model, "--session", str(session))
    assert result.exit_code == 0
    history = load_history(session)
    assert [m.role for m in history] == [
        "user", "assistant", "tool_result", "assistant", "user", "assistant"
    ]  # fmt: skip
