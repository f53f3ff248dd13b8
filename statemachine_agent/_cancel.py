"""Cancellation: the run's abort signal and the one scope every awaited step runs under.

A run is stopped in one way only: `AbortSignal.set` (from `Agent.abort`, on the loop's thread).
Code that must stop when it is set runs inside `abort_scope`: an ``asyncio.timeout`` scope that the
signal makes expire (at once, or after a grace period), so the step is cancelled by asyncio itself and
the scope tells afterwards whether the abort was the cause. The model request and the one-call tool
path both use it. A cancellation of the task running the agent is a different thing (the caller
cancelled it): it is never swallowed, and `raise_if_cancelling` re-raises one that awaited code
(a tool or a model) swallowed.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable
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
        ``scope.expired()`` is true. Returns the function that disarms it. `abort_scope` is the
        usual way to use this.
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


class AbortScope:
    """What `abort_scope` yields; after the block, ``aborted`` tells whether the abort (and not
    the block itself) ended it."""

    __slots__ = ("aborted",)

    def __init__(self) -> None:
        self.aborted = False


class abort_scope:  # named like the function it was: ``async with abort_scope(...)``
    """Run the block until it ends or until ``grace_seconds`` after ``signal`` is set, whichever
    comes first; an abort that cuts it short is swallowed and reported as ``scope.aborted``
    (``async with abort_scope(signal) as scope:``).

    A `TimeoutError` the block raises itself (a tool's or a model's own timeout) propagates
    unchanged; so does a cancellation of the task (re-raised even when the block swallowed it).
    The scope is an ``asyncio.timeout(None)`` that the signal reschedules; a class rather than
    a generator-based context manager, since every model request and inline tool call enters one.

    Args:
        signal: the run's abort signal.
        grace_seconds: how long the block may go on after the abort (a tool cleaning up).
    """

    __slots__ = ("_disarm", "_grace", "_outcome", "_signal", "_timeout")

    def __init__(self, signal: AbortSignal, grace_seconds: float = 0.0) -> None:
        self._signal = signal
        self._grace = grace_seconds
        self._outcome = AbortScope()
        self._timeout = asyncio.timeout(None)
        self._disarm: Callable[[], None] | None = None

    async def __aenter__(self) -> AbortScope:
        await self._timeout.__aenter__()
        self._disarm = self._signal.arm(self._timeout, self._grace)
        return self._outcome

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool:
        if self._disarm is not None:
            self._disarm()
        try:
            await self._timeout.__aexit__(exc_type, exc, tb)
        except TimeoutError:
            if not self._timeout.expired():
                raise
            self._outcome.aborted = True
            raise_if_cancelling()
            return True  # the abort ended the block: swallowed, reported as ``aborted``
        if exc_type is None:
            raise_if_cancelling()  # a cancellation the block swallowed
        return False


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


def raise_if_cancelling() -> None:
    """Re-raise a cancellation of the current task that code it awaited swallowed (a tool or a
    model catching `asyncio.CancelledError`): cancellation is never lost."""
    if cancelling():
        raise asyncio.CancelledError
