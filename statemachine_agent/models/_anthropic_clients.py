"""The SDK clients of an `AnthropicModel`, one per event loop (`LoopClients`): an SDK client's
connections belong to the loop that opened them. Each is built on first use on its loop and closed
as that loop shuts down its async generators (``asyncio.run``, ``asyncio.Runner``)."""

from __future__ import annotations

import asyncio
import os
import threading
import weakref
from collections.abc import AsyncGenerator, Callable
from dataclasses import dataclass
from typing import Any

import anthropic

from .._errors import UsageError

NO_KEY = (
    "No Anthropic API key found: set the ANTHROPIC_API_KEY environment variable, or pass "
    "AnthropicModel(..., api_key=...) or a ready client=anthropic.AsyncAnthropic(...)."
)


class LoopClients:
    """The clients of one model, one per event loop (see `AnthropicModel`'s "Event loops").

    Args:
        client: the client of the first loop the model sends a request on.
        owned: the model built ``client`` (from ``api_key`` / ``base_url``): other loops get
            copies of it, and `aclose` closes them. A client passed in (not owned) serves one
            loop only and is left open.
    """

    def __init__(self, client: anthropic.AsyncAnthropic, *, owned: bool) -> None:
        self._client = client  # serves the first loop; other loops get copies (get)
        self._owns_client = owned
        self._first_loop: weakref.ref[asyncio.AbstractEventLoop] | None = None
        self._loops: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _LoopClient] = (
            weakref.WeakKeyDictionary()
        )
        self._lock = threading.Lock()

    @property
    def current(self) -> anthropic.AsyncAnthropic:
        """The client serving the running event loop (outside a loop, or before a request on
        this one: the first client)."""
        try:
            entry = self._loops.get(asyncio.get_running_loop())
        except RuntimeError:
            entry = None
        return self._client if entry is None else entry.client

    async def get(self) -> anthropic.AsyncAnthropic:
        """The client of the running loop, built on first use.

        Raises:
            UsageError: a ``client`` passed in, already used on another loop.
        """
        loop = asyncio.get_running_loop()
        with self._lock:
            entry = self._loops.get(loop)
            if entry is not None:
                return entry.client
            dead = self._pop_closed_loops()
            first = self._first_loop() if self._first_loop is not None else None
            if self._first_loop is None or (first is loop and not self._client.is_closed()):
                client = self._client
            elif not self._owns_client:
                raise UsageError(
                    "this AnthropicModel(client=...) already sent requests on another event loop, "
                    "and an SDK client's connections belong to the loop that opened them: use the "
                    "model on one event loop, or pass api_key= / base_url= instead of client= "
                    "(the model then keeps one client per event loop)"
                )
            else:
                client = self._client.copy(
                    http_client=anthropic.DefaultAsyncHttpxClient(
                        base_url=self._client.base_url, timeout=self._client.timeout
                    )
                )
            if self._first_loop is None:
                self._first_loop = weakref.ref(loop)
            entry = _LoopClient(client)
            if self._owns_client:
                entry.closer = _close_at_loop_end(entry, self._forget_loop)
            self._loops[loop] = entry
        for gone in dead:
            gone.abandon()
        if entry.closer is not None:
            # Its first step registers it with the loop (asyncgen hooks): the loop's
            # shutdown_asyncgens (asyncio.run, Runner) then closes it, and with it the client.
            await entry.closer.__anext__()
        return client

    def _forget_loop(self, loop: asyncio.AbstractEventLoop) -> None:
        with self._lock:
            self._loops.pop(loop, None)

    def _pop_closed_loops(self) -> list[_LoopClient]:
        """Take out the clients of loops closed without shutting down their async generators:
        their connections cannot be closed any more (no loop runs them). Under ``_lock``."""
        dead = [(loop, entry) for loop, entry in self._loops.items() if loop.is_closed()]
        for loop, _ in dead:
            del self._loops[loop]
        return [entry for _, entry in dead]

    async def aclose(self) -> None:
        """Close the clients built here (none when the client is not ``owned``): the running
        loop's here, those of other running loops on their own loop (waited for), those of
        closed loops abandoned. Safe to call more than once; `get` builds new clients after."""
        if not self._owns_client:
            return
        here = asyncio.get_running_loop()
        with self._lock:
            entries = list(self._loops.items())
            self._loops.clear()
        for loop, entry in entries:
            if loop is here:
                await entry.close()
            elif loop.is_running():
                await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(entry.close(), loop))
            else:
                entry.abandon()
        if self._first_loop is None:
            await self._client.close()  # built, never used on a loop


@dataclass(eq=False)
class _LoopClient:
    """The SDK client of one event loop, and the async generator that closes it when the loop
    shuts down its async generators (``asyncio.run``, ``asyncio.Runner``)."""

    client: anthropic.AsyncAnthropic
    closer: AsyncGenerator[None, None] | None = None
    abandoned: bool = False

    async def close(self) -> None:
        """Close the client on its own (running) loop."""
        if self.closer is not None:
            await self.closer.aclose()  # runs its finally: closes the client
        else:
            await self.client.close()

    def abandon(self) -> None:
        """Finish the closer without awaiting (its loop is closed: nothing can run there)."""
        self.abandoned = True
        if self.closer is not None:
            step = self.closer.aclose()
            try:
                step.send(None)
            except StopIteration:
                pass
            finally:
                step.close()


async def _close_at_loop_end(
    entry: _LoopClient, forget: Callable[[asyncio.AbstractEventLoop], None]
) -> AsyncGenerator[None, None]:
    """Wait at its ``yield`` until closed; then close the client and drop the loop's entry
    (the finished generator still refers to its loop, which would keep the entry alive)."""
    try:
        yield
    finally:
        if not entry.abandoned:
            forget(asyncio.get_running_loop())
            await entry.client.close()


def make_client(
    api_key: str | None, base_url: str | None, max_retries: int, timeout_seconds: float | None
) -> anthropic.AsyncAnthropic:
    kwargs: dict[str, Any] = {"base_url": base_url, "max_retries": max_retries}
    if timeout_seconds is not None:
        kwargs["timeout"] = timeout_seconds
    key = api_key if api_key is not None else os.environ.get("ANTHROPIC_API_KEY")
    if key is not None and not key.strip():
        raise UsageError(NO_KEY)
    try:
        client = anthropic.AsyncAnthropic(api_key=key, **kwargs)
    except anthropic.CredentialsError as exc:  # a profile the SDK looked for is broken
        raise UsageError(f"{NO_KEY} ({exc})") from None
    if not (client.api_key or client.auth_token or client.credentials):
        raise UsageError(NO_KEY)
    return client
