"""The agent of issue 4, case 2: ``python hang_child.py LOG MARKERS``.

One response asks for three parallel calls: ``fast`` (c2) returns at once, ``slow`` (c1) returns
once ``fast`` has finished (so the completion order c2, c1 holds without timing), ``hang`` (c3)
never returns. The test kills the process while c3 hangs. Each tool appends ``start ID`` and
``end ID`` to MARKERS, so the test can count real runs.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from statemachine_agent import Agent, Tool, ToolContext, tool
from statemachine_agent.models import ScriptedModel
from statemachine_agent.testing.steps import call, text_response, tool_response

PROMPT = "three at once"
BATCH = tool_response(
    call("slow", {"n": 1}, id="c1"),
    call("fast", {"n": 2}, id="c2"),
    call("hang", {"n": 3}, id="c3"),
)
FINAL = "c1 and c2 done; c3 may not have run"


def make_tools(markers: Path) -> list[Tool]:
    fast_done = asyncio.Event()

    def mark(kind: str, ctx: ToolContext) -> None:
        with markers.open("a") as f:
            f.write(f"{kind} {ctx.call_id}\n")

    @tool
    async def slow(n: int, ctx: ToolContext) -> str:
        """Finishes second."""
        mark("start", ctx)
        await fast_done.wait()
        mark("end", ctx)
        return f"slow {n}"

    @tool
    async def fast(n: int, ctx: ToolContext) -> str:
        """Finishes first."""
        mark("start", ctx)
        fast_done.set()
        mark("end", ctx)
        return f"fast {n}"

    @tool
    async def hang(n: int, ctx: ToolContext) -> str:
        """Never finishes."""
        mark("start", ctx)
        await asyncio.Event().wait()
        mark("end", ctx)
        return "unreachable"

    return [slow, fast, hang]


def make_agent(log: Path, markers: Path) -> Agent:
    """A new agent logging to ``log``, or the session there resumed (then the model only answers
    with `FINAL`)."""
    tools = make_tools(markers)
    if log.exists():
        return Agent.resume(log, model=ScriptedModel([text_response(FINAL)]), tools=tools)
    return Agent(ScriptedModel([BATCH, text_response(FINAL)]), tools=tools, session=log)


if __name__ == "__main__":
    make_agent(Path(sys.argv[1]), Path(sys.argv[2])).run_sync(PROMPT)
