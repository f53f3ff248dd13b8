"""Shared test fixtures."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

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
