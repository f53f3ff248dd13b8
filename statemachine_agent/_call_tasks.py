"""The asyncio tasks a tool batch runs its calls in (`_execution.BatchRun`): how one is made and
started, and the loop pass a batch gives them."""

from __future__ import annotations

import asyncio
import functools
import sys
import types
from collections.abc import Callable, Coroutine, Generator
from typing import Any

CALL_TASK_NAME = "statemachine_agent tool call"  # (asyncio would format a name per task)

StartTask = Callable[..., "asyncio.Task[Any]"]
"""``start(coroutine, loop=loop, name=...)``: makes a call's task on ``loop`` (what `starter`
returns)."""


def _by_the_loop(
    coroutine: Coroutine[Any, Any, Any], *, loop: asyncio.AbstractEventLoop, name: str
) -> asyncio.Task[Any]:
    """A call's task made by ``loop.create_task`` (the loop's own, or its task factory)."""
    return loop.create_task(coroutine, name=name)


_ASYNCIO_CREATE_TASK = asyncio.BaseEventLoop.create_task


# The task `starter` makes when the loop makes tasks asyncio's way: on Python 3.12+ started at
# once (``eager_start``), so a call that ends in its first step (an async tool that does not
# wait) ends before its task is returned and its batch needs no event loop pass for it; on 3.11,
# which has no public way to start a task at once, `asyncio.Task` itself (what
# ``loop.create_task`` makes, without that method's layer), its first step in the next pass.
_OWN_TASK: StartTask
if sys.version_info >= (3, 12):
    _OWN_TASK = functools.partial(asyncio.Task, eager_start=True)
else:
    _OWN_TASK = asyncio.Task


def starter(loop: asyncio.AbstractEventLoop) -> StartTask:
    """How a call's task is made on ``loop``: `asyncio.Task` called directly, started at once on
    Python 3.12+ (``eager_start``: a call that ends in its first step needs no event loop pass);
    with a task factory of the loop's own (`loop.set_task_factory`), or a ``create_task`` of its
    own (an event loop that is not asyncio's), ``loop.create_task`` makes it. Either way the call
    runs in a task of its own (`asyncio.current_task` is that task, in a copy of the context).

    Args:
        loop: the running event loop.

    Returns:
        ``start(coroutine, loop=loop, name=...)``, returning the task (on 3.12+ it may be done
        already).
    """
    if loop.get_task_factory() is not None or type(loop).create_task is not _ASYNCIO_CREATE_TASK:
        return _by_the_loop
    return _OWN_TASK


@types.coroutine
def next_pass() -> Generator[None, None, None]:
    """Give the event loop one pass (``asyncio.sleep(0)``'s own step, without its call)."""
    yield
