"""A two-level agent for the durable sub-agent test (child processes import this module: the test
puts this folder on ``PYTHONPATH``). Each model request and each tool call appends a line to
SMA_SIDE_FILE, so the test counts what ran (and ran again)."""

from __future__ import annotations

import os
import time
from pathlib import Path

from statemachine_agent import Agent, ToolResultMessage, tool
from statemachine_agent.models import FunctionModel

PARENT_ANSWER = "The research is in."
CHILD_ANSWER = "Otters hold hands."


def _append(line: str) -> None:
    with Path(os.environ["SMA_SIDE_FILE"]).open("a", encoding="utf-8") as f:
        f.write(line + "\n")
        f.flush()
        os.fsync(f.fileno())


def note() -> str:
    """Append ``note`` to the side-effect file."""
    _append("note")
    return "noted"


def wait_here() -> str:
    """Append ``wait`` (and, with SMA_READY_FIFO set, write it to that named pipe: the test
    reading it learns the call runs), then take long (SMA_SLOW_SECONDS)."""
    _append("wait")
    fifo = os.environ.get("SMA_READY_FIFO")
    if fifo:
        with Path(fifo).open("w", encoding="utf-8") as ready:  # waits for the test to read
            ready.write("wait\n")
    time.sleep(float(os.environ.get("SMA_SLOW_SECONDS", "60")))
    return "waited"


def _call(call_id: str, name: str, arguments: dict[str, str]) -> dict[str, object]:
    use = {"type": "tool_use", "id": call_id, "name": name, "input": arguments}
    return {"content": [use], "stop_reason": "tool_use"}


def child_model(messages: list[object], request: object) -> object:
    _append("child_model")
    done = sum(isinstance(m, ToolResultMessage) for m in messages)
    if done == 0:
        return _call("c1", "note", {})
    if done == 1:
        return _call("c2", "wait_here", {})
    last = messages[-1]
    _append(f"c2 answered: {'error' if getattr(last, 'is_error', False) else 'ok'}")
    return CHILD_ANSWER


def parent_model(messages: list[object], request: object) -> object:
    _append("parent_model")
    if not any(isinstance(m, ToolResultMessage) for m in messages):
        return _call("p1", "research", {"prompt": "otters"})
    return PARENT_ANSWER


def parent_agent() -> Agent:
    """A parent whose ``research`` tool is a sub-agent: ``note`` (c1), ``wait_here`` (c2, not
    idempotent), then its answer."""
    child = Agent(FunctionModel(child_model), tools=[tool(note), tool(wait_here)])
    research = child.as_tool("research", "Research a topic.")
    return Agent(FunctionModel(parent_model), tools=[research])
