"""Shared pieces of the durable tests that launch DBOS in the test's own process: the agent
factory a test sets, an abort sent through the database only (as from another process), and
waiting until a run reaches a point. The waits end on events; the timeout only ends a hung
wait, nothing is asserted about time."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from statemachine_agent import Agent
from statemachine_agent.durable import Client

SAFETY_SECONDS = 60.0  # only ends a hung wait; nothing is asserted about time


class AgentFactory:
    """The agent factory of the launched process: calls ``build``, which a test may set."""

    def __init__(self, build: Callable[[], Agent]) -> None:
        self.build = build

    def __call__(self) -> Agent:
        return self.build()


def client_abort(db: str, run_id: str, reason: str) -> None:
    """Abort ``run_id`` through the database only, as another process does (`Client.abort`)."""
    client = Client(db)
    try:
        client.abort(run_id, reason)
    finally:
        client.close()


async def reached(point: Awaitable[Any], what: str, *runs: asyncio.Future[Any]) -> None:
    """Wait until ``point`` completes or one of ``runs`` ends, whichever comes first; fail with
    ``what`` (and how the run ended) when a run ended, or the safety timeout passed, first."""
    waiting = asyncio.ensure_future(point)
    await asyncio.wait({*runs, waiting}, timeout=SAFETY_SECONDS, return_when="FIRST_COMPLETED")
    if not waiting.done():
        waiting.cancel()
        ended = [f"a run ended: {run.result()!r}" for run in runs if run.done()] or ["timed out"]
        raise AssertionError(f"{what} ({ended[0]})")
