"""assert_valid_history: every violation of invariants 1-4, with message indexes."""

from __future__ import annotations

import pytest

from statemachine_agent import (
    AssistantMessage,
    InvalidHistoryError,
    StopReason,
    TextBlock,
    ToolCallBlock,
    ToolResultMessage,
    UserMessage,
)
from statemachine_agent.testing import assert_valid_history, find_violations


def calls(*ids: str, stop_reason: str = "tool_use") -> AssistantMessage:
    return AssistantMessage(
        content=[ToolCallBlock(id=i, name="f", input={}) for i in ids], stop_reason=stop_reason
    )


def result(i: str) -> ToolResultMessage:
    return ToolResultMessage(tool_call_id=i, tool_name="f", content=[TextBlock(text="ok")])


def test_valid_history_passes() -> None:
    assert_valid_history(
        [UserMessage("q"), calls("a", "b"), result("a"), result("b"), UserMessage("s")]
    )


def test_every_violation_is_listed() -> None:
    history = [
        UserMessage("q"),
        calls("a", "b"),
        result("b"),  # out of order
        result("a"),
        result("zzz"),  # orphan
        calls("a"),  # duplicate id
        UserMessage("between"),  # before a's result
        AssistantMessage(content=[TextBlock(text="  ")], stop_reason="end_turn"),  # blank text
    ]
    with pytest.raises(InvalidHistoryError) as info:
        assert_valid_history(history, request=True)
    text = "\n".join(info.value.violations)
    assert "message 2" in text and "out of order" in text
    assert "message 4" in text and "'zzz'" in text
    assert "message 5" in text and "appears twice" in text
    assert "message 6" in text and "before the results" in text
    assert "message 7" in text and "whitespace" in text


def test_blank_text_is_kept_in_a_stored_history_and_refused_only_in_a_request() -> None:
    streamed = AssistantMessage(
        content=[TextBlock(text="Downtown S.F."), TextBlock(text=" "), TextBlock(text="Fares")],
        stop_reason="end_turn",
    )
    assert not find_violations([UserMessage("q"), streamed])
    (problem,) = find_violations([UserMessage("q"), streamed, UserMessage("next")], request=True)
    assert problem == "message 1: block 1 is an empty or whitespace-only text"


def test_request_rules() -> None:
    assert find_violations(
        [UserMessage("q"), AssistantMessage(content=[TextBlock(text="a")])], request=True
    )
    paused = AssistantMessage(content=[TextBlock(text="a")], stop_reason="pause_turn")
    assert not find_violations([UserMessage("q"), paused], request=True)
    assert find_violations([UserMessage(content=[])], request=True)


def test_aborted_message_with_tool_calls_is_a_violation() -> None:
    history = [UserMessage("q"), calls("a", stop_reason=StopReason.ABORTED), result("a")]
    assert any("aborted" in v for v in find_violations(history))


def test_dangling_call_at_the_end_is_a_violation() -> None:
    assert any("no result" in v for v in find_violations([UserMessage("q"), calls("a")]))
