"""Issue 16: what an embedder needs around the loop (usage limits, tracing, a graceful last
turn, typed results), each case of the issue checked on its exact expected values."""

from __future__ import annotations

from typing import Any

import pytest

from statemachine_agent import (
    Agent,
    State,
    ToolResultMessage,
    UsageError,
    UsageLimits,
    tool,
)
from statemachine_agent.models import FunctionModel, ScriptedModel
from statemachine_agent.testing import assert_valid_history
from statemachine_agent.testing.steps import call, text_response, tool_response


@tool
def ping(n: int) -> str:
    """Answer a ping."""
    return f"pong {n}"


def results_of(messages: list[Any]) -> list[ToolResultMessage]:
    return [m for m in messages if isinstance(m, ToolResultMessage)]


def forever_model(requests: list[Any]) -> FunctionModel:
    """A model that calls ``ping`` every turn (and answers in text when tools are disabled)."""

    def respond(messages: Any, request: Any) -> dict[str, Any]:
        requests.append(request)
        n = len(requests)
        if request.settings.get("tool_choice") == {"type": "none"}:
            return text_response(f"Summary after {n - 1} requests.", usage=usage(10, 5))
        return tool_response(call("ping", {"n": n}, id=f"c{n}"), usage=usage(10, 5))

    return FunctionModel(respond)


def usage(input_tokens: int, output_tokens: int) -> dict[str, int]:
    return {"input_tokens": input_tokens, "output_tokens": output_tokens}


# -- case 2: usage limits as guarded transitions ---------------------------------------------


MAX_TOOL_CALLS_ERROR = (
    "Stopped after 4 turn(s): the usage limit max_tool_calls=3 was reached: 3 used, 1 more "
    "wanted (4 request(s), 3 tool call(s), 60 token(s) so far). To continue, raise the limit "
    "(agent.limits = UsageLimits(...)) and call run() again without a prompt."
)


async def test_case2_max_tool_calls_stops_before_the_fourth_call() -> None:
    requests: list[Any] = []
    agent = Agent(forever_model(requests), tools=[ping], limits=UsageLimits(max_tool_calls=3))
    result = await agent.run("go")
    assert result.state is State.MAX_TURNS
    assert result.error == MAX_TOOL_CALLS_ERROR
    results = results_of(result.new_messages)
    assert [r.text for r in results] == [
        "pong 1",
        "pong 2",
        "pong 3",
        "Not run: the usage limit max_tool_calls=3 was reached: 3 used, 1 more wanted.",
    ]
    assert results[-1].is_error
    assert len(requests) == 4
    assert_valid_history(result.messages)


async def test_case2_continuing_with_a_higher_limit_goes_on() -> None:
    requests: list[Any] = []
    agent = Agent(forever_model(requests), tools=[ping], limits=UsageLimits(max_tool_calls=3))
    await agent.run("go")
    again = await agent.run()  # same limit: the next response's call is not run either
    assert again.state is State.MAX_TURNS
    assert len(requests) == 5
    assert again.error is not None and "max_tool_calls=3 was reached: 3 used" in again.error
    agent.limits = UsageLimits(max_tool_calls=5)
    result = await agent.run()
    assert result.state is State.MAX_TURNS
    assert len(requests) == 8  # calls 6 and 7 run, the 8th response's call does not
    assert [r.text for r in results_of(result.new_messages)] == [
        "pong 6",
        "pong 7",
        "Not run: the usage limit max_tool_calls=5 was reached: 5 used, 1 more wanted.",
    ]
    assert_valid_history(result.messages)


async def test_case2_max_requests_sends_exactly_two_requests() -> None:
    requests: list[Any] = []
    agent = Agent(forever_model(requests), tools=[ping], limits=UsageLimits(max_requests=2))
    result = await agent.run("go")
    assert len(requests) == 2
    assert result.state is State.MAX_TURNS
    assert result.error == (
        "Stopped after 2 turn(s): the usage limit max_requests=2 was reached: 2 used, 1 more "
        "wanted (2 request(s), 2 tool call(s), 30 token(s) so far). To continue, raise the "
        "limit (agent.limits = UsageLimits(...)) and call run() again without a prompt."
    )
    assert [r.text for r in results_of(result.new_messages)] == ["pong 1", "pong 2"]
    assert_valid_history(result.messages)


async def test_token_limit_checked_after_each_response() -> None:
    requests: list[Any] = []
    agent = Agent(forever_model(requests), tools=[ping], limits=UsageLimits(max_total_tokens=20))
    result = await agent.run("go")
    # 15 tokens after the first response, 30 after the second: its call is not run.
    assert len(requests) == 2
    assert result.state is State.MAX_TURNS
    assert result.error is not None
    assert "the usage limit max_total_tokens=20 was reached: 30 used" in result.error
    assert [r.text for r in results_of(result.new_messages)] == [
        "pong 1",
        "Not run: the usage limit max_total_tokens=20 was reached: 30 used.",
    ]


async def test_a_final_answer_is_not_stopped_by_a_limit() -> None:
    model = ScriptedModel([text_response("hi", usage=usage(100, 100))])
    agent = Agent(model, limits=UsageLimits(max_total_tokens=10))
    result = await agent.run("hello")
    assert result.state is State.DONE
    assert result.text == "hi"


def test_bad_limit_is_refused() -> None:
    with pytest.raises(UsageError, match=r"max_requests=\.\.\.\) must be a non-negative"):
        UsageLimits(max_requests=-1)
