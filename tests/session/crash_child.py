"""A scripted agent for the crash test: ``python crash_child.py LOG MARKERS``.

It resumes the session at LOG (a new one when the file is missing) and runs it to the end: three
batches of three parallel calls that sleep, then a final answer. Each tool appends ``start ID`` and
``end ID`` to MARKERS, so the test can count real runs. The model decides from the history alone,
so a resumed process carries on where the log left off with fresh call ids.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Sequence
from pathlib import Path

from statemachine_agent import Agent, AssistantMessage, ToolCallBlock, ToolContext, tool
from statemachine_agent._messages import Message, TextBlock
from statemachine_agent.models import FunctionModel, ModelRequest

BATCHES = 3
SLEEPS = (0.06, 0.01, 0.11)  # completion order differs from declaration order


def make_agent(log: Path, markers: Path) -> Agent:
    @tool
    async def work(seconds: float, ctx: ToolContext) -> str:
        """Sleep, then report."""
        with markers.open("a") as f:
            f.write(f"start {ctx.call_id}\n")
        await asyncio.sleep(seconds)
        with markers.open("a") as f:
            f.write(f"end {ctx.call_id}\n")
        return f"worked {seconds}"

    async def respond(messages: Sequence[Message], request: ModelRequest) -> AssistantMessage:
        await asyncio.sleep(0.04)  # a request in flight
        batch = sum(1 for m in messages if isinstance(m, AssistantMessage) and m.tool_calls)
        if batch >= BATCHES:
            return AssistantMessage(content=[TextBlock(text="all done")], stop_reason="end_turn")
        calls = [
            ToolCallBlock(id=f"b{batch}_c{j}", name="work", input={"seconds": s})
            for j, s in enumerate(SLEEPS)
        ]
        return AssistantMessage(content=calls, stop_reason="tool_use")

    return Agent.resume(log, model=FunctionModel(respond), tools=[work])


def can_continue(agent: Agent) -> bool:
    last = agent.messages[-1] if agent.messages else None
    return not (isinstance(last, AssistantMessage) and last.text == "all done")


def main(log: Path, markers: Path) -> None:
    agent = make_agent(log, markers)
    if not agent.messages:
        agent.run_sync("do the work")
    elif can_continue(agent):
        agent.run_sync()


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
