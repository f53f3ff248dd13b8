"""A two-level agent for the durable sub-agent test (child processes import this module: the test
puts this folder on ``PYTHONPATH``). Each model request and each tool call appends a line to
SMA_SIDE_FILE, so the test counts what ran (and ran again)."""

from __future__ import annotations

import os
import time
from pathlib import Path

from statemachine_agent import Agent, RunResult, State, ToolResultMessage, tool
from statemachine_agent.models import FunctionModel
from statemachine_agent.testing import assert_valid_history

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


STEPS_AT_THE_KILL = [
    "model_request",
    "p1/model_request",
    "p1/tool_start:c1",
    "p1/tool:c1",
    "p1/model_request",
    "p1/tool_start:c2",
]
"""The steps recorded when the worker is killed inside ``wait_here``: the sub-agent's requests and
calls are the parent workflow's steps, named under the call id ``p1``."""


def check_recovered_tree(
    result: RunResult, side_lines: list[str], before: list[str], after: list[str]
) -> None:
    """What a run killed inside the sub-agent's ``wait_here`` call (the parent's call ``p1``, the
    child's ``c2``) and recovered must show: the parent done with the child's answer; nothing
    completed ran again (1 parent request before the kill and 1 after; the sub-agent's 2 before
    and 1 after; ``note`` once; ``wait_here``, in flight and not idempotent, once); the steps
    recorded before the kill kept, then the child's call, its last request and the parent's;
    the in-flight call answered "no result", the history valid at both levels."""
    assert (result.state, result.error, result.text) == (State.DONE, None, PARENT_ANSWER)
    research = next(m for m in result.messages if isinstance(m, ToolResultMessage))
    assert (research.tool_call_id, research.text, research.is_error) == ("p1", CHILD_ANSWER, False)
    assert side_lines.count("parent_model") == 2
    assert side_lines.count("child_model") == 3
    assert side_lines.count("note") == 1
    assert side_lines.count("wait") == 1
    assert after[: len(before)] == before
    assert after[len(before) :] == ["p1/tool:c2", "p1/model_request", "model_request"]
    assert "c2 answered: error" in side_lines
    assert_valid_history(result.messages)


def worker_env(side: Path, slow_seconds: float, fifo: Path | None = None) -> dict[str, str]:
    """The environment of a process running these agents: this folder importable, the side-effect
    file, how long ``wait_here`` waits, and (for the first worker only) the named pipe it writes
    to when it starts."""
    env = dict(os.environ)
    here = str(Path(__file__).resolve().parent)
    env["PYTHONPATH"] = os.pathsep.join([here, env.get("PYTHONPATH", "")])
    env["SMA_SIDE_FILE"] = str(side)
    env["SMA_SLOW_SECONDS"] = str(slow_seconds)
    env.pop("SMA_READY_FIFO", None)
    if fifo is not None:
        env["SMA_READY_FIFO"] = str(fifo)
    return env


def side_lines(side: Path) -> list[str]:
    """What ran so far: the side-effect file's lines."""
    return side.read_text(encoding="utf-8").splitlines() if side.exists() else []
