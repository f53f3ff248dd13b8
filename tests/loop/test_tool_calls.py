"""Tool calls and their results: the order of results and events, errors, unknown tools,
invalid arguments, denials, the per-resource write queue, what a result's text and data hold."""

from __future__ import annotations

import asyncio
import logging
import math
from pathlib import Path
from typing import Any

import pytest
from loop_helpers import results_of, roles
from models.replay_server import ReplayServer, Reply, message, says, sse
from models.replay_server import anthropic_model as new_model
from pydantic import BaseModel, Field

from statemachine_agent import (
    Agent,
    AssistantMessage,
    Deny,
    Event,
    RunResult,
    State,
    TextBlock,
    Tool,
    ToolCallBlock,
    ToolCallInfo,
    ToolError,
    ToolExecutionEnd,
    ToolExecutionStart,
    ToolResult,
    ToolResultMessage,
    tool,
)
from statemachine_agent.models import ScriptedModel
from statemachine_agent.testing import assert_valid_history
from statemachine_agent.testing.steps import call, text_response, tool_response


async def test_one_tool_call_then_an_answer_ends_done() -> None:
    @tool
    def list_files() -> str:
        """List the files in the workspace."""
        return "README.md, src/index.ts"

    model = ScriptedModel(
        [
            tool_response(call("list_files", {}, id="t1")),
            text_response("The workspace contains README.md and src/index.ts."),
        ]
    )
    agent = Agent(model, tools=[list_files])
    result = await agent.run("List the files in the workspace")
    assert result.state is State.DONE and agent.state is State.DONE
    assert roles(result.messages) == ["user", "assistant", "tool_result", "assistant"]
    assert result.messages[0].text == "List the files in the workspace"
    assert result.messages[1].tool_calls[0].name == "list_files"
    assert result.messages[2].text == "README.md, src/index.ts"
    assert result.text == "The workspace contains README.md and src/index.ts."
    assert_valid_history(result.messages)


async def test_parallel_results_in_declaration_order_events_in_completion_order() -> None:
    # The delays (0.3, 0.1, 0.2, 0.0 s) as an order the test controls: each call waits
    # for its gate, and the gates open one at a time in that completion order (w3, w1, w2, w0),
    # each after the previous call's end event. No timing, so a loaded machine cannot reorder it.
    ids = ["w0", "w1", "w2", "w3"]
    timeline: list[tuple[str, str]] = []
    started = {i: asyncio.Event() for i in ids}
    gates = {i: asyncio.Event() for i in ids}
    ended = {i: asyncio.Event() for i in ids}

    @tool
    async def wait(name: str) -> str:
        """Wait for the test to let this call finish."""
        timeline.append(("start", name))
        started[name].set()
        await gates[name].wait()
        timeline.append(("end", name))
        return f"finished {name}"

    model = ScriptedModel(
        [tool_response(*(call("wait", {"name": i}, id=i) for i in ids)), text_response("ok")]
    )
    agent = Agent(model, tools=[wait])
    ends: list[str] = []

    def on_event(event: object) -> None:
        if isinstance(event, ToolExecutionEnd):
            ends.append(event.call.id)
            ended[event.call.id].set()

    agent.subscribe(on_event)
    run = asyncio.create_task(agent.run("go"))
    for i in ids:  # parallel: all four run at once (sequential execution would hang here)
        await started[i].wait()
    for i in ["w3", "w1", "w2", "w0"]:
        gates[i].set()
        await ended[i].wait()
    result = await run
    assert [r.tool_call_id for r in results_of(result.messages)] == ["w0", "w1", "w2", "w3"]
    assert [r.text for r in results_of(result.messages)] == [f"finished {i}" for i in ids]
    assert ends == ["w3", "w1", "w2", "w0"]
    assert [kind for kind, _ in timeline[:4]] == ["start"] * 4
    assert result.state is State.DONE and result.text == "ok"
    assert_valid_history(result.messages)


async def test_a_tool_exception_becomes_an_error_result_and_the_run_reaches_done() -> None:
    @tool
    def explode() -> str:
        """Fail."""
        raise ValueError("boom")

    model = ScriptedModel([tool_response(call("explode", {})), text_response("It failed.")])
    result = await Agent(model, tools=[explode]).run("go")
    (res,) = results_of(result.messages)
    assert res.is_error and "ValueError: boom" in res.text
    assert "Traceback" not in res.text
    assert result.state is State.DONE
    assert_valid_history(result.messages)


async def test_an_unknown_tool_result_names_the_available_ones_and_order_is_kept() -> None:
    @tool
    def get_weather(city: str) -> str:
        """Weather for a city."""
        return f"Sunny in {city}"

    model = ScriptedModel(
        [
            tool_response(
                call("get_date", {}, id="a"), call("get_weather", {"city": "Paris"}, id="b")
            ),
            text_response("ok"),
        ]
    )
    result = await Agent(model, tools=[get_weather]).run("go")
    first, second = results_of(result.messages)
    assert (first.tool_call_id, second.tool_call_id) == ("a", "b")
    assert first.is_error and "get_weather" in first.text and "get_date" in first.text
    assert not second.is_error and second.text == "Sunny in Paris"
    assert_valid_history(result.messages)


@pytest.mark.parametrize(
    ("raw", "expect"),
    [
        (
            '{"{"tagIds":[1,2]}',
            "not valid JSON (Expecting ':' delimiter: line 1 column 5 (char 4))",
        ),
        ("[1,2]", "got array"),
        ("null", "got null"),
    ],
)
async def test_invalid_or_non_object_arguments_never_run(raw: str, expect: str) -> None:
    calls: list[object] = []

    @tool
    def tag(tagIds: list[int] | None = None) -> str:
        """Tag things."""
        calls.append(tagIds)
        return "tagged"

    model = ScriptedModel([tool_response(call("tag", raw, id="x")), text_response("ok")])
    result = await Agent(model, tools=[tag]).run("go")
    (res,) = results_of(result.messages)
    assert calls == []  # never called, in particular never with {}
    assert res.is_error and expect in res.text
    assert raw in res.text  # quotes what was received
    assert_valid_history(result.messages)


async def test_raw_argument_text_in_an_error_result_is_capped() -> None:
    raw = '{"a": "' + "x" * 1000
    model = ScriptedModel([tool_response(call("tag", raw)), text_response("ok")])

    @tool
    def tag(a: str) -> str:
        """Tag."""
        return a

    result = await Agent(model, tools=[tag]).run("go")
    (res,) = results_of(result.messages)
    assert res.is_error and "more chars" in res.text
    quoted = res.text.split("Raw arguments: ", 1)[1].split("... [", 1)[0]
    assert quoted == raw[:200]  # the raw text, capped at 200 characters


async def test_a_denied_call_never_runs_and_its_end_event_fires() -> None:
    ran: list[str] = []

    @tool
    def write_file(path: str, content: str) -> str:
        """Write a file."""
        ran.append(path)
        return "written"

    def guard(info: ToolCallInfo) -> Deny | None:
        return (
            Deny("do not touch protected/")
            if info.arguments["path"].startswith("protected/")
            else None
        )

    model = ScriptedModel(
        [
            tool_response(call("write_file", {"path": "protected/hosts", "content": "x"}, id="w")),
            text_response("ok"),
        ]
    )
    agent = Agent(model, tools=[write_file], before_tool_call=guard)
    events: list[str] = []
    agent.subscribe(
        lambda e: (
            events.append(e.type) if isinstance(e, ToolExecutionStart | ToolExecutionEnd) else None
        )
    )
    result = await agent.run("go")
    (res,) = results_of(result.messages)
    assert ran == []
    assert res.is_error and "do not touch protected/" in res.text
    assert events == ["tool_execution_start", "tool_execution_end"]
    assert result.state is State.DONE
    assert_valid_history(result.messages)


async def test_a_terminating_denial_answers_every_call_and_aborts() -> None:
    @tool
    def write_file(path: str) -> str:
        """Write."""
        return "written"

    def guard(info: ToolCallInfo) -> Deny | None:
        if info.call.id == "first":
            return Deny("do not touch protected/", terminate=True)
        return None

    model = ScriptedModel(
        [
            tool_response(
                call("write_file", {"path": "protected/a"}, id="first"),
                call("write_file", {"path": "b"}, id="second"),
            ),
            text_response("never reached"),
        ]
    )
    result = await Agent(model, tools=[write_file], before_tool_call=guard).run("go")
    assert [r.tool_call_id for r in results_of(result.messages)] == ["first", "second"]
    assert result.state is State.ABORTED
    assert "do not touch protected/" in (result.error or "")
    assert model.calls == 1
    assert_valid_history(result.messages)


async def test_the_write_queue_serialises_edits_to_one_file(tmp_path: Path) -> None:
    target = tmp_path / "file.txt"
    target.write_text("".join(f"line {i}\n" for i in range(1, 101)))

    @tool(resource=lambda args: str((tmp_path / args["path"]).resolve()))
    async def edit_line(path: str, line: int, text: str) -> str:
        """Replace one line (read, think, write back)."""
        file = tmp_path / path
        lines = file.read_text().splitlines(keepends=True)
        await asyncio.sleep(0.05)
        lines[line - 1] = text + "\n"
        file.write_text("".join(lines))
        return f"edited line {line}"

    model = ScriptedModel(
        [
            tool_response(
                call("edit_line", {"path": "file.txt", "line": 50, "text": "FIFTY"}, id="e1"),
                call(
                    "edit_line", {"path": "file.txt", "line": 75, "text": "SEVENTY-FIVE"}, id="e2"
                ),
            ),
            text_response("edited"),
        ]
    )
    result = await Agent(model, tools=[edit_line]).run("edit")
    lines = target.read_text().splitlines()
    assert lines[49] == "FIFTY" and lines[74] == "SEVENTY-FIVE"
    assert [r.text for r in results_of(result.messages)] == ["edited line 50", "edited line 75"]
    assert_valid_history(result.messages)


async def test_write_queue_keeps_declaration_order_past_a_denied_call() -> None:
    # Found by the oracle (issue 23): a denied call on a resource gave up its place at once, so
    # the call after it ran before the (still running) call before it.
    journal: list[str] = []

    @tool(resource="key")
    async def write(key: str, text: str) -> str:
        """Write ``text`` under ``key``."""
        journal.append(f"start {text}")
        for _ in range(5):  # suspends: a call that may not overtake this one gets the loop
            await asyncio.sleep(0)
        journal.append(f"end {text}")
        return text

    def deny_second(info: ToolCallInfo) -> Deny | None:
        return Deny("not this one") if info.call.id == "w2" else None

    calls = [call("write", {"key": "a", "text": f"w{i}"}, id=f"w{i}") for i in (1, 2, 3)]
    model = ScriptedModel([tool_response(*calls), text_response("written")])
    result = await Agent(model, tools=[write], before_tool_call=deny_second).run("write")
    assert journal == ["start w1", "end w1", "start w3", "end w3"]
    assert [r.text for r in results_of(result.messages)] == ["w1", "Denied: not this one", "w3"]
    assert_valid_history(result.messages)


# The documented texts of calls that did not run (README "What the loop guarantees").
NOT_RUN_AFTER_TERMINATION = "Not run: an earlier call of this batch ended the run."


def result_texts(messages: list[Any]) -> list[tuple[str, str, bool]]:
    return [
        (m.tool_call_id, m.text, m.is_error) for m in messages if isinstance(m, ToolResultMessage)
    ]


def tool_events(events: list[Event]) -> list[tuple[str, str]]:
    return [
        (e.type, e.call.id) for e in events if isinstance(e, ToolExecutionStart | ToolExecutionEnd)
    ]


async def test_a_terminating_denial_in_a_sequential_batch_never_runs_the_next_call() -> None:
    ran: list[str] = []

    @tool
    def write(path: str) -> str:
        """Write."""
        ran.append(path)
        return f"wrote {path}"

    def guard(info: ToolCallInfo) -> Deny | None:
        return Deny("stop here", terminate=True) if info.call.id == "first" else None

    model = ScriptedModel(
        [
            tool_response(
                call("write", {"path": "a"}, id="first"), call("write", {"path": "b"}, id="second")
            ),
            text_response("never requested"),
        ]
    )
    agent = Agent(model, tools=[write], tool_execution="sequential", before_tool_call=guard)
    events: list[Event] = []
    agent.subscribe(events.append)
    result = await agent.run("go")
    assert ran == []
    assert result_texts(result.messages) == [
        ("first", "Denied: stop here", True),
        ("second", NOT_RUN_AFTER_TERMINATION, True),
    ]
    assert result.state is State.ABORTED and model.calls == 1
    assert result.error == "A tool call was denied and ended the run: stop here"
    # Only the denied call started; the second never did.
    assert tool_events(events) == [
        ("tool_execution_start", "first"),
        ("tool_execution_end", "first"),
    ]
    assert_valid_history(result.messages)


@pytest.mark.parametrize("mode", ["parallel", "sequential"])
async def test_a_terminating_denial_or_an_interrupt_ends_only_its_own_batch(mode: str) -> None:
    # What ends a batch (a denial with terminate=True, a KeyboardInterrupt in a tool or out of a
    # subscriber) belongs to that batch: a later run, of any agent, runs its calls.
    @tool
    def write(path: str) -> str:
        """Write."""
        return f"wrote {path}"

    @tool
    def boom() -> str:
        """Raises an interrupt."""
        raise KeyboardInterrupt

    def guard(info: ToolCallInfo) -> Deny | None:
        return Deny("stop here", terminate=True) if info.call.id == "denied" else None

    def two_writes(*more: Any) -> ScriptedModel:
        calls = [call("write", {"path": "a"}, id="a"), call("write", {"path": "b"}, id="b")]
        return ScriptedModel([tool_response(*calls), *more])

    def interrupt_at_start(event: Event) -> None:
        if isinstance(event, ToolExecutionStart) and event.call.id == "a":
            raise KeyboardInterrupt

    denied = Agent(
        ScriptedModel(
            [tool_response(call("write", {"path": "x"}, id="denied")), text_response("")]
        ),
        tools=[write],
        before_tool_call=guard,
    )
    assert (await denied.run("go")).state is State.ABORTED
    raised = Agent(ScriptedModel([tool_response(call("boom", id="k"))]), tools=[boom])
    with pytest.raises(KeyboardInterrupt):
        await raised.run("go")
    watched = Agent(two_writes(), tools=[write])
    watched.subscribe(interrupt_at_start)
    with pytest.raises(KeyboardInterrupt):
        await watched.run("go")

    model = two_writes(text_response("done"))
    try:
        result = await Agent(model, tools=[write], tool_execution=mode).run("go")  # type: ignore[arg-type]
    except KeyboardInterrupt:
        pytest.fail("the interrupt of an earlier run was raised again by a later run's batch")
    assert result_texts(result.messages) == [("a", "wrote a", False), ("b", "wrote b", False)]
    assert (result.state, result.error, model.calls) == (State.DONE, None, 2)
    assert_valid_history(result.messages)


def tool_texts(messages: list[Any]) -> list[str]:
    return [m.text for m in messages if isinstance(m, ToolResultMessage)]


# Found by a review: per-resource write queue is not in declaration order when before_tool_call suspends
async def test_the_write_queue_keeps_declaration_order_under_an_async_permission_hook():
    order = []

    @tool(resource="path")
    async def write(path: str, content: str) -> str:
        order.append(content)
        return "ok"

    second_approved = asyncio.Event()

    async def before(info):  # e.g. asks a human; the 2nd approval comes first
        if info.arguments["content"] == "1":
            await second_approved.wait()
        else:
            second_approved.set()

    model = ScriptedModel(
        [
            tool_response(
                call("write", {"path": "x", "content": "1"}, id="a"),
                call("write", {"path": "x", "content": "2"}, id="b"),
            ),
            text_response("done"),
        ]
    )
    agent = Agent(model, tools=[write], before_tool_call=before)
    result = await agent.run("hi")
    assert order == ["1", "2"]
    assert second_approved.is_set()
    assert tool_texts(result.messages) == ["ok", "ok"]
    assert result.state is State.DONE and result.text == "done"


async def test_a_raising_resource_function_is_an_error_result_and_the_agent_runs_again():
    def key(args):
        raise KeyError("path")

    @tool(resource=key)
    async def w(x: int) -> str:
        return "ok"

    model = ScriptedModel(
        [tool_response(call("w", {"x": 1}, id="a")), text_response("x"), text_response("y")]
    )
    agent = Agent(model, tools=[w])
    result = await agent.run("hi")
    assert result.state is State.DONE and result.text == "x"
    assert tool_texts(result.messages) == ["Could not prepare the call: KeyError: 'path'"]
    assert [m.role for m in result.messages] == ["user", "assistant", "tool_result", "assistant"]
    again = await agent.run("again")  # the agent is not stuck mid-run
    assert again.state is State.DONE and again.text == "y"


@pytest.mark.parametrize(
    "value",
    [
        "",
        " \n ",
        TextBlock(text="  "),
        ToolResultMessage(tool_call_id="?", tool_name="?", content=[TextBlock(text="")]),
    ],
)
async def test_a_tool_value_with_blank_text_is_sent_as_empty_output(value):
    @tool
    async def t() -> object:
        return value

    model = ScriptedModel([tool_response(call("t", id="a")), text_response("done")])
    agent = Agent(model, tools=[t])
    result = await agent.run("hi")
    (res,) = [m for m in result.messages if isinstance(m, ToolResultMessage)]
    assert (res.tool_call_id, res.text, res.is_error) == ("a", "(empty output)", False)
    assert model.requests[1].messages[-1] == res  # what the provider got: no blank text
    assert result.state is State.DONE
    assert_valid_history(result.messages)


@pytest.mark.parametrize(
    ("text", "is_error", "details"), [("", False, None), (" \n\t", True, {"code": 7})]
)
async def test_a_tool_result_with_blank_text_is_sent_as_empty_output_keeping_its_flag_and_details(
    text: str, is_error: bool, details: Any
) -> None:
    # A ToolResult's text is a tool's output like a plain str: blank text would be refused by
    # the provider (protocol rule 4); the error flag and the details are the tool's to keep.
    @tool
    async def t() -> ToolResult:
        """Returns a ToolResult."""
        return ToolResult(text, is_error=is_error, details=details)

    model = ScriptedModel([tool_response(call("t", id="a")), text_response("done")])
    result = await Agent(model, tools=[t]).run("hi")
    (res,) = results_of(result.messages)
    assert (res.tool_call_id, res.text, res.is_error, res.details) == (
        "a",
        "(empty output)",
        is_error,
        details,
    )
    assert model.requests[1].messages[-1] == res  # what the provider got: no blank text
    assert result.state is State.DONE
    assert_valid_history(result.messages)


@pytest.mark.parametrize(
    "value",
    ["  indented = 1", "\nafter a newline", "\t tab first\n", "x", " x ", "\u3000ideographic"],
)
async def test_a_tool_text_with_leading_or_trailing_whitespace_is_sent_as_it_is(value: str) -> None:
    # Only whitespace-only text is blank (protocol rule 4): text that merely starts or ends
    # with whitespace is the tool's output, kept to the character.
    @tool
    async def t() -> str:
        """Returns text."""
        return value

    model = ScriptedModel([tool_response(call("t", id="a")), text_response("done")])
    result = await Agent(model, tools=[t]).run("hi")
    (res,) = results_of(result.messages)
    assert (res.tool_call_id, res.text, res.is_error) == ("a", value, False)
    assert model.requests[1].messages[-1] == res
    assert_valid_history(result.messages)


async def test_a_tool_exception_is_logged_at_warning_with_traceback_tool_and_call(
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


async def test_a_tool_error_result_is_not_logged(caplog: pytest.LogCaptureFixture) -> None:
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


async def test_unknown_tool_and_invalid_arguments_final_state_and_second_request() -> None:
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


async def test_a_denials_end_event_carries_the_denied_result() -> None:
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


def _call(i: int, name: str = "noop") -> AssistantMessage:
    return AssistantMessage(
        content=[ToolCallBlock(id=f"call_{i}", name=name, input={})], stop_reason="tool_use"
    )


@pytest.mark.parametrize("timeout_seconds", [None, 30.0])
async def test_a_tool_raising_timeout_error_itself(timeout_seconds: float | None) -> None:
    async def flaky() -> str:
        """Fail."""
        raise TimeoutError

    agent = Agent(
        ScriptedModel([_call(1, "flaky"), {"content": [{"type": "text", "text": "ok"}]}]),
        tools=[tool(flaky, timeout_seconds=timeout_seconds)],
    )
    result = await agent.run("go")
    assert result.messages[2].is_error
    assert result.messages[2].text == "TimeoutError: the tool timed out"


def wire_results(body: dict[str, Any]) -> list[dict[str, Any]]:
    """The ``tool_result`` blocks of a recorded request body."""
    return [
        block
        for message in body["messages"]
        if isinstance(message["content"], list)
        for block in message["content"]
        if block.get("type") == "tool_result"
    ]


def no_argument_call_stream(with_empty_delta: bool) -> Reply:
    """A streamed ``tool_use`` of a tool without parameters, as the API sends it: the block
    starts with ``"input": {}`` and its only ``input_json_delta`` (if any) is empty."""
    block = {"type": "tool_use", "id": "toolu_now", "name": "now", "input": {}}
    deltas = [{"type": "input_json_delta", "partial_json": ""}] if with_empty_delta else []
    events: list[dict[str, Any]] = [
        {
            "type": "message_start",
            "message": message(
                [], None, id="msg_now", usage={"input_tokens": 5, "output_tokens": 1}
            ),
        },
        {"type": "content_block_start", "index": 0, "content_block": block},
        *({"type": "content_block_delta", "index": 0, "delta": d} for d in deltas),
        {"type": "content_block_stop", "index": 0},
        {
            "type": "message_delta",
            "delta": {"stop_reason": "tool_use", "stop_sequence": None},
            "usage": {"output_tokens": 3},
        },
        {"type": "message_stop"},
    ]
    return Reply(body=sse(events))


@pytest.mark.parametrize("with_empty_delta", [False, True], ids=["no-delta", "empty-delta"])
async def test_a_streamed_call_without_arguments_runs_with_empty_input(
    server: ReplayServer, with_empty_delta: bool
) -> None:
    """microsoft/autogen#6661 (fixed by microsoft/autogen#6979): a streamed tool call of a tool
    without parameters carries no (or one empty) ``input_json_delta``; the accumulated argument
    text was ``""`` instead of the block's ``{}``, and parsing it failed when the tool was run.

    Expected: through the real SDK, both stream shapes run the tool once with no arguments
    (result ``"12:00"``), the run ends ``done`` with 2 requests, and request 2 echoes the call
    with ``"input": {}`` and exactly one result for it.
    """
    ran: list[str] = []

    @tool
    def now() -> str:
        """The time."""
        ran.append("now")
        return "12:00"

    server.add(no_argument_call_stream(with_empty_delta), says("It is noon."))
    result = await Agent(server.closing(new_model(server)), tools=[now]).run("Time?")

    assert result.state is State.DONE, result.error
    assert ran == ["now"]
    (answer,) = results_of(result.messages)
    assert (answer.is_error, answer.text) == (False, "12:00")
    assert len(server.requests) == 2
    echoed = server.requests[1].body["messages"][1]["content"]
    assert [b for b in echoed if b["type"] == "tool_use"] == [
        {"type": "tool_use", "id": "toolu_now", "name": "now", "input": {}}
    ]
    assert [b["tool_use_id"] for b in wire_results(server.requests[1].body)] == ["toolu_now"]


async def test_a_list_argument_sent_as_json_text_is_an_error_result_naming_the_field() -> None:
    """earendil-works/pi#5697 (also earendil-works/pi#9931): models served by some stacks send an
    array parameter as a JSON-encoded string (``{"queries": "[\\"a\\", \\"b\\"]"}``); the
    validator's error did not make the shape plain, and a ``str`` parameter that happened to
    hold JSON text was at risk of being "coerced" by a fix.

    Expected: the tool does not run with a string; the call gets an error result naming the
    field ``queries`` and showing the arguments received; the model's corrected call runs with
    the list, and a ``str`` parameter holding JSON text reaches the tool unchanged; the run ends
    ``done`` with 3 requests.
    """
    ran: list[tuple[list[str], str]] = []

    @tool
    def search(queries: list[str], note: str = "") -> str:
        """Search for each query.

        Args:
            queries: the queries.
            note: a free-text note.
        """
        ran.append((queries, note))
        return f"{len(queries)} hits"

    model = ScriptedModel(
        [
            tool_response(call("search", {"queries": '["a", "b"]'}, id="j1")),
            tool_response(call("search", {"queries": ["a", "b"], "note": '{"k": 1}'}, id="j2")),
            text_response("Two hits."),
        ]
    )
    result = await Agent(model, tools=[search]).run("Search a and b.")

    assert result.state is State.DONE, result.error
    assert ran == [(["a", "b"], '{"k": 1}')]
    first, second = results_of(result.messages)
    assert first.is_error
    assert "- queries:" in first.text
    assert '\\"a\\"' in first.text  # the arguments received, as JSON
    assert (second.is_error, second.text) == (False, "2 hits")
    assert len(model.requests) == 3


def run_one_call(t: Tool, arguments: dict[str, Any]) -> tuple[RunResult, ToolResultMessage]:
    """One scripted call of ``t`` with ``arguments``, then a final answer."""
    model = ScriptedModel([tool_response(call(t.name, arguments, id="t1")), text_response("ok")])
    result = Agent(model, tools=[t]).run_sync("go")
    (answer,) = [m for m in result.messages if isinstance(m, ToolResultMessage)]
    return result, answer


class _Order(BaseModel):
    order_id: str = Field(alias="orderId")
    total: float


@pytest.mark.parametrize(
    ("returned", "text", "is_error"),
    [
        (_Order(orderId="A-17", total=math.nan), '{"orderId":"A-17","total":null}', False),
        ({"ratio": math.inf, "n": -math.nan}, '{"ratio":null,"n":null}', False),
        ("é".encode(), '"é"', False),
        (b"\xff", "The tool returned a value of type bytes that cannot be turned into JSON", True),
    ],
    ids=["alias_and_nan", "infinities", "utf8_bytes", "other_bytes"],
)
def test_result_data_uses_aliases_nan_as_null_and_bytes_as_utf8_text(
    returned: Any, text: str, is_error: bool
) -> None:
    @tool
    def give() -> Any:
        """Give a value."""
        return returned

    _, answer = run_one_call(give, {})
    assert answer.text.startswith(text), answer.text
    assert answer.is_error is is_error


async def test_a_parallel_call_still_running_when_another_has_ended_is_waited_for() -> None:
    # One call ends in its first step, the other needs a few more loop iterations (yields, no
    # time): the batch waits for both, whatever the abort grace (0 here: a call the batch
    # stopped waiting for would be cancelled at once and answered as interrupted).
    @tool
    async def quick() -> str:
        """End at once."""
        return "quick done"

    @tool
    async def slower() -> str:
        """End a few loop iterations later."""
        for _ in range(5):
            await asyncio.sleep(0)
        return "slower done"

    model = ScriptedModel(
        [tool_response(call("quick", {}, id="q"), call("slower", {}, id="s")), text_response("ok")]
    )
    agent = Agent(model, tools=[quick, slower], abort_grace_seconds=0)
    result = await agent.run("go")
    assert [r.text for r in results_of(result.messages)] == ["quick done", "slower done"]
    assert result.state is State.DONE and result.text == "ok"
