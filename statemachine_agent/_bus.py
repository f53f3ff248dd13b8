"""`EventBus`: an agent's event subscribers, and publishing to them."""

from __future__ import annotations

import inspect
import logging
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any

from ._events import SLOW_SUBSCRIBER_SECONDS, Event

logger = logging.getLogger("statemachine_agent")

_perf_counter = time.perf_counter


class Subscriber:
    """A subscribed callback; `EventBus.publish` calls it (and these methods on a failure or
    when slow)."""

    __slots__ = ("callback", "warned")

    def __init__(self, callback: Callable[[Event], Any]) -> None:
        self.callback = callback
        self.warned = False

    def failed(self, event: Event) -> None:
        """The callback raised on ``event`` (called in its ``except``): logged, never raised."""
        logger.exception("event subscriber %r failed on %s", self.callback, event.type)

    def took(self, event: Event, seconds: float) -> None:
        """The callback took ``seconds`` on ``event``, more than `SLOW_SUBSCRIBER_SECONDS`:
        warn, once per subscriber."""
        if self.warned:
            return
        self.warned = True
        logger.warning(
            "event subscriber %r took %.0f ms on a %s event (more than %.0f ms); it "
            "holds up every agent on its event loop: consume slow work through "
            "agent.events() instead (logged once per subscriber)",
            self.callback,
            seconds * 1000,
            event.type,
            SLOW_SUBSCRIBER_SECONDS * 1000,
        )


class EventBus:
    """The subscribers of one agent's events.

    Attributes:
        subscribers: the subscribers of this moment, a tuple replaced on each change
            (copy-on-write: an event goes to those registered when it was published).
    """

    __slots__ = ("__weakref__", "_lock", "subscribers")

    def __init__(self) -> None:
        self.subscribers: tuple[Subscriber, ...] = ()
        self._lock = threading.Lock()

    def listening(self) -> bool:
        """Anyone receives events (events are not built otherwise)."""
        return bool(self.subscribers)

    def subscribe(self, callback: Callable[[Event], Any]) -> Callable[[], None]:
        """Call ``callback(event)`` for every event published from the next one on (see
        `Agent.subscribe`). Returns an unsubscribe function (it holds no reference to the bus).

        Raises:
            TypeError: ``callback`` is async (it would never be awaited; use ``agent.events()``).
        """
        call = getattr(callback, "__call__", None)  # noqa: B004 (an async __call__ counts too)
        if inspect.iscoroutinefunction(callback) or inspect.iscoroutinefunction(call):
            raise TypeError(
                f"subscribe() takes a plain function, got the async {callback!r}, which would "
                "never be awaited; iterate 'async for event in agent.events()' instead"
            )
        subscriber = Subscriber(callback)
        with self._lock:
            self.subscribers = (*self.subscribers, subscriber)
        bus_ref = weakref.ref(self)  # an unsubscribe function kept by a callback makes no cycle

        def unsubscribe() -> None:
            bus = bus_ref()
            if bus is not None:
                with bus._lock:
                    bus.subscribers = tuple(s for s in bus.subscribers if s is not subscriber)

        return unsubscribe

    def publish(self, event: Event) -> None:
        """Send ``event`` to every subscriber of this moment, in order. A callback that raises is
        logged; one slower than `SLOW_SUBSCRIBER_SECONDS` is logged once."""
        for subscriber in self.subscribers:  # the tuple of this moment: a snapshot
            started = _perf_counter()
            try:
                subscriber.callback(event)
            except Exception:
                subscriber.failed(event)
            seconds = _perf_counter() - started
            if seconds > SLOW_SUBSCRIBER_SECONDS:
                subscriber.took(event, seconds)
