"""The per-turn fast paths added for the benchmarks (issue 7) behave as the general paths did.

- A model stream is read in the run's task under a timeout scope the abort signal expires; a
  response that completes in the pass the abort happened in is kept, and an outside cancel records
  the partial response and propagates.
- A tool without ``timeout_seconds`` runs outside a timeout scope; its own ``TimeoutError`` is
  reported as before.
- Abort waiters do not pile up over a long run.
"""

from __future__ import annotations

import asyncio
import functools
from typing import Any

import pytest
from pydantic import BaseModel, model_validator

from statemachine_agent import (
    Agent,
    AssistantMessage,
    State,
    StopReason,
    TextBlock,
    ToolCallBlock,
    tool,
)
from statemachine_agent.models import FunctionModel, ScriptedModel


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


async def test_abort_waiters_do_not_pile_up_over_a_run() -> None:
    script: list[Any] = [_call(i) for i in range(30)]
    script.append({"content": [{"type": "text", "text": "done"}], "stop_reason": "end_turn"})
    agent = Agent(ScriptedModel(script, record_requests=False), tools=[noop], max_turns=40)
    coro = agent.run("go")
    run = coro.run  # the agent holds its run only while it is in progress
    result = await coro
    assert result.state is State.DONE and result.turns == 31
    assert not run.signal._callbacks  # abort waiters are callbacks too


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


# -- issue 17: the cheaper scope, event and stream paths behave as the general ones did ----------


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


def test_events_and_stream_objects_keep_their_dataclass_constructors() -> None:
    """`fast_init` gives each class the signature ``dataclasses`` made: positional fields,
    defaults, keyword-only ``run_id``/``seq``, a fresh default from a factory, frozen objects."""
    import dataclasses
    import inspect

    from statemachine_agent import MessageDelta, StateChanged, TurnEnd
    from statemachine_agent.models import ModelRequest, ToolCallDelta

    delta = MessageDelta(2, "text", "hi")
    assert (delta.index, delta.kind, delta.delta, delta.tool_name) == (2, "text", "hi", None)
    assert (delta.run_id, delta.seq) == ("", 0)
    stamped = StateChanged("idle", "awaiting_model", "start", "start", run_id="r", seq=3)
    assert (stamped.run_id, stamped.seq, stamped.label) == ("r", 3, "start")
    assert stamped == StateChanged("idle", "awaiting_model", "start", "start")  # not compared
    assert dataclasses.replace(stamped, dest="done").dest == "done"
    with pytest.raises(dataclasses.FrozenInstanceError):
        stamped.dest = "done"  # type: ignore[misc]
    with pytest.raises(TypeError, match="missing"):
        StateChanged("idle")  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        StateChanged("a", "b", "c", "d", "e")  # type: ignore[call-arg]  # run_id is keyword-only
    assert str(inspect.signature(TurnEnd)).startswith("(turn: 'int', message:")
    first, second = ModelRequest([]), ModelRequest([])
    assert first.settings == {} and first.settings is not second.settings
    assert ModelRequest([], settings={"a": 1}).settings == {"a": 1}
    assert ToolCallDelta(0, "c1", "noop", "{}") == ToolCallDelta(0, "c1", "noop", "{}")


async def test_the_offline_models_call_their_function_when_the_stream_is_read() -> None:
    """As an async generator did: nothing is asked until the first event is read, and what the
    function raises comes out of that read."""
    from statemachine_agent.models import ModelRequest, ResponseComplete

    asked: list[int] = []

    def respond(_messages: Any, _request: Any) -> str:
        asked.append(1)
        if len(asked) > 1:
            raise ValueError("second")
        return "hello"

    model = FunctionModel(respond)
    stream = model.stream(ModelRequest([]))
    assert asked == []
    events = [event async for event in stream]
    assert asked == [1] and isinstance(events[-1], ResponseComplete)
    assert events[-1].message.text == "hello"
    failing = model.stream(ModelRequest([]))
    with pytest.raises(ValueError, match="second"):
        await failing.__anext__()
    with pytest.raises(StopAsyncIteration):  # ended, as an async generator that raised
        await failing.__anext__()
    assert len(asked) == 2  # the function was not asked again
    scripted = ScriptedModel([])
    exhausted = scripted.stream(ModelRequest([]))
    assert scripted.calls == 1  # counted when asked, as before
    with pytest.raises(Exception, match="no step 1"):
        await exhausted.__anext__()


async def test_a_raising_subscriber_is_logged_with_its_traceback_and_the_event_type(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """`Run.emit` delivers inline: a subscriber's exception is logged (error level, traceback,
    the event's type) for each event it fails on, and the run goes on."""
    import logging

    agent = Agent(ScriptedModel([_call(1), AssistantMessage(content=[])]), tools=[tool(noop)])

    def bad(event: Any) -> None:
        if event.type == "tool_execution_end":
            raise RuntimeError("subscriber bug")

    agent.subscribe(bad)
    with caplog.at_level(logging.ERROR, logger="statemachine_agent"):
        result = await agent.run("go")
    assert result.state is State.DONE
    failed = [r for r in caplog.records if "failed on tool_execution_end" in r.getMessage()]
    assert len(failed) == 1 and failed[0].exc_info is not None
    assert "subscriber bug" in str(failed[0].exc_info[1])


# -- review: each fast path's bugs the tests above would not catch ---------------------------------


def test_usage_adds_every_field_and_only_the_shared_zero_adds_as_nothing() -> None:
    """`Usage.__add__` returns the other operand only for ``NO_USAGE`` itself: a usage that reports
    only cache tokens (no input or output) is added field by field like any other."""
    from statemachine_agent import Usage
    from statemachine_agent._messages import NO_USAGE

    used = Usage(input_tokens=3, output_tokens=2)
    cached_only = Usage(cache_write_tokens=5, cache_read_tokens=7)
    assert used + cached_only == Usage(
        input_tokens=3, output_tokens=2, cache_write_tokens=5, cache_read_tokens=7
    )
    assert cached_only + used == used + cached_only
    assert used + NO_USAGE == used and NO_USAGE + used == used
    assert NO_USAGE + cached_only == cached_only and Usage() == NO_USAGE + NO_USAGE


class _Point(BaseModel):
    x: int
    y: int = 0


class _PlaceArgs(BaseModel):
    at: _Point
    limit: int = 10


def _place(at: _Point, limit: int = 99) -> str:
    """Place something."""
    return f"{at!r} {limit}"


def test_a_tool_gets_its_args_model_s_defaults_and_nested_models() -> None:
    """`Tool.validate` gives every field as the model holds it: defaults of the args model (not
    of the function) and nested models as model instances (not dumped to dicts)."""
    from statemachine_agent import Tool

    placed = Tool(name="place", description="Place.", function=_place, args_model=_PlaceArgs)
    kwargs = placed.validate({"at": {"x": 1}})
    assert kwargs == {"at": _Point(x=1, y=0), "limit": 10}
    assert type(kwargs["at"]) is _Point and list(kwargs) == ["at", "limit"]
    made = tool(_place)
    assert made.validate({"at": {"x": 2}, "limit": 3}) == {"at": _Point(x=2), "limit": 3}
    assert type(made.validate({"at": {"x": 2}})["at"]) is _Point


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


async def test_an_offline_stream_stays_ended_once_it_has_ended() -> None:
    """As an async generator did: once the response's events are read, the stream raises
    `StopAsyncIteration` again and again, and neither replays nor calls the function again."""
    from statemachine_agent.models import ModelRequest

    asked: list[int] = []

    def respond(_messages: Any, _request: Any) -> str:
        asked.append(1)
        return "hello"

    for model in (FunctionModel(respond), ScriptedModel([AssistantMessage(content=[])])):
        stream = model.stream(ModelRequest([]))
        events = [event async for event in stream]
        assert events
        for _ in range(2):
            with pytest.raises(StopAsyncIteration):
                await stream.__anext__()
    assert asked == [1]


class _PathArgs(BaseModel):
    path: str

    @functools.cached_property
    def parts(self) -> list[str]:
        return self.path.split("/")

    @model_validator(mode="after")
    def _named(self) -> _PathArgs:
        if not self.parts[-1]:
            raise ValueError("the path names no file")
        return self


def _read(path: str) -> str:
    """Read a file."""
    return f"read {path}"


async def test_a_tool_gets_only_its_args_model_s_fields() -> None:
    """`Tool.validate` returns the args model's fields only: a value the model caches in its
    ``__dict__`` (a ``functools.cached_property`` read by a validator) is not an argument of the
    function."""
    from statemachine_agent import Tool

    read = Tool(name="read", description="Read.", function=_read, args_model=_PathArgs)
    assert read.validate({"path": "a/b"}) == {"path": "a/b"}
    call = AssistantMessage(
        content=[ToolCallBlock(id="c1", name="read", input={"path": "a/b"})],
        stop_reason="tool_use",
    )
    result = await Agent(ScriptedModel([call, AssistantMessage(content=[])]), tools=[read]).run(
        "go"
    )
    assert not result.messages[2].is_error and result.messages[2].text == "read a/b"


class _Stop(BaseException):
    """Not an `Exception`: a subscriber raising it is not a subscriber failure to log."""


async def test_a_subscriber_raising_a_base_exception_is_not_swallowed() -> None:
    """`Run.emit` catches a subscriber's `Exception` only (as ``Agent._emit`` did): a
    `BaseException` such as ``KeyboardInterrupt`` or ``CancelledError`` comes out of the run."""
    agent = Agent(ScriptedModel([_call(1), AssistantMessage(content=[])]), tools=[tool(noop)])

    def stop(event: Any) -> None:
        if event.type == "tool_execution_start":
            raise _Stop

    agent.subscribe(stop)
    with pytest.raises(_Stop):
        await agent.run("go")


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


async def test_a_run_counts_usage_from_the_shared_zero_until_a_response_reports_some() -> None:
    # No model of its own per run (two were built, each a tracked object with its field set,
    # alive for the whole run: garbage-collector work per running agent).
    from statemachine_agent._messages import NO_USAGE

    seen: list[tuple[object, object]] = []

    async def look() -> str:
        """Look at the run's usage."""
        run = agent.current_run
        assert run is not None
        seen.append((run._usage, run.data.usage))
        return "ok"

    answer = AssistantMessage(content=[TextBlock(text="done")], stop_reason="end_turn")
    agent = Agent(ScriptedModel([_call(1, "look"), answer]), tools=[look])
    result = await agent.run("go")
    assert result.state is State.DONE
    assert len(seen) == 1
    assert seen[0][0] is NO_USAGE and seen[0][1] is NO_USAGE  # the object itself, not an equal one
