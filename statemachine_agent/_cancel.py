"""Cancellation: the run's abort signal and the one scope every awaited step runs under.

A run is stopped in one way only: `AbortSignal.set` (from `Agent.abort`, on the loop's thread).
Code that must stop when it is set runs inside `abort_scope`, which works as ``asyncio.timeout``
does: the signal makes it expire (at once, or after a grace period), so the step is cancelled by
asyncio itself, and the scope tells afterwards whether the abort was the cause. The model request
and the one-call tool path both use it. A cancellation of the task running the agent is a
different thing (the caller cancelled it): it is never swallowed, and a scope re-raises one that
awaited code (a tool or a model) swallowed.
"""

from __future__ import annotations

import asyncio
import inspect
import itertools
from collections.abc import Callable, Sequence
from functools import partial
from types import TracebackType
from typing import cast


class AbortSignal:
    """Set when the run is aborted. Tools should check it and stop early.

    Readable from any thread (sync tools run in a worker thread).
    """

    def __init__(self) -> None:
        self._aborted = False
        self.reason: str | None = None
        # Each change is one dict operation, atomic under the GIL: no lock (a lock per abort
        # scope was a per-turn cost, and the loop's thread is the one that sets the signal).
        self._callbacks: dict[int, Callable[[], None]] = {}
        self._keys = itertools.count()  # next() is one atomic step: threads may add callbacks

    @property
    def aborted(self) -> bool:
        """True once the run has been aborted."""
        return self._aborted

    def set(self, reason: str | None = None) -> None:
        """Abort (idempotent). Call from the event loop's thread."""
        if self._aborted:
            return
        self._aborted = True
        self.reason = reason
        for callback in list(self._callbacks.values()):
            callback()

    def add_callback(self, callback: Callable[[], None]) -> Callable[[], None]:
        """Call ``callback()`` on abort; returns a function that removes it."""
        key = next(self._keys)
        self._callbacks[key] = callback
        return cast("Callable[[], None]", partial(self._callbacks.pop, key, None))

    def arm(self, scope: asyncio.Timeout, after_seconds: float = 0.0) -> Callable[[], None]:
        """Make ``scope`` (an ``asyncio.timeout(None)``) expire ``after_seconds`` after an abort,
        cancelling the block it guards; leaving it then raises `TimeoutError` and
        ``scope.expired()`` is true. Returns the function that disarms it. For code that guards a
        block with its own ``asyncio.timeout``; the engine's `abort_scope` takes the same steps
        without one.
        """
        loop = asyncio.get_running_loop()

        def on_abort() -> None:
            if scope.when() is None:
                scope.reschedule(loop.time() + after_seconds)

        remove = self.add_callback(on_abort)
        if self._aborted:
            on_abort()
        return remove

    def future(self) -> asyncio.Future[None]:
        """A future resolved on abort (already resolved if aborted)."""
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if self._aborted:
            fut.set_result(None)
            return fut

        def wake() -> None:
            if not fut.done():
                fut.set_result(None)

        remove = self.add_callback(wake)
        fut.add_done_callback(lambda _fut: remove())  # a cancelled waiter does not linger
        return fut

    async def wait(self) -> None:
        """Return once the run is aborted."""
        await self.future()

    def raise_if_aborted(self) -> None:
        """Raise `asyncio.CancelledError` if the run was aborted (for cooperative tools)."""
        if self._aborted:
            raise asyncio.CancelledError(self.reason or "aborted")


class abort_scope:  # named like the function it was: ``with abort_scope(...)``
    """Run the block until it ends or until ``grace_seconds`` after ``signal`` is set, whichever
    comes first; an abort that cuts it short is swallowed and reported as ``scope.aborted``
    (``with abort_scope(signal) as scope:``, or ``async with``; the scope is its own outcome:
    ``aborted`` is False until an abort ends the block).

    A `TimeoutError` the block raises itself (a tool's or a model's own timeout) propagates
    unchanged; so does a cancellation of the task (re-raised even when the block swallowed it).

    It works as ``asyncio.timeout`` does (the same steps, the same timing): the abort schedules
    the cancellation of the task running the block (on the loop's next iteration, or after the
    grace period), and leaving the block takes that cancellation back with ``Task.uncancel``,
    so a cancellation by anyone else is never lost. Unlike ``asyncio.timeout`` it has no
    deadline of its own and enters synchronously: every model request and inline tool call
    enters one, and the two ``asyncio.timeout`` steps plus an ``await`` on each side were a
    noticeable part of a turn's cost (benchmarks/README.md).

    Args:
        signal: the run's abort signal.
        grace_seconds: how long the block may go on after the abort (a tool cleaning up).

    Raises:
        RuntimeError: entered outside a task.
    """

    __slots__ = (
        "_cancelling",
        "_expired",
        "_grace",
        "_handle",
        "_key",
        "_signal",
        "_task",
        "aborted",
    )

    def __init__(self, signal: AbortSignal, grace_seconds: float = 0.0) -> None:
        self._signal = signal
        self._grace = grace_seconds
        self.aborted = False
        self._handle: asyncio.Handle | None = None
        self._expired = False

    def __enter__(self) -> abort_scope:
        task = asyncio.current_task()
        if task is None:
            raise RuntimeError("abort_scope must be used inside a task")
        self._task = task
        self._cancelling = task.cancelling()
        signal = self._signal
        # `AbortSignal.add_callback`'s steps, without the remover it builds: every model
        # request and inline tool call enters a scope, and `__exit__` removes by the key.
        self._key = key = next(signal._keys)
        signal._callbacks[key] = self._on_abort
        if signal._aborted:
            self._on_abort()
        return self

    def _on_abort(self) -> None:
        """The signal was set: cancel the block's task, now or after the grace period."""
        if self._handle is not None or self._expired:
            return
        loop = self._task.get_loop()
        if self._grace > 0:
            self._handle = loop.call_later(self._grace, self._expire)
        else:
            self._handle = loop.call_soon(self._expire)

    def _expire(self) -> None:
        self._handle = None
        self._expired = True
        self._task.cancel()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool:
        self._signal._callbacks.pop(self._key, None)
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        if (
            self._expired
            # Take back the cancellation the abort asked for; if nobody else asked for one, the
            # CancelledError the block ends with is the abort's: swallowed, reported.
            and self._task.uncancel() <= self._cancelling
            and exc_type is asyncio.CancelledError
        ):
            self.aborted = True
            if self._task.cancelling():  # the task's own cancellation is never lost
                raise asyncio.CancelledError
            return True
        if exc_type is None and self._task.cancelling():
            raise asyncio.CancelledError  # a cancellation the block swallowed
        return False

    async def __aenter__(self) -> abort_scope:
        return self.__enter__()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool:
        return self.__exit__(exc_type, exc, tb)


async def all_done_or_abort(tasks: Sequence[asyncio.Future[None]], signal: AbortSignal) -> None:
    """Wait until every task is done or ``signal`` is set, whichever comes first (one future
    woken by the tasks' done callbacks and the signal: no waiting task)."""
    woken: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    left = len(tasks)

    def wake(_done: object = None) -> None:
        if not woken.done():
            woken.set_result(None)

    def one_done(_task: asyncio.Future[None]) -> None:
        nonlocal left
        left -= 1
        if not left:
            wake()

    for task in tasks:
        task.add_done_callback(one_done)
    remove = signal.add_callback(wake)
    if signal.aborted:
        wake()
    try:
        await woken
    finally:
        remove()
        for task in tasks:
            task.remove_done_callback(one_done)


def cancelling() -> bool:
    """The current task is being cancelled (an abort's scope expiring, or its caller cancelling
    it). A `asyncio.CancelledError` raised while this is False is the raiser's own: a failure of
    that code (a tool, a hook, a model), not a cancellation of the run."""
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0


def is_run_cancellation(exc: BaseException) -> bool:
    """``exc`` is the run's task being cancelled (re-raise it), not the `asyncio.CancelledError`
    a hook, tool or model raised of its own (a failure of that code)."""
    return isinstance(exc, asyncio.CancelledError) and cancelling()


def takes_signal(hook: object) -> bool:
    """``hook`` takes a second positional parameter (the run's abort signal): the rule for
    ``transform_context`` and a compaction summarizer alike."""
    try:
        parameters = list(inspect.signature(hook).parameters.values())  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return False
    if any(p.kind is p.VAR_POSITIONAL for p in parameters):
        return True
    positional = [p for p in parameters if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return len(positional) >= 2
