"""Figure 1: per-turn overhead of N turns of one no-op tool call each, zero-latency model.

Three loops run the same conversation in the same process: a bare ``while`` loop over dicts (the
floor), this engine (a `FunctionModel` building each response when asked, one event subscriber
attached), and pydantic-ai's ``Agent`` with its ``FunctionModel``, which builds each response the
same way (only when pydantic-ai is importable: it lives in the benchmark environment, never in the
project's dependencies). A run is N tool-call turns plus the final answer; the figures are the
run's CPU time (``time.process_time``) and wall time over its N + 1 turns, medians of repeated runs
with their min-max spread. Agent construction is outside the timing.

The runs of one size share one event loop, as a service's agents do, and the collector runs as
it does in a service (one ``gc.collect()`` before the size, none between runs: a full collection
just before a timed run evicts the CPU caches, a cost of the benchmark rather than of a run; see
`bench_turn_cpu`). Each loop's runs go in blocks, back to back (a service runs one framework),
each block after an untimed warm-up run that also collects what the previous block left; the
loops take turns in three rounds, so the machine's slow periods fall on all of them.

Usage: ``python benchmarks/bench_overhead.py [--quick]``
"""

from __future__ import annotations

import asyncio
import gc
import time
from collections.abc import Awaitable, Callable
from typing import Any

from _common import emit, median, pydantic_ai_version, quick, skip_note, table

from statemachine_agent import Agent, AssistantMessage, State, TextBlock, ToolCallBlock, tool
from statemachine_agent.models import FunctionModel

SIZES = (20, 200, 2000)


async def noop() -> str:
    """Do nothing."""
    return "ok"


NOOP = tool(noop)


def make_engine(n: int) -> Callable[[], Awaitable[tuple[float, float]]]:
    """The engine as a service runs it: a `FunctionModel` that builds each response when asked
    (as pydantic-ai's `FunctionModel` does below), one event subscriber attached."""

    async def run() -> tuple[float, float]:
        calls = 0

        def respond(_messages: Any, _request: Any) -> AssistantMessage:
            nonlocal calls
            calls += 1
            if calls <= n:
                call = ToolCallBlock(id=f"call_{calls}", name="noop", input={})
                return AssistantMessage(content=[call], stop_reason="tool_use")
            return AssistantMessage(content=[TextBlock(text="done")], stop_reason="end_turn")

        agent = Agent(FunctionModel(respond), tools=[NOOP], max_turns=n + 1)
        agent.subscribe(lambda _event: None)
        cpu, start = time.process_time(), time.perf_counter()
        result = await agent.run("go")
        elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu
        assert result.state is State.DONE and result.turns == n + 1, (result.state, result.error)
        return elapsed, cpu

    return run


def make_bare(n: int) -> Callable[[], Awaitable[float]]:
    async def model(turn: int) -> dict[str, Any]:
        if turn < n:
            call = {"type": "tool_use", "id": f"call_{turn}", "name": "noop", "input": {}}
            return {"role": "assistant", "content": [call], "stop_reason": "tool_use"}
        return {"role": "assistant", "content": [{"type": "text", "text": "done"}]}

    tools = {"noop": noop}

    async def run() -> tuple[float, float]:
        cpu, start = time.process_time(), time.perf_counter()
        history: list[dict[str, Any]] = [{"role": "user", "content": "go"}]
        turn = 0
        while True:
            response = await model(turn)
            turn += 1
            history.append(response)
            calls = [b for b in response["content"] if b["type"] == "tool_use"]
            if not calls:
                break
            for call in calls:
                output = await tools[call["name"]](**call["input"])
                block = {"type": "tool_result", "tool_use_id": call["id"], "content": output}
                history.append({"role": "user", "content": [block]})
        elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu
        assert turn == n + 1
        return elapsed, cpu

    return run


def make_pydantic_ai(n: int) -> Callable[[], Awaitable[tuple[float, float]]]:
    from pydantic_ai import Agent as PAgent
    from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart
    from pydantic_ai.models.function import FunctionModel
    from pydantic_ai.usage import UsageLimits

    async def run() -> tuple[float, float]:
        calls = 0

        def respond(_messages: Any, _info: Any) -> ModelResponse:
            nonlocal calls
            calls += 1
            if calls <= n:
                return ModelResponse(parts=[ToolCallPart("noop", {}, tool_call_id=f"call_{calls}")])
            return ModelResponse(parts=[TextPart("done")])

        agent = PAgent(FunctionModel(respond))
        agent.tool_plain(noop)
        limits = UsageLimits(request_limit=None)
        cpu, start = time.process_time(), time.perf_counter()
        result = await agent.run("go", usage_limits=limits)
        elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu
        assert result.output == "done" and calls == n + 1
        return elapsed, cpu

    return run


LOOPS = ("bare", "engine", "pydantic_ai")
ROUNDS = 3


def repeats(n: int) -> dict[str, int]:
    """Repeats per loop for size ``n`` (pydantic-ai's cost grows with history, so fewer)."""
    if quick():
        return {"bare": 3, "engine": 3, "pydantic_ai": 1 if n < 2000 else 0}
    table_ = {20: (41, 41, 21), 200: (11, 11, 5), 2000: (5, 5, 1)}
    bare, engine, pai = table_[n]
    return {"bare": bare, "engine": engine, "pydantic_ai": pai}


def measure(n: int, with_pai: bool) -> dict[str, dict[str, float] | None]:
    """Wall and CPU microseconds per turn (median, min, max) for each loop at size ``n``."""
    makers: dict[str, Callable[[int], Callable[[], Awaitable[tuple[float, float]]]]] = {
        "bare": make_bare,
        "engine": make_engine,
    }
    if with_pai:
        makers["pydantic_ai"] = make_pydantic_ai
    counts = repeats(n)
    runs = {name: make(n) for name, make in makers.items() if counts[name]}
    samples: dict[str, list[tuple[float, float]]] = {name: [] for name in runs}

    async def in_rounds() -> None:
        for round_ in range(ROUNDS):
            for name, run in runs.items():
                # This round's share of the loop's runs, after a warm-up run (first-run costs,
                # and the collection of what the previous block left behind).
                share = counts[name] // ROUNDS + (round_ < counts[name] % ROUNDS)
                if not share:
                    continue
                await makers[name](20)()
                for _ in range(share):
                    wall, cpu = await run()
                    samples[name].append((wall / (n + 1) * 1e6, cpu / (n + 1) * 1e6))

    gc.collect()
    asyncio.run(in_rounds())
    # Every loop has its key (None when it did not run: pydantic-ai not importable, or no
    # repeats at this size), so the table and the JSON keep one shape.
    out: dict[str, dict[str, float] | None] = {name: None for name in LOOPS}
    for name, values in samples.items():
        walls, cpus = [w for w, _ in values], [c for _, c in values]
        out[name] = {
            "wall": median(walls),
            "wall_min": min(walls),
            "wall_max": max(walls),
            "cpu": median(cpus),
            "cpu_min": min(cpus),
            "cpu_max": max(cpus),
            "runs": len(values),
        }
    return out


def _cell(figure: dict[str, float] | None, key: str) -> str | None:
    if figure is None:
        return None
    return f"{figure[key]:.1f} ({figure[key + '_min']:.1f}-{figure[key + '_max']:.1f})"


def main() -> dict[str, Any]:
    version = pydantic_ai_version()
    with_pai = version is not None
    if not with_pai:
        print(skip_note())
    results = {n: measure(n, with_pai) for n in SIZES}
    rows = []
    for n, r in results.items():
        engine, bare, pai = r["engine"], r["bare"], r["pydantic_ai"]
        assert engine is not None and bare is not None
        rows.append(
            [
                n,
                _cell(bare, "cpu"),
                _cell(engine, "cpu"),
                _cell(engine, "wall"),
                _cell(pai, "cpu"),
                _cell(pai, "wall"),
                None if pai is None else pai["cpu"] / engine["cpu"],
                None if pai is None else pai["wall"] / engine["wall"],
            ]
        )
    print(
        table(
            [
                "N turns",
                "bare CPU µs/turn",
                "engine CPU µs/turn",
                "engine wall µs/turn",
                "pydantic-ai CPU µs/turn",
                "pydantic-ai wall µs/turn",
                "pydantic-ai / engine (CPU)",
                "pydantic-ai / engine (wall)",
            ],
            rows,
            "Figure 1: per-turn overhead (zero-latency model building each response, one no-op "
            "call per turn; median (min-max))",
        )
    )
    at20 = results[20]
    engine20 = at20["engine"]
    assert engine20 is not None
    pai20 = at20["pydantic_ai"]
    growth = {
        name: results[2000][name]["cpu"] / value["cpu"]  # type: ignore[index]
        for name, value in at20.items()
        if value and results[2000][name]
    }
    print(
        "per-turn CPU, 2000-turn run over 20-turn run: "
        + ", ".join(f"{k} {v:.2f}x" for k, v in growth.items())
    )
    ratio = None if pai20 is None else pai20["cpu"] / engine20["cpu"]
    targets = {
        "engine_cpu_us_per_turn_at_20_le_50": engine20["cpu"] <= 50,
        "pydantic_ai_over_engine_cpu_at_20_ge_40": None if ratio is None else ratio >= 40,
    }
    print("targets:", ", ".join(f"{k}: {v}" for k, v in targets.items()))
    data = {
        "us_per_turn": {str(n): r for n, r in results.items()},
        "pydantic_ai_version": version,
        "growth_2000_over_20": growth,
        "targets": targets,
    }
    emit("overhead", data)
    return data


if __name__ == "__main__":
    main()
