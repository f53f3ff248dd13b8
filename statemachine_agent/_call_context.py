"""The `ToolContext` a call's tool gets: its progress updates become ``tool_execution_update``
events on the loop's thread, between the call's start and end events."""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable
from typing import Any

from ._cancel import AbortSignal
from ._events import Event, ToolExecutionUpdate
from ._messages import ToolCallBlock
from ._tools import ToolContext

logger = logging.getLogger("statemachine_agent")


def call_context(
    call: ToolCallBlock,
    signal: AbortSignal,
    deps: Any,
    emit: Callable[[Event], None],
    result: Callable[[], object],
    run: Any = None,
) -> ToolContext:
    """The `ToolContext` of ``call``. ``result()`` is the call's result so far (None while it
    runs): an update that comes after it (from a background task or thread the tool left
    running) is dropped. Updates from a worker thread are delivered on the loop's thread.
    ``run`` is the `Run` executing the call (`ToolContext.run`)."""
    loop = asyncio.get_running_loop()
    loop_thread = threading.get_ident()

    def deliver(update: Any) -> None:
        if result() is not None:
            logger.debug(
                "dropped a progress update of tool %r (call %s): the call has ended",
                call.name,
                call.id,
            )
            return
        emit(ToolExecutionUpdate(call.id, update))

    def progress(update: Any) -> None:
        if threading.get_ident() == loop_thread:
            deliver(update)
            return
        try:  # a sync tool in a worker thread: events are delivered on the loop's thread
            loop.call_soon_threadsafe(deliver, update)
        except RuntimeError:  # the loop is closed: the run is long over
            logger.debug("dropped a progress update of call %s: its loop is closed", call.id)

    return ToolContext(call.id, call.name, signal, progress, deps, run)
