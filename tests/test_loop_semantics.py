"""Issue 20: loop semantics a peer's agent-loop test suite expects, one named test per case."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest
from loop_helpers import pydantic_message, results_of

from statemachine_agent import (
    AbortSignal,
    Agent,
    Deny,
    Event,
    MessageEnd,
    RunEnd,
    State,
    ToolCallInfo,
    ToolContext,
    ToolExecutionEnd,
    ToolExecutionStart,
    ToolExecutionUpdate,
    ToolResult,
    ToolResultMessage,
    TurnEnd,
    TurnInfo,
    UsageError,
    UserMessage,
    tool,
)
from statemachine_agent.models import ScriptedModel
from statemachine_agent.testing import assert_valid_history
from statemachine_agent.testing.steps import call, text_response, tool_response


def texts(messages: list[Any]) -> list[str]:
    return [m.text for m in messages]


# -- fault 1 / case 1: progress after a call ended is dropped -------------------------------------


async def test_progress_after_the_call_returned_is_dropped(
    caplog: pytest.LogCaptureFixture,
) -> None:
    late_sent = asyncio.Event()
    background: list[asyncio.Task[None]] = []

    @tool
    async def leaves_a_task(ctx: ToolContext) -> str:
        """Returns at once, leaving a task that reports progress 50 ms later."""

        async def late() -> None:
            await asyncio.sleep(0.05)
            ctx.progress("late")
            late_sent.set()

        ctx.progress("early")
        background.append(asyncio.ensure_future(late()))
        return "returned"

    events: list[Event] = []
    model = ScriptedModel([tool_response(call("leaves_a_task", id="p1")), text_response("Done.")])
    agent = Agent(model, tools=[leaves_a_task])
    agent.subscribe(events.append)
    with caplog.at_level(logging.DEBUG, logger="statemachine_agent"):
        result = await agent.run("Go")
        await late_sent.wait()
    assert result.state is State.DONE
    kinds = [
        e.type
        for e in events
        if getattr(e, "call_id", None) == "p1"
        or (isinstance(e, ToolExecutionStart | ToolExecutionEnd) and e.call.id == "p1")
    ]
    assert kinds == ["tool_execution_start", "tool_execution_update", "tool_execution_end"]
    updates = [e.update for e in events if isinstance(e, ToolExecutionUpdate)]
    assert updates == ["early"]
    assert events[-1].type == "run_end"
    assert any(
        rec.levelno == logging.DEBUG and "dropped a progress update" in rec.getMessage()
        for rec in caplog.records
    )


async def test_progress_after_the_call_ended_while_its_batch_runs_is_dropped() -> None:
    late_sent = asyncio.Event()
    background: list[asyncio.Task[None]] = []

    @tool
    async def quick(ctx: ToolContext) -> str:
        """Returns at once; its background task reports progress afterwards."""

        async def late() -> None:
            await asyncio.sleep(0)
            ctx.progress("late")
            late_sent.set()

        background.append(asyncio.ensure_future(late()))
        return "quick done"

    @tool
    async def slow() -> str:
        """Runs until quick's late progress was sent."""
        await late_sent.wait()
        return "slow done"

    events: list[Event] = []
    model = ScriptedModel(
        [tool_response(call("quick", id="q1"), call("slow", id="s1")), text_response("Done.")]
    )
    agent = Agent(model, tools=[quick, slow])
    agent.subscribe(events.append)
    result = await agent.run("Go")
    assert [r.text for r in results_of(result.messages)] == ["quick done", "slow done"]
    assert [e for e in events if isinstance(e, ToolExecutionUpdate)] == []


async def test_progress_from_a_thread_after_the_call_ended_is_dropped() -> None:
    import threading

    release = threading.Event()
    sent = threading.Event()

    @tool
    def threaded(ctx: ToolContext) -> str:
        """A sync tool leaving a thread that reports progress after it returned."""

        def later() -> None:
            release.wait(5)
            ctx.progress("late")
            sent.set()

        threading.Thread(target=later, daemon=True).start()
        return "returned"

    events: list[Event] = []
    model = ScriptedModel([tool_response(call("threaded", id="h1")), text_response("Done.")])
    agent = Agent(model, tools=[threaded])
    agent.subscribe(events.append)
    await agent.run("Go")
    release.set()
    await asyncio.to_thread(sent.wait, 5)
    await asyncio.sleep(0)  # let the loop run the delivery the thread scheduled
    await asyncio.sleep(0)
    assert [e for e in events if isinstance(e, ToolExecutionUpdate)] == []
    assert events[-1].type == "run_end"


# -- fault 2 / case 2: arguments a hook edits in place are validated again ------------------------


async def test_in_place_argument_edit_is_validated_again() -> None:
    seen: list[Any] = []

    @tool
    def greet(name: str) -> str:
        """Greet someone."""
        seen.append(name)
        return f"hello {name}"

    def before(info: ToolCallInfo) -> None:
        info.arguments["name"] = 123  # in place, returning None

    model = ScriptedModel(
        [tool_response(call("greet", {"name": "Ada"}, id="g1")), text_response("Done.")]
    )
    result = await Agent(model, tools=[greet], before_tool_call=before).run("Greet Ada")
    assert seen == []
    (r,) = results_of(result.messages)
    assert r.is_error
    assert r.text == (
        "Invalid arguments for tool 'greet' (1 error(s)):\n"
        f"- name: {pydantic_message(str, 123)}\n"
        'Arguments received: {"name": 123}\n'
        "Fix the arguments and call the tool again."
    )
    assert result.state is State.DONE


async def test_a_valid_in_place_edit_runs_with_the_validated_value() -> None:
    seen: list[Any] = []

    @tool
    def greet(name: str, times: int = 1) -> str:
        """Greet someone."""
        seen.append((name, times))
        return "ok"

    def before(info: ToolCallInfo) -> None:
        info.arguments["times"] = "3"  # a string pydantic turns into the int 3

    model = ScriptedModel(
        [tool_response(call("greet", {"name": "Ada"}, id="g1")), text_response("Done.")]
    )
    await Agent(model, tools=[greet], before_tool_call=before).run("Greet Ada")
    assert seen == [("Ada", 3)]


# -- gap 3 / case 3: input queued with an abort stays queued for the next run ---------------------


async def test_steering_queued_with_an_abort_reaches_the_next_run_after_its_prompt() -> None:
    @tool
    def step() -> str:
        """One step."""
        return "stepped"

    model = ScriptedModel([tool_response(call("step", id="a1")), text_response("Fresh.")])
    agent = Agent(model, tools=[step])
    fired: list[bool] = []

    def at_turn_end(event: Event) -> None:
        if isinstance(event, TurnEnd) and event.tool_results and not fired:
            fired.append(True)
            agent.steer("q1")
            agent.steer("q2")
            agent.abort("stop now")

    agent.subscribe(at_turn_end)
    aborted = await agent.run("first")
    assert (aborted.state, aborted.error) == (State.ABORTED, "stop now")
    assert len(model.requests) == 1  # nothing was sent after the abort
    assert "q1" not in texts(aborted.messages) and "q2" not in texts(aborted.messages)
    assert agent.has_queued_input()
    result = await agent.run("fresh")
    last_request = model.requests[-1].messages
    assert texts(last_request[-3:]) == ["fresh", "q1", "q2"]
    assert all(isinstance(m, UserMessage) for m in last_request[-3:])
    assert texts(result.messages).count("q1") == 1 and texts(result.messages).count("q2") == 1
    assert (result.state, result.text) == (State.DONE, "Fresh.")
    assert not agent.has_queued_input()
    assert_valid_history(result.messages)


async def test_abort_while_steering_is_delivered_keeps_the_rest_queued() -> None:
    @tool
    def step() -> str:
        """One step."""
        agent.steer("q1")
        agent.steer("q2")
        return "stepped"

    model = ScriptedModel(
        [tool_response(call("step", id="b1")), text_response("unused"), text_response("Fresh.")]
    )
    agent = Agent(model, tools=[step], tool_execution="sequential")

    def on_message(event: Event) -> None:
        if isinstance(event, MessageEnd) and getattr(event.message, "text", "") == "q1":
            agent.abort("stop while delivering")

    agent.subscribe(on_message)
    aborted = await agent.run("first")
    assert aborted.state is State.ABORTED
    assert texts(aborted.messages).count("q1") == 1 and "q2" not in texts(aborted.messages)
    assert agent.clear_queues() == ([UserMessage("q2")], [])
    assert not agent.has_queued_input()


# -- gap 4 / case 4: delivery modes and queue inspection ------------------------------------------


async def test_one_at_a_time_steering_reaches_three_consecutive_requests() -> None:
    @tool
    def work() -> str:
        """Queues three steering messages while it runs."""
        for text in ("s1", "s2", "s3"):
            agent.steer(text)
        return "worked"

    model = ScriptedModel(
        [tool_response(call("work", id="w1"))] + [text_response(f"answer {i}") for i in range(3)]
    )
    agent = Agent(model, tools=[work], steering_mode="one_at_a_time")
    result = await agent.run("Work")
    requests = [r.messages for r in model.requests]
    assert len(requests) == 4
    assert [m.text for m in requests[1][-2:]] == ["worked", "s1"]
    assert texts(requests[2][-2:]) == ["answer 0", "s2"]
    assert texts(requests[3][-2:]) == ["answer 1", "s3"]
    for n, steering in ((1, "s1"), (2, "s2"), (3, "s3")):
        user_texts = [m.text for m in requests[n] if isinstance(m, UserMessage)]
        assert user_texts == ["Work", *["s1", "s2", "s3"][:n]], steering
    assert (result.state, result.text) == (State.DONE, "answer 2")


async def test_all_steering_arrives_in_one_request() -> None:
    @tool
    def work() -> str:
        """Queues two steering messages."""
        agent.steer("s1")
        agent.steer("s2")
        return "worked"

    model = ScriptedModel([tool_response(call("work", id="w1")), text_response("ok")])
    agent = Agent(model, tools=[work])  # steering_mode="all" is the default
    await agent.run("Work")
    assert texts(model.requests[1].messages[-3:]) == ["worked", "s1", "s2"]


async def test_follow_up_modes_deliver_one_or_all_queued_follow_ups() -> None:
    for mode, expected in (("one_at_a_time", 3), ("all", 2)):
        model = ScriptedModel([text_response(f"r{i}") for i in range(3)])
        agent = Agent(model, follow_up_mode=mode)  # type: ignore[arg-type]
        agent.follow_up("f1")
        agent.follow_up("f2")
        result = await agent.run("Start")
        assert len(model.requests) == expected, mode
        assert texts(result.messages).count("f1") == 1 and texts(result.messages).count("f2") == 1


def test_has_queued_input_and_clear_queues() -> None:
    agent = Agent(ScriptedModel([]))
    assert agent.has_queued_input() is False
    assert agent.clear_queues() == ([], [])
    agent.steer("s1")
    agent.follow_up("f1")
    agent.steer("s2")
    assert agent.has_queued_input() is True
    assert agent.clear_queues() == ([UserMessage("s1"), UserMessage("s2")], [UserMessage("f1")])
    assert agent.has_queued_input() is False


def test_unknown_delivery_mode_is_refused() -> None:
    with pytest.raises(UsageError, match="steering_mode must be 'all' or 'one_at_a_time'"):
        Agent(ScriptedModel([]), steering_mode="some")  # type: ignore[arg-type]


# -- gap 5 / case 5: a terminating result ends the run done ---------------------------------------


@pytest.mark.parametrize("mode", ["parallel", "sequential"])
async def test_terminating_result_in_a_batch_of_three(mode: str) -> None:
    @tool
    def finish(answer: str) -> ToolResult:
        """Give the final answer."""
        return ToolResult(answer, terminate=True)

    @tool
    def lookup(key: str) -> str:
        """Look a key up."""
        return f"value of {key}"

    model = ScriptedModel(
        [
            tool_response(
                call("lookup", {"key": "a"}, id="l1"),
                call("finish", {"answer": "The answer is 42."}, id="f1"),
                call("lookup", {"key": "b"}, id="l2"),
            ),
            text_response("never requested"),
        ]
    )
    agent = Agent(model, tools=[finish, lookup], tool_execution=mode)  # type: ignore[arg-type]
    result = await agent.run("Answer")
    assert len(model.requests) == 1
    assert [(r.tool_call_id, r.is_error, r.text) for r in results_of(result.messages)] == [
        ("l1", False, "value of a"),
        ("f1", False, "The answer is 42."),
        ("l2", False, "value of b"),
    ]
    assert (result.state, result.text, result.error, result.turns) == (
        State.DONE,
        "The answer is 42.",
        None,
        1,
    )
    assert result.stop_reason == "tool_use"
    assert_valid_history(result.messages)


async def test_after_tool_call_hook_may_return_a_terminating_result() -> None:
    @tool
    def search(query: str) -> str:
        """Search."""
        return f"found {query}"

    def after(info: ToolCallInfo, result: ToolResultMessage) -> ToolResult | None:
        if "found" in result.text:
            return ToolResult(f"Stop: {result.text}", terminate=True)
        return None

    model = ScriptedModel(
        [tool_response(call("search", {"query": "x"}, id="s1")), text_response("never")]
    )
    result = await Agent(model, tools=[search], after_tool_call=after).run("Find")
    assert (result.state, result.text) == (State.DONE, "Stop: found x")
    assert len(model.requests) == 1


async def test_a_terminating_denial_wins_over_a_terminating_result() -> None:
    @tool
    def finish() -> ToolResult:
        """Finish."""
        return ToolResult("final", terminate=True)

    @tool
    def danger() -> str:
        """Dangerous."""
        return "ran"

    def before(info: ToolCallInfo) -> Deny | None:
        return Deny("no", terminate=True) if info.tool.name == "danger" else None

    model = ScriptedModel(
        [tool_response(call("finish", id="f1"), call("danger", id="d1")), text_response("x")]
    )
    result = await Agent(model, tools=[finish, danger], before_tool_call=before).run("Go")
    assert result.state is State.ABORTED
    assert result.error == "A tool call was denied and ended the run: no"


# -- gap 6: a sequential tool -------------------------------------------------------------------


async def test_sequential_tool_makes_its_batch_run_one_call_at_a_time() -> None:
    log: list[str] = []

    @tool(sequential=True)
    async def migrate(n: int) -> str:
        """Must not overlap with anything."""
        log.append(f"start migrate {n}")
        await asyncio.sleep(0.01)
        log.append(f"end migrate {n}")
        return "migrated"

    @tool
    async def read(n: int) -> str:
        """Reads."""
        log.append(f"start read {n}")
        await asyncio.sleep(0.01)
        log.append(f"end read {n}")
        return "read"

    model = ScriptedModel(
        [
            tool_response(
                call("read", {"n": 1}, id="r1"),
                call("migrate", {"n": 2}, id="m2"),
                call("read", {"n": 3}, id="r3"),
            ),
            text_response("ok"),
        ]
    )
    await Agent(model, tools=[migrate, read]).run("Go")
    assert log == [
        "start read 1",
        "end read 1",
        "start migrate 2",
        "end migrate 2",
        "start read 3",
        "end read 3",
    ]


async def test_a_batch_without_a_sequential_tool_still_runs_in_parallel() -> None:
    both = asyncio.Barrier(2)

    @tool
    async def meet() -> str:
        """Both calls must run at once to pass the barrier."""
        await asyncio.wait_for(both.wait(), 5)
        return "met"

    model = ScriptedModel(
        [tool_response(call("meet", id="a"), call("meet", id="b")), text_response("ok")]
    )
    result = await Agent(model, tools=[meet]).run("Go")
    assert [r.text for r in results_of(result.messages)] == ["met", "met"]


# -- gap 7: hooks see the abort signal ----------------------------------------------------------


async def test_before_tool_call_hook_sees_the_abort_signal_and_stops_waiting() -> None:
    asked = asyncio.Event()
    signals: list[AbortSignal] = []

    @tool
    def write() -> str:
        """Writes."""
        return "written"

    async def ask_permission(info: ToolCallInfo) -> Deny:
        signals.append(info.signal)
        asked.set()
        await info.signal.wait()  # a person would answer here; the abort ends the wait
        return Deny("the run was aborted while asking")

    model = ScriptedModel([tool_response(call("write", id="w1")), text_response("x")])
    agent = Agent(model, tools=[write], before_tool_call=ask_permission)
    task = asyncio.ensure_future(agent.run("Write"))
    await asyncio.wait_for(asked.wait(), 5)
    agent.abort("the user left")
    result = await asyncio.wait_for(task, 5)
    assert result.state is State.ABORTED
    assert signals[0].aborted and signals[0].reason == "the user left"
    (r,) = results_of(result.messages)
    assert r.text == "Denied: the run was aborted while asking"


async def test_should_continue_and_transform_context_see_the_signal() -> None:
    seen: list[Any] = []

    @tool
    def step() -> str:
        """A step."""
        return "ok"

    def should_continue(info: TurnInfo) -> bool:
        seen.append(("should_continue", isinstance(info.signal, AbortSignal), info.signal.aborted))
        return True

    def transform_context(messages: list[Any], signal: AbortSignal) -> list[Any]:
        seen.append(("transform_context", isinstance(signal, AbortSignal), signal.aborted))
        return messages

    model = ScriptedModel([tool_response(call("step", id="s1")), text_response("done")])
    agent = Agent(
        model,
        tools=[step],
        should_continue=should_continue,
        transform_context=transform_context,
    )
    result = await agent.run("Go")
    assert result.state is State.DONE
    assert seen == [
        ("transform_context", True, False),
        ("should_continue", True, False),
        ("transform_context", True, False),
    ]


async def test_run_end_is_the_last_event_of_a_run() -> None:
    events: list[Event] = []
    model = ScriptedModel([text_response("hi")])
    agent = Agent(model)
    agent.subscribe(events.append)
    await agent.run("Hello")
    assert isinstance(events[-1], RunEnd)


# -- continuing a cut answer ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("stop", "asked", "options"),
    [
        # max_turns right after a max_tokens cut: the error says "call run() again without a
        # prompt and a higher limit", which must then continue.
        ("max_tokens", "CONTINUE_PROMPT", {"max_turns": 1}),
        ("max_tokens", "CONTINUE_PROMPT", {"max_tokens_policy": "stop"}),
        # A context-window stop with compaction off: its error says to make room and "run()
        # again without a prompt".
        ("model_context_window_exceeded", "CONTINUE_AFTER_WINDOW", {}),
    ],
)
async def test_run_without_a_prompt_continues_an_answer_that_was_cut(
    stop: str, asked: str, options: dict[str, Any]
) -> None:
    from statemachine_agent._compacting import CONTINUE_AFTER_WINDOW
    from statemachine_agent._messages import CONTINUE_PROMPT

    texts = {"CONTINUE_PROMPT": CONTINUE_PROMPT, "CONTINUE_AFTER_WINDOW": CONTINUE_AFTER_WINDOW}
    model = ScriptedModel(
        [text_response("the first half", stop_reason=stop), text_response(" and the rest")]
    )
    agent = Agent(model, **options)
    first = await agent.run("write the report")
    assert first.text == "the first half" and len(model.requests) == 1
    second = await agent.run(max_turns=5)  # no prompt: continue
    assert second.state is State.DONE and second.error is None
    assert second.text == " and the rest"
    sent = model.requests[1].messages
    assert [m.role for m in sent] == ["user", "assistant", "user"]
    assert sent[1].text == "the first half"  # the cut answer goes back as it was
    assert sent[2] == UserMessage(texts[asked])  # then the request to go on
    assert [m.role for m in second.new_messages] == ["user", "assistant"]
    assert_valid_history(agent.messages)


async def test_run_without_a_prompt_still_refuses_after_a_complete_answer() -> None:
    agent = Agent(ScriptedModel([text_response("done")]))
    await agent.run("go")
    with pytest.raises(UsageError, match="nothing to continue"):
        await agent.run()
