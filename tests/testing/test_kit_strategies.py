"""The kit's strategies produce what they promise, and the README's example runs."""

from __future__ import annotations

import runpy
from pathlib import Path
from typing import Any

from hypothesis import given

from statemachine_agent import ToolCallBlock
from statemachine_agent.models._anthropic_response import parse_response
from statemachine_agent.testing import assert_valid_history, prefix_ids
from statemachine_agent.testing.strategies import API_STOP_REASONS, histories, responses, scripts

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "property_test_hooks.py"


@given(scripts())
def test_scripts_have_at_most_8_steps_and_unique_call_ids(script: list[dict[str, Any]]) -> None:
    assert 1 <= len(script) <= 8
    ids = [b["id"] for s in script for b in s.get("content", []) if b["type"] == "tool_use"]
    assert len(ids) == len(set(ids))
    for step in script:
        if "error" not in step:
            message = parse_response(step)  # the shape ScriptedModel accepts
            assert len(message.tool_calls) <= 4


@given(responses())
def test_responses_parse_as_anthropic_messages(response: dict[str, Any]) -> None:
    message = parse_response(response)
    assert all(isinstance(c, ToolCallBlock) for c in message.tool_calls)
    assert message.stop_reason is None or isinstance(message.stop_reason, str)


def test_every_provider_stop_reason_is_drawn() -> None:
    assert {"end_turn", "tool_use", "max_tokens", "pause_turn", "refusal"} <= set(API_STOP_REASONS)
    assert "aborted" not in API_STOP_REASONS  # recorded by the engine, never sent by a provider


@given(histories())
def test_histories_are_valid(history: list[Any]) -> None:
    assert_valid_history(history)


def test_prefix_ids_renames_only_tool_use_ids() -> None:
    script = [{"content": [{"type": "tool_use", "id": "a"}, {"type": "text", "text": "x"}]}]
    assert prefix_ids(script, "r1_") == [
        {"content": [{"type": "tool_use", "id": "r1_a"}, {"type": "text", "text": "x"}]}
    ]


def test_the_readme_example_runs(capsys: Any) -> None:
    runpy.run_path(str(EXAMPLE), run_name="__main__")
    assert "invariants held" in capsys.readouterr().out
