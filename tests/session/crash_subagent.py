"""A two-level agent killed mid-child: ``python crash_subagent.py LOG FIFO``.

The parent (session log LOG) asks its ``research`` sub-agent (call ``p1``); the sub-agent calls
``lookup`` (call ``c1``), which writes ``running`` to the named pipe FIFO (the test learns the
call runs, and kills this process) and then waits forever. `resumed_parent` builds the same
agent for the test's resume, its sub-agent scripted to answer."""

from __future__ import annotations

import asyncio
import sys
import threading
from pathlib import Path

from statemachine_agent import Agent, tool
from statemachine_agent.models import ScriptedModel
from statemachine_agent.testing.steps import call, text_response, tool_response

CHILD_ANSWER = "Otters hold hands."
PARENT_ANSWER = "Done: otters hold hands."


def _child(fifo: Path | None) -> Agent:
    @tool
    def lookup(topic: str) -> str:
        """Look a topic up (here: tell the test, then wait until killed)."""
        if fifo is not None:
            with fifo.open("w", encoding="utf-8") as ready:
                ready.write("running\n")
            threading.Event().wait()  # killed here
        return f"facts about {topic}"

    steps = [
        tool_response(call("lookup", {"topic": "otters"}, id="c1")),
        text_response(CHILD_ANSWER),
    ]
    return Agent(ScriptedModel(steps), tools=[lookup])


def _parent_steps() -> list[dict[str, object]]:
    return [
        tool_response(call("research", {"prompt": "otters"}, id="p1")),
        text_response(PARENT_ANSWER),
    ]


def resumed_parent(log: Path) -> Agent:
    """The parent resumed from the crashed LOG: the same tools; its model answers at once."""
    research = _child(None).as_tool("research", "Research a topic.")
    return Agent.resume(log, model=ScriptedModel([text_response(PARENT_ANSWER)]), tools=[research])


async def main(log: Path, fifo: Path) -> None:
    research = _child(fifo).as_tool("research", "Research a topic.")
    parent = Agent(ScriptedModel(_parent_steps()), tools=[research], session=log)
    await parent.run("Research otters.")


if __name__ == "__main__":
    asyncio.run(main(Path(sys.argv[1]), Path(sys.argv[2])))
