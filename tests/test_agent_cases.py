"""The cases handed over by issue 2 ("Core loop engine"), one named test each."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from statemachine_agent import (
    Agent,
    AssistantMessage,
    Deny,
    State,
    ToolCallInfo,
    ToolExecutionEnd,
    ToolExecutionStart,
    ToolResultMessage,
    TurnStart,
    UserMessage,
    tool,
)
from statemachine_agent.models import ScriptedModel
from statemachine_agent.testing import assert_valid_history
from statemachine_agent.testing.steps import call, text_response, tool_response

INTERRUPTED = (
    "Interrupted while running: the run was aborted. The call may have partly completed; "
    "check its effects before retrying."
)
NOT_RUN = "Not run: the run was aborted before this call started."


def results_of(messages: list) -> list[ToolResultMessage]:
    return [m for m in messages if isinstance(m, ToolResultMessage)]


def kinds(messages: list) -> list[str]:
    return [m.role for m in messages]


async def test_case01_checkpoint_script() -> None:
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
    assert kinds(result.messages) == ["user", "assistant", "tool_result", "assistant"]
    assert result.messages[0].text == "List the files in the workspace"
    assert result.messages[1].tool_calls[0].name == "list_files"
    assert result.messages[2].text == "README.md, src/index.ts"
    assert result.text == "The workspace contains README.md and src/index.ts."
    assert_valid_history(result.messages)


async def test_case02_end_turn_with_tool_call_still_runs_the_tool() -> None:
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


async def test_case03_parallel_results_in_declaration_order_events_in_completion_order() -> None:
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


async def test_case04_tool_exception_becomes_error_result_and_run_reaches_done() -> None:
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


async def test_case05_unknown_tool_names_available_ones_and_order_is_kept() -> None:
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
async def test_case06_invalid_or_non_object_arguments_never_run(raw: str, expect: str) -> None:
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


async def test_case06_raw_argument_text_is_capped() -> None:
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


async def test_case07_denied_call_never_runs_and_end_event_fires() -> None:
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


async def test_case07_terminating_denial_answers_every_call_and_aborts() -> None:
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


async def test_case08_max_turns_then_continue_with_higher_limit() -> None:
    runs: list[str] = []

    @tool
    def bash(command: str) -> str:
        """Run a command."""
        runs.append(command)
        return "noop"

    steps = [tool_response(call("bash", {"command": "echo noop"}, id=f"b{i}")) for i in range(20)]
    model = ScriptedModel(steps)
    agent = Agent(model, tools=[bash], max_turns=5)
    result = await agent.run("loop forever")
    assert model.calls == 5
    assert result.state is State.MAX_TURNS
    assert result.turns == 5
    assert len(results_of(result.messages)) == 5  # every call answered
    error = result.error or ""
    assert "the max_turns limit (5) was reached" in error  # the limit
    assert "Stopped after 5 turn(s)" in error  # turns used
    assert "tool batch (bash)" in error  # the last action
    assert "run() again without a prompt" in error  # how to continue
    assert_valid_history(result.messages)

    again = await agent.run(max_turns=7)
    assert model.calls == 7
    assert again.state is State.MAX_TURNS
    assert len(runs) == 7  # none of the first five re-ran
    ids = [r.tool_call_id for r in results_of(again.messages)]
    assert ids == [f"b{i}" for i in range(7)]
    assert_valid_history(again.messages)


async def test_case09_abort_while_first_of_three_calls_sleeps() -> None:
    # "interrupted, not run, not run" means the later calls had not started: sequential execution
    # (in parallel mode they would have finished long before the abort).
    first_started = asyncio.Event()

    @tool
    async def slow(seconds: float) -> str:
        """Sleep."""
        first_started.set()
        await asyncio.sleep(seconds)
        return "slept"

    model = ScriptedModel(
        [
            tool_response(
                call("slow", {"seconds": 30}, id="s1"),
                call("slow", {"seconds": 0}, id="s2"),
                call("slow", {"seconds": 0}, id="s3"),
            ),
            text_response("after"),
        ]
    )
    grace = 0.5
    agent = Agent(model, tools=[slow], tool_execution="sequential", abort_grace_seconds=grace)
    task = asyncio.create_task(agent.run("go"))
    await first_started.wait()
    started = time.perf_counter()
    agent.abort("user pressed stop")
    result = await task
    # The one timing bound kept: the abort must not wait for the 30 s call, only for the 0.5 s
    # grace period; 10 s leaves room for a loaded machine and is still far from 30 s.
    assert time.perf_counter() - started < 10
    assert result.state is State.ABORTED and result.error == "user pressed stop"
    texts = [r.text for r in results_of(result.messages)]
    assert texts == [INTERRUPTED, NOT_RUN, NOT_RUN]
    assert_valid_history(result.messages)
    follow = await agent.run("what happened?")
    assert follow.state is State.DONE
    assert_valid_history(model.requests[-1].messages, request=True)


async def test_case10_cancelling_the_run_task_records_and_reraises() -> None:
    started = asyncio.Event()

    @tool
    async def slow() -> str:
        """Sleep."""
        started.set()
        await asyncio.sleep(30)
        return "slept"

    model = ScriptedModel([tool_response(call("slow", {}, id="s")), text_response("x")])
    agent = Agent(model, tools=[slow])
    task = asyncio.create_task(agent.run("go"))
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert agent.state is State.ABORTED
    (res,) = results_of(agent.messages)
    assert res.tool_call_id == "s" and res.is_error and res.text == INTERRUPTED
    assert kinds(agent.messages) == ["user", "assistant", "tool_result"] and model.calls == 1
    assert_valid_history(agent.messages)


async def test_case11_write_queue_serialises_edits_to_one_file(tmp_path: Path) -> None:
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


async def test_case12_abort_during_delayed_response_keeps_no_tool_call() -> None:
    model = ScriptedModel(
        [tool_response(call("anything", {}, id="late"), text="Thinking", delay_seconds=30)]
    )
    agent = Agent(model)
    requesting = asyncio.Event()
    agent.subscribe(lambda e: requesting.set() if isinstance(e, TurnStart) else None)
    task = asyncio.create_task(agent.run("go"))
    await requesting.wait()
    started = time.perf_counter()
    agent.abort()
    result = await task
    # Kept timing bound: the abort stops the request at once instead of waiting for the 30 s
    # response; 10 s is generous for a loaded machine and still far from 30 s.
    assert time.perf_counter() - started < 10
    assert result.state is State.ABORTED and result.error == "aborted by the caller"
    assert kinds(result.messages) == ["user", "assistant"]
    assert all(not m.tool_calls for m in result.messages if isinstance(m, AssistantMessage))
    assert_valid_history(result.messages)


async def test_case13_steering_after_batch_and_follow_up_when_model_would_stop() -> None:
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
