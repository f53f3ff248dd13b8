"""Issue 39, item 3: how a worker watches its runs for an abort sent through the database.

One task per worker process reads the abort attribute of the runs it executes
(`statemachine_agent.durable._abort`): it ends when no run is left to watch and starts again
for the next run; a run's first step waits for the first read, so an abort sent before the run
executed a step here reaches it before the model is asked; a run that ended is no longer
watched. The aborts here go through the database only (`Client.abort`, as from another
process), so nothing but that task can deliver them. The tests wait on events; nothing is
asserted about time."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("dbos", reason="the durable tests need the dbos extra")

from launched_process import SAFETY_SECONDS, AgentFactory, client_abort, reached

from statemachine_agent import AbortSignal, Agent, Approve, State, ToolResultMessage, tool
from statemachine_agent.durable import (
    _abort,
    launch,
    pending,
    run,
    send_decisions,
    shutdown,
)
from statemachine_agent.durable._state import process
from statemachine_agent.models import FunctionModel
from statemachine_agent.testing import assert_valid_history

REASON = "stop, please"


async def noop() -> str:
    """Do nothing."""
    return "ok"


def _one_call_model(messages: list[Any], request: Any) -> Any:
    if not any(isinstance(m, ToolResultMessage) for m in messages):
        use = {"type": "tool_use", "id": "call_1", "name": "noop", "input": {}}
        return {"content": [use], "stop_reason": "tool_use"}
    return "done"


@pytest.fixture
def db(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'runs.sqlite'}"


@pytest.fixture
async def factory(db: str) -> AsyncIterator[AgentFactory]:
    made = AgentFactory(lambda: Agent(FunctionModel(_one_call_model), tools=[tool(noop)]))
    await launch(db, made, executor_id="abort-watch")
    try:
        yield made
    finally:
        shutdown()


async def _poller_ended() -> None:
    """Wait until the watching task has ended (it ends once no run is left to watch)."""
    task = _abort.poller.task
    assert task is not None, "no run was watched"
    await asyncio.wait_for(asyncio.shield(task), SAFETY_SECONDS)


async def test_a_run_that_ended_is_no_longer_watched(factory: AgentFactory) -> None:
    result = await run("Go.", run_id="ended")
    assert (result.state, result.text) == (State.DONE, "done")
    assert "ended" not in process.watches
    await _poller_ended()  # nothing left to watch: the task reads no more and ends
    assert process.watches == {}


async def test_an_abort_reaches_a_run_started_after_the_watching_task_ended(
    factory: AgentFactory, db: str
) -> None:
    first = await run("Go.", run_id="before")
    assert first.state is State.DONE
    await _poller_ended()
    # The next run must get a watching task again: only it can deliver a Client.abort.
    stuck, never = asyncio.Event(), asyncio.Event()

    async def stuck_model(messages: list[Any], request: Any) -> Any:
        stuck.set()
        await never.wait()
        return "unreachable"

    factory.build = lambda: Agent(FunctionModel(stuck_model), abort_grace_seconds=0)
    started = asyncio.ensure_future(run("Go.", run_id="after"))
    await reached(stuck.wait(), "the run did not reach its model request", started)
    await asyncio.to_thread(client_abort, db, "after", REASON)
    result = await asyncio.wait_for(started, SAFETY_SECONDS)
    assert (result.state, result.error) == (State.ABORTED, REASON)
    assert not never.is_set()  # nothing but the abort ended the request
    assert_valid_history(result.messages)


async def test_an_abort_sent_before_the_first_step_is_applied_before_the_model_is_asked(
    factory: AgentFactory, db: str
) -> None:
    # The abort is set (through the database) while the run is being set up here, before its
    # first step: that step waits for the run's first read of the abort attribute, so the run
    # is already aborted when its model request starts (the request then ends at once).
    applied: list[str | None] = []
    never = asyncio.Event()

    async def model(messages: list[Any], request: Any) -> Any:
        applied.append(process.watches["early"].applied())
        await never.wait()
        return "unreachable"

    def aborted_while_starting() -> Agent:
        client_abort(db, "early", REASON)
        return Agent(FunctionModel(model), tools=[tool(noop)], abort_grace_seconds=0)

    factory.build = aborted_while_starting
    result = await asyncio.wait_for(run("Go.", run_id="early"), SAFETY_SECONDS)
    assert applied == [REASON]
    assert (result.state, result.error) == (State.ABORTED, REASON)
    assert not any(isinstance(m, ToolResultMessage) for m in result.messages)
    assert_valid_history(result.messages)


async def test_a_runs_first_step_body_waits_for_the_first_read_of_its_abort() -> None:
    # The poller's first read for a run found an abort: the run's first step body, started
    # before that read came back, must see the run aborted (go_live waits for the read).
    watch = _abort.AbortWatch("first-read")
    signal = AbortSignal()
    watch.attach(signal)
    order: list[object] = []

    async def step_body() -> None:
        await watch.go_live()
        order.append(("body", signal.reason))

    async def first_read() -> None:
        order.append("read")
        watch.seen(REASON)
        watch.checked.set()

    # Tasks start in the order they were made: the step reaches go_live before the read ends.
    await asyncio.gather(asyncio.ensure_future(step_body()), asyncio.ensure_future(first_read()))
    assert order == ["read", ("body", REASON)]


async def test_a_run_waiting_for_approval_is_not_read_and_a_client_abort_still_ends_it(
    factory: AgentFactory, db: str
) -> None:
    # A waiting run gets an abort as a message: the watching task has nothing to read and ends
    # (no query every poll while runs only wait for people).
    factory.build = lambda: Agent(
        FunctionModel(_one_call_model), tools=[tool(requires_approval=True)(noop)]
    )
    started = asyncio.ensure_future(run("Go.", run_id="waiting"))
    calls = await pending("waiting", wait_seconds=SAFETY_SECONDS)
    assert [call.id for call in calls] == ["call_1"]
    await _poller_ended()
    assert list(process.watches) == ["waiting"]  # still watched: read again once it goes on
    await asyncio.to_thread(client_abort, db, "waiting", REASON)
    result = await asyncio.wait_for(started, SAFETY_SECONDS)
    assert (result.state, result.error) == (State.ABORTED, REASON)
    answers = [m for m in result.messages if isinstance(m, ToolResultMessage)]
    assert [(m.tool_call_id, m.is_error) for m in answers] == [("call_1", True)]
    assert_valid_history(result.messages)


async def test_a_run_that_resumed_after_approval_is_read_again_and_a_client_abort_ends_it(
    factory: AgentFactory, db: str
) -> None:
    # While it waited, the run was not read; once the approval let it go on, its abort
    # attribute must be read again: a Client.abort (database only) stops the approved tool.
    entered, never = asyncio.Event(), asyncio.Event()

    async def noop() -> str:
        """Wait for nothing that comes."""
        entered.set()
        await never.wait()
        return "unreachable"

    factory.build = lambda: Agent(
        FunctionModel(_one_call_model),
        tools=[tool(requires_approval=True)(noop)],
        abort_grace_seconds=0,
    )
    started = asyncio.ensure_future(run("Go.", run_id="resumed"))
    calls = await pending("resumed", wait_seconds=SAFETY_SECONDS)
    assert [call.id for call in calls] == ["call_1"]
    await _poller_ended()  # only waiting: nothing read
    await send_decisions("resumed", {"call_1": Approve()})
    await reached(entered.wait(), "the approved tool did not start", started)
    await asyncio.to_thread(client_abort, db, "resumed", REASON)
    result = await asyncio.wait_for(started, SAFETY_SECONDS)
    assert (result.state, result.error) == (State.ABORTED, REASON)
    assert not never.is_set()  # nothing but the abort ended the tool
    answers = [m for m in result.messages if isinstance(m, ToolResultMessage)]
    assert [(m.tool_call_id, m.is_error) for m in answers] == [("call_1", True)]
    assert_valid_history(result.messages)
