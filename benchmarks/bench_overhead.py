"""Figure 1: per-turn overhead of N turns of one no-op tool call each, zero-latency model.

Three loops run the same conversation in the same process: a bare ``while`` loop over dicts (the
floor), this engine (`ScriptedModel` with pre-built `AssistantMessage` steps, ``record_requests=
False``), and pydantic-ai's ``Agent`` with its ``FunctionModel`` (only when pydantic-ai is importable:
it lives in the benchmark environment, never in the project's dependencies). A run is N tool-call
turns plus the final answer; the figure is the run's wall time over its N + 1 turns, median of
repeated runs interleaved between the loops. Agent construction is outside the timing.

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
from statemachine_agent.models import ScriptedModel

SIZES = (20, 200, 2000)


async def noop() -> str:
    """Do nothing."""
    return "ok"


NOOP = tool(noop)


def engine_steps(n: int) -> list[AssistantMessage]:
    """N tool-call responses, then a final answer."""
    steps = [
        AssistantMessage(
            content=[ToolCallBlock(id=f"call_{i}", name="noop", input={})], stop_reason="tool_use"
        )
        for i in range(n)
    ]
    steps.append(AssistantMessage(content=[TextBlock(text="done")], stop_reason="end_turn"))
    return steps


def make_engine(n: int) -> Callable[[], Awaitable[float]]:
    steps = engine_steps(n)

    async def run() -> float:
        agent = Agent(ScriptedModel(steps, record_requests=False), tools=[NOOP], max_turns=n + 1)
        start = time.perf_counter()
        result = await agent.run("go")
        elapsed = time.perf_counter() - start
        assert result.state is State.DONE and result.turns == n + 1, (result.state, result.error)
        return elapsed

    return run


def make_bare(n: int) -> Callable[[], Awaitable[float]]:
    async def model(turn: int) -> dict[str, Any]:
        if turn < n:
            call = {"type": "tool_use", "id": f"call_{turn}", "name": "noop", "input": {}}
            return {"role": "assistant", "content": [call], "stop_reason": "tool_use"}
        return {"role": "assistant", "content": [{"type": "text", "text": "done"}]}

    tools = {"noop": noop}

    async def run() -> float:
        start = time.perf_counter()
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
        elapsed = time.perf_counter() - start
        assert turn == n + 1
        return elapsed

    return run


def make_pydantic_ai(n: int) -> Callable[[], Awaitable[float]]:
    from pydantic_ai import Agent as PAgent
    from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart
    from pydantic_ai.models.function import FunctionModel
    from pydantic_ai.usage import UsageLimits

    async def run() -> float:
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
        start = time.perf_counter()
        result = await agent.run("go", usage_limits=limits)
        elapsed = time.perf_counter() - start
        assert result.output == "done" and calls == n + 1
        return elapsed

    return run


LOOPS = ("bare", "engine", "pydantic_ai")


def repeats(n: int) -> dict[str, int]:
    """Repeats per loop for size ``n`` (pydantic-ai's cost grows with history, so fewer)."""
    if quick():
        return {"bare": 3, "engine": 3, "pydantic_ai": 1 if n < 2000 else 0}
    table_ = {20: (41, 41, 21), 200: (11, 11, 5), 2000: (5, 5, 1)}
    bare, engine, pai = table_[n]
    return {"bare": bare, "engine": engine, "pydantic_ai": pai}


def measure(n: int, with_pai: bool) -> dict[str, float | None]:
    """Microseconds per turn (median) for each loop at size ``n``."""
    makers: dict[str, Callable[[int], Callable[[], Awaitable[float]]]] = {
        "bare": make_bare,
        "engine": make_engine,
    }
    if with_pai:
        makers["pydantic_ai"] = make_pydantic_ai
    counts = repeats(n)
    runs = {name: make(n) for name, make in makers.items() if counts[name]}
    samples: dict[str, list[float]] = {name: [] for name in runs}
    for name in runs:  # warm-up (imports, caches, first-run costs) on a short run
        asyncio.run(makers[name](20)())
    for i in range(max(counts.values())):
        for name, run in runs.items():
            if i < counts[name]:
                gc.collect()
                samples[name].append(asyncio.run(run()) / (n + 1) * 1e6)
    # Every loop has its key (None when it did not run: pydantic-ai not importable, or no
    # repeats at this size), so the table and the JSON keep one shape.
    out: dict[str, float | None] = {name: None for name in LOOPS}
    out.update({name: median(values) for name, values in samples.items()})
    return out


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
                bare,
                engine,
                pai,
                engine / bare,
                None if pai is None else pai / engine,
            ]
        )
    print(
        table(
            [
                "N turns",
                "bare loop µs/turn",
                "engine µs/turn",
                "pydantic-ai µs/turn",
                "engine / bare",
                "pydantic-ai / engine",
            ],
            rows,
            "Figure 1: per-turn overhead (zero-latency model, one no-op tool call per turn)",
        )
    )
    at20 = results[20]
    engine20 = at20["engine"]
    assert engine20 is not None
    pai20 = at20["pydantic_ai"]
    growth = {
        name: (results[2000][name] or 0) / value
        for name, value in at20.items()
        if value and results[2000][name]
    }
    print(
        "per-turn cost, 2000-turn run over 20-turn run: "
        + ", ".join(f"{k} {v:.2f}x" for k, v in growth.items())
    )
    targets = {
        "engine_us_per_turn_at_20_le_150": engine20 <= 150,
        "pydantic_ai_over_engine_at_20_ge_20": None if pai20 is None else pai20 / engine20 >= 20,
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
