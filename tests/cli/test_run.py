"""``statemachine-agent run`` with scripted models (click's CliRunner: no terminal)."""

from __future__ import annotations

import json
import os
import textwrap
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from docs.blocks import documentation_text
from pydantic import ValidationError, create_model
from test_diagram_views import always, review, run_cli, user_folder  # noqa: F401

from statemachine_agent import HISTORY_ADAPTER
from statemachine_agent.cli import main
from statemachine_agent.session import load_history
from statemachine_agent.testing import assert_valid_history


def pydantic_missing_message() -> str:
    """pydantic's own message for a missing required field (its wording belongs to the
    installed pydantic version, so it is taken from it, not written here)."""
    try:
        create_model("Required", field=(str, ...)).model_validate({})
    except ValidationError as exc:
        return str(exc.errors()[0]["msg"])
    raise AssertionError("a missing field was accepted")


def tool_step(call_id: str, name: str, **args: Any) -> dict[str, Any]:
    return {
        "content": [{"type": "tool_use", "id": call_id, "name": name, "input": args}],
        "stop_reason": "tool_use",
    }


def answer(text: str) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": text}], "stop_reason": "end_turn"}


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
    assert "messages" not in events[-1]["result"]  # the history came as message_end events
    logged = [e["message"] for e in events if e["type"] == "message_end"]
    history = HISTORY_ADAPTER.validate_python(logged)
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
    result = invoke("run", "hi", "-w", str(folder), "-m", "claude-sonnet-4-6")
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


# -- a fresh user's findings (CLI usability) ---------------------------------------------------


@pytest.mark.parametrize("prompt", ["", "   "])
def test_empty_prompt_is_a_usage_error(folder: Path, tmp_path: Path, prompt: str) -> None:
    model = write_script(tmp_path, [answer("never")])
    result = CliRunner().invoke(main, ["run", prompt, "-w", str(folder), "-m", model])
    assert result.exit_code == 2, result.output
    assert "Invalid value for '[PROMPT]': it is empty" in flat(result.output)
    assert "Traceback" not in result.output and result.exception is not None
    assert isinstance(result.exception, SystemExit)


def test_max_turns_run_continues_from_the_command_line(folder: Path, tmp_path: Path) -> None:
    session = tmp_path / "run.jsonl"
    model = write_script(tmp_path, [tool_step("t1", "list_files"), answer("never")])
    result = invoke(
        "run", "list", "-w", str(folder), "-m", model, "--session", str(session),
        "--max-turns", "1",
    )  # fmt: skip
    assert result.exit_code == 3, result.output
    text = flat(result.output)
    assert "the max_turns limit (1) was reached" in text
    assert "await agent.run" not in text and "call run() again" not in text
    assert (
        f"To continue (up to 1 more turn; raise --max-turns for more): statemachine-agent run "
        f"--session {session} --max-turns 1 -w {folder} -m {model}"
    ) in text
    # No PROMPT: the logged run continues (the script holds the steps still to come).
    model = write_script(tmp_path, [answer("Listed, at last.")])
    result = invoke("run", "-w", str(folder), "-m", model, "--session", str(session))
    assert result.exit_code == 0, result.output
    assert "Listed, at last." in result.output
    history = load_history(session)
    assert_valid_history(history)
    assert [m.role for m in history] == ["user", "assistant", "tool_result", "assistant"]


def test_max_turns_without_a_session_says_to_rerun_with_one(folder: Path, tmp_path: Path) -> None:
    model = write_script(tmp_path, [tool_step("t1", "list_files"), answer("never")])
    result = invoke("run", "list", "-w", str(folder), "-m", model, "--max-turns", "1")
    assert result.exit_code == 3
    text = flat(result.output)
    assert "run it with --session FILE" in text
    assert "await agent.run" not in text


def test_no_prompt_needs_a_session_log_with_a_run_to_continue(folder: Path, tmp_path: Path) -> None:
    model = write_script(tmp_path, [answer("Done.")])
    result = CliRunner().invoke(main, ["run", "-w", str(folder), "-m", model])
    assert result.exit_code == 2
    assert "Missing argument 'PROMPT'" in flat(result.output)
    assert "--session FILE" in flat(result.output)
    session = tmp_path / "run.jsonl"
    result = CliRunner().invoke(
        main, ["run", "-w", str(folder), "-m", model, "--session", str(session)]
    )
    assert result.exit_code == 2
    assert "there is no run to continue" in flat(result.output)
    # A logged run that ended with the model's answer: the engine's UsageError, as exit 2.
    assert (
        invoke("run", "hi", "-w", str(folder), "-m", model, "--session", str(session)).exit_code
        == 0
    )
    result = CliRunner().invoke(
        main, ["run", "-w", str(folder), "-m", model, "--session", str(session)]
    )
    assert result.exit_code == 2, result.output
    assert "nothing to continue: the history ends with the model's answer" in flat(result.output)
    assert_valid_history(load_history(session))


@pytest.mark.parametrize(
    ("steps", "expected"),
    [
        ([answer("ok"), {"content": "hello"}], "step 2: 'content' must be a list of blocks"),
        ([{"foo": 1}], "step 1: needs 'content'"),
        ([answer("ok"), answer("ok"), 7], "step 3: expected a response object"),
        ("hello", "must hold a JSON list of steps"),
    ],
)
def test_malformed_script_step_is_a_usage_error_naming_the_step(
    folder: Path, tmp_path: Path, steps: Any, expected: str
) -> None:
    path = tmp_path / "script.json"
    path.write_text(json.dumps(steps))
    result = CliRunner().invoke(main, ["run", "hi", "-w", str(folder), "-m", f"script:{path}"])
    assert result.exit_code == 2, result.output
    assert expected in flat(result.output)
    assert "Traceback" not in result.output


def test_invalid_arguments_error_shows_its_field_errors(folder: Path, tmp_path: Path) -> None:
    model = write_script(
        tmp_path, [tool_step("t1", "edit_file", path="hello.txt"), answer("Gave up.")]
    )
    result = invoke("run", "edit", "-w", str(folder), "-m", model, "--yes")
    assert result.exit_code == 0, result.output
    assert "Invalid arguments for tool 'edit_file' (2 error(s)):" in result.output
    missing = pydantic_missing_message()
    assert f"- old_text: {missing}" in result.output
    assert f"- new_text: {missing}" in result.output


def test_readme_script_example_runs(tmp_path: Path) -> None:
    readme = documentation_text()
    section = readme.split("# Running the agent on your folder", 1)[1]
    steps = json.loads(section.split("```json\n", 1)[1].split("```", 1)[0])
    folder = tmp_path / "ws"
    folder.mkdir()
    (folder / "notes.txt").write_text("helo world\n")
    model = write_script(tmp_path, steps)
    result = invoke("run", "Fix the typo", "-w", str(folder), "-m", model, "--yes")
    assert result.exit_code == 0, result.output
    assert "Fixed the typo in notes.txt." in result.output
    assert (folder / "notes.txt").read_text() == "hello world\n"


def test_cli_agent_prefers_the_working_folder_over_an_installed_module(
    user_folder: Path,  # noqa: F811 (the fixture)
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    installed = tmp_path / "site"  # an installed package of the same name, without `agent`
    (installed / "mybot").mkdir(parents=True)
    (installed / "mybot" / "__init__.py").write_text("", encoding="utf-8")
    (installed / "mybot" / "app.py").write_text(textwrap.dedent("number = 1\n"), encoding="utf-8")
    paths = [str(installed), *os.environ.get("PYTHONPATH", "").split(os.pathsep)]
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in paths if p))
    done = run_cli(user_folder, "diagram", "--agent", "mybot.app:agent")
    assert done.returncode == 0, done.stderr
    assert "executing_tools --> reviewing : review_first\n" in done.stdout
