"""Bytes: what a call + result pair costs in a history, and an idle agent (issue 39, item 2).

Counted with ``tracemalloc`` (after ``gc.collect()``), a figure the machine's load does not move:

- **a call + result pair**: the history of a run of 110 tool-call turns minus that of a run of
  10 (the same prompt and final answer cancel out), over 100. Each turn is figure 5's
  (`bench_scale`) response: an `AssistantMessage` holding one `ToolCallBlock` and its own
  `Usage`, answered by the engine's `ToolResultMessage` of the no-op tool's ``"ok"``. The
  memory counted is what the agent's history holds once the run is over (messages, blocks,
  strings, lists), with the run's events dropped.
- **an idle agent**: ``Agent(model, tools=[noop])`` with a subscriber, over 1,000 agents.

Targets: a pair at most 1.5 KiB (pydantic-ai about 1.5 KiB, openai-agents 0.7 KiB, issue 39);
an idle agent under 10 KiB.

Usage: ``python benchmarks/bench_bytes.py [--quick]``
"""

from __future__ import annotations

import asyncio
import gc
import tracemalloc
from typing import Any

from _common import emit, table
from bench_turn_cpu import NOOP

from statemachine_agent import (
    Agent,
    AssistantMessage,
    Message,
    State,
    TextBlock,
    ToolCallBlock,
    Usage,
)
from statemachine_agent.models import FunctionModel

PAIR_TARGET_KIB = 1.5
IDLE_TARGET_KIB = 10.0
IDLE_AGENTS = 1000


def responder(turns: int) -> Any:
    """Figure 5's responses: ``turns`` responses of one call, each with its usage, then ``done``."""

    def respond(messages: list[Message], _request: Any) -> AssistantMessage:
        done = sum(1 for m in messages if isinstance(m, AssistantMessage))
        usage = Usage(input_tokens=10 + 20 * done, output_tokens=5)
        if done < turns:
            call = ToolCallBlock(id=f"toolu_{done}", name="noop", input={})
            return AssistantMessage(content=[call], stop_reason="tool_use", usage=usage)
        return AssistantMessage(
            content=[TextBlock(text="done")], stop_reason="end_turn", usage=usage
        )

    return respond


def _drop(_event: object) -> None:
    pass


def _traced() -> int:
    gc.collect()
    return tracemalloc.get_traced_memory()[0]


def history_bytes(turns: int) -> int:
    """Bytes the history of a run of ``turns`` tool-call turns holds (tracemalloc)."""
    agent = Agent(FunctionModel(responder(turns)), tools=[NOOP], max_turns=turns + 5)
    agent.subscribe(_drop)
    tracemalloc.start()
    try:
        result = asyncio.run(agent.run("go"))
        assert result.state is State.DONE, result.error
        del result
        with_history = _traced()
        history = agent.messages
        agent.messages = []
        assert len(history) == 2 + 2 * turns
        del history
        return with_history - _traced()
    finally:
        tracemalloc.stop()


def pair_bytes() -> float:
    """Bytes one call + result pair adds to a history (110 turns minus 10, over 100)."""
    history_bytes(10)  # first-use costs (caches of the classes, the shared keys) are not a pair's
    return (history_bytes(110) - history_bytes(10)) / 100


def idle_bytes(n: int = IDLE_AGENTS) -> float:
    """Bytes per idle agent (constructed with a subscriber, never run)."""
    model = FunctionModel(responder(1))

    def build() -> list[Agent]:
        agents = [Agent(model, tools=[NOOP]) for _ in range(n)]
        for agent in agents:
            agent.subscribe(_drop)
        return agents

    build()
    tracemalloc.start()
    try:
        before = _traced()
        agents = build()
        size = _traced() - before
        del agents
        return size / n
    finally:
        tracemalloc.stop()


def main() -> dict[str, Any]:
    pair = pair_bytes()
    idle = idle_bytes()
    print(
        table(
            ["measure", "bytes", "KiB", "target KiB"],
            [
                ["a call + result pair in the history", pair, pair / 1024, PAIR_TARGET_KIB],
                ["an idle agent", idle, idle / 1024, IDLE_TARGET_KIB],
            ],
            "Bytes (tracemalloc; the machine's load does not move them)",
        )
    )
    data = {
        "pair_bytes": pair,
        "idle_agent_bytes": idle,
        "targets": {
            "pair_le_1_5kib": pair <= PAIR_TARGET_KIB * 1024,
            "idle_agent_lt_10kib": idle < IDLE_TARGET_KIB * 1024,
        },
    }
    emit("bytes", data)
    return data


if __name__ == "__main__":
    main()
