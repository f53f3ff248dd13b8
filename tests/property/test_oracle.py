"""The engine against the reference model (issue 23): every generated scenario ends as the oracle
predicts (calls run, result kinds, final state, turns, requests), on top of the invariants."""

from __future__ import annotations

import asyncio
from pathlib import Path

from hypothesis import event, given

from statemachine_agent import Agent, ToolResultMessage, tool
from statemachine_agent.models import ScriptedModel
from statemachine_agent.testing import Scenario, check_scenario
from statemachine_agent.testing.steps import call, text_response, tool_response
from statemachine_agent.testing.strategies import scenarios


@given(scenario=scenarios())
def test_the_engine_matches_the_oracle(scenario: Scenario) -> None:
    prediction = check_scenario(scenario)
    for label in sorted(prediction.labels):
        event(label)
