"""The history the engine checks and projects: given histories with dangling calls, messages
added behind the engine's back, call ids reused, a replaced history."""

from __future__ import annotations

from typing import Any

import pytest

from statemachine_agent import (
    Agent,
    AssistantMessage,
    State,
    TextBlock,
    ToolCallBlock,
    ToolResultMessage,
    UserMessage,
    tool,
)
from statemachine_agent.models import ScriptedModel
from statemachine_agent.testing import assert_valid_history
from statemachine_agent.testing.steps import text_response

NO_RESULT = (
    "no result recorded: the run ended before this call finished; it may or may not have run; "
    "check before retrying"
)


# Found by a review: history produced by the engine violates invariant 1/4
async def test_dangling_calls_in_a_given_history_are_answered_before_the_prompt():
    hist = [
        UserMessage("do"),
        AssistantMessage(
            content=[ToolCallBlock(id="t1", name="x", input={})], stop_reason="tool_use"
        ),
    ]
    model = ScriptedModel([text_response("ok")])
    agent = Agent(model, messages=hist)
    result = await agent.run("next")
    assert [(m.role, m.text) for m in result.messages] == [
        ("user", "do"),
        ("assistant", ""),
        ("tool_result", NO_RESULT),
        ("user", "next"),
        ("assistant", "ok"),
    ]
    assert [m.role for m in result.new_messages] == ["tool_result", "user", "assistant"]
    assert [m.role for m in model.requests[0].messages] == [
        "user",
        "assistant",
        "tool_result",
        "user",
    ]
    assert_valid_history(result.messages)


def _call(i: int, name: str = "noop") -> AssistantMessage:
    return AssistantMessage(
        content=[ToolCallBlock(id=f"call_{i}", name=name, input={})], stop_reason="tool_use"
    )


async def noop() -> str:
    """Do nothing."""
    return "ok"


async def test_replacing_the_history_lets_the_old_messages_go() -> None:
    """The request projection and the context account follow the history list; replacing it
    (``agent.messages = ...``) must not keep the old messages alive in them (an agent that
    clears its history between tasks would otherwise hold every message it ever had)."""
    import gc

    script: list[Any] = [_call(i) for i in range(3)]
    script.append({"content": [{"type": "text", "text": "done"}], "stop_reason": "end_turn"})
    agent = Agent(ScriptedModel(script, record_requests=False), tools=[noop])
    agent.subscribe(lambda _event: None)  # the turn_end events ask for the context account
    result = await agent.run("go")
    assert result.state is State.DONE
    watched = result.messages[2]  # a tool result the engine built
    del result
    agent.messages = []
    gc.collect()
    holders = [r for r in gc.get_referrers(watched) if r is not locals()]
    assert not [h for h in holders if isinstance(h, list | dict) and h is not vars()], holders


@pytest.mark.parametrize("where", ["tool", "hook"])
async def test_a_message_added_behind_the_engines_back_is_still_checked(where: str) -> None:
    """A tail only the engine appended is not checked again before a request (issue 17); one
    that something else added to (here a tool or an ``after_tool_call`` hook appending a turn
    that reuses the running call's id) is, and the request is refused rather than sent."""
    from statemachine_agent import ToolResultMessage

    reused = _call(0)  # the id of the call being run
    stray = [reused, ToolResultMessage(tool_call_id="call_0", tool_name="noop", content=[])]
    agent: Agent

    async def meddle() -> str:
        """Append to the history behind the engine's back."""
        if where == "tool":
            agent.messages.extend(stray)
        return "ok"

    def after(_info: Any, result: Any) -> Any:
        if where == "hook":
            agent.messages.extend(stray)
        return result

    script: list[Any] = [_call(0, "meddle"), _call(1, "meddle")]
    script.append({"content": [{"type": "text", "text": "done"}], "stop_reason": "end_turn"})
    agent = Agent(ScriptedModel(script), tools=[tool(meddle)], after_tool_call=after)
    result = await agent.run("go")
    assert result.state is State.FAILED
    assert result.error is not None and result.error.startswith("The request was not sent")
    assert "'call_0'" in result.error and "twice" in result.error
    assert agent.model.calls == 1  # type: ignore[attr-defined]  # the second request was not sent


def test_the_projector_remembers_the_call_ids_of_what_it_committed() -> None:
    """A call id of a committed part of the history, used again in a later part that is checked
    (it came from outside the engine), is refused: the committed ids were kept."""
    from statemachine_agent import InvalidHistoryError, ToolResultMessage, UserMessage
    from statemachine_agent._context import ContextProjector

    def result(call_id: str) -> ToolResultMessage:
        return ToolResultMessage(tool_call_id=call_id, tool_name="noop", content=[])

    history: list[Any] = [UserMessage(content="go"), _call(1), result("call_1")]
    projector = ContextProjector()
    assert len(projector.project(history)) == 3
    history += [
        AssistantMessage(content=[]),
        UserMessage(content="more"),
        _call(2),
        result("call_2"),
    ]
    assert len(projector.project(history)) == 6  # the empty response is left out
    history += [_call(1), result("call_1")]
    with pytest.raises(InvalidHistoryError, match="call_1"):
        projector.project(history)


def _two_calls(first: str, second: str) -> AssistantMessage:
    return AssistantMessage(
        content=[
            ToolCallBlock(id=first, name="noop", input={}),
            ToolCallBlock(id=second, name="noop", input={}),
        ],
        stop_reason="tool_use",
    )


async def test_a_response_reusing_any_earlier_call_id_is_refused() -> None:
    """The agent remembers every call id of each response it appended (not only the first
    one), so a later response reusing the second call's id is an invalid response."""
    again = AssistantMessage(
        content=[ToolCallBlock(id="b", name="noop", input={})], stop_reason="tool_use"
    )
    agent = Agent(
        ScriptedModel([_two_calls("a", "b"), again, AssistantMessage(content=[])]),
        tools=[noop],
    )
    result = await agent.run("go")
    assert result.state is State.FAILED
    assert result.error is not None and "reuses tool-call id(s) b" in result.error
    assert agent.conversation.call_ids == {"a", "b"}


@pytest.mark.parametrize("how", ["constructor", "setter"])
async def test_a_response_reusing_a_call_id_of_a_history_the_user_gave_is_refused(how: str) -> None:
    """The call ids of a history the user gave (``Agent(messages=...)`` or the ``messages``
    setter, not appended by the engine) are remembered too: a response reusing one fails the run
    as an invalid response, and its call never runs."""
    ran: list[str] = []

    async def job() -> str:
        """Records that it ran."""
        ran.append("job")
        return "ok"

    history: list[Any] = [
        UserMessage(content="before"),
        _call(7, "job"),
        ToolResultMessage(tool_call_id="call_7", tool_name="job", content=[]),
        AssistantMessage(content=[TextBlock(text="done before")], stop_reason="end_turn"),
    ]
    model = ScriptedModel([_call(7, "job"), text_response("done")])
    if how == "constructor":
        agent = Agent(model, tools=[tool(job)], messages=history)
    else:
        agent = Agent(model, tools=[tool(job)])
        agent.messages = history
    result = await agent.run("again")
    assert result.state is State.FAILED
    assert result.error is not None and "reuses tool-call id(s) call_7" in result.error
    assert ran == []
    assert_valid_history(result.messages)
