"""Fixtures of the Anthropic adapter tests: a replay server on 127.0.0.1 per test."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from .replay_server import ReplayServer


@pytest.fixture
async def server() -> AsyncIterator[ReplayServer]:
    """A running `ReplayServer` with no replies queued (add them with ``server.add``).

    Models registered with ``server.closing(model)`` are closed (``aclose``) in the test's event
    loop before the server stops, so no connection outlives its loop.
    """
    with ReplayServer() as running:
        try:
            yield running
        finally:
            for model in running.models:
                await model.aclose()
