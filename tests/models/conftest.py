"""Fixtures of the Anthropic adapter tests: a replay server on 127.0.0.1 per test."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from .replay_server import ReplayServer


@pytest.fixture
def server() -> Iterator[ReplayServer]:
    """A running `ReplayServer` with no replies queued (add them with ``server.add``)."""
    with ReplayServer() as running:
        yield running
