"""How an abort reaches a durable run without costing it a DBOS record a turn.

`abort` / `Client.abort` set the workflow attribute `ABORT_ATTRIBUTE` (DBOS's
``update_workflow_attributes``, from any process, durable). A worker watches the runs it
executes: one task per process reads their attributes (``DBOS.list_workflows``, outside any
workflow, so nothing is recorded) every `ABORT_POLL_SECONDS` and sets the run's abort signal;
the run then ends under the usual grace rules, as after ``agent.abort()``. The task ends when no
run is left to read (a run waiting for decisions gets an abort as a message instead, not read)
and starts again with the next one.

Replay stays deterministic: an abort is applied only once the run executes a step for real
(`AbortWatch.go_live`: a replayed step does not), and each step whose run was aborted by its end
records the reason in its output, so a replay applies it at the same place (`wrap` / `unwrap`).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
from collections.abc import Iterator
from typing import Any

from dbos import DBOS

from .._cancel import AbortSignal
from ._names import ABORT_ATTRIBUTE
from ._state import process

logger = logging.getLogger("statemachine_agent")

ABORT_POLL_SECONDS = 0.1
"""How often a worker reads the abort attribute of the runs it executes (one query for all of
them; no DBOS record). An abort reaches a running run within about this long."""

_RECORDED_KEY = "statemachine-agent.aborted"
"""The key, in a step's recorded output, of the abort reason the run had by the step's end."""


class AbortWatch:
    """The abort state of one workflow executing in this process.

    Attributes:
        workflow_id: the run's id.
        signal: the abort signal of its current top-level run (None before the first).
        reason: the abort reason read from the database (None: no abort yet).
        live: a step of this workflow has executed in this process (not a replay): an abort
            read from the database may be applied from now on.
        checked: set once the attribute was read for the first time.
        waiting: the run waits for decisions (`waiting_for_decisions`): an abort reaches it as
            a message then, so its attribute is not read.
    """

    def __init__(self, workflow_id: str) -> None:
        self.workflow_id = workflow_id
        self.signal: AbortSignal | None = None
        self.reason: str | None = None
        self.live = False
        self.checked = asyncio.Event()
        self.waiting = False

    def attach(self, signal: AbortSignal) -> None:
        """A new top-level run of the workflow (a continuation after decisions, too)."""
        self.signal = signal
        self.apply()

    def seen(self, reason: str) -> None:
        """The watcher read an abort for this run."""
        self.reason = reason
        self.apply()

    async def go_live(self) -> None:
        """A step body runs for real (each body calls it first): apply an abort sent meanwhile
        (the run's first live step waits for the first read of its abort attribute)."""
        if not self.live:
            await self.checked.wait()
            self.live = True
        self.apply()

    def replayed(self, reason: str) -> None:
        """A replayed step recorded that the run was aborted by its end: abort it here too."""
        if self.signal is not None and not self.signal.aborted:
            self.signal.set(reason)

    def applied(self) -> str | None:
        """The reason the run was aborted with, when it was (None: not aborted)."""
        signal = self.signal
        if signal is None or not signal.aborted:
            return None
        return signal.reason or ""

    def apply(self) -> None:
        """Set the run's signal to the abort read, once live (a step body runs for real)."""
        signal = self.signal
        if self.live and self.reason is not None and signal is not None and not signal.aborted:
            signal.set(self.reason)


def current() -> AbortWatch | None:
    """The watch of the workflow this code runs in (None outside a watched workflow)."""
    workflow_id = DBOS.workflow_id
    return None if workflow_id is None else process.watches.get(workflow_id)


def wrap(output: Any, watch: AbortWatch | None) -> Any:
    """A step's output, with the run's abort reason when it was aborted by the step's end (what
    each step body returns)."""
    if watch is None:
        return output
    reason = watch.applied()
    return output if reason is None else {_RECORDED_KEY: reason, "output": output}


def unwrap(recorded: Any, watch: AbortWatch | None) -> Any:
    """The output of a step `wrap` built; a replayed one's abort is applied to the run."""
    if isinstance(recorded, dict) and _RECORDED_KEY in recorded:
        if watch is not None:
            watch.replayed(str(recorded[_RECORDED_KEY]))
        return recorded["output"]
    return recorded


class _Poller:
    """The one task of this process that reads the watched runs' abort attribute."""

    def __init__(self) -> None:
        self.task: asyncio.Task[None] | None = None
        self.wake: asyncio.Event | None = None

    def start(self) -> None:
        """Make sure the task runs on this loop, and have it read now."""
        loop = asyncio.get_running_loop()
        task = self.task
        if task is None or task.done() or task.get_loop() is not loop:
            self.wake = asyncio.Event()
            # A fresh context: the task belongs to no workflow, so DBOS records nothing for it.
            self.task = loop.create_task(self._poll(self.wake), context=contextvars.Context())
        elif self.wake is not None:
            self.wake.set()

    def stop(self) -> None:
        """Stop the task (`shutdown`)."""
        task, self.task = self.task, None
        if task is not None and not task.done() and not task.get_loop().is_closed():
            task.get_loop().call_soon_threadsafe(task.cancel)

    async def _poll(self, wake: asyncio.Event) -> None:
        loop = asyncio.get_running_loop()
        failing = False
        while True:
            wake.clear()
            # Runs waiting for decisions get an abort as a message: nothing to read for them.
            watches = {key: w for key, w in process.watches.items() if not w.waiting}
            if not watches:
                break  # `watch` / `waiting_for_decisions` start the task again
            try:
                statuses = await DBOS.list_workflows_async(
                    workflow_ids=list(watches), load_input=False, load_output=False
                )
            except Exception as exc:  # the database is away for a moment: read again later
                if not failing:
                    logger.warning("could not read the abort requests of durable runs: %s", exc)
                failing = True
                for found in watches.values():  # their steps need not wait for a read
                    found.checked.set()
            else:
                failing = False
                _deliver(statuses, watches)
            # A timer, not ``wait_for`` (a task and its timeout every poll).
            timer = loop.call_later(ABORT_POLL_SECONDS, wake.set)
            try:
                await wake.wait()
            finally:
                timer.cancel()


def _deliver(statuses: list[Any], watches: dict[str, AbortWatch]) -> None:
    for status in statuses:
        reason = (status.attributes or {}).get(ABORT_ATTRIBUTE)
        found = watches.get(status.workflow_id)
        if reason is not None and found is not None:
            found.seen(str(reason))
    for found in watches.values():
        found.checked.set()


poller = _Poller()


def watch(workflow_id: str) -> AbortWatch:
    """Start watching ``workflow_id`` in this process (call `unwatch` when its body ends)."""
    found = process.watches.get(workflow_id)
    if found is None:
        found = process.watches[workflow_id] = AbortWatch(workflow_id)
    poller.start()
    return found


def deliver(workflow_id: str, reason: str) -> None:
    """An abort sent from this process: a run executing here gets it now, without waiting for
    the next read (on its loop's thread)."""
    found = process.watches.get(workflow_id)
    task = poller.task
    if found is None or task is None or task.done():
        return
    loop = task.get_loop()
    try:
        running = asyncio.get_running_loop()
    except RuntimeError:
        running = None
    if running is loop:
        found.seen(reason)
    elif not loop.is_closed():
        loop.call_soon_threadsafe(found.seen, reason)


@contextlib.contextmanager
def waiting_for_decisions() -> Iterator[None]:
    """The block waits for decisions (``recv``): the watched run of this workflow is not read
    meanwhile (an abort sent then comes as a message on the decision topic); when the block
    ends, its attribute is read at once (an abort sent meanwhile still reaches it)."""
    found = current()
    if found is None:
        yield
        return
    found.waiting = True
    try:
        yield
    finally:
        found.waiting = False
        poller.start()


def unwatch(workflow_id: str) -> None:
    """Stop watching ``workflow_id`` (its workflow body ended here)."""
    process.watches.pop(workflow_id, None)
