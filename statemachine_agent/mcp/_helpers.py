"""Small helpers of the MCP client: cancelling a task, listing every page of tools, where a
stdio server's stderr goes, and one line describing an exception (group)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
from typing import Any, TextIO

import mcp.types as mt
from mcp import Client


async def cancel_task(task: asyncio.Future[Any]) -> None:
    """Cancel ``task`` and wait for it to end (its own outcome retrieved)."""
    task.cancel()
    with contextlib.suppress(BaseException):
        await asyncio.wait({task})
    if task.done() and not task.cancelled():
        task.exception()


async def list_all(client: Client) -> list[mt.Tool]:
    """Every tool the server lists, page after page, in its order."""
    tools: list[mt.Tool] = []
    cursor: str | None = None
    while True:
        page = await client.list_tools(cursor=cursor, cache_mode="refresh")
        tools.extend(page.tools)
        cursor = page.next_cursor
        if cursor is None:
            return tools


def errlog() -> TextIO:
    """Where a stdio server's stderr goes: this process's, the real one when ``sys.stderr`` was
    replaced by an object with no file descriptor (a test's capture, a notebook)."""
    try:
        sys.stderr.fileno()
    except (AttributeError, OSError, ValueError):
        return sys.__stderr__ or open(os.devnull, "w")
    return sys.stderr


def describe(exc: BaseException) -> str:
    """``Type: message`` of ``exc``; the parts of an exception group joined by ``; ``."""
    if isinstance(exc, BaseExceptionGroup):
        return "; ".join(describe(e) for e in exc.exceptions)
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
