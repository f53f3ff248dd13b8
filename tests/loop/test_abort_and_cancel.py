"""Abort and cancellation: an abort ends the run ``aborted`` with every call answered and no
further request; cancelling the run's task is recorded, then re-raised; a tool's, hook's or model's
own `asyncio.CancelledError` is an ordinary failure; the abort signal's scopes."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from typing import Any

import pytest
from loop_helpers import NOT_RUN, results_of, roles

from statemachine_agent import (
    Agent,
    AssistantMessage,
    Event,
    ModelRetry,
    RunEnd,
    State,
    StateChanged,
    StopReason,
    ToolCallBlock,
    ToolCallInfo,
    ToolContext,
    ToolExecutionEnd,
    ToolExecutionStart,
    ToolExecutionUpdate,
    ToolResultMessage,
    TurnStart,
    UserMessage,
    tool,
)
from statemachine_agent.models import FunctionModel, ScriptedModel
from statemachine_agent.testing import (
    FakeMessagesAPI,
    assert_valid_history,
)
from statemachine_agent.testing.steps import call, error_step, text_response, tool_response


def result_texts(messages: list[Any]) -> list[tuple[str, str, bool]]:
    return [
        (m.tool_call_id, m.text, m.is_error) for m in messages if isinstance(m, ToolResultMessage)
    ]


def tool_events(events: list[Event]) -> list[tuple[str, str]]:
    return [
        (e.type, e.call.id) for e in events if isinstance(e, ToolExecutionStart | ToolExecutionEnd)
    ]


def states(events: list[Event]) -> list[tuple[str, str]]:
    return [(e.source, e.dest) for e in events if isinstance(e, StateChanged)]


@pytest.mark.parametrize("mode", ["parallel", "sequential"])  # one call: both run it inline
async def test_a_tool_swallowing_the_cancellation_in_an_inline_batch_still_ends_aborted(
    mode: str,
) -> None:
    started = asyncio.Event()

    @tool
    async def stubborn() -> str:
        """Wait, and swallow a cancellation."""
        started.set()
        try:
            await asyncio.Event().wait()  # never set: only the cancellation ends it
        except asyncio.CancelledError:
            return "cleaned up"
        return "finished"

    model = ScriptedModel([tool_response(call("stubborn", id="s")), text_response("next turn")])
    agent = Agent(model, tools=[stubborn], tool_execution=mode)  # type: ignore[arg-type]
    events: list[Event] = []
    agent.subscribe(events.append)
    task = asyncio.create_task(agent.run("go"))
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert model.calls == 1, "a second request was sent after the task was cancelled"
    assert roles(agent.messages) == ["user", "assistant", "tool_result"]
    assert agent.state is State.ABORTED
    (res,) = [m for m in agent.messages if isinstance(m, ToolResultMessage)]
    assert res.tool_call_id == "s"
    assert tool_events(events) == [("tool_execution_start", "s"), ("tool_execution_end", "s")]
    assert states(events)[-1] == ("executing_tools", "aborted")
    (end,) = [e for e in events if isinstance(e, RunEnd)]
    assert end.result.state is State.ABORTED
    assert_valid_history(agent.messages)


async def test_a_call_abandoned_after_the_abort_that_ends_cancelled_later_reports_no_error() -> (
    None
):
    # A hook ignoring its first cancellation is abandoned (the run ends aborted); when it ends
    # later through a cancellation, nothing is left for the event loop to report (no "Exception
    # in callback", no "Task exception was never retrieved").
    entered, release = asyncio.Event(), asyncio.Event()
    hook_tasks: list[asyncio.Task[Any]] = []

    @tool
    def work() -> str:
        """Work."""
        return "worked"

    async def before(info: ToolCallInfo) -> None:
        hook_tasks.append(asyncio.current_task())  # type: ignore[arg-type]
        entered.set()
        with contextlib.suppress(asyncio.CancelledError):  # the first one swallowed
            await asyncio.Event().wait()
        await release.wait()
        raise asyncio.CancelledError  # then ends cancelled after all

    loop = asyncio.get_running_loop()
    reported: list[dict[str, Any]] = []
    loop.set_exception_handler(lambda _loop, context: reported.append(context))
    try:
        model = ScriptedModel([tool_response(call("work", id="w"))])
        agent = Agent(model, tools=[work], before_tool_call=before, abort_grace_seconds=0)
        task = asyncio.create_task(agent.run("go"))
        await entered.wait()
        agent.abort("stop")
        result = await task
        assert (result.state, result.error) == (State.ABORTED, "stop")
        assert [(r.tool_call_id, r.is_error) for r in results_of(result.messages)] == [("w", True)]
        release.set()
        (hook_task,) = hook_tasks
        await asyncio.wait([hook_task])  # its done callbacks ran before this wait's own
        assert hook_task.cancelled()
        assert reported == []
    finally:
        loop.set_exception_handler(None)


@pytest.mark.parametrize("mode", ["parallel", "sequential"])  # one call: run one at a time
async def test_a_before_hook_swallowing_its_cancellation_cannot_keep_an_aborted_run_open(
    mode: str,
) -> None:
    # A sync tool in a worker thread runs in the batch's own task only when no hook is set: with
    # a before_tool_call hook, the call gets a task of its own, so a hook that ignores its
    # cancellation is abandoned after the grace period and the run still ends aborted.
    entered, release = asyncio.Event(), asyncio.Event()
    ran: list[str] = []

    @tool
    def work() -> str:
        """Work (a sync tool, run in a worker thread)."""
        ran.append("work")
        return "worked"

    async def before(info: ToolCallInfo) -> None:
        entered.set()
        while not release.is_set():
            with contextlib.suppress(asyncio.CancelledError):  # swallowed: stays in the hook
                await release.wait()

    model = ScriptedModel([tool_response(call("work", id="w")), text_response("never requested")])
    agent = Agent(
        model,
        tools=[work],
        tool_execution=mode,  # type: ignore[arg-type]
        before_tool_call=before,
        abort_grace_seconds=0,
    )
    task = asyncio.create_task(agent.run("go"))
    await entered.wait()
    agent.abort("stop")
    try:
        result = await asyncio.wait_for(asyncio.shield(task), 60)  # (only ends a hung wait)
    finally:
        release.set()  # let the abandoned hook end
    assert (result.state, result.error) == (State.ABORTED, "stop")
    assert ran == [] and model.calls == 1
    assert [(m.tool_call_id, m.is_error) for m in results_of(result.messages)] == [("w", True)]
    assert_valid_history(result.messages)


@pytest.mark.parametrize("mode", ["parallel", "sequential"])
async def test_a_hook_that_aborts_then_sleeps_runs_no_tool(mode: str) -> None:
    ran: list[str] = []

    @tool
    async def work(n: int) -> str:
        """Work."""
        ran.append(str(n))
        return f"worked {n}"

    async def before(info: ToolCallInfo) -> None:
        agent.abort("stopped by the permission hook")
        await asyncio.sleep(0.05)  # the hook goes on for a while after aborting (no race)

    model = ScriptedModel(
        [
            tool_response(call("work", {"n": 1}, id="w1"), call("work", {"n": 2}, id="w2")),
            text_response("never requested"),
        ]
    )
    agent = Agent(
        model,
        tools=[work],
        tool_execution=mode,  # type: ignore[arg-type]
        before_tool_call=before,
        abort_grace_seconds=5,
    )
    result = await agent.run("go")
    assert ran == []
    assert result_texts(result.messages) == [("w1", NOT_RUN, True), ("w2", NOT_RUN, True)]
    assert result.state is State.ABORTED and model.calls == 1
    assert result.error == "stopped by the permission hook"
    assert_valid_history(result.messages)


async def test_two_cooperative_parallel_tools_aborted_keep_their_cleanup_results() -> None:
    started = {"a": asyncio.Event(), "b": asyncio.Event()}

    @tool
    async def worker(name: str, ctx: ToolContext) -> str:
        """Work until aborted, then clean up."""
        started[name].set()
        await ctx.signal.wait()
        await asyncio.sleep(0)  # clean-up takes a step after the abort
        await asyncio.sleep(0.01)
        return f"{name}: cleaned up"

    model = ScriptedModel(
        [
            tool_response(
                call("worker", {"name": "a"}, id="a"), call("worker", {"name": "b"}, id="b")
            ),
            text_response("never requested"),
        ]
    )
    agent = Agent(model, tools=[worker], abort_grace_seconds=5)
    events: list[Event] = []
    agent.subscribe(events.append)
    task = asyncio.create_task(agent.run("go"))
    await started["a"].wait()
    await started["b"].wait()
    agent.abort("user pressed stop")
    result = await task
    assert result_texts(result.messages) == [
        ("a", "a: cleaned up", False),
        ("b", "b: cleaned up", False),
    ]
    assert result.state is State.ABORTED and result.error == "user pressed stop"
    assert model.calls == 1
    assert sorted(tool_events(events)) == [
        ("tool_execution_end", "a"),
        ("tool_execution_end", "b"),
        ("tool_execution_start", "a"),
        ("tool_execution_start", "b"),
    ]
    assert_valid_history(result.messages)


class SwallowingModel:
    """A model whose stream catches the task's cancellation and answers anyway."""

    name = "swallowing"

    def __init__(self) -> None:
        self.calls = 0
        self.streaming = asyncio.Event()

    def stream(self, request: Any) -> Any:
        self.calls += 1
        return self._stream()

    async def _stream(self) -> Any:
        from statemachine_agent.models import ResponseComplete

        self.streaming.set()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.Event().wait()  # only the cancellation ends this wait
        yield ResponseComplete(
            AssistantMessage.model_validate(
                {"content": [{"type": "text", "text": "answer anyway"}], "stop_reason": "end_turn"}
            )
        )


async def test_a_model_swallowing_the_cancellation_still_ends_the_run_aborted() -> None:
    model = SwallowingModel()
    agent = Agent(model)  # type: ignore[arg-type]
    events: list[Event] = []
    agent.subscribe(events.append)
    task = asyncio.create_task(agent.run("go"))
    await model.streaming.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert model.calls == 1
    assert agent.state is State.ABORTED
    assert roles(agent.messages) == ["user", "assistant"]
    last = agent.messages[-1]
    assert isinstance(last, AssistantMessage) and last.stop_reason == StopReason.ABORTED
    assert states(events) == [("idle", "awaiting_model"), ("awaiting_model", "aborted")]
    (end,) = [e for e in events if isinstance(e, RunEnd)]
    assert end.result.state is State.ABORTED
    assert_valid_history(agent.messages)


INTERRUPTED = (
    "Interrupted while running: the run was aborted. The call may have partly completed; "
    "check its effects before retrying."
)


async def test_an_abort_while_the_first_of_three_calls_sleeps_answers_all_three() -> None:
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


async def test_cancelling_the_run_task_records_the_run_and_reraises() -> None:
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
    assert roles(agent.messages) == ["user", "assistant", "tool_result"] and model.calls == 1
    assert_valid_history(agent.messages)


async def test_an_abort_during_a_delayed_response_keeps_no_tool_call() -> None:
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
    assert roles(result.messages) == ["user", "assistant"]
    assert all(not m.tool_calls for m in result.messages if isinstance(m, AssistantMessage))
    assert_valid_history(result.messages)


OWN_CANCELLATION = (
    "CancelledError: the tool raised asyncio.CancelledError itself (the run was not aborted or "
    "cancelled); the call may have partly completed."
)


@pytest.mark.parametrize("mode", ["parallel", "sequential"])
async def test_a_tool_raising_cancelled_error_itself_is_an_error_result(mode: str) -> None:
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


async def _cancelled_during_two_waiting_calls(
    mode: str,
) -> tuple[Agent, ScriptedModel, list[str]]:
    """A run whose batch of two ``waits`` calls (each waiting until cancelled) is cancelled once
    the first call has started; the re-raised `asyncio.CancelledError` is checked here. Returns
    the agent, its model and an entry ``"cancelled"`` for each call that saw its cancellation."""
    started = asyncio.Event()
    outcome: list[str] = []

    @tool
    async def waits() -> str:
        """Waits until cancelled."""
        started.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            outcome.append("cancelled")
            raise
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
    return agent, model, outcome


@pytest.mark.parametrize("mode", ["parallel", "sequential"])
async def test_cancelling_the_run_during_a_batch_answers_each_call_by_mode_and_reraises(
    mode: str,
) -> None:
    agent, model, _ = await _cancelled_during_two_waiting_calls(mode)
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
async def test_a_keyboard_interrupt_in_a_tool_is_recorded_then_propagates(mode: str) -> None:
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


async def test_an_abort_answers_the_calls_and_the_next_request_carries_them() -> None:
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


async def test_hooks_raising_their_own_cancelled_error_fail_like_any_exception() -> None:
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


async def test_a_model_raising_its_own_cancelled_error_fails_the_run() -> None:
    from statemachine_agent.models import FunctionModel

    def model(messages: Any, request: Any) -> str:
        raise asyncio.CancelledError

    result = await Agent(FunctionModel(model), model_retries=0).run("Hi")
    assert (result.state, result.error) == (State.FAILED, "Model request failed: CancelledError: ")


ABORTED_BEFORE_THE_REQUEST = [
    "run_start",
    "message_end",  # the prompt
    "state_changed",
    "turn_start",
    "state_changed",
    "turn_end",
    "run_end",
]


def transitions(events: list[Event]) -> list[tuple[str, str]]:
    return [(e.source, e.dest) for e in events if isinstance(e, StateChanged)]


def tool_texts(messages: list[Any]) -> list[str]:
    return [m.text for m in messages if isinstance(m, ToolResultMessage)]


# Found by a review: abort() that lands after the top-of-loop check but before the stream suspends is lost
async def test_an_abort_during_transform_context_sends_no_request():
    model = ScriptedModel([text_response("hello")])

    async def transform(msgs):
        agent.abort("stop")  # e.g. user presses Esc while a slow compaction hook runs
        await asyncio.sleep(0.01)
        return msgs

    agent = Agent(model, transform_context=transform)
    events: list[Event] = []
    agent.subscribe(events.append)
    result = await agent.run("hi")
    assert model.calls == 0, "a request was sent after abort()"
    assert result.state is State.ABORTED and result.error == "stop"
    assert [m.role for m in result.messages] == ["user"]
    assert [e.type for e in events] == ABORTED_BEFORE_THE_REQUEST
    assert transitions(events) == [("idle", "awaiting_model"), ("awaiting_model", "aborted")]


async def test_an_abort_from_a_turn_start_subscriber_sends_no_request():
    model = ScriptedModel([text_response("hello")])
    agent = Agent(model)
    agent.subscribe(lambda e: isinstance(e, TurnStart) and agent.abort("x"))
    events: list[Event] = []
    agent.subscribe(events.append)
    result = await agent.run("hi")
    assert model.calls == 0, "a request was sent after abort()"
    assert result.state is State.ABORTED and result.error == "x"
    assert [m.role for m in result.messages] == ["user"]
    assert [e.type for e in events] == ABORTED_BEFORE_THE_REQUEST
    assert transitions(events) == [("idle", "awaiting_model"), ("awaiting_model", "aborted")]


# Found by a review: unexpected exception escaping the batch / request leaves the machine mid-run forever
class Boom(BaseException):
    pass


async def test_a_base_exception_from_a_tool_ends_the_run_failed_with_the_call_answered():
    @tool
    async def bad() -> str:
        raise Boom()

    model = ScriptedModel([tool_response(call("bad", id="a")), text_response("x")])
    agent = Agent(model, tools=[bad])
    events: list[Event] = []
    agent.subscribe(events.append)
    with pytest.raises(Boom):
        await agent.run("hi")
    # A bug escaping a tool batch ends the run failed (``fail`` leaves every active state), with
    # the call answered, then propagates.
    assert agent.state is State.FAILED and not agent.is_running
    assert [m.role for m in agent.messages] == ["user", "assistant", "tool_result"]
    assert tool_texts(agent.messages) == [INTERRUPTED]
    assert model.calls == 1
    (end,) = [e for e in events if isinstance(e, RunEnd)]
    assert end.result.state is State.FAILED and end.result.error == "Boom: "
    assert transitions(events)[-1] == ("executing_tools", "failed")


def _call(i: int, name: str = "noop") -> AssistantMessage:
    return AssistantMessage(
        content=[ToolCallBlock(id=f"call_{i}", name=name, input={})], stop_reason="tool_use"
    )


async def noop() -> str:
    """Do nothing."""
    return "ok"


async def test_abort_in_the_pass_a_response_completes_keeps_the_response() -> None:
    agent = Agent(ScriptedModel([_call(1)]), tools=[noop])
    agent.subscribe(lambda e: agent.abort("stop") if e.type == "message_start" else None)
    result = await agent.run("go")
    assert result.state is State.ABORTED
    assert [m.role for m in result.messages] == ["user", "assistant", "tool_result"]
    assert result.messages[1].stop_reason == StopReason.TOOL_USE
    assert result.messages[2].is_error and result.messages[2].text.startswith("Not run")


async def test_abort_during_a_slow_request_records_an_aborted_response() -> None:
    started = asyncio.Event()

    async def slow(_messages: Any, _request: Any) -> str:
        started.set()
        await asyncio.sleep(30)
        return "late"

    agent = Agent(FunctionModel(slow))
    task = asyncio.ensure_future(agent.run("go"))
    await started.wait()
    agent.abort("stop")
    result = await task
    assert result.state is State.ABORTED and result.error == "stop"
    assert result.messages[-1].stop_reason == StopReason.ABORTED


async def test_a_turn_whose_request_was_aborted_or_failed_is_not_counted() -> None:
    """``turns`` counts completed turns: a turn whose response never came (its request aborted,
    or failed) is not one, in the result and the turn's end alike."""
    second_sent = asyncio.Event()

    async def answer(messages: list[Any], _request: Any) -> AssistantMessage:
        if len(messages) == 1:
            return _call(1)
        second_sent.set()
        await asyncio.Event().wait()  # never answers: the test aborts it
        raise AssertionError("unreachable")

    agent = Agent(FunctionModel(answer), tools=[noop])
    ends: list[tuple[int, bool]] = []
    agent.subscribe(
        lambda e: ends.append((e.turn, e.message is not None)) if e.type == "turn_end" else None
    )
    task = asyncio.ensure_future(agent.run("go"))
    await second_sent.wait()
    agent.abort("stop")
    result = await task
    assert result.state is State.ABORTED and result.turns == 1
    assert ends == [(1, True), (2, False)]

    failing = Agent(
        ScriptedModel([_call(1), error_step("authentication_error", "no")]), tools=[noop]
    )
    failed = await failing.run("go")
    assert failed.state is State.FAILED and failed.turns == 1


async def test_cancelling_the_run_during_a_request_records_the_partial_response() -> None:
    started = asyncio.Event()

    async def slow(_messages: Any, _request: Any) -> str:
        started.set()
        await asyncio.sleep(30)
        return "late"

    agent = Agent(FunctionModel(slow))
    task = asyncio.ensure_future(agent.run("go"))
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert agent.state is State.ABORTED
    last = agent.messages[-1]
    assert isinstance(last, AssistantMessage) and last.stop_reason == StopReason.ABORTED


async def test_abort_waiters_do_not_pile_up_over_a_run() -> None:
    script: list[Any] = [_call(i) for i in range(30)]
    script.append({"content": [{"type": "text", "text": "done"}], "stop_reason": "end_turn"})
    agent = Agent(ScriptedModel(script, record_requests=False), tools=[noop], max_turns=40)
    coro = agent.run("go")
    run = coro.run  # the agent holds its run only while it is in progress
    result = await coro
    assert result.state is State.DONE and result.turns == 31
    assert not run.signal._callbacks  # abort waiters are callbacks too


async def test_an_abort_set_inside_a_scope_that_then_ends_without_waiting_leaves_no_cancellation() -> (
    None
):
    """The abort schedules the cancellation (as ``asyncio.timeout`` does, on the loop's next
    pass): a block that sets the signal and ends without awaiting is not aborted, and nothing is
    left to cancel the task later (a cancellation asked of the task at once would be)."""
    from statemachine_agent import AbortSignal
    from statemachine_agent._cancel import abort_scope

    signal = AbortSignal()
    with abort_scope(signal) as scope:
        signal.set("stop")
    assert not scope.aborted
    await asyncio.sleep(0)  # would raise CancelledError if a cancellation were left behind
    await asyncio.sleep(0)
    task = asyncio.current_task()
    assert task is not None and task.cancelling() == 0


async def test_a_scope_aborted_while_waiting_reports_it_and_takes_its_cancellation_back() -> None:
    from statemachine_agent import AbortSignal
    from statemachine_agent._cancel import abort_scope

    signal = AbortSignal()
    loop = asyncio.get_running_loop()
    loop.call_soon(signal.set, "stop")
    with abort_scope(signal) as scope:
        await asyncio.sleep(30)
    assert scope.aborted
    task = asyncio.current_task()
    assert task is not None and task.cancelling() == 0
    assert signal._callbacks == {}  # the scope's callback went with it


async def test_an_abort_with_a_grace_period_lets_the_block_finish_within_it() -> None:
    from statemachine_agent import AbortSignal
    from statemachine_agent._cancel import abort_scope

    signal = AbortSignal()
    finished = asyncio.Event()
    with abort_scope(signal, grace_seconds=30) as scope:
        signal.set("stop")
        await asyncio.sleep(0.01)  # shorter than the grace period: not cancelled
        finished.set()
    assert finished.is_set() and not scope.aborted
    with abort_scope(signal, grace_seconds=0.01) as scope:  # already aborted when entered
        await asyncio.sleep(30)
    assert scope.aborted


async def test_a_cancellation_of_the_task_is_not_taken_for_an_abort() -> None:
    from statemachine_agent import AbortSignal
    from statemachine_agent._cancel import abort_scope

    signal = AbortSignal()
    entered = asyncio.Event()

    async def body() -> None:
        with abort_scope(signal):
            entered.set()
            await asyncio.sleep(30)

    task = asyncio.ensure_future(body())
    await entered.wait()
    task.cancel()
    signal.set("stop")  # both: the caller's cancellation wins and propagates
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_arm_makes_a_timeout_scope_expire_on_abort_and_disarms() -> None:
    """`AbortSignal.arm` (public; the engine's own scope no longer uses it) expires an
    ``asyncio.timeout(None)`` after the abort, and its returned function disarms it."""
    from statemachine_agent import AbortSignal

    signal = AbortSignal()
    asyncio.get_running_loop().call_soon(signal.set, "stop")
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(None) as scope:
            signal.arm(scope)
            await asyncio.sleep(30)
    assert scope.expired()
    other = AbortSignal()
    async with asyncio.timeout(None) as kept:
        disarm = other.arm(kept)
        disarm()
        other.set("too late")
        for _ in range(3):  # an armed scope would expire on the loop's next pass
            await asyncio.sleep(0)
    assert not kept.expired()


@tool
async def waits_then_stops(ctx: ToolContext) -> str:
    """An async tool that stops cooperatively: it waits for the abort, then raises on it."""
    ctx.progress("waiting")  # the test aborts on this update: the call has started
    await ctx.signal.wait()
    ctx.signal.raise_if_aborted()
    return "finished"


@tool
def blocks_then_stops(ctx: ToolContext) -> str:
    """A sync tool (a worker thread) that stops cooperatively when the run is aborted."""
    aborted = threading.Event()
    ctx.signal.add_callback(aborted.set)
    ctx.progress("waiting")
    aborted.wait()
    ctx.signal.raise_if_aborted()
    return "finished"


@pytest.mark.parametrize(
    "names",
    [
        ["waits_then_stops"],  # a batch of one: run inline under the abort scope
        ["blocks_then_stops"],
        ["waits_then_stops", "blocks_then_stops"],  # parallel: tasks, the grace in _watch
    ],
)
@pytest.mark.parametrize("mode", ["parallel", "sequential"])
async def test_a_tool_stopping_through_raise_if_aborted_is_answered_interrupted_not_as_its_own_error(
    names: list[str], mode: str, caplog: pytest.LogCaptureFixture
) -> None:
    script = [
        tool_response(*(call(n, id=f"c{i}") for i, n in enumerate(names))),
        text_response("never requested"),
    ]
    agent = Agent(
        ScriptedModel(script),
        tools=[waits_then_stops, blocks_then_stops],
        tool_execution=mode,  # type: ignore[arg-type]
        abort_grace_seconds=60.0,  # a realistic grace: the tools stop well within it
    )
    waiting: set[str] = set()

    def abort_once_all_wait(event: Event) -> None:
        if isinstance(event, ToolExecutionUpdate):
            waiting.add(event.call_id)
            if mode == "sequential" or len(waiting) == len(names):
                agent.abort("stop now")

    agent.subscribe(abort_once_all_wait)
    with caplog.at_level(logging.DEBUG, logger="statemachine_agent"):
        result = await agent.run("go")
    assert result.state is State.ABORTED
    results = results_of(result.messages)
    assert [r.tool_call_id for r in results] == [f"c{i}" for i in range(len(names))]
    started = len(waiting)  # sequential: the calls after the first are not started
    assert [r.text for r in results[:started]] == [INTERRUPTED] * started
    assert all(r.is_error for r in results)
    assert [r.text for r in results[started:]] == [
        "Not run: the run was aborted before this call started."
    ] * (len(names) - started)
    assert len(agent.model.requests) == 1  # type: ignore[attr-defined]
    noisy = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert [r.getMessage() for r in noisy] == []
    assert_valid_history(result.messages)


HOUR = 3600.0  # a backoff the run could never wait out in a test: the abort must end it


def abort_on_retry(agent: Agent, *, later: bool) -> list[ModelRetry]:
    """Abort from a subscriber on the retry event: at once, or from the loop once the backoff
    has begun (``later``)."""
    retries: list[ModelRetry] = []

    def on_event(event: Event) -> None:
        if isinstance(event, ModelRetry):
            retries.append(event)
            if later:
                asyncio.get_running_loop().call_soon(agent.abort, "stop retrying")
            else:
                agent.abort("stop retrying")

    agent.subscribe(on_event)
    return retries


@pytest.mark.parametrize("later", [False, True], ids=["on_the_event", "during_the_sleep"])
async def test_an_abort_during_a_retry_backoff_sends_no_more_requests(later: bool) -> None:
    model = ScriptedModel([error_step(), text_response("paid for, never wanted")])
    agent = Agent(model, model_retries=3, retry_backoff_seconds=HOUR)
    retries = abort_on_retry(agent, later=later)
    result = await agent.run("go")
    assert result.state is State.ABORTED
    assert len(model.requests) == 1 and model.calls == 1
    assert [(r.attempt, r.delay_seconds) for r in retries] == [(1, HOUR)]
    assert_valid_history(result.messages)


@pytest.mark.parametrize("later", [False, True], ids=["on_the_event", "during_the_sleep"])
async def test_an_abort_during_a_retry_backoff_sends_no_more_http_requests(later: bool) -> None:
    # An error event inside a 200 stream: the SDK does not retry it, the engine does.
    with FakeMessagesAPI([error_step(), text_response("paid for, never wanted")]) as api:
        agent = Agent(api.model(), model_retries=3, retry_backoff_seconds=HOUR)
        retries = abort_on_retry(agent, later=later)
        result = await agent.run("go")
        await agent.aclose()
    assert result.state is State.ABORTED
    assert len(api.requests) == 1
    assert len(retries) == 1


async def test_a_run_cancelled_during_its_only_tool_call_takes_a_new_prompt() -> None:
    """pydantic/pydantic-ai#7977 (fixed by pydantic/pydantic-ai#7993): cancelling a run while its
    first (or only) tool call was running left the call unanswered in the history, so the next
    prompt was refused ("the message history contains unprocessed tool calls"); whether it
    worked depended on whether a sibling call had finished first.

    Expected: cancelling the task running the only call raises `asyncio.CancelledError` to the
    canceller; the history is valid (the call has its result); the agent is free; the next
    prompt runs to ``done`` and its request answers the call exactly once, before the prompt.
    """
    started = asyncio.Event()

    @tool
    async def slow() -> str:
        """A long job."""
        started.set()
        await asyncio.Event().wait()  # runs until cancelled
        return "never"

    model = ScriptedModel(
        [tool_response(call("slow", {}, id="c1")), text_response("Starting over.")]
    )
    agent = Agent(model, tools=[slow], abort_grace_seconds=0)
    task = asyncio.create_task(agent.run("Do the long job."))
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task

    assert not agent.is_running
    assert_valid_history(agent.messages)
    (answer,) = results_of(agent.messages)
    assert answer.tool_call_id == "c1" and answer.is_error

    result = await agent.run("Never mind; start over.")
    assert result.state is State.DONE, result.error
    assert result.text == "Starting over."
    sent = model.requests[1].messages
    assert [m.role for m in sent] == ["user", "assistant", "tool_result", "user"]
    assert [m.tool_call_id for m in results_of(list(sent))] == ["c1"]


@pytest.mark.timeout(60)
async def test_a_parallel_call_ignoring_the_abort_is_the_one_answered_and_named_as_left(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # After the grace period the batch maps its still-running tasks back to their calls: the
    # call that ignores its cancellation (the last one) is answered interrupted, named in
    # the warning and its end event sent then; the others keep what they returned.
    entered = asyncio.Event()
    release = asyncio.Event()

    @tool
    async def quick() -> str:
        """Return at once."""
        return "quick done"

    @tool
    async def stubborn() -> str:
        """Ignore every cancellation until released."""
        entered.set()
        while not release.is_set():
            with contextlib.suppress(asyncio.CancelledError):
                await release.wait()
        return "late"

    @tool
    async def polite() -> str:
        """Wait until cancelled."""
        await asyncio.Event().wait()
        return "never"

    model = ScriptedModel(
        [tool_response(call("quick", id="q1"), call("polite", id="p2"), call("stubborn", id="s3"))]
    )
    agent = Agent(model, tools=[quick, stubborn, polite], abort_grace_seconds=0.05)
    ends: list[str] = []
    agent.subscribe(lambda e: ends.append(e.call.id) if isinstance(e, ToolExecutionEnd) else None)
    task = asyncio.ensure_future(agent.run("go"))
    try:
        with caplog.at_level(logging.WARNING, logger="statemachine_agent"):
            await entered.wait()
            agent.abort("stop")
            done, _ = await asyncio.wait({task}, timeout=30)
        assert done, "the run waited for a tool that ignores its cancellation"
        assert task.result().state is State.ABORTED
        texts = {m.tool_call_id: m.text for m in agent.messages if isinstance(m, ToolResultMessage)}
        assert texts == {"q1": "quick done", "p2": INTERRUPTED, "s3": INTERRUPTED}
        [left] = [r.getMessage() for r in caplog.records if "did not stop" in r.getMessage()]
        assert "'stubborn' (call s3)" in left
        assert sorted(ends) == ["p2", "q1", "s3"]
    finally:
        release.set()


@pytest.mark.parametrize("mode", ["parallel", "sequential"])
async def test_cancelling_the_run_during_a_batch_cancels_the_running_tool_tasks(mode: str) -> None:
    """The cancellation of the run's task reaches the calls' own tasks: a running async tool
    sees its `asyncio.CancelledError` before the cancellation propagates (not left running)."""
    _, _, outcome = await _cancelled_during_two_waiting_calls(mode)
    expected = ["cancelled", "cancelled"] if mode == "parallel" else ["cancelled"]
    assert outcome == expected, "a running call's task was not cancelled with the run"


async def test_a_parallel_call_that_aborts_in_its_first_step_then_sleeps_is_stopped_after_the_grace():
    """The abort is set before the batch starts waiting for its calls (in a call's first step):
    the wait still sees it, gives the grace period, then cancels the calls, instead of waiting
    for them to end by themselves."""

    @tool
    async def aborts_then_sleeps(n: int) -> str:
        """Aborts the run, then waits for what never comes, ignoring the abort signal (only
        a cancellation ends it)."""
        agent.abort("stopped by the tool")
        await asyncio.Event().wait()
        return "never"

    model = ScriptedModel(
        [
            tool_response(
                call("aborts_then_sleeps", {"n": 1}, id="a1"),
                call("aborts_then_sleeps", {"n": 2}, id="a2"),
            ),
            text_response("never requested"),
        ]
    )
    agent = Agent(model, tools=[aborts_then_sleeps], abort_grace_seconds=0.05)
    # The calls never end by themselves: a batch that missed the abort would wait for ever
    # (the hang guard below fails the test), one that saw it cancels them after the grace.
    result = await asyncio.wait_for(agent.run("go"), timeout=60)
    assert result.state is State.ABORTED and result.error == "stopped by the tool"
    assert [(r.tool_call_id, r.is_error) for r in results_of(result.messages)] == [
        ("a1", True),
        ("a2", True),
    ]
    assert model.calls == 1
    assert_valid_history(result.messages)


async def test_abort_waiters_of_parallel_batches_do_not_pile_up_over_a_run() -> None:
    """A parallel batch whose calls outlive their first step waits on the abort signal with a
    callback: the callback goes when the batch ends, batch after batch."""

    @tool
    async def naps() -> str:
        """Naps briefly (so the batch waits for it)."""
        await asyncio.sleep(0.001)
        return "ok"

    def two_calls(i: int) -> AssistantMessage:
        return AssistantMessage(
            content=[
                ToolCallBlock(id=f"a{i}", name="naps", input={}),
                ToolCallBlock(id=f"b{i}", name="naps", input={}),
            ],
            stop_reason="tool_use",
        )

    script: list[Any] = [two_calls(i) for i in range(5)]
    script.append({"content": [{"type": "text", "text": "done"}], "stop_reason": "end_turn"})
    agent = Agent(ScriptedModel(script, record_requests=False), tools=[naps], max_turns=10)
    coro = agent.run("go")
    run = coro.run
    result = await coro
    assert result.state is State.DONE and result.turns == 6
    assert not run.signal._callbacks
