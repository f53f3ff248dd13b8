"""`ScriptedModel.seek`: a durable run moves a script past the requests DBOS replayed (issue 30,
item 5); the script's own counting (``calls``, ``remaining``, ``requests``) is unchanged."""

from __future__ import annotations

import pytest

from statemachine_agent import Agent, State, UsageError
from statemachine_agent.models import ScriptedModel
from statemachine_agent.testing.steps import text_response


def _script() -> list[dict[str, object]]:
    return [text_response("one"), text_response("two"), text_response("three")]


async def test_seek_continues_the_script_after_the_given_step() -> None:
    model = ScriptedModel(_script())
    model.seek(2)  # two requests answered elsewhere (replayed from a database)
    assert (model.calls, model.remaining) == (2, 1)

    result = await Agent(model).run("Go.")

    assert (result.state, result.text) == (State.DONE, "three")
    assert (model.calls, model.remaining) == (3, 0)
    assert len(model.requests) == 1  # only the request this model was asked


async def test_a_script_shared_over_two_runs_still_continues_where_the_first_stopped() -> None:
    model = ScriptedModel(_script())
    agent = Agent(model)

    first = await agent.run("Go.")
    second = await agent.run("Again.")

    assert (first.text, second.text) == ("one", "two")
    assert (model.calls, model.remaining, len(model.requests)) == (2, 1, 2)


async def test_seek_back_to_zero_plays_the_script_from_its_first_step() -> None:
    model = ScriptedModel(_script())
    await Agent(model).run("Go.")
    model.seek(0)

    result = await Agent(model).run("Go.")

    assert result.text == "one"


@pytest.mark.parametrize("calls", [-1, 1.5, True, "2"])
def test_seek_refuses_a_position_that_is_not_a_count(calls: object) -> None:
    model = ScriptedModel(_script())
    with pytest.raises(UsageError, match="calls must be an int >= 0"):
        model.seek(calls)  # type: ignore[arg-type]
    assert model.calls == 0
