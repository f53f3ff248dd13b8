"""The oracle's tools (``job``, ``limited``, ``write``) and the ``tool_use`` block of a `Call`."""

from __future__ import annotations

import asyncio
import contextvars
from typing import Any, Literal

# Public names only (the engine's internals may change under it): the oracle sees the loop as a
# user does.
from ... import (
    TextBlock,
    Tool,
    ToolContext,
    ToolError,
    ToolResult,
    ToolResultMessage,
    tool,
)
from .scenario import Call
from .texts import COOPERATE_CHUNKS, HANG_SECONDS, TIMEOUT_SECONDS

# -- the tools ---------------------------------------------------------------------------------

JOURNAL: contextvars.ContextVar[list[str] | None] = contextvars.ContextVar(
    "oracle_journal", default=None
)
"""The call ids of the oracle's tools, appended as each tool function starts (set by the runner)."""


def _record(ctx: ToolContext) -> None:
    journal = JOURNAL.get()
    if journal is not None:
        journal.append(ctx.call_id)


@tool
async def job(
    behaviour: Literal[
        "return",
        "raise",
        "tool_error",
        "sleep",
        "hang",
        "finish",
        "cancel_itself",
        "cooperate",
        "message",
    ],
    ctx: ToolContext,
    text: str = "out-x",
) -> str | ToolResult | ToolResultMessage:
    """Do what ``behaviour`` says (the oracle's test tool).

    Args:
        behaviour: return ``text``; raise `RuntimeError`; raise `ToolError`; sleep 2 ms (stopping
            early on abort); hang 20 ms ignoring an abort; finish: return ``text`` marked
            ``terminate=True`` (the run ends after the batch); cancel_itself: raise its own
            `asyncio.CancelledError` (nothing was aborted: an error result); cooperate: work in
            three 1 ms chunks, calling ``ctx.signal.raise_if_aborted()`` before each and at the
            end (an abort makes it raise: "interrupted while running"); message: return ``text``
            as a `ToolResultMessage` built with another call's id (`foreign_id`: the engine
            addresses it to this call).
        text: what to return (or the error message).
    """
    _record(ctx)
    if behaviour == "raise":
        raise RuntimeError(f"job raised: {text}")
    if behaviour == "finish":
        return ToolResult(text, terminate=True)
    if behaviour == "message":
        return ToolResultMessage(
            tool_call_id=foreign_id(ctx.call_id), tool_name="write", content=[TextBlock(text=text)]
        )
    if behaviour == "cancel_itself":
        raise asyncio.CancelledError(f"job cancelled itself: {text}")
    if behaviour == "tool_error":
        raise ToolError(f"job failed: {text}")
    if behaviour == "sleep":
        try:
            await asyncio.wait_for(ctx.signal.wait(), 0.002)
        except TimeoutError:
            return text
        return "stopped early: the run was aborted"
    if behaviour == "hang":
        await asyncio.sleep(HANG_SECONDS)
    if behaviour == "cooperate":
        for _ in range(COOPERATE_CHUNKS):
            ctx.signal.raise_if_aborted()
            await asyncio.sleep(0.001)  # a chunk of the tool's work
        ctx.signal.raise_if_aborted()
    return text


@tool(timeout_seconds=TIMEOUT_SECONDS)
async def limited(
    behaviour: Literal["return", "raise", "slow"], ctx: ToolContext, text: str = "out-x"
) -> str:
    """A tool with a 2 ms timeout.

    Args:
        behaviour: return ``text``; raise `ValueError`; slow (sleeps 1 s, so it times out).
        text: what to return (or the error message).
    """
    _record(ctx)
    if behaviour == "raise":
        raise ValueError(text)
    if behaviour == "slow":
        await asyncio.sleep(1)
    return text


@tool(resource="key")
async def write(key: str, ctx: ToolContext, text: str = "out-x") -> str:
    """Write ``text`` under ``key`` (calls on one key queue: the journal shows their order).

    Args:
        key: the resource written.
        text: what to write (returned).
    """
    _record(ctx)
    await asyncio.sleep(0)
    return text


ORACLE_TOOLS: tuple[Tool, ...] = (job, limited, write)
"""The tools the oracle's scenarios call."""


def call_block(call: Call, call_id: str) -> dict[str, Any]:
    """The ``tool_use`` block of ``call`` (its text argument is ``out-<id>``)."""
    tag = f"out-{call_id.replace('_', '')}"
    if call.args == "unparsable":
        arguments: Any = '{"behaviour": "ret'
    elif call.args == "invalid":
        arguments = {"behaviour": "explode", "key": 3}
    elif call.tool == "write":
        arguments = {"key": call.key, "text": tag}
    elif call.tool == "limited":
        arguments = {"behaviour": limited_behaviour(call), "text": tag}
    elif call.tool == "delegate":
        arguments = {"prompt": tag}  # the sub-agent's prompt (and its final answer)
    else:
        arguments = {"behaviour": job_behaviour(call), "text": tag}
    return {"type": "tool_use", "id": call_id, "name": call.tool, "input": arguments}


def limited_behaviour(call: Call) -> str:
    return call.behaviour if call.behaviour in ("return", "raise", "slow") else "return"


def job_behaviour(call: Call) -> str:
    return call.behaviour if call.behaviour != "slow" else "hang"


def foreign_id(call_id: str) -> str:
    """Another call's id for a result message built for ``call_id``: the next call of the
    scenario's numbering (``r1_2`` for ``r1_1``; it may be a call of the same batch)."""
    prefix, _, number = call_id.rpartition("_")
    return f"{prefix}_{int(number) + 1}" if number.isdigit() else f"{call_id}_other"


def tag_of(call_id: str) -> str:
    return f"out-{call_id.replace('_', '')}"
