"""Per-call overhead of an MCP tool call over a local tool: the same ``add(a, b)`` as a local
`tool`, on the demo MCP server over stdio (a subprocess) and over streamable HTTP (127.0.0.1).

Each run is one agent run of N turns, each one call of ``add`` (a zero-latency `FunctionModel`);
the figures are per call: the run's wall time and this process's CPU time (``time.process_time``;
the server's own CPU is not in it) divided by N, median and min-max of several runs. The
overhead is the MCP figure minus the local one. Connecting and listing are outside the timing
(``async with agent`` before it).

Usage: ``python benchmarks/bench_mcp.py [--quick]``
"""

from __future__ import annotations

import asyncio
import socket
import subprocess
import sys
import time
from typing import Any

from _common import ROOT, emit, median, quick, table

from statemachine_agent import Agent, AssistantMessage, ToolCallBlock, tool
from statemachine_agent.mcp import MCPServer
from statemachine_agent.models import FunctionModel

SERVER = ROOT / "tests" / "mcp" / "servers" / "demo_server.py"


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def model(turns: int) -> FunctionModel:
    count = 0

    def respond(messages: Any, request: Any) -> AssistantMessage:
        nonlocal count
        count += 1
        if count % (turns + 1) == 0:
            return AssistantMessage(content=[], stop_reason="end_turn")
        call = ToolCallBlock(id=f"toolu_{count}", name="add", input={"a": 1, "b": 2})
        return AssistantMessage(content=[call], stop_reason="tool_use")

    return FunctionModel(respond)


async def measure(source: Any, turns: int, runs: int) -> tuple[list[float], list[float]]:
    walls, cpus = [], []
    async with Agent(model(turns), tools=[source], max_turns=turns + 5) as agent:
        await agent.run("warm up")
        for _ in range(runs):
            wall, cpu = time.perf_counter(), time.process_time()
            await agent.run("go")
            walls.append((time.perf_counter() - wall) / turns * 1e6)
            cpus.append((time.process_time() - cpu) / turns * 1e6)
    return walls, cpus


def http_server() -> tuple[subprocess.Popen[str], str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    process = subprocess.Popen(
        [sys.executable, str(SERVER), "--http", str(port)], stderr=subprocess.PIPE, text=True
    )
    assert process.stderr is not None
    for line in process.stderr:
        if "Uvicorn running on" in line:
            break
    return process, f"http://127.0.0.1:{port}/mcp"


def main() -> None:
    turns, runs = (20, 3) if quick() else (100, 7)
    process, url = http_server()
    try:
        kinds = {
            "local tool": add,
            "MCP stdio": MCPServer.stdio(sys.executable, [str(SERVER)], name="demo"),
            "MCP HTTP": MCPServer.http(url, name="demo"),
        }
        figures: dict[str, dict[str, float]] = {}
        rows = []
        for name, source in kinds.items():
            walls, cpus = asyncio.run(measure(source, turns, runs))
            figures[name] = {
                "wall_us": median(walls),
                "wall_min": min(walls),
                "wall_max": max(walls),
                "cpu_us": median(cpus),
            }
        local = figures["local tool"]
        for name, f in figures.items():
            rows.append(
                [
                    name,
                    f"{f['wall_us']:.0f} ({f['wall_min']:.0f}-{f['wall_max']:.0f})",
                    f"{f['cpu_us']:.0f}",
                    f"{f['wall_us'] - local['wall_us']:+.0f}",
                    f"{f['cpu_us'] - local['cpu_us']:+.0f}",
                ]
            )
        print(f"{turns} calls a run, {runs} runs; microseconds per call (median, min-max)")
        print(table(["tool", "wall/call", "CPU/call", "wall overhead", "CPU overhead"], rows))
        emit("mcp", {"turns": turns, "runs": runs, "figures": figures})
    finally:
        process.terminate()
        process.wait()


if __name__ == "__main__":
    main()
