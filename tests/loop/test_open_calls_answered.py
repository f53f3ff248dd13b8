"""Calls a user's branch leaves open are answered once, before anything else enters the history:
by `Run.request` when a user's state calls it, and by `Run.append` before any other message."""

from __future__ import annotations

from typing import Any

from statemachine_agent import (
    Agent,
    AssistantMessage,
    LoopData,
    State,
    TextBlock,
    ToolResultMessage,
    TransitionSpec,
    UserMessage,
    tool,
)
from statemachine_agent.models import ScriptedModel
from statemachine_agent.testing import assert_valid_history
from statemachine_agent.testing.steps import call, text_response, tool_response

BRANCH = (
    "Not run: the run took the branch 'ask_instead' into state asking instead of running this call."
)


@tool
def lookup(key: str) -> str:
    """Look a key up."""
    return f"value of {key}"


def _has_calls(data: LoopData) -> bool:
    return data.response is not None and bool(data.response.tool_calls)


def _branching_agent(effect: Any) -> tuple[Agent, ScriptedModel]:
    """An agent whose response with calls leads into the user state ``asking`` (``effect``)
    instead of its tool batch; ``asking`` ends the run with the trigger ``asked``."""
    model = ScriptedModel(
        [tool_response(call("lookup", {"key": "k"}, id="c1")), text_response("answered")]
    )
    agent = Agent(model, tools=[lookup])
    agent.machine.add_state("asking", effect)
    agent.machine.add_transition(
        TransitionSpec(
            "model_replied",
            (State.AWAITING_MODEL,),
            "asking",
            (_has_calls,),
            label="ask_instead",
            before="tool_calls",
        )
    )
    agent.machine.add_transition(TransitionSpec("asked", ("asking",), State.DONE, label="asked"))
    return agent, model


def _roles(messages: list[Any]) -> list[str]:
    return [m.role for m in messages]


def _asking(note: UserMessage | None = None) -> Any:
    """A user state's effect that appends ``note`` (if any) while the calls are still open, then
    requests the model itself (not through ``request_model``) and keeps its reply."""

    async def asking(run: Any) -> str:
        if note is not None:
            run.append(note)
        reply = await run.request()
        if isinstance(reply, str):
            return reply
        run.append(reply)
        return "asked"

    return asking


async def test_request_from_a_user_state_sends_the_branch_results_of_open_calls() -> None:
    agent, model = _branching_agent(_asking())  # the request answers the open calls first
    result = await agent.run("go")

    assert result.state == State.DONE
    sent = model.requests[1].messages[-1]
    assert isinstance(sent, ToolResultMessage)
    assert (sent.tool_call_id, sent.text, sent.is_error) == ("c1", BRANCH, True)
    assert _roles(agent.messages) == ["user", "assistant", "tool_result", "assistant"]
    stored = agent.messages[2]
    assert isinstance(stored, ToolResultMessage) and stored.text == BRANCH
    assert_valid_history(agent.messages)


async def test_a_message_appended_after_open_calls_answers_them_first() -> None:
    agent, model = _branching_agent(_asking(UserMessage("a note")))
    result = await agent.run("go")

    assert result.state == State.DONE
    assert _roles(agent.messages) == ["user", "assistant", "tool_result", "user", "assistant"]
    answer = agent.messages[2]
    assert isinstance(answer, ToolResultMessage)
    assert (answer.tool_call_id, answer.text, answer.is_error) == ("c1", BRANCH, True)
    assert isinstance(agent.messages[3], UserMessage) and agent.messages[3].text == "a note"
    final = agent.messages[4]
    assert isinstance(final, AssistantMessage) and final.text == "answered"
    assert model.requests[1].messages[-1] == agent.messages[3]
    assert_valid_history(agent.messages)


async def test_a_response_appended_after_open_calls_answers_them_first() -> None:
    """Not only a user message: any message but a tool result (here a canned assistant answer a
    user's state appends itself) first answers the calls still open before it."""

    async def asking(run: Any) -> str:
        run.append(
            AssistantMessage(content=[TextBlock(text="A canned answer.")], stop_reason="end_turn")
        )
        return "asked"

    agent, model = _branching_agent(asking)
    result = await agent.run("go")

    assert result.state == State.DONE
    assert _roles(agent.messages) == ["user", "assistant", "tool_result", "assistant"]
    answer = agent.messages[2]
    assert isinstance(answer, ToolResultMessage)
    assert (answer.tool_call_id, answer.text, answer.is_error) == ("c1", BRANCH, True)
    assert agent.messages[3].text == "A canned answer."
    assert model.calls == 1
    assert_valid_history(agent.messages)


async def test_a_branch_back_to_the_model_answers_calls_whatever_the_stop_reason() -> None:
    """`request_model` answers the calls a branch left open whenever the history ends with a
    response: a response may hold calls under a stop reason other than ``tool_use``."""
    model = ScriptedModel(
        [
            tool_response(call("lookup", {"key": "k"}, id="c1"), stop_reason="end_turn"),
            text_response("answered"),
        ]
    )
    agent = Agent(model, tools=[lookup])
    agent.machine.add_transition(
        TransitionSpec(
            "model_replied",
            (State.AWAITING_MODEL,),
            State.AWAITING_MODEL,
            (_has_calls,),
            label="again",
            before="tool_calls",
        )
    )
    result = await agent.run("go")

    assert result.state == State.DONE and result.text == "answered"
    assert _roles(agent.messages) == ["user", "assistant", "tool_result", "assistant"]
    answer = agent.messages[2]
    assert isinstance(answer, ToolResultMessage)
    assert (answer.tool_call_id, answer.is_error) == ("c1", True)
    assert answer.text == (
        "Not run: the run took the branch 'again' into state awaiting_model instead of running "
        "this call."
    )
    assert model.requests[1].messages[-1] == answer  # sent as stored
    assert_valid_history(agent.messages)
