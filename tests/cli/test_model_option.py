"""``--model script:FILE`` reads its file by the rule `ScriptedModel` has (`script_steps`): one
path for the script's shape, so the CLI and the class accept and refuse the same scripts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from statemachine_agent import UsageError
from statemachine_agent.models import ScriptedModel

from .test_run import answer, flat, invoke


def script_file(tmp_path: Path, script: object) -> Path:
    path = tmp_path / "script.json"
    path.write_text(json.dumps(script))
    return path


def test_a_script_object_with_a_key_besides_steps_and_prompt_is_refused_naming_the_key(
    folder: Path, tmp_path: Path
) -> None:
    script = {"steps": [answer("Done.")], "stesp": []}
    path = script_file(tmp_path, script)
    result = invoke("run", "hi", "-w", str(folder), "-m", f"script:{path}")

    assert result.exit_code == 2, result.output
    expected = "a script object holds 'steps' (and at most 'prompt'), got also stesp"
    assert f"Invalid value for --model: {path}: {expected}" in flat(result.output)
    with pytest.raises(UsageError) as refused:  # the class refuses it with the same words
        ScriptedModel(script)
    assert str(refused.value) == f"ScriptedModel: {expected}"


def test_a_script_object_with_steps_that_are_not_a_list_says_so(
    folder: Path, tmp_path: Path
) -> None:
    path = script_file(tmp_path, {"steps": "Done."})
    result = invoke("run", "hi", "-w", str(folder), "-m", f"script:{path}")

    assert result.exit_code == 2, result.output
    assert f"{path}: a script object's 'steps' must be a list of steps, got str" in flat(
        result.output
    )


def test_a_script_object_with_a_prompt_plays_its_steps(folder: Path, tmp_path: Path) -> None:
    path = script_file(tmp_path, {"prompt": "Say done", "steps": [answer("Done.")]})
    result = invoke("run", "hi", "-w", str(folder), "-m", f"script:{path}", "--json")

    assert result.exit_code == 0, result.output
    ends = [json.loads(line) for line in result.stdout.splitlines()]
    assert [e["result"]["text"] for e in ends if e["type"] == "run_end"] == ["Done."]


def test_a_step_with_an_unknown_key_keeps_its_error_naming_the_step_and_key(
    folder: Path, tmp_path: Path
) -> None:
    path = script_file(tmp_path, {"steps": [{**answer("Done."), "stop_reasn": "end_turn"}]})
    result = invoke("run", "hi", "-w", str(folder), "-m", f"script:{path}")

    assert result.exit_code == 2, result.output
    text = flat(result.output)
    assert f"{path}: ScriptedModel step 1: unknown key 'stop_reasn' (did you mean" in text
    assert "'stop_reason'?)" in text
