"""Figure 4: abort latency, from ``agent.abort()`` to the run's terminal state (``run()`` returns).

Cases: a cooperative tool (awaits ``ctx.signal``), an async tool that ignores the signal (cancelled
when ``abort_grace_seconds`` runs out), a sync tool in a worker thread that ignores it (threads cannot
be cancelled: the run ends after the grace period, the thread finishes in the background), and an
abort while a model request is in flight. ``abort()`` is called once the tool (or model) is running.

Usage: ``python benchmarks/bench_abort.py [--quick]``
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from _common import emit, median, quick, table

from statemachine_agent import Agent, AssistantMessage, State, ToolCallBlock, ToolContext, tool
from statemachine_agent.models import FunctionModel, ScriptedModel

GRACE = 0.5


async def cooperative(ctx: ToolContext) -> str:
    """Wait until the run is aborted."""
    await ctx.signal.wait()
    return "stopped"


async def ignores_async() -> str:
    """Sleep a minute, ignoring the signal."""
    await asyncio.sleep(60)
    return "slept"


def ignores_sync() -> str:
    """Block a worker thread for a second, ignoring the signal."""
    time.sleep(1.0)
    return "slept"


TOOLS = [tool(cooperative), tool(ignores_async), tool(ignores_sync)]


async def abort_during_tool(name: str) -> float:
    script = [
        AssistantMessage(
            content=[ToolCallBlock(id="call_1", name=name, input={})], stop_reason="tool_use"
        )
    ]
    agent = Agent(
        ScriptedModel(script, record_requests=False), tools=TOOLS, abort_grace_seconds=GRACE
    )
    running = asyncio.Event()
    agent.subscribe(lambda e: running.set() if e.type == "tool_execution_start" else None)
    task = asyncio.ensure_future(agent.run("go"))
    await running.wait()
    await asyncio.sleep(0.005)  # let the tool reach its await
    start = time.perf_counter()
    agent.abort("benchmark")
    result = await task
    elapsed = time.perf_counter() - start
    assert result.state is State.ABORTED, result.state
    return elapsed


async def abort_during_model() -> float:
    requested = asyncio.Event()

    async def slow(_messages: Any, _request: Any) -> str:
        requested.set()
        await asyncio.sleep(60)
        return "late"

    agent = Agent(FunctionModel(slow), abort_grace_seconds=GRACE)
    task = asyncio.ensure_future(agent.run("go"))
    await requested.wait()
    start = time.perf_counter()
    agent.abort("benchmark")
    result = await task
    elapsed = time.perf_counter() - start
    assert result.state is State.ABORTED, result.state
    return elapsed


def main() -> dict[str, Any]:
    many, few = (5, 2) if quick() else (25, 3)
    cases = [
        ("cooperative tool (awaits ctx.signal)", lambda: abort_during_tool("cooperative"), many),
        ("model request in flight", abort_during_model, many),
        (
            f"async tool ignoring the signal (grace {GRACE} s)",
            lambda: abort_during_tool("ignores_async"),
            few,
        ),
        (
            f"sync tool in a thread ignoring it (grace {GRACE} s)",
            lambda: abort_during_tool("ignores_sync"),
            few,
        ),
    ]
    rows = []
    data: dict[str, Any] = {"grace_seconds": GRACE, "cases": {}}
    for label, case, reps in cases:
        samples = [asyncio.run(case()) * 1e3 for _ in range(reps)]
        rows.append([label, median(samples), max(samples)])
        data["cases"][label] = {"median_ms": median(samples), "max_ms": max(samples)}
    print(table(["case", "median ms", "max ms"], rows, "Figure 4: abort() to terminal state"))
    target = data["cases"][cases[0][0]]["median_ms"] < 50
    print(f"target cooperative < 50 ms: {target}")
    data["targets"] = {"abort_cooperative_lt_50ms": target}
    emit("abort", data)
    return data


if __name__ == "__main__":
    main()
