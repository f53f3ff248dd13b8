"""Bounded exhaustive mode (issue 23, deliverable 4): every scenario over a small abstract alphabet
up to three responses deep is played and compared with the oracle. Hypothesis explores beyond it
(tests/property/test_oracle.py)."""

from __future__ import annotations

import asyncio
import itertools

from statemachine_agent.testing import EXHAUSTIVE_OUTCOMES, check_scenario, exhaustive_scenarios


def test_every_small_scenario_matches_the_oracle() -> None:
    # Three responses deep with three call outcomes (returns, raises, times out); two deep with a
    # denial as a fourth. Each x (final answer, refusal with a call, pause, one or two calls, a
    # truncated second call) x (no abort, abort at the 1st..3rd tool start) x both modes.
    everything = itertools.chain(
        exhaustive_scenarios(3, outcomes=EXHAUSTIVE_OUTCOMES[:3]),
        exhaustive_scenarios(2, outcomes=EXHAUSTIVE_OUTCOMES),
    )
    loop = asyncio.new_event_loop()
    failures: list[str] = []
    checked = 0
    try:
        for scenario in everything:
            checked += 1
            try:
                check_scenario(scenario, loop=loop)
            except AssertionError as exc:
                failures.append(f"{scenario}\n{exc}")
                if len(failures) >= 3:
                    break
    finally:
        loop.close()
    assert not failures, f"{len(failures)} scenario(s) of {checked} disagree:\n\n" + "\n\n".join(
        failures
    )
    assert checked > 4000
