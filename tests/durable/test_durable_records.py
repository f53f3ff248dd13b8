"""Issue 39, item 3: what a durable turn records, and an abort that costs no record.

A turn with one idempotent call records two DBOS steps (the model request and the call), three
with a call that is not idempotent (its ``tool_start`` marker stays: recovery never re-runs such
a call blindly); nothing else, no abort check. An abort (`abort`, or `Client.abort` from another
process) still reaches a run that is in a model request, in a tool call, or waiting for
approval, and a replay of an aborted run takes the path the original took. Records are counted
with DBOS's public client (`worker_process.recorded_steps`); the tests wait on events, nothing
is asserted about time (the latency is `benchmarks/bench_durable.py`'s figure)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("dbos", reason="the durable tests need the dbos extra")

from dbos import DBOS
from launched_process import SAFETY_SECONDS, AgentFactory, client_abort, reached
from worker_process import recorded_steps

from statemachine_agent import Agent, State, ToolContext, ToolResultMessage, tool
from statemachine_agent.durable import abort, decode_result, launch, pending, run, shutdown
from statemachine_agent.models import FunctionModel
from statemachine_agent.testing import assert_valid_history

REASON = "stop, please"
TURNS = 3


def _call(done: int, name: str) -> dict[str, Any]:
    use = {"type": "tool_use", "id": f"call_{done + 1}", "name": name, "input": {}}
    return {"content": [use], "stop_reason": "tool_use"}


def _turns_model(name: str, turns: int = TURNS) -> Callable[[list[Any], Any], Any]:
    def model(messages: list[Any], request: Any) -> Any:
        done = sum(isinstance(m, ToolResultMessage) for m in messages)
        return _call(done, name) if done < turns else f"finished after {done} calls"

    return model


async def noop() -> str:
    """Do nothing."""
    return "ok"


@pytest.fixture
def db(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'runs.sqlite'}"


@pytest.fixture
async def factory(db: str) -> AsyncIterator[AgentFactory]:
    made = AgentFactory(lambda: Agent(FunctionModel(_turns_model("noop"))))
    await launch(db, made, executor_id="records")
    try:
        yield made
    finally:
        shutdown()


# -- records a turn ------------------------------------------------------------------------------


def _expected_steps(turns: int, *, marker: bool) -> list[str]:
    steps: list[str] = []
    for turn in range(1, turns + 1):
        steps.append("model_request")
        if marker:
            steps.append(f"tool_start:call_{turn}")
        steps.append(f"tool:call_{turn}")
    return [*steps, "model_request"]


async def test_a_turn_with_an_idempotent_call_records_two_dbos_steps(
    factory: AgentFactory, db: str
) -> None:
    factory.build = lambda: Agent(
        FunctionModel(_turns_model("noop")), tools=[tool(idempotent=True)(noop)]
    )
    result = await run("Go.", run_id="idempotent")
    assert (result.state, result.turns) == (State.DONE, TURNS + 1)
    steps = await asyncio.to_thread(recorded_steps, db, "idempotent")
    # Every record DBOS holds for the run (its own ``DBOS.*`` operations included): the
    # request and the call of each turn, and the final answer's request.
    assert steps == _expected_steps(TURNS, marker=False)
    assert len(steps) == 2 * TURNS + 1


async def test_a_turn_with_a_non_idempotent_call_records_three_dbos_steps(
    factory: AgentFactory, db: str
) -> None:
    factory.build = lambda: Agent(FunctionModel(_turns_model("noop")), tools=[tool(noop)])
    result = await run("Go.", run_id="non-idempotent")
    assert (result.state, result.turns) == (State.DONE, TURNS + 1)
    steps = await asyncio.to_thread(recorded_steps, db, "non-idempotent")
    assert steps == _expected_steps(TURNS, marker=True)
    assert len(steps) == 3 * TURNS + 1


# -- an abort reaches a running or waiting run ---------------------------------------------------


class Stuck:
    """A model request or a tool call that never ends on its own: only an abort ends it."""

    def __init__(self) -> None:
        self.stuck = asyncio.Event()
        self.never = asyncio.Event()

    async def model(self, messages: list[Any], request: Any) -> Any:
        self.stuck.set()
        await self.never.wait()
        return "unreachable"

    async def hold(self) -> str:
        """Hold until released (ignores the abort signal: cancelled when the grace ends)."""
        self.stuck.set()
        await self.never.wait()
        return "released"

    async def cooperate(self, ctx: ToolContext) -> str:
        """Hold until the run is aborted, then say so (the call's step ends and is recorded)."""
        self.stuck.set()
        await ctx.signal.wait()
        return "stopped by the abort"


async def _abort_once_stuck(stuck: Stuck, run_id: str, db: str, sender: str) -> Any:
    started = asyncio.ensure_future(run("Go.", run_id=run_id))
    await reached(stuck.stuck.wait(), "the run did not get stuck", started)
    if sender == "client":
        await asyncio.to_thread(client_abort, db, run_id, REASON)
    else:
        await abort(run_id, REASON)
    result = await asyncio.wait_for(started, SAFETY_SECONDS)
    assert not stuck.never.is_set()  # nothing but the abort ended the wait
    status = await DBOS.get_workflow_status_async(run_id)
    assert status is not None and status.status == "SUCCESS"  # an ending, not DBOS's ERROR
    return result


@pytest.mark.parametrize("sender", ["client", "launched"])
async def test_an_abort_reaches_a_run_in_a_slow_model_request(
    factory: AgentFactory, db: str, sender: str
) -> None:
    stuck = Stuck()
    factory.build = lambda: Agent(FunctionModel(stuck.model), abort_grace_seconds=0)
    result = await _abort_once_stuck(stuck, f"model-{sender}", db, sender)
    assert (result.state, result.error) == (State.ABORTED, REASON)
    assert not any(isinstance(m, ToolResultMessage) for m in result.messages)
    assert_valid_history(result.messages)


@pytest.mark.parametrize("sender", ["client", "launched"])
async def test_an_abort_reaches_a_run_in_a_slow_tool_call(
    factory: AgentFactory, db: str, sender: str
) -> None:
    stuck = Stuck()
    factory.build = lambda: Agent(
        FunctionModel(_turns_model("hold")), tools=[tool(stuck.hold)], abort_grace_seconds=0
    )
    result = await _abort_once_stuck(stuck, f"tool-{sender}", db, sender)
    assert (result.state, result.error) == (State.ABORTED, REASON)
    answers = [m for m in result.messages if isinstance(m, ToolResultMessage)]
    assert [(m.tool_call_id, m.is_error) for m in answers] == [("call_1", True)]
    assert result.text != "finished after 1 calls"
    assert_valid_history(result.messages)


async def test_a_client_abort_reaches_a_run_waiting_for_approval(
    factory: AgentFactory, db: str
) -> None:
    factory.build = lambda: Agent(
        FunctionModel(_turns_model("noop")), tools=[tool(requires_approval=True)(noop)]
    )
    started = asyncio.ensure_future(run("Go.", run_id="waiting"))
    calls = await pending("waiting", wait_seconds=SAFETY_SECONDS)
    assert [call.id for call in calls] == ["call_1"]
    await asyncio.to_thread(client_abort, db, "waiting", REASON)
    result = await asyncio.wait_for(started, SAFETY_SECONDS)
    assert (result.state, result.error) == (State.ABORTED, REASON)
    answers = [m for m in result.messages if isinstance(m, ToolResultMessage)]
    assert [(m.tool_call_id, m.is_error) for m in answers] == [("call_1", True)]
    assert_valid_history(result.messages)


# -- a replay takes the original's path ----------------------------------------------------------


async def test_a_replay_of_a_run_aborted_in_a_call_ends_aborted_at_the_same_place(
    factory: AgentFactory, db: str
) -> None:
    # The original run is aborted while its first call runs; the call stops and its step is
    # recorded with the abort. A fork from after that step replays the request and the call
    # (DBOS copies their records): no abort is sent to the fork, yet it ends aborted there,
    # with the original's history, instead of asking the model again.
    stuck = Stuck()
    asked: list[int] = []
    model = _turns_model("cooperate")

    def counting(messages: list[Any], request: Any) -> Any:
        asked.append(len(messages))
        return model(messages, request)

    factory.build = lambda: Agent(FunctionModel(counting), tools=[tool(stuck.cooperate)])
    original = await _abort_once_stuck(stuck, "original", db, "launched")
    assert (original.state, asked) == (State.ABORTED, [1])
    answers = [m for m in original.messages if isinstance(m, ToolResultMessage)]
    assert [m.text for m in answers] == ["stopped by the abort"]
    steps = await asyncio.to_thread(recorded_steps, db, "original")
    assert steps == ["model_request", "tool_start:call_1", "tool:call_1"]
    handle = await DBOS.fork_workflow_async("original", len(steps) + 1)
    replayed = decode_result(await asyncio.wait_for(handle.get_result(), SAFETY_SECONDS))
    assert (replayed.state, replayed.error) == (State.ABORTED, REASON)
    assert replayed.messages == original.messages
    assert asked == [1]  # the model was not asked again


async def test_a_client_abort_of_one_run_leaves_another_run_of_the_worker_going(
    factory: AgentFactory, db: str
) -> None:
    # Both runs are in a model request when run "a" is aborted through the database only (the
    # worker reads the attributes of all its runs at once): run "b" must not take a's abort.
    a_stuck, b_stuck, b_gate, never = (asyncio.Event() for _ in range(4))

    async def model(messages: list[Any], request: Any) -> Any:
        if messages[0].text == "A.":
            a_stuck.set()
            await never.wait()
        b_stuck.set()
        await b_gate.wait()
        return "b finished"

    factory.build = lambda: Agent(FunctionModel(model), abort_grace_seconds=0)
    a = asyncio.ensure_future(run("A.", run_id="a"))
    b = asyncio.ensure_future(run("B.", run_id="b"))
    both = asyncio.gather(a_stuck.wait(), b_stuck.wait())
    await reached(both, "both runs were not stuck", a, b)
    await asyncio.to_thread(client_abort, db, "a", REASON)
    aborted = await asyncio.wait_for(a, SAFETY_SECONDS)
    assert (aborted.state, aborted.error) == (State.ABORTED, REASON)
    b_gate.set()
    going = await asyncio.wait_for(b, SAFETY_SECONDS)
    assert (going.state, going.text, going.error) == (State.DONE, "b finished", None)
    assert_valid_history(going.messages)
