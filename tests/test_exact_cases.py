"""Issue 22: earlier bug cases checked on their exact expected values, one named test each."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from statemachine_agent import (
    Agent,
    AssistantMessage,
    Deny,
    InvalidHistoryError,
    ProviderBlock,
    State,
    StopReason,
    TextBlock,
    ToolCallInfo,
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


# -- case 5: the earlier cases, asserted on their whole outcome -----------------------------------

NOT_RUN = "Not run: the run was aborted before this call started."


async def test_case5_abort_results_assistant_message_and_next_request() -> None:
    started = asyncio.Event()

    @tool
    async def slow(seconds: float) -> str:
        """Sleep."""
        started.set()
        await asyncio.sleep(seconds)
        return "slept"

    model = ScriptedModel(
        [
            tool_response(
                call("slow", {"seconds": 30}, id="s1"),
                call("slow", {"seconds": 0}, id="s2"),
                call("slow", {"seconds": 0}, id="s3"),
                text="Sleeping.",
            ),
            text_response("Nothing ran to the end."),
        ]
    )
    agent = Agent(model, tools=[slow], tool_execution="sequential", abort_grace_seconds=0.05)
    task = asyncio.ensure_future(agent.run("go"))
    await started.wait()
    agent.abort("user pressed stop")
    result = await task
    assert (result.state, result.error, result.turns) == (State.ABORTED, "user pressed stop", 1)
    assistant = result.messages[1]
    assert isinstance(assistant, AssistantMessage)
    assert assistant.stop_reason == StopReason.TOOL_USE and assistant.text == "Sleeping."
    assert [(c.id, c.input) for c in assistant.tool_calls] == [
        ("s1", {"seconds": 30}),
        ("s2", {"seconds": 0}),
        ("s3", {"seconds": 0}),
    ]
    assert [(r.tool_call_id, r.is_error, r.text) for r in result.messages[2:]] == [
        ("s1", True, INTERRUPTED),
        ("s2", True, NOT_RUN),
        ("s3", True, NOT_RUN),
    ]
    follow = await agent.run("what happened?")
    sent = model.requests[-1].messages
    assert sent == [*result.messages, UserMessage("what happened?")]
    assert (follow.state, follow.text) == (State.DONE, "Nothing ran to the end.")


async def test_case5_end_turn_with_tool_call_order_result_and_final_text() -> None:
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


async def test_case5_truncated_call_then_the_corrected_call_runs() -> None:
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


async def test_case5_unknown_tool_and_invalid_arguments_final_state_and_second_response() -> None:
    @tool
    def get_weather(city: str) -> str:
        """Weather for a city."""
        return f"Sunny in {city}"

    model = ScriptedModel(
        [
            tool_response(
                call("get_date", {}, id="a"),
                call("get_weather", {"city": "Paris"}, id="b"),
                call("get_weather", "[1,2]", id="c"),
            ),
            text_response("Paris is sunny; I have no date tool."),
        ]
    )
    result = await Agent(model, tools=[get_weather]).run("go")
    assert [(r.tool_call_id, r.is_error, r.text) for r in results_of(result.messages)] == [
        (
            "a",
            True,
            "Unknown tool 'get_date'. Available tools: get_weather. Did you mean 'get_weather'?",
        ),
        ("b", False, "Sunny in Paris"),
        (
            "c",
            True,
            "Invalid arguments for tool 'get_weather': expected a JSON object, got array: [1,2]. "
            "Send the arguments as one JSON object.",
        ),
    ]
    assert model.requests[1].messages == result.messages[:5]
    assert (result.state, result.text, result.error) == (
        State.DONE,
        "Paris is sunny; I have no date tool.",
        None,
    )


async def test_case5_denial_end_event_carries_the_denied_result() -> None:
    @tool
    def write_file(path: str, content: str) -> str:
        """Write a file."""
        return "written"

    def guard(info: ToolCallInfo) -> Deny | None:
        return (
            Deny("do not touch /srv/private")
            if info.arguments["path"].startswith("/srv/private")
            else None
        )

    model = ScriptedModel(
        [
            tool_response(
                call("write_file", {"path": "/srv/private/hosts", "content": "x"}, id="w")
            ),
            text_response("I will not touch /srv/private."),
        ]
    )
    agent = Agent(model, tools=[write_file], before_tool_call=guard)
    ends: list[ToolExecutionEnd] = []
    agent.subscribe(lambda e: ends.append(e) if isinstance(e, ToolExecutionEnd) else None)
    result = await agent.run("go")
    (end,) = ends
    assert end.call.id == "w"
    assert (end.result.tool_call_id, end.result.is_error, end.result.text) == (
        "w",
        True,
        "Denied: do not touch /srv/private",
    )
    assert results_of(result.messages) == [end.result]
    assert (result.state, result.text) == (State.DONE, "I will not touch /srv/private.")


async def test_case5_next_request_after_an_empty_refusal() -> None:
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


async def test_case5_max_turns_history_shape_at_the_limit() -> None:
    @tool
    def bash(command: str) -> str:
        """Run a command."""
        return "noop"

    steps = [tool_response(call("bash", {"command": "echo noop"}, id=f"b{i}")) for i in range(9)]
    model = ScriptedModel(steps)
    result = await Agent(model, tools=[bash], max_turns=5).run("loop forever")
    assert len(model.requests) == 5
    assert [m.role for m in result.messages] == ["user"] + ["assistant", "tool_result"] * 5
    assert [(r.tool_call_id, r.is_error, r.text) for r in results_of(result.messages)] == [
        (f"b{i}", False, "noop") for i in range(5)
    ]
    assert (result.state, result.turns, result.stop_reason) == (State.MAX_TURNS, 5, "tool_use")
    assert result.error == (
        "Stopped after 5 turn(s): the max_turns limit (5) was reached. The last action was a tool "
        "batch (bash) whose results are recorded. To continue, call run() again without a prompt "
        "and a higher limit, e.g. await agent.run(max_turns=15)."
    )


# -- case 1, the whole kind: hooks and models raising their own CancelledError --------------------


async def test_case1_hooks_raising_their_own_cancelled_error_fail_like_any_exception() -> None:
    @tool
    def step() -> str:
        """A step."""
        return "stepped"

    def before(info: ToolCallInfo) -> None:
        if info.call.id == "h1":
            raise asyncio.CancelledError

    def should_continue(info: Any) -> bool:
        raise asyncio.CancelledError

    model = ScriptedModel(
        [tool_response(call("step", id="h1"), call("step", id="h2")), text_response("x")]
    )
    agent = Agent(model, tools=[step], before_tool_call=before, should_continue=should_continue)
    result = await agent.run("Go")  # no CancelledError reaches the caller: nothing was cancelled
    assert [(r.tool_call_id, r.is_error, r.text) for r in results_of(result.messages)] == [
        (
            "h1",
            True,
            "The before_tool_call hook failed (CancelledError: ); the call was not completed.",
        ),
        ("h2", False, "stepped"),
    ]
    assert (result.state, result.error) == (
        State.FAILED,
        "The should_continue hook failed: CancelledError: ",
    )


async def test_case1_a_model_raising_its_own_cancelled_error_fails_the_run() -> None:
    from statemachine_agent.models import FunctionModel

    def model(messages: Any, request: Any) -> str:
        raise asyncio.CancelledError

    result = await Agent(FunctionModel(model), model_retries=0).run("Hi")
    assert (result.state, result.error) == (State.FAILED, "Model request failed: CancelledError: ")
