"""The headline per-turn figure: CPU time per turn in the realistic set-up (issue 17).

A run is N turns, each a response of ``batch`` parallel calls of a no-op tool, then a final answer.
The model is a `FunctionModel` that builds each response when it is asked (as a real provider's
adapter builds its message from the wire), one event subscriber is attached (as every UI and log
is), and the figure is the process CPU time of the run (``time.process_time``, measured inside
the running event loop: the loop's creation is not a turn's cost) over its N + 1 turns, beside the
wall time of the same runs. Each cell is the median of several runs; the spread (min-max) is
printed with it.

The runs of a cell share one event loop, as the agents of a service do: an untimed warm-up run,
then the timed runs, each with a fresh agent, the garbage collector running as it does in a
service (one ``gc.collect()`` before the cell, none between runs). Until 2026-11-30 each run had
its own loop and a ``gc.collect()`` just before it; that full collection evicts the CPU caches
and added 15-20 µs to every turn of a 20-turn run (measured back to back: 70-75 against 54-57
µs), a cost of the benchmark that no run in a service pays.

Beside the single-call cells, the same runs done by the minimal loop (`_common.minimal_run`: the
same response objects and result messages, no engine: no events, checks, projection or machine;
not figure 1's bare loop over dicts) give the least any loop pays for these turns. They run after
the engine's cells, so on a VM whose speed changes within seconds the difference of the two is
only as good as the moment.

Before/after comparisons of the engine run this file against an older checkout:
``PYTHONPATH=/path/to/old/checkout python benchmarks/bench_turn_cpu.py``.

Usage: ``python benchmarks/bench_turn_cpu.py [--quick]`` (all cells), or
``python benchmarks/bench_turn_cpu.py N BATCH [REPEATS] [--minimal]`` (one cell, a line of text;
``--minimal``: the minimal loop's).
"""

from __future__ import annotations

import asyncio
import gc
import statistics
import sys
import time
from typing import Any

from statemachine_agent import Agent, AssistantMessage, TextBlock, ToolCallBlock, tool
from statemachine_agent.models import FunctionModel

TARGET_US = 50.0
SIZES = (20, 2000)
BATCHES = (1, 2, 4)


async def noop() -> str:
    """Do nothing."""
    return "ok"


NOOP = tool(noop)


def responder(n: int, batch: int) -> Any:
    """A model function answering N responses of ``batch`` calls each, then ``done``, building
    each response when asked."""
    asked = 0

    def respond(_messages: Any, _request: Any) -> AssistantMessage:
        nonlocal asked
        asked += 1
        if asked > n:
            return AssistantMessage(content=[TextBlock(text="done")], stop_reason="end_turn")
        calls = [ToolCallBlock(id=f"call_{asked}_{k}", name="noop", input={}) for k in range(batch)]
        return AssistantMessage(content=calls, stop_reason="tool_use")

    return respond


def build(n: int, batch: int, *, subscribe: bool = True) -> tuple[Agent, list[Any]]:
    """A fresh agent for one run, with a subscriber keeping every event in the list returned
    (``subscribe=False``: none attached, the list stays empty)."""
    agent = Agent(FunctionModel(responder(n, batch)), tools=[NOOP], max_turns=n + 5)
    seen: list[Any] = []
    if subscribe:
        agent.subscribe(seen.append)
    return agent, seen


async def one_run(n: int, batch: int) -> tuple[float, float]:
    """CPU and wall microseconds per turn of one run (a fresh agent), in the running loop."""
    agent, _seen = build(n, batch)
    cpu, wall = time.process_time(), time.perf_counter()
    result = await agent.run("go")
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    assert result.state == "done", (result.state, result.error)
    return cpu / (n + 1) * 1e6, wall / (n + 1) * 1e6


async def one_minimal_run(n: int, batch: int) -> tuple[float, float]:
    """CPU and wall microseconds per turn of the same run done by a minimal loop (no engine)."""
    from _common import check_minimal, minimal_run

    respond = responder(n, batch)
    cpu, wall = time.process_time(), time.perf_counter()
    history = await minimal_run(respond, noop)
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    check_minimal(history, batch, n)
    return cpu / (n + 1) * 1e6, wall / (n + 1) * 1e6


async def runs(
    n: int, batch: int, repeats: int, minimal: bool = False
) -> list[tuple[float, float]]:
    """One untimed warm-up run, then ``repeats`` timed runs, all in this event loop (``minimal``:
    of the minimal loop instead of the engine)."""
    run = one_minimal_run if minimal else one_run
    await run(20, batch)
    return [await run(n, batch) for _ in range(repeats)]


def repeats_for(n: int, quick: bool) -> int:
    if quick:
        return 2
    return 21 if n < 200 else 5


def measure(n: int, batch: int, repeats: int, minimal: bool = False) -> dict[str, float]:
    """Median and spread of CPU and wall µs per turn over ``repeats`` runs (one warm-up first),
    in one event loop (``minimal``: of the minimal loop)."""
    gc.collect()
    timed = asyncio.run(runs(n, batch, repeats, minimal))
    cpu = [c for c, _ in timed]
    wall = [w for _, w in timed]
    return {
        "cpu_us": statistics.median(cpu),
        "cpu_min": min(cpu),
        "cpu_max": max(cpu),
        "wall_us": statistics.median(wall),
        "wall_min": min(wall),
        "wall_max": max(wall),
        "runs": repeats,
    }


def main() -> dict[str, Any]:
    from _common import emit, quick, table

    results = {
        f"n{n}_batch{b}": measure(n, b, repeats_for(n, quick())) for n in SIZES for b in BATCHES
    }
    rows = []
    for key, r in results.items():
        n, b = key[1:].split("_batch")
        rows.append(
            [
                n,
                b,
                r["cpu_us"],
                f"{r['cpu_min']:.1f}-{r['cpu_max']:.1f}",
                r["wall_us"],
                f"{r['wall_min']:.1f}-{r['wall_max']:.1f}",
                int(r["runs"]),
            ]
        )
    print(
        table(
            [
                "N turns",
                "calls/turn",
                "CPU µs/turn",
                "CPU spread",
                "wall µs/turn",
                "wall spread",
                "runs",
            ],
            rows,
            "Headline: per-turn cost, subscriber attached, responses built per turn (median)",
        )
    )
    minimal = {f"n{n}_batch1": measure(n, 1, repeats_for(n, quick()), minimal=True) for n in SIZES}
    print(
        table(
            [
                "N turns",
                "calls/turn",
                "minimal loop CPU µs/turn",
                "spread",
                "engine",
                "engine - minimal",
            ],
            [
                [
                    key[1:].split("_batch")[0],
                    1,
                    r["cpu_us"],
                    f"{r['cpu_min']:.1f}-{r['cpu_max']:.1f}",
                    results[key]["cpu_us"],
                    results[key]["cpu_us"] - r["cpu_us"],
                ]
                for key, r in minimal.items()
            ],
            "The same runs with no engine: a minimal loop building the same responses and results "
            "(median)",
        )
    )
    worst = max(r["cpu_us"] for k, r in results.items() if k.endswith("_batch1"))
    targets = {f"cpu_us_per_turn_single_call_le_{TARGET_US:g}": worst <= TARGET_US}
    print(f"targets: {', '.join(f'{k}: {v}' for k, v in targets.items())}")
    out = {"cells": results, "minimal_loop": minimal, "targets": targets}
    emit("turn_cpu", out)
    return out


if __name__ == "__main__":
    positional = [a for a in sys.argv[1:] if not a.startswith("--")]
    if len(positional) > 1:
        size, width = int(positional[0]), int(positional[1])
        count = int(positional[2]) if len(positional) > 2 else 7
        without = "--minimal" in sys.argv
        r = measure(size, width, count, minimal=without)
        print(
            f"N={size} batch={width}: median {r['cpu_us']:.1f} µs CPU/turn "
            f"({r['cpu_min']:.1f}-{r['cpu_max']:.1f}), wall {r['wall_us']:.1f} µs/turn, "
            f"{count} runs, " + ("a minimal loop (no engine)" if without else "subscriber attached")
        )
    else:
        main()
