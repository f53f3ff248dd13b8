"""The scenario players: the oracle's `ScenarioModel` and the kit's `ScriptPlayer` play a run's
steps one request at a time, a cut step in its place, a ``reused_id`` step against what the
request still holds (`still_reused`), and fail a request after the last step naming it."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from statemachine_agent import (
    Agent,
    AssistantMessage,
    ScriptExhaustedError,
    State,
    TextBlock,
    ToolCallBlock,
    UsageError,
    UserMessage,
)
from statemachine_agent.models import ModelRequest, ResponseComplete
from statemachine_agent.testing import Call, RunSpec, Scenario, Step, play
from statemachine_agent.testing._kit import ScriptPlayer
from statemachine_agent.testing._oracle import compare
from statemachine_agent.testing._oracle.scenario_agent import (
    ScenarioModel,
    render_step,
    still_reused,
)

FIRST = render_step(Step("tool_use", (Call(),)), ("r1_1",), 1, [])
REUSED = render_step(Step("reused_id"), (), 2, ["r1_1"])
PLAYERS = [ScriptPlayer, ScenarioModel]


def holding(*call_ids: str) -> AssistantMessage:
    return AssistantMessage(
        content=[ToolCallBlock(id=i, name="job", input={}) for i in call_ids],
        stop_reason="tool_use",
    )


def played(model: Any, messages: list[Any]) -> list[str] | None:
    """The call ids of the response ``model`` plays for a request of ``messages`` (None: a
    stream that ends before its stop event, a cut step)."""

    async def go() -> list[str] | None:
        events = [e async for e in model.stream(ModelRequest(messages=messages))]
        last = events[-1]
        if not isinstance(last, ResponseComplete):
            return None
        return [c.id for c in last.message.tool_calls]

    return asyncio.run(go())


@pytest.mark.parametrize("player", PLAYERS)
def test_a_player_reuses_the_earlier_id_while_the_request_holds_it_else_repeats_its_call(
    player: type,
) -> None:
    model = player()
    model.load([FIRST, REUSED])
    assert played(model, [UserMessage("go")]) == ["r1_1"]
    assert played(model, [UserMessage("go")]) == ["r1_1", "r1_1"]
    model.load([FIRST, REUSED])
    assert played(model, [UserMessage("go")]) == ["r1_1"]
    assert played(model, [UserMessage("go"), holding("r1_1")]) == ["r1_1"]


@pytest.mark.parametrize("player", PLAYERS)
def test_a_player_plays_a_cut_step_in_its_place_and_names_the_request_after_the_last_step(
    player: type,
) -> None:
    model = player()
    model.load([FIRST, None, REUSED])
    assert played(model, [UserMessage("go")]) == ["r1_1"]
    assert played(model, [UserMessage("go")]) is None
    assert played(model, [UserMessage("go")]) == ["r1_1", "r1_1"]
    with pytest.raises(ScriptExhaustedError, match=r"has no step 4: the script holds 3 step"):
        played(model, [UserMessage("go")])


def test_the_kits_player_plays_a_cut_step_where_the_scenario_has_it() -> None:
    """Through a whole run: a batch, a cut stream (retried), a batch, a reused id."""
    scenario = Scenario(
        (
            RunSpec(
                (
                    Step("tool_use", (Call(),)),
                    Step("cut"),
                    Step("tool_use", (Call(),)),
                    Step("reused_id"),
                )
            ),
        )
    )
    obs = asyncio.run(play(scenario, model=ScriptPlayer()))
    run = obs.runs[0]
    assert (run.state, run.turns, run.requests, run.ran) == ("failed", 2, 4, ["r1_1", "r1_2"])
    assert compare(scenario, obs)[0] == []


def test_the_kits_player_refuses_a_malformed_step_when_it_is_loaded() -> None:
    with pytest.raises(UsageError, match=r"got keys \['contnt'\]"):
        ScriptPlayer().load([FIRST, None, {"contnt": []}])


def test_the_kits_player_plays_message_steps_as_scripted_model_does() -> None:
    player = ScriptPlayer()
    player.load(
        [
            AssistantMessage(
                content=[TextBlock(text="hi"), ToolCallBlock(id="a1", name="nope", input={})],
                stop_reason="tool_use",
            ),
            AssistantMessage(content=[TextBlock(text="done")], stop_reason="end_turn"),
        ]
    )
    result = asyncio.run(Agent(player).run("go"))
    assert (result.state, result.text) == (State.DONE, "done")


def test_a_reused_id_step_with_calls_of_its_own_reuses_the_id_with_its_last_call() -> None:
    step = render_step(Step("reused_id", (Call(),)), ("r1_2",), 2, ["r1_1"])
    out = still_reused(step, [FIRST], [UserMessage("x")])
    assert [b["id"] for b in out["content"][1:]] == ["r1_2", "r1_1", "r1_1"]


def test_a_reused_id_the_request_holds_is_kept_even_behind_an_older_one() -> None:
    second = render_step(Step("tool_use", (Call(),)), ("r1_0",), 1, [])
    sent = [UserMessage("x"), holding("r1_0"), holding("r1_1")]
    out = still_reused(REUSED, [second, FIRST], sent)
    assert [b["id"] for b in out["content"][1:]] == ["r1_1"]


def test_a_reused_call_is_never_given_an_id_no_earlier_step_gave() -> None:
    """A ``transform_context`` hook may show the model a call its history does not hold
    (``recall_1``); the engine checks the history, so only the run's own ids may stand in."""
    second = render_step(Step("tool_use", (Call(),)), ("r1_2",), 2, ["r1_1"])
    sent = [UserMessage("x"), holding("recall_1"), holding("r1_2")]
    out = still_reused(REUSED, [FIRST, second], sent)
    assert [b["id"] for b in out["content"][1:]] == ["r1_2"]
    out = still_reused(REUSED, [FIRST], [UserMessage("x"), holding("recall_1")])
    assert [b["id"] for b in out["content"][1:]] == ["r1_1", "r1_1"]
