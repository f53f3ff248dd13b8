"""Stop reasons: ``end_turn`` with tool calls, ``pause_turn`` and its continuation, a truncated
call (``max_tokens``), an empty refusal, an unknown stop reason."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from loop_helpers import results_of

from statemachine_agent import (
    Agent,
    AssistantMessage,
    InvalidHistoryError,
    ProviderBlock,
    State,
    StopReason,
    TextBlock,
    UserMessage,
    tool,
)
from statemachine_agent.models import ScriptedModel
from statemachine_agent.testing import assert_valid_history, find_violations
from statemachine_agent.testing.steps import call, text_response, tool_response


async def test_end_turn_with_a_tool_call_still_runs_the_tool() -> None:
    ran: list[str] = []

    @tool
    def ping() -> str:
        """Ping."""
        ran.append("ping")
        return "pong"

    model = ScriptedModel(
        [
            tool_response(call("ping", {}), text="Let me ping.", stop_reason="end_turn"),
            text_response("Pinged."),
        ]
    )
    result = await Agent(model, tools=[ping]).run("ping it")
    assert ran == ["ping"]
    assert model.calls == 2
    assert result.state is State.DONE
    assert_valid_history(result.messages)


def paused(n: int) -> dict[str, Any]:
    return {
        "content": [
            {"type": "text", "text": f"Searching ({n})."},
            {
                "type": "server_tool_use",
                "id": f"srvtoolu_{n}",
                "name": "web_search",
                "input": {"query": "state machines"},
            },
        ],
        "stop_reason": "pause_turn",
    }


async def test_a_pause_turn_cap_ends_max_turns_naming_the_cap() -> None:
    model = ScriptedModel([paused(n) for n in range(1, 5)])
    agent = Agent(model, max_continuations=3)
    result = await agent.run("Search the web")
    assert len(model.requests) == 4
    assert result.state is State.MAX_TURNS
    assert result.stop_reason == "pause_turn"
    assert result.error == (
        "Stopped at a pause_turn: the model was still working after 3 continuation(s), the "
        "max_continuations=3 limit. To continue, call run() again without a prompt (the paused "
        "response is sent back as a continuation), or raise the limit: "
        "agent.max_continuations = 6."
    )
    assert [m.role for m in result.messages] == ["user"] + ["assistant"] * 4
    # each continuation request ends with the paused assistant content, never a user message
    for request in model.requests[1:]:
        last = request.messages[-1]
        assert isinstance(last, AssistantMessage) and last.stop_reason == StopReason.PAUSE_TURN
    assert_valid_history(result.messages)


async def test_continuing_a_paused_turn_sends_its_content_back_as_a_continuation() -> None:
    model = ScriptedModel([paused(n) for n in range(1, 5)])
    agent = Agent(model, max_continuations=3)
    await agent.run("Search the web")
    agent.model = model2 = ScriptedModel([text_response("Found three papers.")])
    result = await agent.run()
    (request,) = model2.requests
    last = request.messages[-1]
    assert isinstance(last, AssistantMessage) and last.stop_reason == StopReason.PAUSE_TURN
    assert [type(m).__name__ for m in request.messages] == ["UserMessage", "AssistantMessage"]
    assert (result.state, result.text, result.error) == (State.DONE, "Found three papers.", None)
    assert_valid_history(result.messages)


async def test_a_new_prompt_after_a_capped_pause_waits_for_the_continuation() -> None:
    model = ScriptedModel([paused(n) for n in range(1, 5)])
    agent = Agent(model, max_continuations=3)
    await agent.run("Search the web")
    agent.model = model2 = ScriptedModel(
        [text_response("Found three papers."), text_response("The first is the best.")]
    )
    result = await agent.run("Which one is best?")
    first, second = model2.requests
    assert isinstance(first.messages[-1], AssistantMessage)
    assert first.messages[-1].stop_reason == StopReason.PAUSE_TURN
    assert isinstance(second.messages[-1], UserMessage)
    assert second.messages[-1].text == "Which one is best?"
    assert [m.text for m in result.messages[-3:]] == [
        "Found three papers.",
        "Which one is best?",
        "The first is the best.",
    ]
    assert (result.state, result.text) == (State.DONE, "The first is the best.")
    assert_valid_history(result.messages)


def test_the_checker_flags_a_user_message_after_a_paused_response() -> None:
    history = [
        UserMessage("Search the web"),
        AssistantMessage(
            content=[TextBlock(text="Searching."), ProviderBlock(data=paused(1)["content"][1])],
            stop_reason="pause_turn",
        ),
        UserMessage("and then?"),
    ]
    problems = find_violations(history)
    assert problems == [
        "message 2: user message after the pause_turn response at message 1 (a paused response "
        "is continued by sending it back as it is, not answered)"
    ]
    with pytest.raises(InvalidHistoryError):
        assert_valid_history(history)
    assert find_violations(history[:2], request=True) == []  # a continuation is a valid request


async def test_a_tool_call_under_an_unknown_stop_reason_is_not_run(
    caplog: pytest.LogCaptureFixture,
) -> None:
    ran: list[str] = []

    @tool
    def delete_branch(name: str) -> str:
        """Delete a branch."""
        ran.append(name)
        return "deleted"

    model = ScriptedModel(
        [
            tool_response(
                call("delete_branch", {"name": "main"}, id="u1"),
                text="Deleting.",
                stop_reason="some_new_reason",
            ),
            text_response("never requested"),
        ]
    )
    with caplog.at_level(logging.DEBUG, logger="statemachine_agent"):
        result = await Agent(model, tools=[delete_branch]).run("Clean up")
    assert ran == []
    assert len(model.requests) == 1
    (r,) = results_of(result.messages)
    assert (r.tool_call_id, r.is_error, r.text) == (
        "u1",
        True,
        "Not run: the response's stop reason 'some_new_reason' is not known, so its tool calls "
        "were not executed.",
    )
    assert (result.state, result.stop_reason, result.text) == (
        State.DONE,
        "some_new_reason",
        "Deleting.",
    )
    assert result.error == (
        "The model stopped with the unknown stop reason 'some_new_reason'; its 1 tool call(s) "
        "were not run."
    )
    warnings = [rec for rec in caplog.records if rec.levelno >= logging.WARNING]
    assert [rec.getMessage() for rec in warnings] == [
        "the model stopped with an unknown stop reason 'some_new_reason'; its tool calls are "
        "not run"
    ]
    assert_valid_history(result.messages)


async def test_end_turn_with_a_tool_call_keeps_the_order_the_result_and_the_final_text() -> None:
    @tool
    def ping() -> str:
        """Ping."""
        return "pong"

    model = ScriptedModel(
        [
            tool_response(call("ping", {}, id="p1"), text="Let me ping.", stop_reason="end_turn"),
            text_response("Pinged: pong."),
        ]
    )
    result = await Agent(model, tools=[ping]).run("ping it")
    assert [m.role for m in result.messages] == ["user", "assistant", "tool_result", "assistant"]
    (r,) = results_of(result.messages)
    assert (r.tool_call_id, r.is_error, r.text) == ("p1", False, "pong")
    assert (result.state, result.text, result.error, result.turns) == (
        State.DONE,
        "Pinged: pong.",
        None,
        2,
    )
    assert model.requests[1].messages == result.messages[:3]


async def test_a_truncated_call_is_not_run_and_the_corrected_call_runs() -> None:
    written: list[tuple[str, str]] = []

    @tool
    def write(path: str, content: str) -> str:
        """Write a file."""
        written.append((path, content))
        return f"wrote {path}"

    model = ScriptedModel(
        [
            tool_response(
                call("write", '{"path": "a.txt", "content": "hel', id="t1"),
                text="Writing.",
                stop_reason="max_tokens",
            ),
            tool_response(call("write", {"path": "a.txt", "content": "hello"}, id="t2")),
            text_response("Written."),
        ]
    )
    result = await Agent(model, tools=[write]).run("write")
    assert written == [("a.txt", "hello")]
    truncated = result.messages[1]
    assert isinstance(truncated, AssistantMessage)
    (cut,) = truncated.tool_calls
    assert (cut.truncated, cut.raw_arguments) == (True, '{"path": "a.txt", "content": "hel')
    assert [(r.tool_call_id, r.is_error, r.text) for r in results_of(result.messages)] == [
        (
            "t1",
            True,
            "Not run: the arguments of this call were truncated because the response hit its "
            "token limit (max_tokens). Call the tool again with complete arguments, or split the "
            "work into smaller calls.",
        ),
        ("t2", False, "wrote a.txt"),
    ]
    assert [m.role for m in result.messages] == [
        "user",
        "assistant",
        "tool_result",
        "assistant",
        "tool_result",
        "assistant",
    ]
    assert (result.state, result.text, result.error) == (State.DONE, "Written.", None)
    assert len(model.requests) == 3


async def test_the_next_request_after_an_empty_refusal() -> None:
    model = ScriptedModel(
        [
            {
                "content": [],
                "stop_reason": "refusal",
                "stop_details": {"category": "cyber", "explanation": "no"},
            },
            text_response("Sure, here is the weather."),
        ]
    )
    agent = Agent(model)
    refused = await agent.run("hack")
    assert (refused.state, refused.error, refused.refusal, refused.text) == (
        State.DONE,
        "The model refused: cyber; no",
        {"category": "cyber", "explanation": "no"},
        "",
    )
    result = await agent.run("what is the weather?")
    assert model.requests[1].messages == [UserMessage("hack"), UserMessage("what is the weather?")]
    assert find_violations(model.requests[1].messages, request=True) == []
    assert (result.state, result.text, result.refusal) == (
        State.DONE,
        "Sure, here is the weather.",
        None,
    )
