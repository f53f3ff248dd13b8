"""Figure 3: parallel tools. One response with 8 calls of a tool that sleeps 200 ms.

The batch time is taken from the engine's events: the first ``tool_execution_start`` to the last
``tool_execution_end`` of the batch; the figure is batch time over 200 ms (1.0 is perfect overlap).
The whole run's wall time (two zero-latency model turns around the batch) is shown beside it. Three
tools: async (``asyncio.sleep``), sync (``time.sleep``, run in a worker thread, the default for sync
tools) and sync with 6 calls, the size of asyncio's default thread pool on a 2-core machine.

Usage: ``python benchmarks/bench_parallel.py [--quick]``
"""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any

from _common import emit, median, quick, table

from statemachine_agent import Agent, AssistantMessage, State, TextBlock, ToolCallBlock, tool
from statemachine_agent._events import Event
from statemachine_agent.models import ScriptedModel

SLEEP = 0.2
CALLS = 8


async def sleep_async() -> str:
    """Sleep 200 ms without blocking the loop."""
    await asyncio.sleep(SLEEP)
    return "slept"


def sleep_sync() -> str:
    """Sleep 200 ms in a worker thread."""
    time.sleep(SLEEP)
    return "slept"


async def run(name: str, calls: int) -> tuple[float, float]:
    """(batch seconds, run seconds) of one run."""
    script = [
        AssistantMessage(
            content=[ToolCallBlock(id=f"call_{i}", name=name, input={}) for i in range(calls)],
            stop_reason="tool_use",
        ),
        AssistantMessage(content=[TextBlock(text="done")], stop_reason="end_turn"),
    ]
    tools = [tool(sleep_async), tool(sleep_sync)]
    agent = Agent(ScriptedModel(script, record_requests=False), tools=tools)
    starts: list[float] = []
    ends: list[float] = []

    def on_event(event: Event) -> None:
        if event.type == "tool_execution_start":
            starts.append(time.perf_counter())
        elif event.type == "tool_execution_end":
            ends.append(time.perf_counter())

    agent.subscribe(on_event)
    begin = time.perf_counter()
    result = await agent.run("go")
    wall = time.perf_counter() - begin
    assert result.state is State.DONE and len(ends) == calls, result.error
    assert all(not m.is_error for m in result.messages if m.role == "tool_result")
    return max(ends) - min(starts), wall


def main() -> dict[str, Any]:
    reps = 3 if quick() else 9
    cases = [
        ("async tool, 8 calls", "sleep_async", CALLS),
        ("sync tool in threads, 8 calls", "sleep_sync", CALLS),
        (
            f"sync tool in threads, {min(32, (os.cpu_count() or 1) + 4)} calls",
            "sleep_sync",
            min(32, (os.cpu_count() or 1) + 4),
        ),
    ]
    rows = []
    data: dict[str, Any] = {"cases": {}}
    for label, name, calls in cases:
        samples = [asyncio.run(run(name, calls)) for _ in range(reps)]
        batch = median([s[0] for s in samples])
        wall = median([s[1] for s in samples])
        rows.append([label, batch * 1e3, batch / SLEEP, wall * 1e3])
        data["cases"][label] = {
            "batch_ms": batch * 1e3,
            "ratio": batch / SLEEP,
            "run_ms": wall * 1e3,
        }
    print(
        table(
            ["case", "batch ms", "batch / 200 ms", "run wall ms"],
            rows,
            "Figure 3: 8 parallel calls of a 200 ms tool",
        )
    )
    target = data["cases"][cases[0][0]]["ratio"] <= 1.15
    print(f"target (async tool) <= 1.15x: {target}")
    data["targets"] = {"parallel_async_le_1_15": target}
    emit("parallel", data)
    return data


if __name__ == "__main__":
    main()
