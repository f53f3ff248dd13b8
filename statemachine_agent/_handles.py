"""What a service holds while it embeds an agent: `RunHandle` (a run started in the background),
`EventStream` (``agent.events()``: events handed to the consumer's loop, from any thread) and
the coroutine ``agent.run()`` returns (the run is claimed when it is created, not when awaited).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import warnings
import weakref
from collections import deque
from collections.abc import Callable, Coroutine, Generator
from types import TracebackType
from typing import TYPE_CHECKING, Any, Self

from ._errors import UsageError
from ._events import Event
from ._limits import RunCounts
from ._result import RunResult
from ._run import Run

if TYPE_CHECKING:
    from ._messages import UserMessage

logger = logging.getLogger("statemachine_agent")

DEFAULT_MAX_QUEUE = 10_000


class RunClaim:
    """Who holds an agent: its current run, claimed under `lock` from any thread, and the loop
    that drives it (an abort from another thread goes through that loop).

    Attributes:
        lock: held while a run is claimed, aborted or bound to its loop.
        run: the current run (None between runs: no reference cycle).
        running: a run is in progress.
        counts: the last run's counts (a continued run goes on from them).
    """

    __slots__ = ("counts", "lock", "loop", "loop_thread", "run", "running")

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.run: Run | None = None
        self.running = False
        self.counts = RunCounts()
        self.loop: asyncio.AbstractEventLoop | None = None
        self.loop_thread = 0

    def claim(self, run: Run) -> None:
        """Make ``run`` the current run (the lock held, the checks done)."""
        self.run, self.loop, self.loop_thread = run, None, 0
        self.running = True

    async def drive(self, run: Run, user: UserMessage | None) -> RunResult:
        """Drive the claimed ``run`` from its first trigger, then release it."""
        with self.lock:  # from now on an abort from another thread goes through the loop
            self.loop = asyncio.get_running_loop()
            self.loop_thread = threading.get_ident()
        try:
            return await run.drive(user, run.first_trigger)
        finally:
            self.release(run)

    def release(self, run: Run) -> None:
        """End ``run``'s claim (it ended, or it never started)."""
        with self.lock:
            if self.run is run:
                self.counts = run.counts
                self.run, self.loop, self.loop_thread = None, None, 0
                self.running = False

    def abort(self, run: Run | None, reason: str) -> bool:
        """Abort ``run`` if it is the current run (from any thread); False when it is not."""
        with self.lock:
            if run is None or run is not self.run or not self.running:
                return False
            loop = self.loop
            if loop is None or threading.get_ident() == self.loop_thread:
                # Not started yet (no callbacks armed; the run sees the flag at its first step)
                # or on the run's own thread.
                run.signal.set(reason)
                return True
            try:
                loop.call_soon_threadsafe(run.signal.set, reason)
            except RuntimeError:  # the loop has closed: the run is over
                return False
            return True


class ClaimedRun(Coroutine[Any, Any, RunResult]):
    """The coroutine ``agent.run()`` returns. The agent is claimed when it is created (so
    ``agent.is_running`` is true and ``agent.abort()`` reaches the run before its first step);
    await it, or schedule it with ``asyncio.create_task``.

    If it is closed, or cancelled, before its first step, or dropped without ever being awaited,
    the claim is released and nothing is recorded (the run never started).
    """

    __slots__ = ("__weakref__", "_claim", "_coro", "_run", "_started")

    def __init__(self, claim: RunClaim, run: Run, prompt: UserMessage | None) -> None:
        self._claim = claim
        self._run = run
        self._started = False
        self._coro = claim.drive(run, prompt)

    @property
    def run(self) -> Run:
        """The claimed run."""
        return self._run

    def send(self, value: Any) -> Any:
        self._started = True
        return self._coro.send(value)

    def throw(
        self,
        typ: type[BaseException] | BaseException,
        val: BaseException | object = None,
        tb: TracebackType | None = None,
    ) -> Any:
        if not self._started:
            self._never_started()
        if isinstance(typ, BaseException) or (val is None and tb is None):
            return self._coro.throw(typ)  # the one-argument form (the other is deprecated)
        return self._coro.throw(typ, val, tb)

    def close(self) -> None:
        if not self._started:
            self._never_started()
        self._coro.close()

    def __await__(self) -> Generator[Any, None, RunResult]:
        return self

    def __iter__(self) -> Self:
        return self

    def __next__(self) -> Any:
        return self.send(None)

    def _never_started(self) -> None:
        self._started = True
        self._claim.release(self._run)

    def __del__(self) -> None:
        if not getattr(self, "_started", True):
            self._never_started()
            self._coro.close()
            warnings.warn(
                "agent.run() was created but never awaited; its claim on the agent was released",
                RuntimeWarning,
                stacklevel=2,
            )


class RunHandle:
    """A run started in the background by `Agent.start`.

    ``await handle`` gives its `RunResult` (awaiting is shielded: cancelling the awaiting
    coroutine does not stop the run; ``handle.abort()`` does). Await it on the loop that started
    it.

    Attributes:
        run_id: the run's id, as in each of its events' ``run_id``.
        task: the ``asyncio.Task`` running it (the agent keeps it referenced until it ends).
    """

    def __init__(self, claim: RunClaim, run: Run, task: asyncio.Task[RunResult]) -> None:
        self._claim = claim
        self._run = run
        self.run_id = run.id
        self.task = task

    def abort(self, reason: str = "aborted by the caller") -> bool:
        """Abort this run (from any thread); False when it is no longer in progress."""
        return self._claim.abort(self._run, reason)

    def done(self) -> bool:
        """The run has ended (its result, or its exception, is ready)."""
        return self.task.done()

    @property
    def result(self) -> RunResult | None:
        """The `RunResult` once the run has ended; None while it runs (or if it raised)."""
        task = self.task
        if not task.done() or task.cancelled() or task.exception() is not None:
            return None
        return task.result()

    def __await__(self) -> Generator[Any, None, RunResult]:
        return asyncio.shield(self.task).__await__()

    def __repr__(self) -> str:
        state = "done" if self.task.done() else "running"
        return f"<RunHandle {self.run_id} {state}>"


_BACKGROUND: set[asyncio.Task[Any]] = set()  # asyncio keeps only weak references to tasks


def keep_until_done(task: asyncio.Task[Any]) -> None:
    """Hold a strong reference to ``task`` until it ends."""
    _BACKGROUND.add(task)
    task.add_done_callback(_BACKGROUND.discard)


class EventStream:
    """``agent.events()``: an async iterator over the agent's events, subscribed from the moment
    it is created (so a server knows it is subscribed before it starts a run).

    Events may be emitted on any thread (a run in ``run_sync`` in a worker thread); each is
    handed to the loop iterating the stream thread-safely (``loop.call_soon_threadsafe``), so the
    consumer wakes at once.

    The queue is bounded: when ``max_queue`` events are waiting, the oldest waiting event is
    dropped for each new one (a slow consumer sees the newest events, the ``run_end`` among them,
    and a gap in ``seq`` where events were dropped). ``dropped`` counts them, and the first drop
    is logged at warning level.

    Iteration ends when the stream is closed (``await stream.aclose()``, ``stream.close()``, or
    leaving ``async with agent.events() as stream``); a stream that is dropped unclosed stops
    receiving when it is collected.

    Attributes:
        max_queue: the bound.
        dropped: events dropped because the consumer was ``max_queue`` events behind.
    """

    def __init__(
        self,
        subscribe: Callable[[Callable[[Event], None]], Callable[[], None]],
        max_queue: int = DEFAULT_MAX_QUEUE,
    ) -> None:
        if max_queue < 1:
            raise UsageError(f"max_queue must be at least 1, got {max_queue}")
        self.max_queue = max_queue
        self.dropped = 0
        self._buffer: deque[Event] = deque()
        self._lock = threading.Lock()
        self._waiter: asyncio.Future[None] | None = None
        self._waiter_thread = 0
        self._closed = False
        ref = weakref.ref(self)

        def deliver(event: Event) -> None:
            stream = ref()
            if stream is not None:
                stream._put(event)

        # The subscriber holds the stream weakly: a stream dropped unclosed is collected, and
        # its finalizer unsubscribes.
        self._finalizer = weakref.finalize(self, subscribe(deliver))

    def _put(self, event: Event) -> None:
        with self._lock:
            if self._closed:
                return
            if len(self._buffer) >= self.max_queue:
                self._buffer.popleft()
                self.dropped += 1
                if self.dropped == 1:
                    logger.warning(
                        "an events() consumer is %d events behind; dropping the oldest "
                        "(see EventStream.dropped)",
                        self.max_queue,
                    )
            self._buffer.append(event)
            waiter, self._waiter = self._waiter, None
            waiter_thread = self._waiter_thread
        if waiter is not None:
            self._wake(waiter, waiter_thread)

    @staticmethod
    def _wake(waiter: asyncio.Future[None], waiter_thread: int) -> None:
        if waiter_thread == threading.get_ident():
            _set_done(waiter)
            return
        with contextlib.suppress(RuntimeError):  # the consumer's loop closed: nobody waits
            waiter.get_loop().call_soon_threadsafe(_set_done, waiter)

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> Event:
        while True:
            with self._lock:
                if self._buffer:
                    return self._buffer.popleft()
                if self._closed:
                    raise StopAsyncIteration
                waiter = asyncio.get_running_loop().create_future()
                self._waiter, self._waiter_thread = waiter, threading.get_ident()
            try:
                await waiter
            finally:
                with self._lock:
                    if self._waiter is waiter:
                        self._waiter = None

    def close(self) -> None:
        """Unsubscribe and end the iteration (events still queued are discarded)."""
        self._finalizer()
        with self._lock:
            self._closed = True
            self._buffer.clear()
            waiter, self._waiter = self._waiter, None
            waiter_thread = self._waiter_thread
        if waiter is not None:
            self._wake(waiter, waiter_thread)

    async def aclose(self) -> None:
        """`close`, as an async iterator's ``aclose``."""
        self.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        self.close()


def _set_done(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)
