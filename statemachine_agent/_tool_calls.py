"""How a tool's function is called: on the event loop or in the tool thread pool, and what it
returned settled (an awaitable awaited, a generator or async generator consumed, each value a
progress update). `Tool.call` (`_tools`) picks the way by the function's kind (`kind_of`)."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import inspect
import threading
from collections.abc import AsyncGenerator, Callable, Generator
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Literal

# Sync tools get their own pool: asyncio's default one has min(32, cpus + 4) workers (6 on two
# cores), which would silently serialise a larger parallel batch of blocking tools. Threads are
# started only as needed.
SYNC_TOOL_WORKERS = 64
_sync_tool_pool = ThreadPoolExecutor(
    SYNC_TOOL_WORKERS, thread_name_prefix="statemachine-agent-tool"
)


ToolKind = Literal["async", "async_generator", "sync"]


def kind_of(function: Callable[..., Any]) -> ToolKind:
    """How a function is called: on the loop and awaited, on the loop and iterated, or as a
    sync function (what it returns is settled at run time)."""
    candidates: list[Any] = [function]
    if not inspect.isroutine(function) and not isinstance(function, type | functools.partial):
        candidates.append(getattr(type(function), "__call__", None))  # noqa: B004
    if any(inspect.iscoroutinefunction(c) for c in candidates):
        return "async"
    if any(inspect.isasyncgenfunction(c) for c in candidates):
        return "async_generator"
    return "sync"


def no_progress(update: Any) -> None:
    """Progress of a call made without a `ToolContext` goes nowhere."""


async def settled(value: Any, progress: Callable[[Any], None]) -> Any:
    """What a tool returned, settled on the event loop: an awaitable (a sync wrapper of a
    coroutine function) awaited, a generator or async generator consumed."""
    if inspect.isawaitable(value):
        value = await value
    if inspect.isasyncgen(value):
        return await last_of(value, progress)
    if inspect.isgenerator(value):  # a sync tool run on the loop (``run_in_thread=False``)
        return drain(value, progress, None)
    return value


async def last_of(values: AsyncGenerator[Any, Any], progress: Callable[[Any], None]) -> Any:
    """Consume an async generator: each value a progress update; returns the last (or None)."""
    last = None
    async with contextlib.aclosing(values):
        async for last in values:
            progress(last)
    return last


def drain(
    values: Generator[Any, Any, Any],
    progress: Callable[[Any], None],
    handoff: Handoff | None,
) -> Any:
    """Consume a generator: each value a progress update; returns its ``return`` value when not
    None, else the last value. Stops (closing it) at the next value once ``handoff`` is stopped."""
    last = None
    with contextlib.closing(values):
        while handoff is None or not handoff.stopped:
            try:
                last = next(values)
            except StopIteration as end:
                return last if end.value is None else end.value
            progress(last)
    return None


class Handoff:
    """What a worker thread hands to the loop, and the loop's word that it stopped waiting.

    A coroutine the thread made after the wait was cancelled would never be awaited: whichever
    side comes second closes it (under a lock), so it is never left unawaited."""

    __slots__ = ("_lock", "_value", "stopped")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.stopped = False
        self._value: Any = None

    def give(self, value: Any) -> Any:
        with self._lock:
            if not self.stopped:
                self._value = value
                return value
        discard(value)
        return None

    def stop(self) -> None:
        with self._lock:
            self.stopped = True
            value, self._value = self._value, None
        discard(value)


def discard(value: Any) -> None:
    """Close a coroutine or generator nobody will await or consume."""
    if inspect.iscoroutine(value) or inspect.isgenerator(value):
        value.close()


def _thread_body(parts: list[Any], handoff: Handoff) -> Any:
    run, progress = parts
    value = run()
    if inspect.isgenerator(value):  # consumed here, in the worker thread
        value = drain(value, progress, handoff)
    return handoff.give(value)


async def in_thread(run: Callable[[], Any], progress: Callable[[Any], None]) -> Any:
    """Run a sync function in the tool pool; settle what it returned on the loop.

    The thread gets the function and the progress callback (which holds the call's context,
    and through it the run) in a list emptied once the thread is done with them: the pool's
    work item may outlive the result by a moment, and must not keep a finished run (and its
    agent and session log) alive."""
    handoff = Handoff()
    parts: list[Any] = [run, progress]
    job = functools.partial(contextvars.copy_context().run, _thread_body, parts, handoff)
    try:
        value = await asyncio.get_running_loop().run_in_executor(_sync_tool_pool, job)
    except asyncio.CancelledError:
        handoff.stop()  # the thread stops a generator at its next value
        raise
    parts.clear()  # the thread has returned: nothing of the run stays with the pool
    return await settled(value, progress)
