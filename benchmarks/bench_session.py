"""Figure 6: session log. Append cost per message and load/resume time of a 10,000-message log.

A run of 5,000 turns (one no-op tool call each, zero-latency model) writes 10,000 messages to
``Agent(session=path)``; the same run without a session gives the difference, divided by the messages
written: the append cost per message (JSON encoding, write, flush). ``fsync=True`` is measured on a
shorter run. Then the 10,000-message log is read back: ``load_history`` and ``Agent.resume``.

Usage: ``python benchmarks/bench_session.py [--quick]``
"""

from __future__ import annotations

import asyncio
import gc
import tempfile
import time
from pathlib import Path
from typing import Any

from _common import emit, median, quick, table

from statemachine_agent import Agent, AssistantMessage, State, TextBlock, ToolCallBlock, tool
from statemachine_agent.models import ScriptedModel
from statemachine_agent.session import SessionLog, load_history

TURNS = 5000  # 2 messages a turn: 10,000 messages


async def noop() -> str:
    """Do nothing."""
    return "ok"


NOOP = tool(noop)


def steps(n: int) -> list[AssistantMessage]:
    out = [
        AssistantMessage(
            content=[ToolCallBlock(id=f"call_{i}", name="noop", input={})], stop_reason="tool_use"
        )
        for i in range(n)
    ]
    out.append(AssistantMessage(content=[TextBlock(text="done")], stop_reason="end_turn"))
    return out


def run(script: list[AssistantMessage], session: Any = None) -> tuple[float, int]:
    """(seconds, messages in the history) of one run."""
    n = len(script) - 1
    agent = Agent(
        ScriptedModel(script, record_requests=False), tools=[NOOP], max_turns=n + 1, session=session
    )
    gc.collect()
    start = time.perf_counter()
    result = asyncio.run(agent.run("go"))
    elapsed = time.perf_counter() - start
    assert result.state is State.DONE, result.error
    if agent.session is not None:
        agent.session.close()
    return elapsed, len(result.messages)


def main() -> dict[str, Any]:
    reps = 1 if quick() else 3
    turns = 500 if quick() else TURNS
    script = steps(turns)
    fsync_script = steps(100)
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        plain = [run(script)[0] for _ in range(reps)]
        logged = []
        for i in range(reps):
            path = base / f"run{i}.jsonl"
            seconds, count = run(script, path)
            logged.append(seconds)
        log_path = base / "run0.jsonl"
        size = log_path.stat().st_size
        plain_fsync = median([run(fsync_script)[0] for _ in range(reps)])
        synced = median(
            [
                run(fsync_script, SessionLog(base / f"sync{i}.jsonl", fsync=True))[0]
                for i in range(reps)
            ]
        )
        fsync_count = len(fsync_script) * 2
        loads, resumes = [], []
        history: list[Any] = []
        for _ in range(reps):
            start = time.perf_counter()
            history = load_history(log_path)
            loads.append(time.perf_counter() - start)
            start = time.perf_counter()
            agent = Agent.resume(log_path, model=ScriptedModel([]), tools=[NOOP])
            resumes.append(time.perf_counter() - start)
            assert len(agent.messages) == len(history)
            assert agent.session is not None
            agent.session.close()
    per_message = (median(logged) - median(plain)) / count * 1e6
    per_message_fsync = (synced - plain_fsync) / fsync_count * 1e6
    rows = [
        ["messages in the log", count],
        ["log size (MiB)", size / 2**20],
        ["append cost per message (µs, flush)", per_message],
        ["append cost per message (µs, fsync=True)", per_message_fsync],
        ["run time with / without the log", median(logged) / median(plain)],
        ["load_history of the log (ms)", median(loads) * 1e3],
        ["Agent.resume of the log (ms)", median(resumes) * 1e3],
        ["messages loaded", len(history)],
    ]
    print(table(["measure", "value"], rows, "Figure 6: session log"))
    data = {
        "messages": count,
        "log_bytes": size,
        "append_us_per_message": per_message,
        "append_us_per_message_fsync": per_message_fsync,
        "run_ratio_with_log": median(logged) / median(plain),
        "load_ms": median(loads) * 1e3,
        "resume_ms": median(resumes) * 1e3,
    }
    emit("session", data)
    return data


if __name__ == "__main__":
    main()
