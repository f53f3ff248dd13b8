"""Figure 2: does the engine's per-turn work grow with the history? (turn 2000 vs turn 20)

A 2000-turn run of one no-op tool call per turn (zero-latency `ScriptedModel`); the tool stamps
``time.perf_counter()`` on each call, so the gap between two stamps is one whole turn (model request,
projection, checks, machine, tool batch). The figure is the median turn time in a window around turn
2000 (turns 1901-2000) over a window around turn 20 (turns 11-110), pooled over repeated runs; the
per-turn cost of whole 2000-turn runs over whole 20-turn runs is reported beside it.

Usage: ``python benchmarks/bench_growth.py [--quick]``
"""

from __future__ import annotations

import asyncio
import gc
import itertools
import time
from typing import Any

from _common import emit, median, quick, table

from statemachine_agent import Agent, AssistantMessage, State, TextBlock, ToolCallBlock, tool
from statemachine_agent.models import ScriptedModel

TURNS = 2000
EARLY = slice(10, 110)  # gaps ending at turns 12..111: "around turn 20" with enough samples
LATE = slice(TURNS - 101, TURNS - 1)


def steps(n: int) -> list[AssistantMessage]:
    out = [
        AssistantMessage(
            content=[ToolCallBlock(id=f"call_{i}", name="stamp", input={})], stop_reason="tool_use"
        )
        for i in range(n)
    ]
    out.append(AssistantMessage(content=[TextBlock(text="done")], stop_reason="end_turn"))
    return out


async def run(script: list[AssistantMessage], stamps: list[float]) -> float:
    async def stamp() -> str:
        """Record the time."""
        stamps.append(time.perf_counter())
        return "ok"

    n = len(script) - 1
    agent = Agent(
        ScriptedModel(script, record_requests=False), tools=[tool(stamp)], max_turns=n + 1
    )
    start = time.perf_counter()
    result = await agent.run("go")
    elapsed = time.perf_counter() - start
    assert result.state is State.DONE, result.error
    return elapsed / (n + 1) * 1e6


def main() -> dict[str, Any]:
    reps = 2 if quick() else 7
    long_script, short_script = steps(TURNS), steps(20)
    early: list[float] = []
    late: list[float] = []
    long_runs: list[float] = []
    short_runs: list[float] = []
    asyncio.run(run(short_script, []))  # warm-up
    for _ in range(reps):
        stamps: list[float] = []
        gc.collect()
        long_runs.append(asyncio.run(run(long_script, stamps)))
        gaps = [(b - a) * 1e6 for a, b in itertools.pairwise(stamps)]
        early += gaps[EARLY]
        late += gaps[LATE]
        for _ in range(10):
            short_runs.append(asyncio.run(run(short_script, [])))
    at_20, at_2000 = median(early), median(late)
    whole_short, whole_long = median(short_runs), median(long_runs)
    rows = [
        ["turn time near turn 20 / near turn 2000 (µs)", at_20, at_2000, at_2000 / at_20],
        [
            "whole run per turn: 20-turn / 2000-turn (µs)",
            whole_short,
            whole_long,
            whole_long / whole_short,
        ],
    ]
    print(
        table(["measure", "early", "late", "late / early"], rows, "Figure 2: growth with history")
    )
    target = at_2000 / at_20 <= 1.5
    print(f"target growth <= 1.5x: {target}")
    data = {
        "turn_us_near_20": at_20,
        "turn_us_near_2000": at_2000,
        "growth": at_2000 / at_20,
        "run_us_per_turn_20": whole_short,
        "run_us_per_turn_2000": whole_long,
        "run_growth": whole_long / whole_short,
        "targets": {"growth_le_1_5": target},
    }
    emit("growth", data)
    return data


if __name__ == "__main__":
    main()
