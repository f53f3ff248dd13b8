"""Any script, tool outcomes, abort point and queued input leave a valid run (issue 5, case 2)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from statemachine_agent import (
    TERMINAL_STATES,
    AssistantMessage,
    State,
    ToolExecutionEnd,
    ToolExecutionStart,
    ToolResultMessage,
)
from statemachine_agent.testing import (
    AbortPoint,
    AgentKit,
    QueuedInput,
    ScriptPlayer,
    assert_valid_history,
    check_run,
    drive_run,
)
from statemachine_agent.testing.strategies import abort_points, histories, queued_inputs, scripts

# A hypothesis search (and shrink) is CPU bound: seconds alone, minutes on a loaded 2-core
# machine (it timed out at 120 s with two suites running beside other work). The timeout only
# catches a hang; no behaviour here depends on time.
pytestmark = pytest.mark.timeout(900)

MODES = st.sampled_from(["parallel", "sequential"])


def run_once(
    script: list[dict[str, Any]],
    abort: AbortPoint | None,
    inputs: list[QueuedInput],
    mode: str,
    history: list[Any] | None = None,
) -> None:
    kit = AgentKit(
        ScriptPlayer(), tool_execution="parallel" if mode == "parallel" else "sequential"
    )
    agent = kit.agent()
    if history:
        agent.messages = history
    kit.model.load(script)
    report = asyncio.run(drive_run(agent, "do the task", abort=abort, inputs=inputs))
    assert check_run(agent, report) == []
    # The same promises, spelled out as the issue states them:
    assert_valid_history(agent.messages)
    assert agent.state in TERMINAL_STATES
    assert report.result is not None and report.result.state == agent.state
    for i, message in enumerate(agent.messages):
        if isinstance(message, AssistantMessage) and message.tool_calls:
            answered = agent.messages[i + 1 : i + 1 + len(message.tool_calls)]
            assert [r.tool_call_id for r in answered if isinstance(r, ToolResultMessage)] == [
                c.id for c in message.tool_calls
            ]
    starts = sorted(e.call.id for e in report.events if isinstance(e, ToolExecutionStart))
    ends = sorted(e.call.id for e in report.events if isinstance(e, ToolExecutionEnd))
    assert starts == ends and len(set(starts)) == len(starts)


@given(script=scripts(), abort=abort_points(), inputs=queued_inputs(), mode=MODES)
def test_any_script_abort_and_queued_input_leave_a_valid_run(
    script: list[dict[str, Any]], abort: AbortPoint | None, inputs: list[QueuedInput], mode: str
) -> None:
    run_once(script, abort, inputs, mode)


@given(script=scripts(errors=False), abort=abort_points(), mode=MODES)
def test_any_script_without_provider_errors_leaves_a_valid_run(
    script: list[dict[str, Any]], abort: AbortPoint | None, mode: str
) -> None:
    run_once(script, abort, [], mode)


@given(history=histories(), script=scripts(max_responses=3), abort=abort_points(), mode=MODES)
def test_runs_from_any_valid_history_stay_valid(
    history: list[Any], script: list[dict[str, Any]], abort: AbortPoint | None, mode: str
) -> None:
    run_once(script, abort, [], mode, history)


def test_a_script_ending_in_a_final_answer_ends_done() -> None:
    script = [
        {
            "content": [
                {"type": "tool_use", "id": "a", "name": "act", "input": {"behaviour": "raise"}}
            ],
            "stop_reason": "tool_use",
        },
        {"content": [{"type": "text", "text": "all done"}], "stop_reason": "end_turn"},
    ]
    kit = AgentKit(ScriptPlayer())
    agent = kit.agent()
    kit.model.load(script)
    report = asyncio.run(drive_run(agent, "go"))
    assert report.result is not None and report.result.state is State.DONE
    assert check_run(agent, report) == []
