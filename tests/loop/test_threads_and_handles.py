"""Runs across event loops and threads: ``run_sync`` with closed or running loops, one model
used from several loops and worker threads, progress from a sync tool."""

from __future__ import annotations

import asyncio
import concurrent.futures
import gc
import sys
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from loop_helpers import results_of
from models.replay_server import ReplayServer, Reply, reply, says
from models.replay_server import anthropic_model as new_model

from statemachine_agent import (
    Agent,
    RunResult,
    State,
    ToolContext,
    ToolResultMessage,
    tool,
)
from statemachine_agent._events import ToolExecutionUpdate
from statemachine_agent.models import AnthropicModel, ScriptedModel
from statemachine_agent.testing.steps import call, text_response, tool_response


def calls(id: str, name: str, arguments: dict[str, Any]) -> Reply:
    return reply([{"type": "tool_use", "id": id, "name": name, "input": arguments}], "tool_use")


def wire_results(body: dict[str, Any]) -> list[dict[str, Any]]:
    """The ``tool_result`` blocks of a recorded request body."""
    return [
        block
        for message in body["messages"]
        if isinstance(message["content"], list)
        for block in message["content"]
        if block.get("type") == "tool_result"
    ]


@pytest.fixture
def replay() -> Iterator[ReplayServer]:
    """A running replay server for tests that drive their own event loops (``run_sync``)."""
    with ReplayServer() as running:
        yield running


def test_run_sync_works_after_the_app_closed_the_threads_current_loop(
    replay: ReplayServer,
) -> None:
    """pydantic/pydantic-ai#6849: ``run_sync`` scheduled its run on the thread's current event
    loop, so an application (or a library) that had closed that loop made every later
    ``run_sync`` fail with "Event loop is closed" before the run began.

    Expected: ``run_sync`` never depends on the thread's current loop: with a closed loop set as
    current, the run ends ``done`` with the model's answer after exactly one request (and the
    model can be closed afterwards).
    """
    model = new_model(replay)
    replay.add(says("Hello."))
    stale = asyncio.new_event_loop()
    asyncio.set_event_loop(stale)
    stale.close()
    try:
        result = Agent(model).run_sync("Say hello.")
    finally:
        asyncio.set_event_loop(None)

    assert result.state is State.DONE, result.error
    assert result.text == "Hello."
    assert len(replay.requests) == 1
    asyncio.run(model.aclose())  # and the model closes afterwards, in a loop of its own


async def test_run_sync_inside_an_async_tool_is_an_error_result_naming_await_not_a_hang(
    server: ReplayServer,
) -> None:
    """pydantic/pydantic-ai#3899 (fixed by pydantic/pydantic-ai#7277): a tool that delegated to a
    sub-agent with ``run_sync`` froze the whole run (a nested ``run_until_complete`` on the
    parent's loop) instead of failing.

    Expected: an ``async def`` tool that calls ``run_sync`` gets an error result that says to use
    ``await agent.run()``, the sub-agent sends nothing and is left free (it can run right after),
    and the parent run goes on to ``done`` with 2 requests, the second answering the call.
    """
    shared = server.closing(new_model(server))
    helper = Agent(shared)

    @tool
    async def delegate(question: str) -> str:
        """Ask the helper agent.

        Args:
            question: what to ask.
        """
        return helper.run_sync(question).text

    server.add(calls("toolu_d1", "delegate", {"question": "2+2?"}), says("I will answer myself."))
    result = await Agent(shared, tools=[delegate]).run("Ask the helper what 2+2 is.")

    assert result.state is State.DONE, result.error
    assert len(server.requests) == 2  # none from the helper
    (answer,) = results_of(result.messages)
    assert answer.is_error
    assert "await agent.run()" in answer.text
    (sent,) = wire_results(server.requests[1].body)
    assert sent["tool_use_id"] == "toolu_d1" and sent["is_error"] is True
    assert not helper.is_running and helper.messages == []
    server.add(says("4"))
    assert (await helper.run("2+2?")).text == "4"


async def test_one_model_serves_a_background_loop_while_its_first_loop_is_still_alive(
    server: ReplayServer,
) -> None:
    """pydantic/pydantic-ai#748: a model first used on one event loop, then driven on a
    long-lived loop in a background thread (``asyncio.run_coroutine_threadsafe``), failed with
    "Event loop is closed" / "attached to a different loop": the HTTP client's pooled connection
    belonged to the first loop, which was still alive, so nothing told the pool it was stale.

    Expected: three runs of one agent and one `AnthropicModel`, on the test's loop, then on a
    background thread's loop, then on the test's loop again, all end ``done``; exactly 3
    requests, the third carrying both earlier exchanges.
    """
    agent = Agent(server.closing(new_model(server)))
    server.add(says("one"), says("two"), says("three"))
    background = asyncio.new_event_loop()
    thread = threading.Thread(target=background.run_forever, daemon=True)
    thread.start()
    try:
        first = await agent.run("First.")
        future = asyncio.run_coroutine_threadsafe(agent.run("Second."), background)
        second = await asyncio.wrap_future(future)
        third = await agent.run("Third.")
    finally:
        background.call_soon_threadsafe(background.stop)
        await asyncio.get_running_loop().run_in_executor(None, thread.join)
        background.close()

    assert [first.state, second.state, third.state] == [State.DONE] * 3, (
        first.error,
        second.error,
        third.error,
    )
    assert [first.text, second.text, third.text] == ["one", "two", "three"]
    assert len(server.requests) == 3
    assert [m["role"] for m in server.requests[2].body["messages"]] == [
        "user",
        "assistant",
        "user",
        "assistant",
        "user",
    ]


def test_closing_a_model_after_its_run_loop_is_gone_raises_and_reports_nothing(
    replay: ReplayServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """anthropics/anthropic-sdk-python#807: the SDK's HTTP client wrapper scheduled its own close
    on whatever loop was running when it was collected; with more than one event loop in a
    process the close ran against a dead loop and logged "RuntimeError: Event loop is closed".

    Expected: after a ``run_sync`` (whose loop is closed when it returns), ``await
    model.aclose()`` in a new loop returns without raising, nothing reaches that loop's exception
    handler, and collecting the model afterwards raises nothing unraisable.
    """
    model = new_model(replay)
    replay.add(says("Done."))
    result = Agent(model).run_sync("Finish.")
    reported: list[dict[str, Any]] = []
    unraisable: list[Any] = []
    monkeypatch.setattr(sys, "unraisablehook", unraisable.append)

    async def close(closing: AnthropicModel) -> None:
        asyncio.get_running_loop().set_exception_handler(lambda _loop, ctx: reported.append(ctx))
        await closing.aclose()

    asyncio.run(close(model))
    del model
    gc.collect()

    assert result.state is State.DONE, result.error
    assert reported == []
    assert [repr(u.exc_value) for u in unraisable] == []


def test_parallel_sub_agents_in_worker_threads_share_one_model(replay: ReplayServer) -> None:
    """NousResearch/hermes-agent#2214: parallel sub-agents run in a thread pool, each with
    ``asyncio.run``, shared cached async clients; connections opened on one worker's loop were
    reused on another's (or closed after it), failing with "Event loop is closed".

    Expected: two sub-agents sharing one `AnthropicModel`, each in its own worker thread with
    ``run_sync`` and held mid-run at the same moment (a tool waits on a barrier), both end
    ``done`` with one answer each; a later ``run_sync`` on the main thread with the same model
    ends ``done`` too; exactly 5 requests (and the model can be closed afterwards).
    """
    model = new_model(replay)
    both_mid_run = threading.Barrier(2)

    @tool
    def meet() -> str:
        """Wait for the other worker."""
        both_mid_run.wait()
        return "met"

    replay.add(
        calls("toolu_w1", "meet", {}),
        calls("toolu_w2", "meet", {}),
        says("A"),
        says("B"),
        says("main"),
    )

    def worker() -> RunResult:
        try:
            return Agent(model, tools=[meet]).run_sync("Meet.")
        finally:
            both_mid_run.abort()  # a run that ended without meeting must not hold the other

    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        workers = [run.result() for run in [pool.submit(worker) for _ in range(2)]]
    last = Agent(model).run_sync("And you?")

    assert [w.state for w in workers] == [State.DONE, State.DONE], [w.error for w in workers]
    assert sorted(w.text for w in workers) == ["A", "B"]
    assert last.state is State.DONE and last.text == "main", last.error
    assert len(replay.requests) == 5
    asyncio.run(model.aclose())  # and the model closes afterwards, in a loop of its own


# Found by a review: progress from a sync tool (a worker thread) reaches subscribers on the loop's thread, while
# the tool still runs
async def test_progress_from_a_sync_tool_is_delivered_on_the_loop_thread():
    delivered = threading.Event()

    @tool
    def long_sync(ctx: ToolContext) -> str:
        ctx.progress("10%")
        # The update must arrive while this call is still running.
        return "seen" if delivered.wait(timeout=10) else "not delivered while running"

    agent = Agent(
        ScriptedModel([tool_response(call("long_sync", id="a")), text_response("x")]),
        tools=[long_sync],
    )
    loop_thread = threading.get_ident()
    threads: list[int] = []

    def on_event(event: object) -> None:
        if isinstance(event, ToolExecutionUpdate):
            threads.append(threading.get_ident())
            delivered.set()

    agent.subscribe(on_event)
    result = await agent.run("go")
    assert threads == [loop_thread]
    assert [m.text for m in result.messages if isinstance(m, ToolResultMessage)] == ["seen"]
