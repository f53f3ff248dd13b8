"""Figure 12: the per-turn cost of context accounting (issue 13).

The same 200-turn run (one no-op tool call per turn, zero-latency `ScriptedModel` whose responses
report usage) runs with the agent's context meter as shipped and with it stubbed out (no count
kept, no estimate made), interleaved, in two settings: nobody subscribed (the meter only records
the response's count) and a subscriber present (each ``turn_end`` event carries the estimated
`ContextUsage`). The noise floor is the spread between two identical stubbed configurations
measured the same way. Times are CPU time of the process (``time.process_time``: the engine runs
in one thread), which a shared machine disturbs less than wall time. Accounting is "within noise"
when its overhead is at most the larger of that floor and 5 %. The direct cost of the meter per
turn (one ``counted`` and, with a subscriber, one ``usage`` over the turn's new messages) is timed
on its own as well.

Usage: ``python benchmarks/bench_context.py [--quick]``
"""

from __future__ import annotations

import asyncio
import gc
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from _common import emit, median, quick, table

from statemachine_agent import Agent, AssistantMessage, State, TextBlock, ToolCallBlock, tool
from statemachine_agent._accounting import ContextMeter, ContextUsage
from statemachine_agent._messages import Usage
from statemachine_agent.models import ScriptedModel

TURNS = 200


async def noop() -> str:
    """Do nothing."""
    return "ok"


NOOP = tool(noop)
USAGE = Usage(input_tokens=1_000, cache_read_tokens=5_000, output_tokens=50)


def steps(n: int) -> list[AssistantMessage]:
    out = [
        AssistantMessage(
            content=[ToolCallBlock(id=f"call_{i}", name="noop", input={})],
            stop_reason="tool_use",
            usage=USAGE,
        )
        for i in range(n)
    ]
    out.append(
        AssistantMessage(content=[TextBlock(text="done")], stop_reason="end_turn", usage=USAGE)
    )
    return out


@contextmanager
def stubbed() -> Iterator[None]:
    """The meter does nothing: no count kept, a constant usage (the cost of accounting removed)."""
    counted, usage, deferred = ContextMeter.counted, ContextMeter.usage, ContextMeter.deferred
    constant = ContextUsage(0, 0, 0, None)
    ContextMeter.counted = lambda self, messages, usage: None  # type: ignore[method-assign]
    ContextMeter.usage = lambda self, messages, window: constant  # type: ignore[method-assign]
    ContextMeter.deferred = lambda self, messages, window: constant  # type: ignore[method-assign]
    try:
        yield
    finally:
        ContextMeter.counted, ContextMeter.usage = counted, usage  # type: ignore[method-assign]
        ContextMeter.deferred = deferred  # type: ignore[method-assign]


async def one_run(script: list[AssistantMessage], subscribe: bool) -> float:
    model = ScriptedModel(script, record_requests=False, context_window=200_000)
    agent = Agent(model, tools=[NOOP], max_turns=TURNS + 1)
    if subscribe:
        agent.subscribe(lambda event: None)
    start = time.process_time()
    result = await agent.run("go")
    elapsed = time.process_time() - start
    assert result.state is State.DONE, result.error
    return elapsed / (TURNS + 1) * 1e6


def measure(subscribe: bool, repeats: int) -> dict[str, float]:
    script = steps(TURNS)
    samples: dict[str, list[float]] = {"stubbed": [], "stubbed_again": [], "accounting": []}
    asyncio.run(one_run(script, subscribe))  # warm-up
    for _ in range(repeats):
        for name in samples:
            gc.collect()
            if name == "accounting":
                samples[name].append(asyncio.run(one_run(script, subscribe)))
            else:
                with stubbed():
                    samples[name].append(asyncio.run(one_run(script, subscribe)))
    return {name: median(values) for name, values in samples.items()}


def direct_cost(repeats: int = 2_000) -> dict[str, float]:
    """Microseconds per turn of the meter itself on a growing history (the turn adds one
    response and one result): ``counted`` alone (no subscriber), ``counted`` + ``deferred``
    (a subscriber: the ``turn_end`` event's figure, not yet read), and ``counted`` + ``usage``
    (the figure made: what reading it costs)."""
    script = steps(repeats)
    from statemachine_agent import UserMessage
    from statemachine_agent._messages import text_result

    out: dict[str, float] = {}
    for label, extra in (
        ("counted", None),
        ("counted_and_deferred", "deferred"),
        ("counted_and_usage", "usage"),
    ):
        meter = ContextMeter()
        history: list[Any] = [UserMessage("go")]
        spent = 0.0
        for response in script[:repeats]:
            call = response.tool_calls[0]
            result = text_result(call, "ok")
            start = time.perf_counter()
            meter.counted(history, response.usage)
            history.append(response)
            history.append(result)
            if extra == "deferred":
                meter.deferred(history, 200_000)
            elif extra == "usage":
                meter.usage(history, 200_000)
            spent += time.perf_counter() - start
        out[label] = spent / repeats * 1e6
    return out


def main() -> dict[str, Any]:
    repeats = 3 if quick() else 25
    direct = direct_cost()
    results = {
        label: measure(sub, repeats)
        for label, sub in (("no subscriber", False), ("subscriber", True))
    }
    rows = []
    targets = {}
    for label, r in results.items():
        noise = abs(r["stubbed_again"] / r["stubbed"] - 1)
        overhead = r["accounting"] / r["stubbed"] - 1
        rows.append(
            [label, r["stubbed"], r["stubbed_again"], r["accounting"], noise * 100, overhead * 100]
        )
        targets[f"{label.replace(' ', '_')}_overhead_within_noise"] = overhead <= max(noise, 0.05)
    print(
        table(
            [
                "setting",
                "stubbed µs/turn",
                "stubbed again µs/turn",
                "accounting µs/turn",
                "noise %",
                "overhead %",
            ],
            rows,
            f"Figure 12: per-turn cost of context accounting ({TURNS} turns, usage reported)",
        )
    )
    print(
        f"the meter itself: counted {direct['counted']:.2f} µs/turn; with a subscriber, counted "
        f"+ deferred {direct['counted_and_deferred']:.2f} µs/turn (the turn_end figure, made "
        f"only when read: counted + usage {direct['counted_and_usage']:.2f} µs/turn); history "
        "growing by 2 messages a turn"
    )
    print("targets:", ", ".join(f"{k}: {v}" for k, v in targets.items()))
    data = {"us_per_turn": results, "meter_us_per_turn": direct, "targets": targets}
    emit("context", data)
    return data


if __name__ == "__main__":
    main()
