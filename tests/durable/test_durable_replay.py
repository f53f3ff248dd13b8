"""Case 4 of issue 12: recovery determinism. The workflow body run again over the same recorded
steps (a DBOS fork that starts after the last step) gives the same history, calls no model and no
tool, even when the permission hook's timing differs so the calls of a parallel batch reach their
steps in another order."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("dbos", reason="the durable tests need the dbos extra")

from dbos import DBOS

from statemachine_agent import Agent, ToolCallInfo, ToolResultMessage, tool
from statemachine_agent._protocol import assert_valid_history
from statemachine_agent.durable import decode_result, launch, run, shutdown
from statemachine_agent.models import FunctionModel

TURNS = 3


class Counted:
    """A model and a tool that count their calls; the hook delays the first call of each batch
    in the original run and the second one afterwards."""

    def __init__(self) -> None:
        self.model_calls = 0
        self.tool_calls = 0
        self.replaying = False

    def model(self, messages: list[Any], request: Any) -> Any:
        self.model_calls += 1
        done = sum(isinstance(m, ToolResultMessage) for m in messages) // 2
        if done < TURNS:
            return {
                "content": [
                    {"type": "tool_use", "id": f"t{done}a", "name": "square", "input": {"x": done}},
                    {
                        "type": "tool_use",
                        "id": f"t{done}b",
                        "name": "square",
                        "input": {"x": done + 10},
                    },
                ],
                "stop_reason": "tool_use",
            }
        return "squared"

    def square(self, x: int) -> int:
        """Square x."""
        self.tool_calls += 1
        return x * x

    async def hook(self, info: ToolCallInfo) -> None:
        first = info.call.id.endswith("a")
        if first != self.replaying:
            await asyncio.sleep(0.05)

    def agent(self) -> Agent:
        return Agent(
            FunctionModel(self.model), tools=[tool(self.square)], before_tool_call=self.hook
        )


@pytest.fixture
async def counted(tmp_path: Path) -> AsyncIterator[Counted]:
    subject = Counted()
    await launch(
        f"sqlite:///{tmp_path / 'runs.sqlite'}",
        subject.agent,
        executor_id="replay",
        poll_seconds=0.05,
    )
    try:
        yield subject
    finally:
        shutdown()


async def test_replay_over_recorded_steps_gives_the_same_history(counted: Counted) -> None:
    first = await run("Square some numbers.", run_id="det-run")
    assert first.state == "done"
    assert (counted.model_calls, counted.tool_calls) == (TURNS + 1, 2 * TURNS)
    steps = await DBOS.list_workflow_steps_async("det-run")
    # Our steps (DBOS's own, such as the recv of the abort check, left out).
    names = [s["function_name"] for s in steps if not s["function_name"].startswith("DBOS.")]
    # Steps in declaration order within each batch, whatever the hook's timing.
    assert names[:5] == [
        "model_request",
        "tool_start:t0a",
        "tool:t0a",
        "tool_start:t0b",
        "tool:t0b",
    ]

    counted.replaying = True  # the second call of each batch now reaches its step first
    last = max(step["function_id"] for step in steps)
    handle = await DBOS.fork_workflow_async("det-run", last + 1)
    again = decode_result(await handle.get_result())

    assert (counted.model_calls, counted.tool_calls) == (TURNS + 1, 2 * TURNS)  # nothing re-ran
    assert again.messages == first.messages
    assert (again.state, again.turns, again.text, again.error) == (
        first.state,
        first.turns,
        first.text,
        first.error,
    )
    assert_valid_history(again.messages)
