"""Issue 14, case 8: bad input to ``statemachine-agent run`` is said up front, as a new user would
meet it (a usage error naming what is wrong, exit 2), and odd tool arguments get a plain answer."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from statemachine_agent.cli._model_option import API_STOP_REASONS

from .test_run import answer, flat, invoke, tool_step, write_script


def tool_results(output: str) -> list[dict[str, Any]]:
    events = [json.loads(line) for line in output.splitlines()]
    return [e["result"] for e in events if e["type"] == "tool_execution_end"]


def test_unknown_stop_reason_is_a_usage_error_naming_the_step(folder: Path, tmp_path: Path) -> None:
    steps = [answer("Fine."), {"content": [{"type": "text", "text": "x"}], "stop_reason": "banana"}]
    result = invoke("run", "hi", "-w", str(folder), "-m", write_script(tmp_path, steps))

    assert result.exit_code == 2, result.output
    text = flat(result.output)
    assert "step 2: unknown stop_reason 'banana'" in text
    assert API_STOP_REASONS == (
        "end_turn",
        "tool_use",
        "max_tokens",
        "stop_sequence",
        "pause_turn",
        "refusal",
        "model_context_window_exceeded",
    )
    assert f"the known stop reasons are {', '.join(API_STOP_REASONS)}" in text


def test_empty_script_is_a_usage_error(folder: Path, tmp_path: Path) -> None:
    result = invoke("run", "hi", "-w", str(folder), "-m", write_script(tmp_path, []))

    assert result.exit_code == 2, result.output
    assert "holds no steps" in flat(result.output)
    empty_object = tmp_path / "object.json"
    empty_object.write_text('{"steps": []}')
    result = invoke("run", "hi", "-w", str(folder), "-m", f"script:{empty_object}")
    assert result.exit_code == 2 and "holds no steps" in flat(result.output)


def test_a_script_file_given_as_a_model_name_suggests_script_prefix(
    folder: Path, tmp_path: Path, monkeypatch: Any
) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "steps.json").write_text(json.dumps([answer("Done.")]))
    result = invoke("run", "hi", "-w", str(folder), "-m", "steps.json")

    assert result.exit_code == 2, result.output
    text = flat(result.output)
    assert "use --model script:steps.json" in text
    assert "ANTHROPIC_API_KEY" not in text


def test_timeout_above_the_cap_says_it_was_capped(folder: Path, tmp_path: Path) -> None:
    steps = [
        tool_step("t1", "run_command", command="echo hi", timeout_seconds=900),
        tool_step("t2", "run_command", command="echo ok", timeout_seconds=5),
        answer("Ran it."),
    ]
    model = write_script(tmp_path, steps)
    result = invoke("run", "Run", "-w", str(folder), "-m", model, "--yes", "--json")

    assert result.exit_code == 0, result.output
    capped, plain = (r["content"][0]["text"] for r in tool_results(result.stdout))
    assert capped == (
        "hi\n[exit code 0]\n[timeout_seconds 900 is above the cap: the command ran with "
        "timeout_seconds 600 (allowed: 0.1 to 600).]"
    )
    assert plain == "ok\n[exit code 0]"


def test_path_with_a_nul_byte_gets_the_usual_refusal(folder: Path, tmp_path: Path) -> None:
    steps = [
        tool_step("t1", "read_file", path="hello.txt\x00.png"),
        tool_step("t2", "write_file", path="new\x00.txt", content="x"),
        tool_step("t3", "read_file", path="../outside.txt"),
        answer("Refused."),
    ]
    model = write_script(tmp_path, steps)
    result = invoke("run", "Read", "-w", str(folder), "-m", model, "--yes", "--json")

    assert result.exit_code == 0, result.output
    nul_read, nul_write, outside = (r["content"][0]["text"] for r in tool_results(result.stdout))
    only_inside = outside.split(" is outside the workspace. ", 1)[1]
    assert nul_read == (
        "Refused: hello.txt\\0.png holds a NUL byte (\\0), which no path can contain. "
        + only_inside
    )
    assert nul_write.startswith("Refused: new\\0.txt holds a NUL byte")
    assert "embedded null byte" not in result.stdout
    assert not list(folder.glob("new*"))
