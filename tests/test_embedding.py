"""Issue 24: embedding the engine in a service. Runs are claimed when they are started, events
cross threads, subscribers are isolated from each other, blocking work stays off the loop,
event streams are bounded, agents close, and scripted call ids are unique across processes."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import gc
import json
import logging
import os
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from statemachine_agent import (
    Agent,
    AgentBusyError,
    Event,
    RunHandle,
    State,
    StateChanged,
    UsageError,
    event_to_dict,
    tool,
)
from statemachine_agent import _agent as agent_module
from statemachine_agent._run import Run
from statemachine_agent.models import FunctionModel, ScriptedModel
from statemachine_agent.session import SessionLog
from statemachine_agent.session._check import check_session
from statemachine_agent.testing import assert_valid_history
from statemachine_agent.testing.steps import call, text_response, tool_response

GUARD_SECONDS = 10.0  # only ever reached when the behaviour under test is broken


@tool
def echo(text: str = "x") -> str:
    """Echo the text."""
    return text


def two_turns(text: str = "All done.") -> list[dict[str, Any]]:
    return [tool_response(call("echo", {"text": "a"})), text_response(text)]


async def blocked_model(messages: Any, request: Any) -> str:
    await asyncio.Event().wait()  # until the run is aborted
    return "never"


# -- case 1: events across threads ------------------------------------------------------------


async def test_events_reach_a_consumer_on_another_loop_while_the_run_thread_waits() -> None:
    # The run's own thread blocks in the model until the consumer (this loop, otherwise idle)
    # has received run_start: only a thread-safe hand-over wakes this loop for it.
    received = threading.Event()
    waited: list[bool] = []

    def model(messages: Any, request: Any) -> str:
        waited.append(received.wait(GUARD_SECONDS))
        return "done"

    agent = Agent(FunctionModel(model))
    stream = agent.events()
    results: list[Any] = []
    runner = threading.Thread(target=lambda: results.append(agent.run_sync("x")))
    runner.start()
    seen: list[str] = []
    async with asyncio.timeout(3 * GUARD_SECONDS):
        async for event in stream:
            seen.append(event.type)
            if event.type == "run_start":
                received.set()
            if event.type == "run_end":
                break
    await asyncio.to_thread(runner.join)
    assert waited == [True]  # the consumer got run_start while the run waited for it
    assert seen[0] == "run_start" and seen[-1] == "run_end"
    assert results[0].state is State.DONE


# -- case 2: unsubscribing during an event ----------------------------------------------------


async def test_a_subscriber_unsubscribing_on_run_end_does_not_hide_run_end_from_the_next() -> None:
    agent = Agent(ScriptedModel([text_response("hi")]))

    def first(event: Event) -> None:
        if event.type == "run_end":
            unsubscribe_first()

    unsubscribe_first = agent.subscribe(first)
    second: list[str] = []
    agent.subscribe(lambda event: second.append(event.type))
    await agent.run("x")
    assert second.count("run_end") == 1 and second[-1] == "run_end"


async def test_unsubscribing_another_subscriber_takes_effect_from_the_next_event() -> None:
    agent = Agent(ScriptedModel([text_response("hi")]))
    later: list[str] = []

    def first(event: Event) -> None:
        if event.type == "run_start":
            unsubscribe_later()

    agent.subscribe(first)
    unsubscribe_later = agent.subscribe(lambda event: later.append(event.type))
    await agent.run("x")
    assert later == ["run_start"]  # registered when run_start was emitted: it got it, only it


async def test_a_session_log_attached_after_a_self_unsubscribing_subscriber_keeps_run_start(
    tmp_path: Path,
) -> None:
    path = tmp_path / "run.jsonl"
    agent = Agent(ScriptedModel([text_response("hi")]))

    def once(event: Event) -> None:
        unsubscribe()

    unsubscribe = agent.subscribe(once)
    log = SessionLog(path)
    log.attach(agent)
    await agent.run("x")
    log.close()
    types = [json.loads(line)["type"] for line in path.read_text().splitlines()]
    assert types.count("run_start") == 1 and types.count("run_end") == 1
    _data, problems = check_session(path)
    assert problems == []


# -- case 3: a run is claimed when it is scheduled --------------------------------------------


async def test_abort_in_the_same_step_as_create_task_ends_the_run_aborted() -> None:
    requests: list[int] = []

    def model(messages: Any, request: Any) -> str:
        requests.append(1)
        return "answered"

    agent = Agent(FunctionModel(model))
    task = asyncio.create_task(agent.run("x"))
    assert agent.is_running is True
    assert agent.abort("stop") is True
    result = await task
    assert (result.state, result.error) == (State.ABORTED, "stop")
    assert requests == []  # aborted before its first step: nothing was sent
    assert not agent.is_running
    assert_valid_history(result.messages)


async def test_a_second_start_raises_agent_busy_at_once() -> None:
    agent = Agent(ScriptedModel([text_response("hi"), text_response("again")]))
    task = asyncio.create_task(agent.run("x"))
    with pytest.raises(AgentBusyError):
        agent.run("y")  # the call itself raises, before any await
    with pytest.raises(AgentBusyError):
        agent.start("y")
    assert (await task).state is State.DONE
    assert (await agent.run("y")).text == "again"


async def test_start_returns_a_handle_to_await_and_read_the_result() -> None:
    agent = Agent(ScriptedModel(two_turns()))
    handle = agent.start("x")
    assert isinstance(handle, RunHandle)
    assert agent.is_running and handle.result is None and not handle.done()
    result = await handle
    assert (result.state, result.text) == (State.DONE, "All done.")
    assert handle.result is result and handle.done()
    assert result.run_id == handle.run_id
    assert not agent.is_running


async def test_a_handle_aborts_its_run_from_another_thread() -> None:
    agent = Agent(FunctionModel(blocked_model))
    requesting = asyncio.Event()
    agent.subscribe(lambda event: requesting.set() if event.type == "turn_start" else None)
    handle = agent.start("x")
    await requesting.wait()
    assert await asyncio.to_thread(handle.abort, "client went away") is True
    result = await handle
    assert (result.state, result.error) == (State.ABORTED, "client went away")
    assert handle.abort("late") is False  # the run is over
    assert_valid_history(result.messages)


async def test_cancelling_a_waiter_of_the_handle_does_not_stop_the_run() -> None:
    gate = asyncio.Event()

    async def model(messages: Any, request: Any) -> str:
        await gate.wait()
        return "finished"

    agent = Agent(FunctionModel(model))
    handle = agent.start("x")
    waiter = asyncio.create_task(_await(handle))
    await asyncio.sleep(0)  # let the waiter start awaiting the handle
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    gate.set()
    assert (await handle).text == "finished"


async def _await(handle: RunHandle) -> Any:
    return await handle


async def test_start_without_a_running_loop_is_a_usage_error() -> None:
    agent = Agent(ScriptedModel([text_response("hi")]))
    with pytest.raises(UsageError, match="running event loop"):
        await asyncio.to_thread(agent.start, "x")
    assert not agent.is_running


async def test_a_run_closed_or_cancelled_before_its_first_step_releases_the_claim() -> None:
    agent = Agent(ScriptedModel([text_response("hi")]))
    coro = agent.run("x")
    assert agent.is_running
    coro.close()
    assert not agent.is_running and agent.messages == []

    task = asyncio.create_task(agent.run("x"))
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert not agent.is_running and agent.messages == []
    assert (await agent.run("x")).state is State.DONE


def test_a_run_never_awaited_releases_the_claim_when_dropped() -> None:
    agent = Agent(ScriptedModel([text_response("hi")]))
    with pytest.warns(RuntimeWarning, match="never awaited"):
        agent.run("x")  # dropped at once
    assert not agent.is_running
    assert agent.run_sync("x").state is State.DONE


def test_two_threads_calling_run_sync_at_once_exactly_one_runs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Forced interleaving: a claim holds both threads inside it for as long as it can (until the
    # other arrives, or a guard passes). Without a lock around check-and-claim both get through.
    inside = threading.Barrier(2)
    busy_seen = threading.Event()

    class SlowToClaim(Run):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            with contextlib.suppress(threading.BrokenBarrierError):
                inside.wait(timeout=1.0)
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(agent_module, "Run", SlowToClaim)

    def model(messages: Any, request: Any) -> str:
        busy_seen.wait(GUARD_SECONDS)  # the run is still in progress when the other one tries
        return "answered"

    agent = Agent(FunctionModel(model))
    start = threading.Barrier(2)
    outcomes: list[str] = []

    def attempt() -> None:
        start.wait()
        try:
            outcomes.append(agent.run_sync("x").state.value)
        except AgentBusyError:
            outcomes.append("AgentBusyError")
            busy_seen.set()

    threads = [threading.Thread(target=attempt) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(outcomes) == ["AgentBusyError", "done"]
    assert [m.role for m in agent.messages] == ["user", "assistant"]


# -- case 4: async subscribers -----------------------------------------------------------------


async def on_event(event: Event) -> None:
    pass


class AsyncCallable:
    async def __call__(self, event: Event) -> None:
        pass


@pytest.mark.parametrize(
    "callback",
    [on_event, AsyncCallable(), functools.partial(on_event)],
    ids=["async-function", "async-__call__", "partial"],
)
def test_an_async_subscriber_is_refused_with_type_error(callback: Any) -> None:
    agent = Agent(ScriptedModel([text_response("hi")]))
    with pytest.raises(TypeError, match=r"agent\.events\(\)"):
        agent.subscribe(callback)
    assert agent.bus.subscribers == ()


# -- case 5: blocking work off the loop --------------------------------------------------------


async def test_a_slow_subscriber_is_logged_once(caplog: pytest.LogCaptureFixture) -> None:
    import time

    agent = Agent(ScriptedModel(two_turns()))

    def slow(event: Event) -> None:
        time.sleep(0.05)  # the slow work under test (above SLOW_SUBSCRIBER_SECONDS)

    agent.subscribe(slow)
    with caplog.at_level(logging.WARNING, logger="statemachine_agent"):
        result = await agent.run("x")
    assert result.state is State.DONE
    slow_records = [r for r in caplog.records if "holds up every agent" in r.getMessage()]
    assert len(slow_records) == 1
    assert "slow" in slow_records[0].getMessage()


@pytest.fixture
def fsync_threads(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    threads: list[int] = []
    real = os.fsync

    def recording_fsync(fd: int) -> None:
        threads.append(threading.get_ident())
        real(fd)

    monkeypatch.setattr(os, "fsync", recording_fsync)
    yield threads


async def test_fsync_happens_off_the_loop_thread(tmp_path: Path, fsync_threads: list[int]) -> None:
    path = tmp_path / "run.jsonl"
    agent = Agent(ScriptedModel(two_turns()), tools=[echo], session=SessionLog(path, fsync=True))
    await agent.run("x")
    assert agent.session is not None and agent.session.sync(GUARD_SECONDS)
    assert fsync_threads, "nothing was synced"
    assert threading.get_ident() not in fsync_threads
    agent.close()
    _data, problems = check_session(path)
    assert problems == []


async def test_fsync_log_writes_each_line_in_order_before_the_event_moves_on(
    tmp_path: Path, fsync_threads: list[int]
) -> None:
    # A killed process keeps every line recorded: each is written and flushed on the loop's
    # thread, in order, before the next subscriber sees the event (only the sync is deferred).
    path = tmp_path / "run.jsonl"
    agent = Agent(ScriptedModel(two_turns()), tools=[echo], session=SessionLog(path, fsync=True))
    last_lines: list[tuple[str, str]] = []

    def check(event: Event) -> None:
        if isinstance(event, StateChanged):
            last = json.loads(path.read_bytes().splitlines()[-1])
            last_lines.append((last["type"], last["dest"]))

    agent.subscribe(check)
    await agent.run("x")
    agent.close()  # syncs the last lines
    assert last_lines == [
        ("state", "awaiting_model"),
        ("state", "executing_tools"),
        ("state", "awaiting_model"),
        ("state", "done"),
    ]
    plain = tmp_path / "plain.jsonl"
    other = Agent(ScriptedModel(two_turns()), tools=[echo], session=plain)
    await other.run("x")
    other.close()

    def shape(p: Path) -> list[str]:
        return [json.loads(line)["type"] for line in p.read_text().splitlines()]

    assert shape(path) == shape(plain)
    assert fsync_threads and threading.get_ident() not in fsync_threads


# -- case 6: bounded streams -------------------------------------------------------------------


async def test_events_subscribes_when_called_not_on_first_iteration() -> None:
    agent = Agent(ScriptedModel([text_response("hi")]))
    stream = agent.events()
    await agent.run("x")  # the whole run happens before the first iteration
    seen: list[str] = []
    async for event in stream:
        seen.append(event.type)
        if event.type == "run_end":
            break
    assert seen[0] == "run_start" and seen[-1] == "run_end"


async def test_the_events_queue_is_bounded_and_drops_the_oldest() -> None:
    agent = Agent(ScriptedModel(two_turns()), tools=[echo])
    emitted: list[Event] = []
    agent.subscribe(emitted.append)
    async with agent.events(max_queue=3) as stream:
        await agent.run("x")
        got = [await anext(stream) for _ in range(3)]
        assert stream.dropped == len(emitted) - 3
    assert [e.seq for e in got] == [e.seq for e in emitted[-3:]]
    assert got[-1].type == "run_end"
    with pytest.raises(StopAsyncIteration):
        await anext(stream)  # closed


async def test_each_event_carries_its_run_id_and_sequence_number() -> None:
    agent = Agent(ScriptedModel([*two_turns(), text_response("second")]), tools=[echo])
    events: list[Event] = []
    agent.subscribe(events.append)
    first = await agent.run("x")
    count = len(events)
    second = await agent.run("y")
    assert first.run_id and second.run_id and first.run_id != second.run_id
    assert [e.run_id for e in events] == [first.run_id] * count + [second.run_id] * (
        len(events) - count
    )
    assert [e.seq for e in events[:count]] == list(range(1, count + 1))
    assert [e.seq for e in events[count:]] == list(range(1, len(events) - count + 1))
    as_dict = event_to_dict(events[0])
    assert (as_dict["run_id"], as_dict["seq"]) == (first.run_id, 1)


async def test_run_end_as_json_does_not_carry_the_whole_history() -> None:
    agent = Agent(ScriptedModel([text_response("The same answer.")] * 30))
    ends: list[dict[str, Any]] = []
    agent.subscribe(lambda e: ends.append(event_to_dict(e)) if e.type == "run_end" else None)
    for i in range(30):
        await agent.run(f"question {i:02d}")
    assert len(agent.messages) == 60
    sizes = [len(json.dumps(body)) for body in ends]
    assert sizes[29] == sizes[0]  # constant: it grew from 1.9 KB at run 1 to 35 KB at run 30
    assert sizes[0] < 1000
    result = ends[29]["result"]
    assert "messages" not in result
    assert (result["state"], result["text"], result["new_messages"]) == (
        "done",
        "The same answer.",
        2,
    )


# -- case 7: agents that close -----------------------------------------------------------------


class ClosingModel(ScriptedModel):
    closed = 0

    async def aclose(self) -> None:
        self.closed += 1


async def test_async_with_closes_the_log_and_the_model_it_owns(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    model = ClosingModel([text_response("hi")])
    async with Agent(model, session=path, owns_model=True) as agent:
        await agent.run("x")
    assert model.closed == 1
    resumed = Agent.resume(path, model=ScriptedModel([text_response("again")]))  # lock released
    assert (await resumed.run("y")).state is State.DONE
    resumed.close()


async def test_closing_leaves_a_shared_model_open(tmp_path: Path) -> None:
    model = ClosingModel([text_response("hi")])
    async with Agent(model, session=tmp_path / "run.jsonl") as agent:
        await agent.run("x")
    with Agent(model) as other:  # sync form: closes the log only
        assert other.session is None
    assert model.closed == 0


@pytest.mark.parametrize("fsync", [False, True], ids=["plain", "fsync"])
async def test_an_agent_dropped_without_closing_releases_its_log_without_gc(
    tmp_path: Path, fsync: bool
) -> None:
    path = tmp_path / "run.jsonl"
    gc.disable()
    try:
        agent = Agent(
            ScriptedModel(two_turns()), tools=[echo], session=SessionLog(path, fsync=fsync)
        )
        await agent.run("x")
        del agent
        resumed = Agent.resume(path, model=ScriptedModel([text_response("again")]), tools=[echo])
    finally:
        gc.enable()
    assert (await resumed.run("y")).state is State.DONE
    resumed.close()
    _data, problems = check_session(path)
    assert problems == []


# -- case 8: test-step ids ---------------------------------------------------------------------

FIRST_ID = "from statemachine_agent.testing.steps import call; print(call('echo')['id'])"

SESSION_STEP = textwrap.dedent(
    """
    import sys
    from statemachine_agent import Agent, tool
    from statemachine_agent.models import ScriptedModel
    from statemachine_agent.testing.steps import call, text_response, tool_response

    @tool
    def echo(text: str = "x") -> str:
        "Echo the text."
        return text

    script = ScriptedModel([tool_response(call("echo")), text_response("ok")])
    path = sys.argv[1]
    if sys.argv[2] == "new":
        agent = Agent(script, tools=[echo], session=path)
    else:
        agent = Agent.resume(path, model=script, tools=[echo])
    result = agent.run_sync("go")
    print(result.state.value, result.error)
    """
)


def _python(*args: str) -> str:
    done = subprocess.run(
        [sys.executable, *args], capture_output=True, text=True, timeout=120, check=True
    )
    return done.stdout.strip()


def test_step_call_ids_are_unique_across_processes() -> None:
    first, second = _python("-c", FIRST_ID), _python("-c", FIRST_ID)
    assert first != second
    assert first.startswith("call_") and second.startswith("call_")


def test_a_session_resumed_in_a_new_process_does_not_reuse_step_ids(tmp_path: Path) -> None:
    path = str(tmp_path / "run.jsonl")
    assert _python("-c", SESSION_STEP, path, "new") == "done None"
    assert _python("-c", SESSION_STEP, path, "resume") == "done None"
