"""A scripted agent for the crash test: ``python crash_child.py LOG MARKERS``.

It resumes the session at LOG (a new one when the file is missing) and runs it to the end: three
batches of three parallel calls that sleep, then a final answer. Every model request waits
`MODEL_DELAY_SECONDS` (a ScriptedModel step's ``delay_seconds``), so a kill can land in one. Each
tool appends ``start ID`` and ``end ID`` to MARKERS, so the test can count real runs. The script
starts from the batches the log already holds, so a resumed process carries on where the log left
off (a batch whose response was logged gets no second response; its calls have fresh ids).
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

from statemachine_agent import Agent, AssistantMessage, ToolContext, tool
from statemachine_agent.models import ScriptedModel
from statemachine_agent.session import read_session
from statemachine_agent.testing.steps import call, text_response, tool_response

PROMPT = "do the work"
FINAL = "all done"
BATCHES = 3
SLEEPS = (0.06, 0.01, 0.11)  # completion order differs from declaration order
MODEL_DELAY_SECONDS = 0.05


def script(batches_done: int) -> list[dict[str, Any]]:
    """The responses still to come once the history holds ``batches_done`` batches."""
    steps = [
        tool_response(
            *(call("work", {"seconds": s}, id=f"b{b}_c{j}") for j, s in enumerate(SLEEPS)),
            delay_seconds=MODEL_DELAY_SECONDS,
        )
        for b in range(batches_done, BATCHES)
    ]
    return [*steps, text_response(FINAL, delay_seconds=MODEL_DELAY_SECONDS)]


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

    done = 0
    if log.exists():  # read only: Agent.resume below writes the repairs
        messages = read_session(log, strict=True).messages
        done = sum(1 for m in messages if isinstance(m, AssistantMessage) and m.tool_calls)
    return Agent.resume(log, model=ScriptedModel(script(done)), tools=[work])


def can_continue(agent: Agent) -> bool:
    last = agent.messages[-1] if agent.messages else None
    return not (isinstance(last, AssistantMessage) and last.text == FINAL)


def main(log: Path, markers: Path) -> None:
    agent = make_agent(log, markers)
    if not agent.messages:
        agent.run_sync(PROMPT)
    elif can_continue(agent):
        agent.run_sync()


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
