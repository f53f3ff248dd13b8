"""The kit's strategies produce what they promise, and the README's example runs."""

from __future__ import annotations

import runpy
from pathlib import Path
from typing import Any

import pytest
from hypothesis import Phase, find, given, settings

from statemachine_agent import TextBlock, ToolResultMessage, UserMessage
from statemachine_agent.models import ScriptedModel
from statemachine_agent.models._anthropic_response import parse_response
from statemachine_agent.testing import assert_valid_history, prefix_ids
from statemachine_agent.testing.strategies import (
    API_STOP_REASONS,
    KNOWN_TOOLS,
    UNKNOWN_TOOLS,
    histories,
    responses,
    scripts,
)

# A hypothesis search (and shrink) is CPU bound: seconds alone, minutes on a loaded 2-core
# machine (it timed out at 120 s with two suites running beside other work). The timeout only
# catches a hang; no behaviour here depends on time.
pytestmark = pytest.mark.timeout(900)

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "property_test_hooks.py"


@given(scripts())
def test_scripts_have_at_most_8_steps_and_unique_call_ids(script: list[dict[str, Any]]) -> None:
    assert 1 <= len(script) <= 8
    ids = [b["id"] for s in script for b in s.get("content", []) if b["type"] == "tool_use"]
    assert len(ids) == len(set(ids))
    assert all(i.startswith("call_") for i in ids)
    ScriptedModel(script)  # every step is one ScriptedModel accepts
    for step in script:
        assert step.get("delay_seconds", 0.001) == 0.001
        if "error" in step:
            assert set(step) <= {"error", "delay_seconds"}
            assert step["error"]["type"] in ERROR_KINDS
            assert step["error"]["message"] == f"scripted {step['error']['type']}"
        else:
            message = parse_response(step)  # the shape ScriptedModel accepts
            assert len(message.tool_calls) <= 4


@given(scripts(max_responses=3, working_start=True))
def test_a_working_start_script_opens_with_at_least_one_tool_call(
    script: list[dict[str, Any]],
) -> None:
    first = script[0]
    assert "error" not in first
    assert sum(b["type"] == "tool_use" for b in first["content"]) >= 1
    ScriptedModel(script)


@given(responses(call_ids=["a", "b"], min_tool_calls=3))
def test_min_tool_calls_is_capped_by_the_ids_given(response: dict[str, Any]) -> None:
    assert sum(b["type"] == "tool_use" for b in response["content"]) == 2


ERROR_KINDS = {"overloaded_error", "api_error", "invalid_request_error", "authentication_error"}


@given(responses())
def test_responses_parse_as_anthropic_messages(response: dict[str, Any]) -> None:
    message = parse_response(response)
    uses = [b for b in response["content"] if b["type"] == "tool_use"]
    assert [(c.id, c.name) for c in message.tool_calls] == [(b["id"], b["name"]) for b in uses]
    assert len(uses) <= 4
    assert all(b["name"] in KNOWN_TOOLS + UNKNOWN_TOOLS for b in uses)
    for block, parsed in zip(uses, message.tool_calls, strict=True):
        if isinstance(block["input"], str):  # raw argument text, as a stream delivers it
            assert parsed.raw_arguments == block["input"]
        else:
            assert parsed.input == block["input"] and parsed.raw_arguments is None
    assert message.stop_reason == response["stop_reason"]
    assert (response.get("stop_details") is not None) == (response["stop_reason"] == "refusal")
    assert response["usage"]["output_tokens"] == len(response["content"])
    texts = [b["text"] for b in response["content"] if b["type"] == "text"]
    assert [b.text for b in message.content if isinstance(b, TextBlock)] == texts


def test_responses_reach_every_kind_they_promise() -> None:
    """Each kind of call and stop the strategy documents is drawn (found within the budget)."""
    # The first match is enough: no shrinking.
    quick = settings(derandomize=True, database=None, max_examples=500, phases=[Phase.generate])

    def calls(response: dict[str, Any]) -> list[dict[str, Any]]:
        return [b for b in response["content"] if b["type"] == "tool_use"]

    wanted = {
        "unknown tool": lambda r: any(b["name"] in UNKNOWN_TOOLS for b in calls(r)),
        "unparsable arguments": lambda r: any(
            isinstance(b["input"], str) and not b["input"].startswith(("[", '"', "t"))
            for b in calls(r)
        ),
        "a non-object value": lambda r: any(
            b["input"] is None or isinstance(b["input"], list | int) for b in calls(r)
        ),
        "four calls": lambda r: len(calls(r)) == 4,
        "a blank text": lambda r: any(
            b["type"] == "text" and not b["text"].strip() for b in r["content"]
        ),
        "a provider block": lambda r: any(b["type"] == "server_tool_use" for b in r["content"]),
        "a refusal": lambda r: r["stop_reason"] == "refusal",
        "calls with end_turn": lambda r: bool(calls(r)) and r["stop_reason"] == "end_turn",
    }
    for what, predicate in wanted.items():
        assert find(responses(), predicate, settings=quick), what


def test_every_provider_stop_reason_is_drawn() -> None:
    assert {"end_turn", "tool_use", "max_tokens", "pause_turn", "refusal"} <= set(API_STOP_REASONS)
    assert "aborted" not in API_STOP_REASONS  # recorded by the engine, never sent by a provider


@given(histories())
def test_histories_are_valid(history: list[Any]) -> None:
    assert_valid_history(history)
    assert isinstance(history[0], UserMessage)
    last = history[-1]
    # It ends on the user side, or with a final answer (no calls left open).
    assert isinstance(last, UserMessage | ToolResultMessage) or not last.tool_calls


def test_prefix_ids_renames_only_tool_use_ids() -> None:
    script = [{"content": [{"type": "tool_use", "id": "a"}, {"type": "text", "text": "x"}]}]
    assert prefix_ids(script, "r1_") == [
        {"content": [{"type": "tool_use", "id": "r1_a"}, {"type": "text", "text": "x"}]}
    ]


def test_the_readme_example_runs(capsys: Any) -> None:
    runpy.run_path(str(EXAMPLE), run_name="__main__")
    assert "invariants held" in capsys.readouterr().out
