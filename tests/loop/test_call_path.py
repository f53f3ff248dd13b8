"""The tool-call path of a turn, where it was made cheaper (issue 39): each shortcut keeps what
the longer path did (results, holds, events)."""

from __future__ import annotations

import asyncio

import pytest
from loop_helpers import NOT_RUN, results_of

from statemachine_agent import Agent, Defer, State, ToolCallInfo, tool
from statemachine_agent.models import ScriptedModel
from statemachine_agent.testing import assert_valid_history
from statemachine_agent.testing.steps import call, text_response, tool_response

INTERRUPTED = (
    "Interrupted while running: the run was aborted. The call may have partly completed; "
    "check its effects before retrying."
)


async def test_cancelling_the_run_while_a_call_is_deferred_answers_every_call_and_holds_none() -> (
    None
):
    started = asyncio.Event()

    @tool
    async def waits() -> str:
        """Waits until cancelled."""
        started.set()
        await asyncio.Event().wait()
        return "never"

    @tool
    async def write() -> str:
        """Needs review."""
        return "written"

    def review(info: ToolCallInfo) -> Defer | None:
        return Defer("writes need review") if info.tool.name == "write" else None

    model = ScriptedModel(
        [tool_response(call("write", id="d1"), call("waits", id="w1")), text_response("no")]
    )
    agent = Agent(model, tools=[write, waits], before_tool_call=review)
    task = asyncio.ensure_future(agent.run("Go"))
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    # The cancelled run holds nothing for a decision: the deferred call is answered too.
    assert agent.state is State.ABORTED
    assert [(r.tool_call_id, r.is_error, r.text) for r in results_of(agent.messages)] == [
        ("d1", True, NOT_RUN),
        ("w1", True, INTERRUPTED),
    ]
    assert_valid_history(agent.messages)
