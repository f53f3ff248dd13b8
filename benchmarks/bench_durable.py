"""Figure 11: durable runs on DBOS (issue 12).

A. Per-turn overhead of a durable run over an in-process run, on SQLite and (with the PostgreSQL
   binaries) on a throwaway Postgres: the same 20-turn run (one no-op tool call a turn,
   zero-latency model) with ``agent.run()`` and as a DBOS workflow
   (`statemachine_agent.durable.run`); the difference per turn is what checkpointing costs.
   Measured in the same process on the same database, alternated run by run: ours with an
   idempotent call and with a non-idempotent one (its ``tool_start`` marker), **the floor** (a
   bare DBOS workflow with one step per request and one per call: the least a durable agent
   loop records) and, when pydantic-ai is importable, **pydantic-ai's DBOS agent**
   (``DBOSAgent``, its tool a DBOS step; over its own ``agent.run()``), each with its **DBOS
   records a turn** (``DBOS.list_workflow_steps``: a count the machine's load does not move;
   the times do move with it, hence the spread; so does the process's CPU time, all its threads,
   DBOS's included, less so), and the **SQL statements a turn** every engine of the process
   executed (SQLAlchemy's event API; load-proof too). Targets (issue 39): ours within 1.3x of the
   floor's overhead; at most 2 records a turn with an idempotent call, 3 with a
   non-idempotent one.
B. Throughput on Postgres: a throwaway server (fsync off), 1, 2 and 4 worker processes (``statemachine-agent
   worker``, concurrency 8 each), runs of 10 turns at 10 ms model latency submitted at once; runs
   per second from the first submit to the last result.

C. Abort latency: `Client.abort` (through the database, as from another process) to the run's
   ending, for a run in a model request, in a tool call and awaiting approval (target: within
   a second).

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
import uuid
import warnings
from pathlib import Path
from typing import Any

from _common import ROOT, emit, median, quick, skip_note, table

DURABLE_TESTS = ROOT / "tests" / "durable"
sys.path.insert(0, str(DURABLE_TESTS))  # the agents and the throwaway server of the tests

import durable_agents  # noqa: E402
import sqlalchemy  # noqa: E402
from dbos import DBOS, SetWorkflowID  # noqa: E402
from sqlalchemy.engine import Engine  # noqa: E402
from throwaway_pg import INSTALL_HINT, ThrowawayPostgres, bin_dir  # noqa: E402

from statemachine_agent import Agent, State, durable, tool  # noqa: E402
from statemachine_agent.models import FunctionModel  # noqa: E402

OVERHEAD_TURNS = 20
THROUGHPUT_TURNS = 10
MODEL_SECONDS = 0.01
WORKER_CONCURRENCY = 8


def _env(turns: int, model_seconds: float) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(DURABLE_TESTS), str(ROOT), env.get("PYTHONPATH", "")])
    env.update(SMA_TURNS=str(turns), SMA_MODEL_SECONDS=str(model_seconds), SMA_TOOL="noop")
    return env


@DBOS.step(name="bench_floor_request")
async def _floor_request(turn: int) -> dict[str, str]:
    return {"kind": "message", "turn": str(turn)}


@DBOS.step(name="bench_floor_call")
async def _floor_call(turn: int) -> str:
    return "ok"


@DBOS.workflow(name="bench_floor")
async def _floor(turns: int) -> int:
    """The floor: one step per model request and one per tool call, nothing else."""
    for turn in range(turns):
        await _floor_request(turn)
        await _floor_call(turn)
    await _floor_request(turns)
    return turns


# -- pydantic-ai's DBOS agent (its tools as steps), when pydantic-ai is importable ----------------


def _pydantic_ai_agents() -> tuple[Any, Any] | None:
    """(the plain pydantic-ai agent, its `DBOSAgent`): the same 20 turns, one no-op call each,
    the call a DBOS step (pydantic-ai's DBOS guide: tools that do I/O are decorated as steps).
    Built before DBOS is launched (the DBOS agent registers its workflows). None without
    pydantic-ai."""
    try:
        from pydantic_ai import Agent as PaiAgent
        from pydantic_ai.durable_exec.dbos import DBOSAgent
        from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart, ToolReturnPart
        from pydantic_ai.models.function import AgentInfo, FunctionModel
    except ImportError:
        return None

    def model(messages: list[Any], info: AgentInfo) -> ModelResponse:
        done = sum(
            isinstance(part, ToolReturnPart) for m in messages for part in getattr(m, "parts", [])
        )
        if done < OVERHEAD_TURNS:
            call = ToolCallPart(tool_name="noop", args={}, tool_call_id=f"call_{done + 1}")
            return ModelResponse(parts=[call])
        return ModelResponse(parts=[TextPart(f"finished after {done} calls")])

    @DBOS.step(name="bench_pai_noop")
    async def noop_step() -> str:
        return "ok"

    agent = PaiAgent(FunctionModel(model), name="bench_pai")

    @agent.tool_plain
    async def noop() -> str:
        """Do nothing."""
        return str(await noop_step())

    with warnings.catch_warnings():  # 2.x deprecates the wrapper for a capability: same steps
        warnings.simplefilter("ignore")
        return agent, DBOSAgent(agent)


PAI_AGENTS = _pydantic_ai_agents()


class _Statements:
    """Counts the SQL statements every SQLAlchemy engine of this process executes (DBOS's own
    included; SQLAlchemy's public event API): a database cost the machine's load does not move."""

    def __init__(self) -> None:
        self.count = 0
        sqlalchemy.event.listen(Engine, "before_cursor_execute", self._seen)

    def _seen(self, *_args: Any) -> None:
        self.count += 1


STATEMENTS = _Statements()


def _spread(values: list[float]) -> str:
    return f"{min(values):.2f}-{max(values):.2f}"


async def _overhead(reps: int, db: str | None = None) -> dict[str, Any]:
    """Per-turn figures on ``db`` (None: a SQLite file in a temporary folder), each run kind
    alternated with the others so a slow period falls on all of them."""
    os.environ.update(_env(OVERHEAD_TURNS, 0.0))
    kinds = ["ours", "ours_marker", "floor"] + (["pydantic_ai"] if PAI_AGENTS else [])
    plain: dict[str, list[float]] = {"ours": [], "pydantic_ai": []}
    times: dict[str, list[float]] = {kind: [] for kind in kinds}
    records: dict[str, list[int]] = {kind: [] for kind in kinds}
    cpu: dict[str, list[float]] = {kind: [] for kind in kinds}
    statements: dict[str, list[int]] = {kind: [] for kind in kinds}
    agents = {
        "ours": durable_agents.idempotent_noop_agent,
        "ours_marker": durable_agents.noop_agent,
    }
    which = {"agent": "ours"}
    # Run ids new to the database: a second call on the same PostgreSQL database would
    # otherwise get each workflow's recorded result back without running it.
    batch = uuid.uuid4().hex[:8]
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(reps):
            start = time.perf_counter()
            result = await durable_agents.idempotent_noop_agent().run("plain")
            plain["ours"].append(time.perf_counter() - start)
            assert result.state is State.DONE, result.error
            if PAI_AGENTS:
                start = time.perf_counter()
                await PAI_AGENTS[0].run("plain")
                plain["pydantic_ai"].append(time.perf_counter() - start)
        url = db or f"sqlite:///{Path(tmp) / 'runs.sqlite'}"
        await durable.launch(url, lambda: agents[which["agent"]](), log_level="ERROR")
        try:
            for i in range(reps):
                for kind in kinds:
                    run_id = f"{kind}-{batch}-{i}"
                    before = STATEMENTS.count
                    start, start_cpu = time.perf_counter(), time.process_time()
                    if kind in agents:
                        which["agent"] = kind
                        result = await durable.run("durable", run_id=run_id)
                        assert result.state is State.DONE, result.error
                    elif kind == "floor":
                        with SetWorkflowID(run_id):
                            handle = await DBOS.start_workflow_async(_floor, OVERHEAD_TURNS)
                        assert await handle.get_result() == OVERHEAD_TURNS
                    else:
                        assert PAI_AGENTS is not None
                        with SetWorkflowID(run_id):
                            await PAI_AGENTS[1].run("durable")
                    times[kind].append(time.perf_counter() - start)
                    cpu[kind].append(time.process_time() - start_cpu)
                    statements[kind].append(STATEMENTS.count - before)
                    records[kind].append(len(await DBOS.list_workflow_steps_async(run_id)))
        finally:
            durable.shutdown()
    out: dict[str, Any] = {}
    for kind in kinds:
        base = plain["pydantic_ai" if kind == "pydantic_ai" else "ours"]
        base_turn = 0.0 if kind == "floor" else median(base) / OVERHEAD_TURNS * 1e3
        turn_ms = [t / OVERHEAD_TURNS * 1e3 for t in times[kind]]
        over = [t - base_turn for t in turn_ms]
        out[kind] = {
            "in_process_ms_per_turn": None if kind == "floor" else base_turn,
            "durable_ms_per_turn": median(turn_ms),
            "overhead_ms_per_turn": median(over),
            "overhead_spread_ms": _spread(over),
            "records_per_turn": median(records[kind]) / OVERHEAD_TURNS,
            # A turn with its call: the run's last request (the answer, no call) left out.
            "records_per_call_turn": (median(records[kind]) - 1) / OVERHEAD_TURNS,
            "statements_per_turn": median(statements[kind]) / OVERHEAD_TURNS,
            "cpu_ms_per_turn": median(cpu[kind]) / OVERHEAD_TURNS * 1e3,
        }
    floor = out["floor"]["overhead_ms_per_turn"]
    for kind in kinds:
        out[kind]["overhead_over_floor"] = out[kind]["overhead_ms_per_turn"] / floor
    return out


LABELS = {
    "ours": "ours, idempotent call (request, call)",
    "ours_marker": "ours, non-idempotent call (request, tool_start, call)",
    "floor": "floor: bare DBOS, a step per request and call",
    "pydantic_ai": "pydantic-ai DBOSAgent, its tool a step",
}


def _overhead_rows(name: str, o: dict[str, Any]) -> list[list[Any]]:
    return [
        [
            name,
            LABELS[kind],
            f["in_process_ms_per_turn"],
            f["durable_ms_per_turn"],
            f["overhead_ms_per_turn"],
            f["overhead_spread_ms"],
            f["overhead_over_floor"],
            f["cpu_ms_per_turn"],
            f["records_per_turn"],
            f["statements_per_turn"],
        ]
        for kind, f in o.items()
    ]


# -- abort latency: Client.abort (through the database only) to the run's ending ------------------


async def _abort_latency(reps: int) -> dict[str, dict[str, float]]:
    """Milliseconds from `Client.abort` (another thread, as another process sends it) to the
    run's end, for a run in a model request, in a tool call, and waiting for approval."""
    gate: dict[str, Any] = {}

    async def stuck_model(messages: list[Any], request: Any) -> Any:
        if gate["kind"] == "model":  # stuck in the request
            gate["where"].set()
            await asyncio.Event().wait()
        name = "hold" if gate["kind"] == "tool" else "approve_me"
        use = {"type": "tool_use", "id": "call_1", "name": name, "input": {}}
        return {"content": [use], "stop_reason": "tool_use"}

    async def hold() -> str:
        """Hold (ignores the signal: cancelled when the grace ends)."""
        gate["where"].set()
        await asyncio.Event().wait()
        return "released"

    async def approve_me() -> str:
        """Needs approval."""
        return "approved"

    def factory() -> Agent:
        tools = [tool(hold), tool(requires_approval=True)(approve_me)]
        return Agent(FunctionModel(stuck_model), tools=tools, abort_grace_seconds=0)

    figures: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        url = f"sqlite:///{Path(tmp) / 'abort.sqlite'}"
        await durable.launch(url, factory, log_level="ERROR")
        client = durable.Client(url)
        try:
            for kind in ("model", "tool", "approval"):
                samples = []
                for i in range(reps):
                    gate.update(kind=kind, where=asyncio.Event())
                    run_id = f"abort-{kind}-{i}"
                    task = asyncio.ensure_future(durable.run("go", run_id=run_id))
                    if kind == "approval":
                        await durable.pending(run_id, wait_seconds=60)
                    else:
                        await gate["where"].wait()
                    start = time.perf_counter()
                    await asyncio.to_thread(client.abort, run_id, "benchmark")
                    result = await task
                    samples.append((time.perf_counter() - start) * 1e3)
                    assert result.state is State.ABORTED, result.state
                figures[kind] = {"median_ms": median(samples), "max_ms": max(samples)}
        finally:
            client.close()
            durable.shutdown()
    return figures


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
    overhead = {"sqlite": asyncio.run(_overhead(reps))}
    data: dict[str, Any] = {"overhead": overhead["sqlite"]}
    binaries = bin_dir()
    server = ThrowawayPostgres(binaries) if binaries is not None else None
    rates: dict[str, float] = {}
    try:
        if server is not None:
            server.start()
            db = server.url.rsplit("/", 1)[0] + "/bench_overhead"
            overhead["postgres"] = asyncio.run(_overhead(reps, db))
            data["overhead_postgres"] = overhead["postgres"]
        rows = [row for name, o in overhead.items() for row in _overhead_rows(name, o)]
        print(
            table(
                [
                    "database",
                    "run",
                    "in-process ms/turn",
                    "durable ms/turn",
                    "overhead ms/turn (median)",
                    "overhead spread (min-max)",
                    "overhead / floor",
                    "process CPU ms/turn",
                    "DBOS records/turn",
                    "SQL statements/turn",
                ],
                rows,
                f"Figure 11a: per-turn overhead, {OVERHEAD_TURNS}-turn run, one no-op call a turn, "
                f"median of {reps} (records: the final answer's request adds 1/{OVERHEAD_TURNS})",
            )
        )
        if PAI_AGENTS is None:
            print(skip_note())
        abort = asyncio.run(_abort_latency(3 if quick() else 5))
        data["abort_ms"] = abort
        print()
        print(
            table(
                ["durable run", "median ms", "max ms"],
                [[kind, f["median_ms"], f["max_ms"]] for kind, f in abort.items()],
                "Figure 11c: Client.abort (through the database) to the run's ending, SQLite",
            )
        )
        if server is None:
            print(f"\nPostgres and figure 11b skipped: no PostgreSQL binaries; {INSTALL_HINT}")
        else:
            for workers in (1, 2, 4):
                rates[str(workers)] = _throughput(server, workers, runs)
    finally:
        if server is not None:
            server.stop()
    targets = {
        "records_per_turn_idempotent_le_2": overhead["sqlite"]["ours"]["records_per_call_turn"]
        <= 2,
        "records_per_turn_non_idempotent_le_3": overhead["sqlite"]["ours_marker"][
            "records_per_call_turn"
        ]
        <= 3,
        "abort_within_1s": all(f["max_ms"] < 1000 for f in abort.values()),
    }
    for name, o in overhead.items():
        targets[f"overhead_within_1_3x_floor_{name}"] = o["ours"]["overhead_over_floor"] <= 1.3
    data["targets"] = targets
    if rates:
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
        f"on {os.cpu_count()} cores (workers, Postgres and this process share them); the "
        "records are a count the load does not move, the times move with the machine"
    )
    for name, passed in targets.items():
        print(f"target {name}: {passed}")
    emit("durable", data)
    return data


if __name__ == "__main__":
    main()
