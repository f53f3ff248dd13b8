"""The names DBOS records a durable run under stay those of the single-module
``statemachine_agent.durable`` (before it became a package): recovery finds a recorded run by
its workflow name and replays its steps by name, so a run started by an older build of the
same release must still be recognised after the code moved."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("dbos", reason="the durable tests need the dbos extra")

from dbos import DBOS

import statemachine_agent
from statemachine_agent import Agent, tool
from statemachine_agent.durable import launch, run, shutdown
from statemachine_agent.models import FunctionModel


def _model(messages: list[Any], request: Any) -> Any:
    if len(messages) == 1:
        return {
            "content": [{"type": "tool_use", "id": "n1", "name": "note", "input": {"text": "x"}}],
            "stop_reason": "tool_use",
        }
    return "noted"


def note(text: str) -> str:
    """Note some text."""
    return f"noted {text}"


def _agent() -> Agent:
    return Agent(FunctionModel(_model), tools=[tool(note)])


@pytest.fixture
async def launched(tmp_path: Path) -> AsyncIterator[None]:
    await launch(f"sqlite:///{tmp_path / 'runs.sqlite'}", _agent, executor_id="names")
    try:
        yield
    finally:
        shutdown()


async def test_a_durable_run_is_recorded_under_the_workflow_and_step_names_of_the_old_module(
    launched: None,
) -> None:
    result = await run("Note x.", run_id="names-1")
    assert (result.state, result.text) == ("done", "noted")

    (status,) = await DBOS.list_workflows_async(workflow_ids=["names-1"])
    assert status.name == "statemachine_agent.durable.agent_run"
    assert status.app_version == f"statemachine-agent-{statemachine_agent.__version__}"
    assert status.queue_name is None  # started in process, not from the queue

    steps = await DBOS.list_workflow_steps_async("names-1")
    ours = [s["function_name"] for s in steps if not s["function_name"].startswith("DBOS.")]
    assert ours == ["model_request", "tool_start:n1", "tool:n1", "model_request"]


async def test_a_run_enqueued_by_the_literal_old_workflow_name_runs_on_a_worker(
    tmp_path: Path,
) -> None:
    """A client of the old module put runs on the queue under this literal workflow name; a
    worker of the package must find its workflow by it."""
    from statemachine_agent.durable import Client

    db = f"sqlite:///{tmp_path / 'runs.sqlite'}"
    await launch(db, _agent, executor_id="names-worker", poll_seconds=0.05)
    client = Client(db)
    try:
        from dbos import DBOSClient

        raw = DBOSClient(system_database_url=db, application_name="statemachine-agent")
        try:
            options: Any = {
                "workflow_name": "statemachine_agent.durable.agent_run",
                "queue_name": "statemachine-agent-runs",
                "workflow_id": "names-queued",
                "app_version": f"statemachine-agent-{statemachine_agent.__version__}",
            }
            raw.enqueue(options, "Note x.", None, 60.0)
        finally:
            raw.destroy()
        handle = await DBOS.retrieve_workflow_async("names-queued")
        await handle.get_result()
        status = client.status("names-queued")
        assert status.status == "SUCCESS"
        assert status.result is not None and status.result.text == "noted"
    finally:
        client.close()
        shutdown()
