"""Figure 11: durable runs on DBOS (issue 12).

A. Per-turn overhead of a durable run over an in-process run, SQLite: the same 20-turn run (one
   no-op tool call a turn, zero-latency model) with ``agent.run()`` and as a DBOS workflow
   (`statemachine_agent.durable.run`); the difference per turn is what checkpointing costs (a
   model-request step, a ``tool_start`` step and a tool step a turn, each a write to the file).
B. Throughput on Postgres: a throwaway server (fsync off), 1, 2 and 4 worker processes (``statemachine-agent
   worker``, concurrency 8 each), runs of 10 turns at 10 ms model latency submitted at once; runs
   per second from the first submit to the last result.

Needs the ``dbos`` extra; part B needs the PostgreSQL binaries (``initdb``, ``pg_ctl``) and is
skipped, saying so, without them.

Usage: ``python benchmarks/bench_durable.py [--quick]``
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _common import ROOT, emit, median, quick, table

DURABLE_TESTS = ROOT / "tests" / "durable"
sys.path.insert(0, str(DURABLE_TESTS))  # the agents and the throwaway server of the tests

import durable_agents  # noqa: E402
from throwaway_pg import INSTALL_HINT, ThrowawayPostgres, bin_dir  # noqa: E402

from statemachine_agent import State, durable  # noqa: E402

OVERHEAD_TURNS = 20
THROUGHPUT_TURNS = 10
MODEL_SECONDS = 0.01
WORKER_CONCURRENCY = 8


def _env(turns: int, model_seconds: float) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(DURABLE_TESTS), str(ROOT), env.get("PYTHONPATH", "")])
    env.update(SMA_TURNS=str(turns), SMA_MODEL_SECONDS=str(model_seconds), SMA_TOOL="noop")
    return env


async def _overhead(reps: int) -> dict[str, float]:
    os.environ.update(_env(OVERHEAD_TURNS, 0.0))
    plain, durable_times = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(reps):  # warm-up included in the median's spread
            start = time.perf_counter()
            result = await durable_agents.noop_agent().run("plain")
            plain.append(time.perf_counter() - start)
            assert result.state is State.DONE, result.error
        await durable.launch(
            f"sqlite:///{Path(tmp) / 'runs.sqlite'}", durable_agents.noop_agent, log_level="ERROR"
        )
        try:
            for i in range(reps):
                start = time.perf_counter()
                result = await durable.run("durable", run_id=f"overhead-{i}")
                durable_times.append(time.perf_counter() - start)
                assert result.state is State.DONE, result.error
        finally:
            durable.shutdown()
    plain_turn = median(plain) / OVERHEAD_TURNS * 1e3
    durable_turn = median(durable_times) / OVERHEAD_TURNS * 1e3
    return {
        "in_process_ms_per_turn": plain_turn,
        "durable_ms_per_turn": durable_turn,
        "overhead_ms_per_turn": durable_turn - plain_turn,
    }


def _throughput(server: ThrowawayPostgres, workers: int, runs: int) -> float:
    db = server.url.rsplit("/", 1)[0] + f"/bench_{workers}"
    env = _env(THROUGHPUT_TURNS, MODEL_SECONDS)
    procs = []
    try:
        for i in range(workers):
            proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "statemachine_agent",
                    "worker",
                    "--db",
                    db,
                    "--factory",
                    "durable_agents:noop_agent",
                    "--executor-id",
                    f"bench-{i}",
                    "--concurrency",
                    str(WORKER_CONCURRENCY),
                    "--poll-seconds",
                    "0.05",
                ],
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                text=True,
            )
            procs.append(proc)
            assert proc.stdout is not None
            assert "serving" in proc.stdout.readline()
        client = durable.Client(db)
        try:
            start = time.perf_counter()
            for i in range(runs):
                client.submit(f"run-{i}", run_id=f"run-{i}")
            while client.count("SUCCESS") < runs:
                time.sleep(0.02)
            elapsed = time.perf_counter() - start
            assert client.count("ERROR") == 0
        finally:
            client.close()
    finally:
        for proc in procs:
            proc.send_signal(signal.SIGTERM)
        for proc in procs:
            proc.wait(timeout=30)
    return runs / elapsed


def main() -> dict[str, Any]:
    reps = 3 if quick() else 7
    runs = 16 if quick() else 48
    load_before = os.getloadavg()[0]
    overhead = asyncio.run(_overhead(reps))
    print(
        table(
            ["run", "ms/turn"],
            [
                ["in-process (agent.run)", overhead["in_process_ms_per_turn"]],
                ["durable (DBOS workflow, SQLite)", overhead["durable_ms_per_turn"]],
                ["overhead per turn", overhead["overhead_ms_per_turn"]],
            ],
            f"Figure 11a: per-turn overhead, {OVERHEAD_TURNS}-turn run, one no-op call a turn",
        )
    )
    data: dict[str, Any] = {"overhead": overhead}
    binaries = bin_dir()
    if binaries is None:
        print(f"\nFigure 11b skipped: no PostgreSQL binaries; {INSTALL_HINT}")
        emit("durable", data)
        return data
    server = ThrowawayPostgres(binaries)
    rates: dict[str, float] = {}
    try:
        server.start()
        for workers in (1, 2, 4):
            rates[str(workers)] = _throughput(server, workers, runs)
    finally:
        server.stop()
    print()
    print(
        table(
            ["workers", "runs/s", "turns/s", "vs 1 worker"],
            [[w, r, r * THROUGHPUT_TURNS, r / rates["1"]] for w, r in rates.items()],
            f"Figure 11b: {runs} runs of {THROUGHPUT_TURNS} turns, {MODEL_SECONDS * 1e3:g} ms "
            f"model, Postgres, concurrency {WORKER_CONCURRENCY} per worker",
        )
    )
    data["runs_per_second"] = rates
    data["load_average"] = [load_before, os.getloadavg()[0]]
    print(
        f"\n1-minute load average before / after: {load_before:.1f} / {os.getloadavg()[0]:.1f} "
        f"on {os.cpu_count()} cores (workers, Postgres and this process share them)"
    )
    emit("durable", data)
    return data


if __name__ == "__main__":
    main()
