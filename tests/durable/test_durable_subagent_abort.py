"""Issue 37, item 2 under DBOS: the parent's durable abort (`abort`, `Client.abort`) reaches a
sub-agent that is running, not only at the parent's next model request. The sub-agent is inside
a long-running tool, waiting on its model, or waiting in its ``before_tool_call`` hook (its
approval): each is aborted at once (under the usual grace rules), and every call at both levels
is answered. The tests wait on events; nothing is asserted about time."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("dbos", reason="the durable tests need the dbos extra")

from dbos import DBOS
from durable_subagents import worker_env
from launched_process import SAFETY_SECONDS, client_abort, reached

from statemachine_agent import Agent, State, ToolCallInfo, ToolResultMessage, tool
from statemachine_agent.durable import Client, abort, decode_result, launch, run, shutdown
from statemachine_agent.models import FunctionModel
from statemachine_agent.testing import assert_valid_history

REASON = "stop the research"
PARENT_ANSWER = "unreachable: the run was aborted"


def _call(call_id: str, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    use = {"type": "tool_use", "id": call_id, "name": name, "input": arguments}
    return {"content": [use], "stop_reason": "tool_use"}


class Tree:
    """A parent whose ``research`` tool is a sub-agent that gets stuck at ``where``: in its
    ``hold`` tool, in its model request, or in its ``before_tool_call`` hook (approval). The
    test waits on ``stuck``; nothing ever releases it but the abort."""

    def __init__(self, where: str) -> None:
        self.where = where
        self.stuck = asyncio.Event()
        self.never = asyncio.Event()
        self.children: list[Agent] = []

    async def _stick(self) -> None:
        self.stuck.set()
        await self.never.wait()

    async def hold(self) -> str:
        """Hold until released."""
        await self._stick()
        return "released"

    async def _child_model(self, messages: list[object], request: object) -> object:
        if self.where == "model":
            await self._stick()
        if not any(isinstance(m, ToolResultMessage) for m in messages):
            return _call("c1", "hold", {})
        return "the child is done"

    async def _approve(self, info: ToolCallInfo) -> None:
        if self.where == "approval":
            await self._stick()  # a person who never answers

    def _parent_model(self, messages: list[object], request: object) -> object:
        if not any(isinstance(m, ToolResultMessage) for m in messages):
            return _call("p1", "research", {"prompt": "otters"})
        return PARENT_ANSWER

    def __call__(self) -> Agent:
        child = Agent(
            FunctionModel(self._child_model),
            tools=[tool(self.hold)],
            before_tool_call=self._approve,
            abort_grace_seconds=0,  # hold ignores the signal: cancelled at once
        )
        self.children.append(child)
        research = child.as_tool("research", "Research a topic.")
        return Agent(FunctionModel(self._parent_model), tools=[research])


@pytest.fixture
def db(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The test's database: SQLite in its folder, or (``indirect`` param ``"postgres"``) a
    throwaway PostgreSQL server (skipped, saying why, without its binaries)."""
    if getattr(request, "param", "sqlite") == "postgres":
        return str(request.getfixturevalue("postgres").url)
    return f"sqlite:///{tmp_path / 'runs.sqlite'}"


@pytest.fixture
async def launched(db: str) -> AsyncIterator[list[Tree]]:
    """DBOS launched in this process on the test's database; the test appends its `Tree`."""
    trees: list[Tree] = []

    def factory() -> Agent:
        return trees[-1]()

    await launch(db, factory, executor_id="subagent-abort", poll_seconds=0.05)
    try:
        yield trees
    finally:
        shutdown()


def _assert_aborted_at_both_levels(tree: Tree, result: Any, where: str) -> None:
    assert (result.state, result.error) == (State.ABORTED, REASON)
    answers = [m for m in result.messages if isinstance(m, ToolResultMessage)]
    assert [(m.tool_call_id, m.is_error) for m in answers] == [("p1", True)]
    assert answers[0].text == f"Sub-agent 'research' ended in state 'aborted': {REASON}"
    assert result.text != PARENT_ANSWER
    assert_valid_history(result.messages)
    (child,) = tree.children
    assert_valid_history(child.messages)
    child_answers = [m for m in child.messages if isinstance(m, ToolResultMessage)]
    if where == "model":  # aborted inside its first request: no call was made
        assert child_answers == []
    else:  # its hold call (running, or waiting for approval) answered as an error
        assert [(m.tool_call_id, m.is_error) for m in child_answers] == [("c1", True)]


@pytest.mark.parametrize("db", ["sqlite", "postgres"], indirect=True)
@pytest.mark.parametrize("where", ["tool", "model", "approval"])
async def test_a_durable_abort_reaches_a_running_sub_agent_and_every_call_is_answered(
    launched: list[Tree], where: str
) -> None:
    tree = Tree(where)
    launched.append(tree)
    started = asyncio.ensure_future(run("Research otters.", run_id=f"abort-{where}"))
    await reached(tree.stuck.wait(), "the run did not get stuck", started)
    await abort(f"abort-{where}", REASON)
    result = await asyncio.wait_for(started, SAFETY_SECONDS)
    _assert_aborted_at_both_levels(tree, result, where)
    assert not tree.never.is_set()  # nothing but the abort ended the wait
    status = await DBOS.get_workflow_status_async(f"abort-{where}")
    assert status is not None and status.status == "SUCCESS"


async def test_a_client_abort_from_another_process_reaches_a_sub_agent_in_its_tool(
    launched: list[Tree], db: str
) -> None:
    tree = Tree("tool")
    launched.append(tree)
    started = asyncio.ensure_future(run("Research otters.", run_id="client-abort"))
    await reached(tree.stuck.wait(), "the sub-agent's tool did not start", started)
    await asyncio.to_thread(client_abort, db, "client-abort", REASON)
    result = await asyncio.wait_for(started, SAFETY_SECONDS)
    _assert_aborted_at_both_levels(tree, result, "tool")


async def test_a_sub_agent_batch_that_ends_without_an_abort_ends_its_watch_and_the_run_goes_on(
    launched: list[Tree],
) -> None:
    # The batch wakes its own abort watch when it ends; the wake-up is no abort: the parent goes
    # on to its final answer.
    tree = Tree("none")
    tree.never.set()  # hold returns at once
    launched.append(tree)
    result = await asyncio.wait_for(run("Research otters.", run_id="no-abort"), SAFETY_SECONDS)
    assert (result.state, result.text) == (State.DONE, PARENT_ANSWER)
    assert_valid_history(result.messages)


# -- an abort sent while no worker runs the run -------------------------------------------------

HERE = Path(__file__).resolve().parent
CHILD = HERE / "durable_subagent_child.py"


def test_an_abort_sent_while_the_worker_is_dead_mid_sub_agent_ends_the_recovered_run_aborted(
    tmp_path: Path, db: str
) -> None:
    # The worker dies inside the sub-agent (its wait_here call running); the abort is sent while
    # no worker runs the run; the relaunched worker replays the recorded steps and receives the
    # abort there: the run ends aborted (not in DBOS's ERROR), every call at both levels
    # answered, nothing completed run again.
    side, fifo = tmp_path / "side-effects.txt", tmp_path / "ready.fifo"
    os.mkfifo(fifo)
    worker = subprocess.Popen(
        [sys.executable, str(CHILD), db, "dead-abort"],
        env=worker_env(side, 3600, fifo),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        with fifo.open(encoding="utf-8") as ready:  # opens once wait_here runs
            assert ready.readline() == "wait\n"
    finally:
        worker.kill()
        worker.wait(timeout=SAFETY_SECONDS)
        assert worker.stderr is not None
        worker.stderr.close()
    client = Client(db)
    try:
        client.abort("dead-abort", REASON)
    finally:
        client.close()
    relaunch = subprocess.run(
        [sys.executable, str(CHILD), db, "dead-abort"],
        env=worker_env(side, 0),
        capture_output=True,
        text=True,
        timeout=SAFETY_SECONDS,
    )
    assert relaunch.returncode == 0, relaunch.stderr
    result = decode_result(json.loads(relaunch.stdout.strip().splitlines()[-1]))
    assert (result.state, result.error) == (State.ABORTED, REASON)
    answers = [m for m in result.messages if isinstance(m, ToolResultMessage)]
    assert [(m.tool_call_id, m.is_error) for m in answers] == [("p1", True)]
    assert answers[0].text.startswith("Sub-agent 'research' ended in state 'aborted'")
    assert_valid_history(result.messages)
    lines = side.read_text(encoding="utf-8").splitlines()
    assert (lines.count("note"), lines.count("wait")) == (1, 1)  # nothing ran again
    assert lines.count("parent_model") == 1  # no request after the abort
