"""Shared helpers of the benchmark scripts: statistics, tables, JSON output, machine info.

Every script prints a table, then one line ``JSON {...}`` holding its figures (`run_all.py` collects
those lines). Times are medians of repeated runs; ratios compare numbers measured in the same run.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run from a checkout without installing
    sys.path.insert(0, str(ROOT))

from statemachine_agent import (  # noqa: E402  (after the path is set)
    AssistantMessage,
    TextBlock,
    ToolResultMessage,
    UserMessage,
)

SETUP = "python3 -m venv .benchvenv && .benchvenv/bin/pip install -e '.[benchmark]'"


def pydantic_ai_version() -> str | None:
    """The installed pydantic-ai version, or None when it is not importable."""
    try:
        import pydantic_ai
    except ImportError:
        return None
    return str(getattr(pydantic_ai, "__version__", "unknown"))


def skip_note() -> str:
    """Why the pydantic-ai column is empty."""
    return (
        "pydantic-ai is not importable in this interpreter: its column is skipped. It is not a "
        f"dependency of the project; set up the benchmark environment with: {SETUP}"
    )


def machine() -> dict[str, Any]:
    """What the figures were measured on."""
    return {
        "python": platform.python_version(),
        "platform": platform.platform(terse=True),
        "cpus": os.cpu_count(),
        "date": time.strftime("%Y-%m-%d"),
    }


def median(values: Sequence[float]) -> float:
    """The median of ``values``."""
    return float(statistics.median(values))


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]], title: str = "") -> str:
    """A GitHub-markdown table (also readable in a terminal)."""
    cells = [[_cell(v) for v in row] for row in rows]
    widths = [max(len(h), *(len(r[i]) for r in cells)) for i, h in enumerate(headers)]
    lines = [f"### {title}", ""] if title else []
    lines.append("| " + " | ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)) + " |")
    lines.append("| " + " | ".join("-" * w for w in widths) + " |")
    for row in cells:
        lines.append("| " + " | ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) + " |")
    return "\n".join(lines)


def _cell(value: Any) -> str:
    if value is None:
        return "n/a"
    if isinstance(value, bool):
        return "yes" if value else "NO"
    if isinstance(value, float):
        return f"{value:.2f}" if abs(value) < 100 else f"{value:.0f}"
    return str(value)


def emit(figure: str, data: dict[str, Any]) -> None:
    """Print the figure's JSON line (collected by `run_all.py`)."""
    print("JSON " + json.dumps({"figure": figure, **data}, sort_keys=True), flush=True)


def quick() -> bool:
    """``--quick`` was passed: fewer repeats, for a smoke run."""
    return "--quick" in sys.argv


async def minimal_run(
    respond: Any, tool: Any, prompt: str = "go", *, call_tasks: bool = False
) -> list[Any]:
    """One run of the minimal loop: the least any agent loop must do, with no engine; the
    reference the engine's figures are read against (not figure 1's bare loop over dicts).

    It asks the same model function for each response (so the same response objects are built),
    awaits the tool of each call and builds its result message (a `ToolResultMessage` with one
    `TextBlock`, validated as the engine's are), and keeps the history; no events, no protocol
    checks, no projection, no state machine, no abort scopes. Returns the history.

    Args:
        respond: the benchmark's model function, ``respond(messages, request)``, sync or async
            (``request`` is None here).
        tool: the async tool function every call runs, called with the call's input.
        prompt: the first user message's text.
        call_tasks: await each call in an asyncio task of its own (as the engine runs an async
            tool, so that a call ignoring its cancellation cannot hold the run open), rather
            than in the loop's own task.
    """
    messages: list[Any] = [UserMessage(prompt)]
    while True:
        response = respond(messages, None)
        if inspect.isawaitable(response):
            response = await response
        messages.append(response)
        calls = response.tool_calls
        if not calls:
            return messages
        for call in calls:
            if call_tasks:
                output = await asyncio.create_task(tool(**call.input))
            else:
                output = await tool(**call.input)
            messages.append(
                ToolResultMessage(
                    tool_call_id=call.id, tool_name=call.name, content=[TextBlock(text=output)]
                )
            )


def check_minimal(history: Sequence[Any], batch: int, turns: int, output: str = "ok") -> None:
    """Raise AssertionError unless ``history`` is what `minimal_run` must leave for ``turns``
    responses of ``batch`` calls then an answer: each call answered, in order, by a result
    carrying the tool's ``output``."""
    if len(history) != 2 + turns * (1 + batch):
        raise AssertionError(f"{len(history)} messages, expected {2 + turns * (1 + batch)}")
    for i, message in enumerate(history):
        if isinstance(message, AssistantMessage) and message.tool_calls:
            results = history[i + 1 : i + 1 + len(message.tool_calls)]
            for call, result in zip(message.tool_calls, results, strict=True):
                if not (
                    isinstance(result, ToolResultMessage)
                    and result.tool_call_id == call.id
                    and result.text == output
                ):
                    raise AssertionError(f"call {call.id} is not answered by its tool's output")
