"""Per-turn CPU cost with a subscriber attached (the realistic set-up), median of several runs.

One process per measurement, so an older checkout can be measured the same way for a before/after
figure: ``PYTHONPATH=/path/to/old/checkout python benchmarks/bench_turn_cpu.py``. A run is N turns
of one no-op tool call each (responses built per turn by `ScriptedModel`) and a final answer; the
figure is the process CPU time of the run over its N + 1 turns, so it holds up on a loaded machine
better than wall time does.

Usage: ``python benchmarks/bench_turn_cpu.py [N] [REPEATS]`` (defaults 200 and 7).
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import time
from typing import Any

from statemachine_agent import Agent, AssistantMessage, TextBlock, ToolCallBlock, tool
from statemachine_agent.models import ScriptedModel


async def noop() -> str:
    """Do nothing."""
    return "ok"


NOOP = tool(noop)


def steps(n: int) -> list[AssistantMessage]:
    """N tool-call responses, then a final answer."""
    calls = [
        AssistantMessage(
            content=[ToolCallBlock(id=f"c{i}", name="noop", input={})], stop_reason="tool_use"
        )
        for i in range(n)
    ]
    return [*calls, AssistantMessage(content=[TextBlock(text="done")], stop_reason="end_turn")]


def measure(n: int, repeats: int) -> list[float]:
    """CPU microseconds per turn of each of ``repeats`` runs."""
    out = []
    for _ in range(repeats):
        agent = Agent(ScriptedModel(steps(n), record_requests=False), tools=[NOOP], max_turns=n + 5)
        seen: list[Any] = []
        agent.subscribe(seen.append)
        started = time.process_time()
        result = asyncio.run(agent.run("go"))
        out.append((time.process_time() - started) / (n + 1) * 1e6)
        assert result.state == "done", result.state
    return out


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 200
    repeats = int(sys.argv[2]) if len(sys.argv) > 2 else 7
    figures = measure(n, repeats)
    print(
        f"N={n}: median {statistics.median(figures):.1f} µs CPU/turn "
        f"(min {min(figures):.1f}, max {max(figures):.1f}, {repeats} runs, subscriber attached)"
    )


if __name__ == "__main__":
    main()
