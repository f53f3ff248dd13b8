"""Figure 5: scale. 1,000 agents running concurrently in one process, 10 turns each, 10 ms model latency.

Each agent has its own `ScriptedModel` of 10 Anthropic-shaped dict steps (9 tool calls and a final
answer), each with ``delay_seconds=0.01`` (parsed with pydantic per request, as recorded responses
are), and one shared async no-op tool. Figures: total wall time, turns per second, peak memory of the
run (tracemalloc, in a second pass, since tracing slows the run), the process's peak RSS, and memory
per idle agent (tracemalloc difference of constructing 1,000 agents, after ``gc.collect()``).

Usage: ``python benchmarks/bench_scale.py [--quick]``
"""

from __future__ import annotations

import asyncio
import gc
import resource
import time
import tracemalloc
from typing import Any

from _common import emit, median, quick, table

from statemachine_agent import Agent, State, tool
from statemachine_agent.models import ScriptedModel

AGENTS = 1000
TURNS = 10
LATENCY = 0.01


async def noop() -> str:
    """Do nothing."""
    return "ok"


NOOP = tool(noop)

STEPS: list[dict[str, Any]] = [
    {
        "content": [{"type": "tool_use", "id": f"toolu_{i}", "name": "noop", "input": {}}],
        "stop_reason": "tool_use",
        "usage": {"input_tokens": 10, "output_tokens": 5},
        "delay_seconds": LATENCY,
    }
    for i in range(TURNS - 1)
] + [
    {
        "content": [{"type": "text", "text": "done"}],
        "stop_reason": "end_turn",
        "usage": {"input_tokens": 10, "output_tokens": 5},
        "delay_seconds": LATENCY,
    }
]


def build(n: int) -> list[Agent]:
    return [Agent(ScriptedModel(STEPS, record_requests=False), tools=[NOOP]) for _ in range(n)]


async def run_all(agents: list[Agent]) -> float:
    start = time.perf_counter()
    results = await asyncio.gather(*(agent.run("go") for agent in agents))
    elapsed = time.perf_counter() - start
    assert all(r.state is State.DONE and r.turns == TURNS for r in results)
    return elapsed


def idle_memory(n: int) -> tuple[float, float]:
    """(KiB per idle agent, µs to construct one)."""
    gc.collect()
    start = time.perf_counter()
    agents = build(n)
    construct = (time.perf_counter() - start) / n * 1e6
    del agents
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    agents = build(n)
    gc.collect()
    after = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    del agents
    return (after - before) / n / 1024, construct


def main() -> dict[str, Any]:
    reps = 1 if quick() else 5
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    walls = []
    for _ in range(reps):
        agents = build(AGENTS)
        gc.collect()
        walls.append(asyncio.run(run_all(agents)))
        del agents
    rss_after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    wall = median(walls)
    gc.collect()
    tracemalloc.start()
    agents = build(AGENTS)
    base = tracemalloc.get_traced_memory()[0]
    tracemalloc.reset_peak()
    asyncio.run(run_all(agents))
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    del agents
    per_idle, construct_us = idle_memory(AGENTS)
    turns_per_s = AGENTS * TURNS / wall
    rows = [
        ["total wall (s)", wall],
        ["turns per second", turns_per_s],
        ["floor: 10 turns x 10 ms (s)", TURNS * LATENCY],
        ["peak traced memory of the run, above the built agents (MiB)", (peak - base) / 2**20],
        ["peak RSS growth of the process (MiB)", (rss_after - rss_before) / 1024],
        ["memory per idle agent (KiB)", per_idle],
        ["Agent() construction (µs)", construct_us],
    ]
    print(
        table(["measure", "value"], rows, f"Figure 5: {AGENTS} agents x {TURNS} turns, 10 ms model")
    )
    targets = {"scale_wall_lt_3s": wall < 3.0, "idle_agent_lt_50kib": per_idle < 50}
    print("targets:", ", ".join(f"{k}: {v}" for k, v in targets.items()))
    data = {
        "agents": AGENTS,
        "turns": TURNS,
        "wall_s": wall,
        "turns_per_s": turns_per_s,
        "peak_run_mib": (peak - base) / 2**20,
        "rss_growth_mib": (rss_after - rss_before) / 1024,
        "idle_agent_kib": per_idle,
        "construct_us": construct_us,
        "targets": targets,
    }
    emit("scale", data)
    return data


if __name__ == "__main__":
    main()
