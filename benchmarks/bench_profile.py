"""Figure 7: where the per-turn time goes. cProfile of a 2000-turn run in the headline set-up of
`bench_turn_cpu` (one no-op tool call a turn, zero-latency model building each response, a
subscriber attached), functions sorted by own time, with each one's share of the profiled run.

cProfile inflates small calls, so the shares matter, not the absolute numbers (figure 1 has those).
With ``--pyinstrument`` (when pyinstrument is importable) a sampling call tree is printed instead.

Usage: ``python benchmarks/bench_profile.py [--quick] [--pyinstrument]``
"""

from __future__ import annotations

import asyncio
import cProfile
import pstats
import sys
from typing import Any

from _common import emit, quick, table
from bench_turn_cpu import build

from statemachine_agent import State

TOP = 20


async def run(n: int) -> None:
    agent, _seen = build(n, 1)
    result = await agent.run("go")
    assert result.state is State.DONE


def where(func: tuple[str, int, str]) -> str:
    path, line, name = func
    for marker in ("statemachine_agent/", "benchmarks/", "site-packages/", "python3."):
        if marker in path:
            path = path.split(marker, 1)[1]
            break
    return f"{path}:{line}({name})" if line else name


def main() -> dict[str, Any]:
    n = 300 if quick() else 2000
    asyncio.run(run(20))  # warm-up
    if "--pyinstrument" in sys.argv:
        from pyinstrument import Profiler

        profiler = Profiler(interval=0.0001)
        profiler.start()
        asyncio.run(run(n))
        profiler.stop()
        print(profiler.output_text(unicode=True, color=False))
    profile = cProfile.Profile()
    profile.enable()
    asyncio.run(run(n))
    profile.disable()
    stats = pstats.Stats(profile)
    entries: dict[Any, Any] = stats.stats  # type: ignore[attr-defined]
    total = sum(v[2] for v in entries.values())
    ranked = sorted(entries.items(), key=lambda kv: kv[1][2], reverse=True)[:TOP]
    rows = []
    top = []
    for func, (_cc, calls, own, cumulative, _callers) in ranked:
        rows.append([where(func), calls / (n + 1), own / total * 100, cumulative / total * 100])
        top.append({"function": where(func), "calls": calls, "own_share": own / total})
    print(
        table(
            ["function", "calls per turn", "own time %", "cumulative %"],
            rows,
            f"Figure 7: cProfile of a {n}-turn run (top {TOP} by own time)",
        )
    )
    data = {"turns": n, "top": top}
    emit("profile", data)
    return data


if __name__ == "__main__":
    main()
