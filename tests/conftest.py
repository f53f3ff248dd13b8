"""Shared test fixtures, and helpers the test modules of this folder import (``from conftest
import ...``): a pair of file tools with a policy that defers writes, pydantic's own error text,
the tool results of a history."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from models.replay_server import ReplayServer
from pydantic import TypeAdapter, ValidationError

from statemachine_agent import Defer, ToolCallInfo, ToolResultMessage, tool
from statemachine_agent.testing.steps import call, text_response, tool_response

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


# -- helpers -----------------------------------------------------------------------------------

REVIEW = "writes need review"
"""The reason `review_writes` defers a ``write`` call with."""


def file_tools(log: list[str]) -> list[Any]:
    """``read(path)`` and ``write(path)`` tools that append what they did to ``log``."""

    @tool
    def read(path: str) -> str:
        """Read a file."""
        log.append(f"read {path}")
        return f"contents of {path}"

    @tool
    def write(path: str) -> str:
        """Write a file."""
        log.append(f"write {path}")
        return f"wrote {path}"

    return [read, write]


def review_writes(info: ToolCallInfo) -> Defer | None:
    """A ``before_tool_call`` policy: every ``write`` waits for a person (`REVIEW`)."""
    return Defer(REVIEW) if info.tool.name == "write" else None


def hello_then_read_a_and_write_b() -> list[dict[str, Any]]:
    """Scripted steps: a greeting; then calls ``read`` a (``r1``) and ``write`` b (``w1``); then
    the answer. With `file_tools` and `review_writes`, the second run stops awaiting approval."""
    return [
        text_response("Hello."),
        tool_response(call("read", {"path": "a"}, id="r1"), call("write", {"path": "b"}, id="w1")),
        text_response("Read a, wrote b."),
    ]


def pydantic_message(kind: Any, value: Any) -> str:
    """pydantic's own message for ``value`` not being a ``kind``: its wording belongs to the
    installed pydantic version, so the expected text is taken from it, not written here."""
    try:
        TypeAdapter(kind).validate_python(value)
    except ValidationError as exc:
        return str(exc.errors()[0]["msg"])
    raise AssertionError(f"{value!r} is a valid {kind}")


def results_of(messages: list[Any]) -> list[ToolResultMessage]:
    """The tool results among ``messages``, in order."""
    return [m for m in messages if isinstance(m, ToolResultMessage)]
