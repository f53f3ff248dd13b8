"""Shared test fixtures (helpers the test modules import are in `loop_helpers`: each folder's
``conftest`` is a module of that same name, so ``from conftest import`` finds whichever came first)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings
from models.replay_server import ReplayServer

ANTHROPIC_FIXTURES = Path(__file__).resolve().parents[2] / "shared" / "fixtures" / "anthropic"

settings.register_profile(
    "ci",
    derandomize=True,
    deadline=None,
    max_examples=60,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile(
    "heavy", deadline=None, max_examples=1000, suppress_health_check=[HealthCheck.too_slow]
)
# .ci/run's second property pass: random (not derandomized) examples, about a minute and a half in all; run
# with --hypothesis-seed=N so a failure replays with the same N.
settings.register_profile(
    "explore",
    derandomize=False,
    deadline=None,
    max_examples=150,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile(__import__("os").environ.get("HYPOTHESIS_PROFILE", "ci"))


@pytest.fixture
def anthropic_fixtures() -> Path:
    """The recorded Anthropic traffic in ../shared/fixtures/anthropic (skips when absent)."""
    if not ANTHROPIC_FIXTURES.is_dir():
        pytest.skip(f"recorded fixtures not found at {ANTHROPIC_FIXTURES}")
    return ANTHROPIC_FIXTURES


@pytest.fixture
async def server() -> AsyncIterator[ReplayServer]:
    """A running `ReplayServer` (tests/models/replay_server.py) with no replies queued (add them
    with ``server.add``).

    Models registered with ``server.closing(model)`` are closed (``aclose``) in the test's event
    loop before the server stops, so no connection outlives its loop.
    """
    with ReplayServer() as running:
        try:
            yield running
        finally:
            for model in running.models:
                await model.aclose()
