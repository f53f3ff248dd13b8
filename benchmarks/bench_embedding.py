"""Figure 10: embedding in a service. How fast events cross threads, and how long the event loop
stalls while 50 agents log with ``SessionLog(fsync=True)``.

1. Cross-thread latency: ``agent.run_sync`` runs in a worker thread (a scripted model answering
   after 5 ms, one tool call per turn) while this thread's loop iterates ``agent.events()``; each
   event's emission time (taken by a subscriber on the run's thread) is compared with the time
   the consumer receives it. (A run that keeps its thread busy without pause makes the consumer
   wait for the GIL, up to its 5 ms switch interval, and the events queue meanwhile.)
2. fsync off the loop: 50 agents run concurrently on one loop (a model answering after 10 ms),
   each with a session log, without and with ``fsync=True``: the wall time, the p99 of how late a
   1 ms sleep wakes up (the loop's stalls; CPU-bound here, with 50 agents on a 2-core machine),
   and the time spent inside ``os.fsync`` on the loop's thread (0 by design) and on the logs'
   sync threads. For scale, the cost of one ``os.fsync`` of a small append on the same disk.

Usage: ``python benchmarks/bench_embedding.py [--quick]``
"""

from __future__ import annotations

import asyncio
import os
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from _common import emit, median, quick, table

from statemachine_agent import Agent, State, tool
from statemachine_agent.models import ScriptedModel
from statemachine_agent.session import SessionLog
from statemachine_agent.testing.steps import call, text_response, tool_response


@tool
async def noop() -> str:
    """Do nothing."""
    return "ok"


def script(turns: int, delay: float = 0.0) -> list[dict[str, Any]]:
    extra = {"delay_seconds": delay} if delay else {}
    steps = [tool_response(call("noop"), **extra) for _ in range(turns)]
    return [*steps, text_response("done", **extra)]


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def cross_thread_latency(turns: int) -> list[float]:
    agent = Agent(ScriptedModel(script(turns, delay=0.005), record_requests=False), tools=[noop])
    emitted: dict[int, float] = {}
    agent.subscribe(lambda event: emitted.__setitem__(event.seq, time.perf_counter()))
    latencies: list[float] = []
    async with agent.events() as stream:
        worker = threading.Thread(target=agent.run_sync, args=("go",))
        worker.start()
        async for event in stream:
            latencies.append(time.perf_counter() - emitted[event.seq])
            if event.type == "run_end":
                break
    await asyncio.to_thread(worker.join)
    return latencies


async def fifty_agents(agents: int, turns: int, folder: Path, fsync: bool) -> list[float]:
    """[wall ms, p99 loop stall ms, ms spent in os.fsync on the loop's thread, ms spent in it on
    other threads, lines] while ``agents`` agents run on one loop with a session log each."""
    runners = [
        Agent(
            ScriptedModel(script(turns, delay=0.01), record_requests=False),
            tools=[noop],
            session=SessionLog(folder / f"{fsync}-agent{i}.jsonl", fsync=fsync),
        )
        for i in range(agents)
    ]
    loop_thread = threading.get_ident()
    in_fsync = {"loop": 0.0, "other": 0.0}
    real_fsync = os.fsync

    def timed_fsync(fd: int) -> None:
        start = time.perf_counter()
        real_fsync(fd)
        where = "loop" if threading.get_ident() == loop_thread else "other"
        in_fsync[where] += time.perf_counter() - start

    stalls: list[float] = []
    stop = asyncio.Event()

    async def ticker() -> None:
        while not stop.is_set():
            start = time.perf_counter()
            await asyncio.sleep(0.001)
            stalls.append(time.perf_counter() - start - 0.001)

    os.fsync = timed_fsync
    try:
        tick = asyncio.create_task(ticker())
        begin = time.perf_counter()
        results = await asyncio.gather(*(agent.run("go") for agent in runners))
        wall = time.perf_counter() - begin
        stop.set()
        await tick
        for agent in runners:
            agent.close()  # syncs what is left
    finally:
        os.fsync = real_fsync
    assert all(r.state is State.DONE for r in results)
    lines = sum(
        len((folder / f"{fsync}-agent{i}.jsonl").read_bytes().splitlines()) for i in range(agents)
    )
    return [
        wall * 1000,
        percentile(stalls, 0.99) * 1000,
        in_fsync["loop"] * 1000,
        in_fsync["other"] * 1000,
        lines,
    ]


def one_fsync_ms(folder: Path, repeats: int) -> float:
    times = []
    with open(folder / "probe", "ab") as file:
        for _ in range(repeats):
            file.write(b'{"type":"probe"}\n')
            file.flush()
            start = time.perf_counter()
            os.fsync(file.fileno())
            times.append(time.perf_counter() - start)
    return median(times) * 1000


def main() -> None:
    turns = 20 if quick() else 100
    latencies = [s * 1000 for s in asyncio.run(cross_thread_latency(turns))]
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        plain = asyncio.run(fifty_agents(50, 4 if quick() else 10, folder, fsync=False))
        synced = asyncio.run(fifty_agents(50, 4 if quick() else 10, folder, fsync=True))
        fsync_ms = one_fsync_ms(folder, 5 if quick() else 30)
    print(
        table(
            ["measure", "median", "p99", "max"],
            [["cross-thread event latency (ms)", *_stats(latencies)]],
            "Figure 10a: events from a run_sync thread to another loop",
        )
    )
    print()
    print(
        table(
            [
                "50 agents on one loop",
                "wall ms",
                "p99 stall ms",
                "fsync ms on the loop",
                "fsync ms off it",
                "lines",
            ],
            [["session log", *plain], ["session log, fsync=True", *synced]],
            "Figure 10b: fsync off the event loop",
        )
    )
    print(f"one os.fsync of a small append on this disk: {fsync_ms:.2f} ms (median)")
    emit(
        "embedding",
        {
            "latency_median_ms": median(latencies),
            "latency_p99_ms": percentile(latencies, 0.99),
            "wall_ms_plain": plain[0],
            "wall_ms_fsync": synced[0],
            "fsync_ms_on_loop": synced[2],
            "fsync_ms_off_loop": synced[3],
            "fsync_ms": fsync_ms,
            "targets": {
                "cross_thread_latency_median_le_5_ms": median(latencies) <= 5,
                "no_fsync_on_the_loop": synced[2] == 0,
            },
        },
    )


def _stats(values: list[float]) -> list[float]:
    return [median(values), percentile(values, 0.99), max(values)]


if __name__ == "__main__":
    main()
