"""Issue 22: earlier bug cases checked on their exact expected values, one named test each."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from statemachine_agent import (
    Agent,
    AssistantMessage,
    InvalidHistoryError,
    ProviderBlock,
    State,
    StopReason,
    TextBlock,
    ToolContext,
    ToolError,
    ToolExecutionEnd,
    ToolResultMessage,
    UserMessage,
    tool,
)
from statemachine_agent.models import ScriptedModel
from statemachine_agent.testing import assert_valid_history, find_violations
from statemachine_agent.testing.steps import call, text_response, tool_response

OWN_CANCELLATION = (
    "CancelledError: the tool raised asyncio.CancelledError itself (the run was not aborted or "
    "cancelled); the call may have partly completed."
)
INTERRUPTED = (
    "Interrupted while running: the run was aborted. The call may have partly completed; "
    "check its effects before retrying."
)


def results_of(messages: list[Any]) -> list[ToolResultMessage]:
    return [m for m in messages if isinstance(m, ToolResultMessage)]


# -- case 1: a tool's own CancelledError is not a cancellation of the run -------------------------


@pytest.mark.parametrize("mode", ["parallel", "sequential"])
async def test_case1_tool_raising_cancelled_error_itself_is_an_error_result(mode: str) -> None:
    t1_ended = asyncio.Event()
    t2_outcome: list[str] = []

    @tool
    async def cancels_itself() -> str:
        """A tool whose library cancelled its own task."""
        raise asyncio.CancelledError

    @tool
    async def slow() -> str:
        """Finishes after t1 has its result (parallel) or right away (sequential)."""
        try:
            if mode == "parallel":
                await t1_ended.wait()  # still running after t1 ended: not disturbed by it
            t2_outcome.append("completed")
            return "slow finished"
        except asyncio.CancelledError:
            t2_outcome.append("cancelled")
            raise

    model = ScriptedModel(
        [
            tool_response(call("cancels_itself", id="t1"), call("slow", id="t2")),
            text_response("Both calls are answered."),
        ]
    )
    agent = Agent(model, tools=[cancels_itself, slow], tool_execution=mode)  # type: ignore[arg-type]
    agent.subscribe(
        lambda e: t1_ended.set() if isinstance(e, ToolExecutionEnd) and e.call.id == "t1" else None
    )
    result = await agent.run("Run both")
    t1, t2 = results_of(result.messages)
    assert (t1.tool_call_id, t1.is_error, t1.text) == ("t1", True, OWN_CANCELLATION)
    assert (t2.tool_call_id, t2.is_error, t2.text) == ("t2", False, "slow finished")
    assert t2_outcome == ["completed"]
    assert (result.state, result.error, result.text) == (
        State.DONE,
        None,
        "Both calls are answered.",
    )
    assert len(model.requests) == 2
    assert_valid_history(result.messages)


@pytest.mark.parametrize("mode", ["parallel", "sequential"])
async def test_case1_cancelling_the_run_is_still_recorded_and_reraised(mode: str) -> None:
    started = asyncio.Event()

    @tool
    async def waits() -> str:
        """Waits until cancelled."""
        started.set()
        await asyncio.Event().wait()
        return "never"

    model = ScriptedModel(
        [tool_response(call("waits", id="w1"), call("waits", id="w2")), text_response("no")]
    )
    agent = Agent(model, tools=[waits], tool_execution=mode)  # type: ignore[arg-type]
    task = asyncio.ensure_future(agent.run("Wait"))
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert agent.state is State.ABORTED
    results = results_of(agent.messages)
    expected_second = (
        INTERRUPTED
        if mode == "parallel"
        else ("Not run: the run was aborted before this call started.")
    )
    assert [(r.tool_call_id, r.is_error, r.text) for r in results] == [
        ("w1", True, INTERRUPTED),
        ("w2", True, expected_second),
    ]
    assert len(model.requests) == 1
    assert_valid_history(agent.messages)


@pytest.mark.parametrize("mode", ["parallel", "sequential"])
async def test_case1_keyboard_interrupt_in_a_tool_is_recorded_then_propagates(mode: str) -> None:
    @tool
    def interrupted() -> str:
        """Ctrl-C lands while this sync tool runs."""
        raise KeyboardInterrupt

    @tool
    async def patient(ctx: ToolContext) -> str:
        """Stops when the run is aborted."""
        await ctx.signal.wait()
        return "stopped on abort"

    model = ScriptedModel(
        [tool_response(call("interrupted", id="k1"), call("patient", id="k2")), text_response("x")]
    )
    agent = Agent(model, tools=[interrupted, patient], tool_execution=mode)  # type: ignore[arg-type]
    with pytest.raises(KeyboardInterrupt):
        await agent.run("Go")
    assert agent.state is State.ABORTED
    k1, k2 = results_of(agent.messages)
    assert (k1.tool_call_id, k1.is_error, k1.text) == (
        "k1",
        True,
        "Interrupted: the tool raised KeyboardInterrupt and the run was aborted. The call may "
        "have partly completed; check its effects before retrying.",
    )
    if mode == "parallel":
        assert (k2.is_error, k2.text) == (False, "stopped on abort")
    else:
        assert (k2.is_error, k2.text) == (
            True,
            "Not run: the run was aborted before this call started.",
        )
    assert len(model.requests) == 1
    assert agent.is_running is False
    assert_valid_history(agent.messages)


# -- case 2: a tool exception is logged; a ToolError is not ---------------------------------------


async def test_case2_tool_exception_logged_at_warning_with_traceback_tool_and_call(
    caplog: pytest.LogCaptureFixture,
) -> None:
    @tool
    def boom() -> str:
        """Fails."""
        raise ValueError("boom")

    model = ScriptedModel([tool_response(call("boom", id="b1")), text_response("It failed.")])
    with caplog.at_level(logging.DEBUG, logger="statemachine_agent"):
        result = await Agent(model, tools=[boom]).run("Try")
    (r,) = results_of(result.messages)
    assert (r.is_error, r.text) == (True, "ValueError: boom")
    assert (result.state, result.text) == (State.DONE, "It failed.")
    records = [rec for rec in caplog.records if rec.levelno >= logging.WARNING]
    assert len(records) == 1
    (record,) = records
    assert (record.name, record.levelno) == ("statemachine_agent", logging.WARNING)
    assert record.exc_info is not None and record.exc_info[0] is ValueError
    assert str(record.exc_info[1]) == "boom"
    assert (record.tool_name, record.call_id) == ("boom", "b1")  # type: ignore[attr-defined]
    assert record.getMessage() == "tool 'boom' raised ValueError (call b1)"


async def test_case2_tool_error_is_not_logged(caplog: pytest.LogCaptureFixture) -> None:
    @tool
    def expected_failure() -> str:
        """Fails the expected way."""
        raise ToolError("file not found: a.txt")

    model = ScriptedModel([tool_response(call("expected_failure", id="e1")), text_response("ok")])
    with caplog.at_level(logging.DEBUG, logger="statemachine_agent"):
        result = await Agent(model, tools=[expected_failure]).run("Try")
    (r,) = results_of(result.messages)
    assert (r.is_error, r.text) == (True, "file not found: a.txt")
    assert [rec for rec in caplog.records if rec.levelno >= logging.WARNING] == []


# -- case 3: the pause_turn continuation cap ------------------------------------------------------


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


async def test_case3_pause_turn_cap_ends_max_turns_naming_the_cap() -> None:
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


async def test_case3_continuing_sends_the_paused_content_back_as_a_continuation() -> None:
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


async def test_case3_a_new_prompt_after_a_capped_pause_waits_for_the_continuation() -> None:
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


def test_case3_checker_flags_a_user_message_after_a_paused_response() -> None:
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


# -- case 4: an unknown stop reason with a tool call ----------------------------------------------


async def test_case4_unknown_stop_reason_tool_call_is_not_run(
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
