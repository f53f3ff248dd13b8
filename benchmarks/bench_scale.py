"""Figure 5: scale. Many agents running concurrently in one process, 10 turns each, 10 ms model latency.

All agents share one `FunctionModel` that waits 10 ms (``asyncio.sleep``) and then builds the
response for the agent that asked, from its own history (9 turns of one call to a shared async no-op
tool, then a final answer, each with token usage): nothing is parsed, and nothing of a script is
held per agent, so the memory figures are the engine's. Each agent has an event subscriber.

Figures, for 100, 1,000 and 5,000 agents: wall time, turns per second, and CPU time per turn
(``time.process_time`` over the whole batch of runs: with 10 ms latency the process is CPU-bound
past a few hundred agents, so this is what grows if anything is super-linear); the target is the
CPU per turn at 5,000 agents within 1.2x of that at 100. Memory (tracemalloc, after
``gc.collect()``): an idle agent (constructed, no history), and an agent after its 10 turns minus
its messages (the retained memory of the agents after their runs, less what clearing their histories
frees); both targets are 10 KiB. Each size also shows its full (generation-2) collections and
the CPU time they took per turn (``gc.callbacks``). The growth is measured three ways: with
CPython's default collector thresholds; with the generation-0 threshold raised to 10,000
(``gc.set_threshold``); and, at the smallest and largest sizes, for minimal loops that build and keep
the same messages with no engine at all (`_common.minimal_run`): the growth a loop that keeps its
history as these message objects has before any engine is added (see the benchmarks README).

Usage: ``python benchmarks/bench_scale.py [--quick]``
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import resource
import time
import tracemalloc
from collections.abc import Sequence
from typing import Any

from _common import check_minimal, emit, median, minimal_run, quick, table

from statemachine_agent import (
    Agent,
    AssistantMessage,
    Message,
    State,
    TextBlock,
    ToolCallBlock,
    Usage,
    tool,
)
from statemachine_agent.models import FunctionModel

SIZES = (100, 1000, 5000)
TURNS = 10
LATENCY = 0.01
MEMORY_AGENTS = 1000
TUNED_THRESHOLD = 10_000


async def noop() -> str:
    """Do nothing."""
    return "ok"


NOOP = tool(noop)


async def respond(messages: Sequence[Message], _request: Any) -> AssistantMessage:
    """Wait LATENCY, then answer turn k of this agent's run (k = its responses so far + 1)."""
    await asyncio.sleep(LATENCY)
    done = sum(1 for m in messages if isinstance(m, AssistantMessage))
    usage = Usage(input_tokens=10 + 20 * done, output_tokens=5)
    if done < TURNS - 1:
        call = ToolCallBlock(id=f"toolu_{done}", name="noop", input={})
        return AssistantMessage(content=[call], stop_reason="tool_use", usage=usage)
    return AssistantMessage(content=[TextBlock(text="done")], stop_reason="end_turn", usage=usage)


MODEL = FunctionModel(respond)


def build(n: int) -> list[Agent]:
    agents = [Agent(MODEL, tools=[NOOP]) for _ in range(n)]
    for agent in agents:
        agent.subscribe(_drop)
    return agents


def _drop(_event: object) -> None:
    pass


async def run_all(agents: list[Agent], full: _FullCollections | None = None) -> tuple[float, float]:
    """Wall seconds and CPU seconds of running every agent once, concurrently (``full``: counts
    the full collections over the same window)."""
    with full or contextlib.nullcontext():
        cpu, wall = time.process_time(), time.perf_counter()
        results = await asyncio.gather(*(agent.run("go") for agent in agents))
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    assert all(r.state is State.DONE and r.turns == TURNS for r in results)
    return wall, cpu


def scale(
    n: int, reps: int, threshold: int | None = None, *, minimal: bool = False
) -> dict[str, float]:
    """Wall, turns/s and CPU per turn of ``n`` agents, and the full collections during the runs
    (``threshold``: the collector's generation-0 threshold during the runs, None keeps CPython's
    default; ``minimal``: `_common.minimal_run` loops instead of agents, the same responses and
    results with no engine)."""
    default = gc.get_threshold()
    if threshold is not None:
        gc.set_threshold(threshold, default[1], default[2])
    try:
        return _scale(n, reps, minimal)
    finally:
        gc.set_threshold(*default)


class _FullCollections:
    """Counts the collector's full (generation 2) collections and the CPU time they take."""

    def __init__(self) -> None:
        self.count, self.seconds, self._started = 0, 0.0, 0.0

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        if info["generation"] != 2:
            return
        if phase == "start":
            self._started = time.process_time()
        else:
            self.count += 1
            self.seconds += time.process_time() - self._started

    def __enter__(self) -> _FullCollections:
        gc.callbacks.append(self)
        return self

    def __exit__(self, *_exc: object) -> None:
        gc.callbacks.remove(self)


async def run_minimal(n: int, full: _FullCollections) -> tuple[float, float]:
    """Wall seconds and CPU seconds of ``n`` minimal loops run concurrently (``full``: counts the
    full collections over the same window)."""
    with full:
        cpu, wall = time.process_time(), time.perf_counter()
        histories = await asyncio.gather(*(minimal_run(respond, noop) for _ in range(n)))
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    for history in histories:
        check_minimal(history, 1, TURNS - 1, "ok")
    return wall, cpu


def _scale(n: int, reps: int, minimal: bool) -> dict[str, float]:
    runs = []
    for _ in range(reps):
        agents = None if minimal else build(n)
        gc.collect()
        full = _FullCollections()
        wall, cpu = asyncio.run(run_minimal(n, full) if agents is None else run_all(agents, full))
        runs.append((cpu / (n * TURNS) * 1e6, wall, full.count, full.seconds / (n * TURNS) * 1e6))
        del agents
    cpus = [r[0] for r in runs]
    middle = sorted(runs)[(reps - 1) // 2]  # the run with the median CPU (the lower middle)
    return {
        "wall_s": median([r[1] for r in runs]),
        "turns_per_s": n * TURNS / median([r[1] for r in runs]),
        "cpu_us_per_turn": median(cpus),
        "cpu_min": min(cpus),
        "cpu_max": max(cpus),
        "full_collections": middle[2],  # of the median run, as the CPU they took
        "full_collection_us_per_turn": middle[3],
    }


def _traced() -> int:
    gc.collect()
    return tracemalloc.get_traced_memory()[0]


def memory(n: int) -> dict[str, float]:
    """KiB per idle agent, KiB per agent after 10 turns minus its messages, µs per Agent()."""
    build(10)  # first-use costs (the shared machine, caches) are not an agent's
    gc.collect()
    start = time.perf_counter()
    agents = build(n)
    construct = (time.perf_counter() - start) / n * 1e6
    del agents
    tracemalloc.start()
    before = _traced()
    agents = build(n)
    idle = _traced() - before
    asyncio.run(run_all(agents))
    after_runs = _traced() - before
    for agent in agents:
        agent.messages = []
    without_messages = _traced() - before
    tracemalloc.stop()
    return {
        "idle_kib": idle / n / 1024,
        "after_10_turns_kib": after_runs / n / 1024,
        "after_10_turns_minus_messages_kib": without_messages / n / 1024,
        "construct_us": construct,
    }


def main() -> dict[str, Any]:
    reps = 1 if quick() else 3
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    asyncio.run(run_all(build(20)))  # warm-up
    sizes = (100, 1000) if quick() else SIZES
    figures = {n: scale(n, reps) for n in sizes}
    # The same with the collector's generation-0 threshold raised (a service setting, see the
    # benchmarks README): what is left of the growth is the collector's, not the engine's.
    tuned = {n: scale(n, 1, TUNED_THRESHOLD) for n in (min(sizes), max(sizes))}
    # The floor: minimal loops (no engine) building and keeping the same messages, at both ends.
    minimal = {n: scale(n, reps, minimal=True) for n in (min(sizes), max(sizes))}
    rss_growth = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss_before) / 1024
    mem = memory(MEMORY_AGENTS)
    rows = [
        [
            n,
            f["wall_s"],
            f["turns_per_s"],
            f["cpu_us_per_turn"],
            f"{f['cpu_min']:.1f}-{f['cpu_max']:.1f}",
            f["full_collections"],
            f["full_collection_us_per_turn"],
        ]
        for n, f in [*figures.items(), *((f"{n} minimal", f) for n, f in minimal.items())]
    ]
    print(
        table(
            [
                "agents",
                "wall s",
                "turns/s",
                "CPU µs/turn",
                "CPU spread",
                "full collections",
                "their CPU µs/turn",
            ],
            rows,
            f"Figure 5: agents x {TURNS} turns, 10 ms model, a subscriber each; minimal rows: "
            f"no engine, no subscriber (median of {reps})",
        )
    )
    largest = max(figures)
    growth = figures[largest]["cpu_us_per_turn"] / figures[min(figures)]["cpu_us_per_turn"]
    tuned_growth = tuned[largest]["cpu_us_per_turn"] / tuned[min(figures)]["cpu_us_per_turn"]
    minimal_growth = minimal[largest]["cpu_us_per_turn"] / minimal[min(figures)]["cpu_us_per_turn"]
    mem_rows = [
        ["memory per idle agent (KiB)", mem["idle_kib"]],
        ["memory per agent after 10 turns (KiB)", mem["after_10_turns_kib"]],
        ["  the same minus its messages (KiB)", mem["after_10_turns_minus_messages_kib"]],
        ["Agent() construction (µs)", mem["construct_us"]],
        [f"CPU per turn, {largest} agents over {min(figures)}", growth],
        [
            f"  the same with gc.set_threshold({TUNED_THRESHOLD}, ...)"
            f" ({tuned[min(figures)]['cpu_us_per_turn']:.0f} -> "
            f"{tuned[largest]['cpu_us_per_turn']:.0f} µs)",
            tuned_growth,
        ],
        [
            f"  a minimal loop keeping the same messages, no engine"
            f" ({minimal[min(figures)]['cpu_us_per_turn']:.0f} -> "
            f"{minimal[largest]['cpu_us_per_turn']:.0f} µs)",
            minimal_growth,
        ],
        ["peak RSS growth of the process (MiB)", rss_growth],
    ]
    print(table(["measure", "value"], mem_rows, f"Memory ({MEMORY_AGENTS} agents)"))
    targets = {
        "idle_agent_le_10kib": mem["idle_kib"] <= 10,
        "agent_after_10_turns_minus_messages_le_10kib": mem["after_10_turns_minus_messages_kib"]
        <= 10,
        f"cpu_per_turn_{largest}_over_{min(figures)}_le_1_2": growth <= 1.2,
    }
    print("targets:", ", ".join(f"{k}: {v}" for k, v in targets.items()))
    data = {
        "turns": TURNS,
        "sizes": {str(n): f for n, f in figures.items()},
        "rss_growth_mib": rss_growth,
        **mem,
        "cpu_growth": growth,
        "cpu_growth_tuned_gc": tuned_growth,
        "tuned": {str(n): f for n, f in tuned.items()},
        "cpu_growth_minimal_loop": minimal_growth,
        "minimal_loop": {str(n): f for n, f in minimal.items()},
        "targets": targets,
    }
    emit("scale", data)
    return data


if __name__ == "__main__":
    main()
