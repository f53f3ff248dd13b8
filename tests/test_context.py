"""Context projection: what a provider may receive, incrementally."""

from __future__ import annotations

import pytest

from statemachine_agent import (
    AssistantMessage,
    InvalidHistoryError,
    StopReason,
    TextBlock,
    ThinkingBlock,
    ToolCallBlock,
    ToolResultMessage,
    UserMessage,
)
from statemachine_agent._context import ContextProjector, project
from statemachine_agent._protocol import NO_RESULT
from statemachine_agent.testing import find_violations


def calls(*ids: str) -> AssistantMessage:
    return AssistantMessage(
        content=[ToolCallBlock(id=i, name="f", input={}) for i in ids], stop_reason="tool_use"
    )


def result(i: str) -> ToolResultMessage:
    return ToolResultMessage(tool_call_id=i, tool_name="f", content=[TextBlock(text=i)])


def test_repairs() -> None:
    history = [
        UserMessage(content=[TextBlock(text=" "), TextBlock(text="q")]),
        AssistantMessage(
            content=[TextBlock(text=""), *calls("a", "b").content], stop_reason="tool_use"
        ),
        result("b"),
        result("x"),  # orphan
        UserMessage("steer"),
        AssistantMessage(
            content=[TextBlock(text="partial"), ToolCallBlock(id="p", name="f", input={})],
            stop_reason=StopReason.ABORTED,
        ),
        UserMessage("again"),
        AssistantMessage(content=[TextBlock(text="cut")], stop_reason=StopReason.ABORTED),
    ]
    out = project(history)
    assert [m.role for m in out] == [
        "user",
        "assistant",
        "tool_result",
        "tool_result",
        "user",
        "assistant",
        "user",
    ]
    assert out[0].content == [TextBlock(text="q")]
    assert [r.tool_call_id for r in out[2:4]] == ["a", "b"]
    assert out[2].text == NO_RESULT and out[2].is_error
    assert out[5].content == [TextBlock(text="partial")]  # text only; trailing aborted one dropped
    assert not find_violations(out, request=True)


def test_a_stray_result_inside_a_batch_does_not_hide_the_results_after_it() -> None:
    """A result answering no call of the response (a stray, e.g. in a hand-edited history) is
    dropped alone: the batch's results after it are still sent, not replaced by NO_RESULT."""
    history = [UserMessage("q"), calls("a", "b"), result("x"), result("a"), result("b")]
    out = project(history)
    assert [m.role for m in out] == ["user", "assistant", "tool_result", "tool_result"]
    assert [(r.tool_call_id, r.text, r.is_error) for r in out[2:]] == [
        ("a", "a", False),
        ("b", "b", False),
    ]
    assert out[2] is history[3] and out[3] is history[4]
    assert not find_violations(out, request=True)


def test_pause_turn_continuation_is_joined() -> None:
    first = AssistantMessage(content=[TextBlock(text="a")], stop_reason="pause_turn")
    second = AssistantMessage(content=[TextBlock(text="b")], stop_reason="end_turn")
    out = project([UserMessage("q"), first, second, UserMessage("next")])
    assert [m.role for m in out] == ["user", "assistant", "user"]
    assert out[1].text == "ab"


def test_projector_is_incremental_and_detects_replacement() -> None:
    history: list = [UserMessage("q"), calls("a"), result("a")]
    projector = ContextProjector()
    first = projector.project(history)
    assert len(first) == 3
    history += [calls("b"), result("b")]
    second = projector.project(history)
    assert len(second) == 5 and second[0] is history[0]
    assert projector.project(list(history[:3])) == history[:3]  # a new list starts over


def test_projector_raises_on_duplicate_ids() -> None:
    history = [UserMessage("q"), calls("a"), result("a"), calls("a"), result("a")]
    with pytest.raises(InvalidHistoryError, match="appears twice"):
        ContextProjector().project(history)


def test_an_aborted_partial_is_never_joined_to_the_next_response() -> None:
    aborted = AssistantMessage(content=[TextBlock(text="partial")], stop_reason=StopReason.ABORTED)
    new = AssistantMessage(
        content=[ThinkingBlock(thinking="t", signature="S"), *calls("a").content],
        stop_reason="tool_use",
    )
    out = project([UserMessage("q"), aborted, new, result("a")])
    assert [m.role for m in out] == ["user", "assistant", "tool_result"]
    assert out[1] is new  # starts with its thinking block, as the API requires
    paused = AssistantMessage(content=[TextBlock(text="p")], stop_reason="pause_turn")
    out = project([UserMessage("q"), paused, aborted, new, result("a")])
    assert [b.type for b in out[1].content] == ["text", "thinking", "tool_call"]


@pytest.mark.parametrize(
    "between",
    [result("x"), UserMessage(content=[TextBlock(text=" ")])],
    ids=["a_stray_result", "a_blank_user_message"],
)
def test_an_aborted_partial_is_never_joined_to_a_response_after_a_dropped_message(
    between: ToolResultMessage | UserMessage,
) -> None:
    """An aborted partial followed by a message the projection drops (a stray result, a blank
    user message) and then a new response is still replaced by that response, never joined to
    it: the new response keeps its thinking block first, as the API requires."""
    aborted = AssistantMessage(content=[TextBlock(text="partial")], stop_reason=StopReason.ABORTED)
    new = AssistantMessage(
        content=[ThinkingBlock(thinking="t", signature="S"), *calls("a").content],
        stop_reason="tool_use",
    )
    out = project([UserMessage("q"), aborted, between, new, result("a")])
    assert [m.role for m in out] == ["user", "assistant", "tool_result"]
    assert out[1] is new
    assert not find_violations(out, request=True)


def test_an_empty_continuation_ends_the_paused_response_so_a_follow_up_may_follow_it() -> None:
    """A ``pause_turn`` response continued by an empty ``end_turn`` one (dropped from requests: the
    API refuses empty messages) is a finished turn: the follow-up after it is sent as answering a
    complete response, never as a user message after a paused one (found by the kit's stateful
    test: steering and a follow-up queued together with a paused response)."""
    from statemachine_agent import Agent
    from statemachine_agent.models import ScriptedModel

    model = ScriptedModel(
        [
            {"content": [{"type": "text", "text": "ok"}], "stop_reason": "pause_turn"},
            {"content": [], "stop_reason": "end_turn"},
            {"content": [{"type": "text", "text": "fin"}], "stop_reason": "end_turn"},
        ]
    )
    agent = Agent(model)
    agent.steer("ok")
    agent.follow_up("and then?")
    result = agent.run_sync("do the task")
    assert (result.state, result.text, len(model.requests)) == ("done", "fin", 3)
    for request in model.requests:
        assert find_violations(request.messages, request=True) == []
    assert [m.role for m in model.requests[2].messages] == ["user", "user", "assistant", "user"]
