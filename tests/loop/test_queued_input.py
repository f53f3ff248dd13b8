"""Queued input: steering lands after the running batch, a follow-up when the model would stop;
both queued together, steering goes first."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import pytest

from statemachine_agent import (
    Agent,
    AssistantMessage,
    Event,
    MessageEnd,
    State,
    ToolResultMessage,
    UserMessage,
    tool,
)
from statemachine_agent.models import FunctionModel, ScriptedModel
from statemachine_agent.testing import (
    assert_valid_history,
)
from statemachine_agent.testing.steps import call, text_response, tool_response


async def test_steering_lands_after_the_batch_and_a_follow_up_when_the_model_would_stop() -> None:
    agent_ref: list[Agent] = []

    @tool
    async def read(path: str) -> str:
        """Read a file."""
        agent_ref[0].steer("also check b.txt")
        return f"contents of {path}"

    model = ScriptedModel(
        [
            tool_response(call("read", {"path": "a.txt"}, id="r1")),
            tool_response(call("read", {"path": "b.txt"}, id="r2")),
            text_response("Both read."),
            text_response("Summary: a and b."),
        ]
    )
    agent = Agent(model, tools=[read])
    agent_ref.append(agent)
    agent.follow_up("now summarise")
    result = await agent.run("read a.txt")
    roles = [
        (m.role, getattr(m, "text", "")) if not isinstance(m, AssistantMessage) else ("assistant",)
        for m in result.messages
    ]
    # The first steer lands right after the first batch's results, before the second request.
    assert roles[:4] == [
        ("user", "read a.txt"),
        ("assistant",),
        ("tool_result", "contents of a.txt"),
        ("user", "also check b.txt"),
    ]
    second_request = model.requests[1].messages
    assert isinstance(second_request[-1], UserMessage)
    assert second_request[-1].text == "also check b.txt"
    # The follow-up is delivered when the model would stop, then the run ends.
    texts = [m.text for m in result.messages if isinstance(m, UserMessage)]
    assert texts[-1] == "now summarise"
    assert result.text == "Summary: a and b."
    assert result.state is State.DONE
    assert_valid_history(result.messages)


def user_groups(agent: Agent, requests: list[list[Any]]) -> list[list[str]]:
    """For each request after the first (its messages as sent): the user messages after its
    last assistant message (what was delivered before it)."""
    groups = []
    for sent in requests[1:]:
        tail: list[str] = []
        for message in reversed(sent):
            if isinstance(message, AssistantMessage):
                break
            if isinstance(message, UserMessage):
                tail.insert(0, message.text)
        groups.append(tail)
    return groups


def expected_groups(steering_mode: str, follow_up_mode: str) -> list[list[str]]:
    steering = [["s1", "s2"]] if steering_mode == "all" else [["s1"], ["s2"]]
    follow_ups = [["f1", "f2"]] if follow_up_mode == "all" else [["f1"], ["f2"]]
    return steering + follow_ups  # README: steering, else follow-ups, each by its mode


MODES = [("all", "all"), ("all", "one_at_a_time"), ("one_at_a_time", "all")]


MODES += [("one_at_a_time", "one_at_a_time")]


def queue_follow_ups_then_steering(agent: Agent) -> None:
    agent.follow_up("f1")
    agent.follow_up("f2")  # queued first: the order of queueing is not the order of delivery
    agent.steer("s1")
    agent.steer("s2")


def recording_agent(
    steering_mode: str,
    follow_up_mode: str,
    answer: Callable[[int], Any] = lambda n: f"answer {n}",
    tools: Sequence[Any] = (),
) -> tuple[Agent, list[list[Any]]]:
    """An agent in the given modes whose model records the messages of each request as sent and
    replies ``answer(number of the request)``; and that record."""
    requests: list[list[Any]] = []

    def respond(messages: list[Any], request: Any) -> Any:
        requests.append(list(request.messages))  # as sent
        return answer(len(requests))

    agent = Agent(
        FunctionModel(respond),
        tools=list(tools),
        steering_mode=steering_mode,  # type: ignore[arg-type]
        follow_up_mode=follow_up_mode,  # type: ignore[arg-type]
    )
    return agent, requests


@pytest.mark.parametrize(("steering_mode", "follow_up_mode"), MODES)
async def test_steering_queued_with_a_follow_up_at_a_stop_is_delivered_first(
    steering_mode: str, follow_up_mode: str
) -> None:
    agent, requests = recording_agent(steering_mode, follow_up_mode)

    def on_first_answer(event: Event) -> None:
        first = len(requests) == 1 and not agent.has_queued_input()
        if first and isinstance(event, MessageEnd) and isinstance(event.message, AssistantMessage):
            queue_follow_ups_then_steering(agent)  # the model would stop here

    agent.subscribe(on_first_answer)
    result = await agent.run("go")
    assert result.state is State.DONE
    assert user_groups(agent, requests) == expected_groups(steering_mode, follow_up_mode)
    assert not agent.has_queued_input()


@pytest.mark.parametrize(("steering_mode", "follow_up_mode"), MODES)
async def test_steering_queued_with_a_follow_up_during_a_batch_lands_after_it_the_follow_up_at_the_stop(
    steering_mode: str, follow_up_mode: str
) -> None:
    @tool
    def work() -> str:
        """Work while the user queues both kinds of input."""
        queue_follow_ups_then_steering(agent)
        return "worked"

    agent, requests = recording_agent(
        steering_mode,
        follow_up_mode,
        lambda n: tool_response(call("work", id="w")) if n == 1 else f"a{n}",
        tools=[work],
    )
    result = await agent.run("go")
    assert result.state is State.DONE
    groups = user_groups(agent, requests)
    assert groups == expected_groups(steering_mode, follow_up_mode)
    # The first steering group follows the batch's result directly (README: after the batch).
    second = requests[1]
    assert isinstance(second[-1 - len(groups[0])], ToolResultMessage)


@pytest.mark.parametrize(("steering_mode", "follow_up_mode"), MODES)
async def test_steering_queued_with_a_follow_up_before_a_continued_run_goes_first(
    steering_mode: str, follow_up_mode: str
) -> None:
    agent, requests = recording_agent(steering_mode, follow_up_mode)
    await agent.run("go")
    queue_follow_ups_then_steering(agent)
    result = await agent.run()  # continue: the queued input is delivered
    assert result.state is State.DONE
    assert user_groups(agent, requests) == expected_groups(steering_mode, follow_up_mode)
