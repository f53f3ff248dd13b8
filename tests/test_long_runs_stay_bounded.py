"""Faults found by replaying peer reports against issue 32's work, fixed by kind: compaction and
any history replacement keep a batch awaiting approval; a call that ignores its cancellation
cannot hold an aborted run open; the default summarizer's requests count toward the limits.
(The reports' own tests are in ``tests/loop/test_compaction_overflow.py``,
``tests/loop/test_limits.py`` and ``tests/tracing/test_tracing.py``.)"""

from __future__ import annotations

import asyncio
import contextlib
import gc
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from loop_helpers import file_tools, hello_then_read_a_and_write_b, review_writes

from statemachine_agent import (
    Agent,
    Approve,
    AssistantMessage,
    Compaction,
    Message,
    State,
    ToolResultMessage,
    UsageError,
    UsageLimits,
    tool,
)
from statemachine_agent._protocol import INTERRUPTED
from statemachine_agent.models import FunctionModel, ScriptedModel
from statemachine_agent.models._base import ModelRequest
from statemachine_agent.session import compact
from statemachine_agent.testing import assert_valid_history
from statemachine_agent.testing.steps import call, text_response, tool_response

# -- any history replacement keeps a batch awaiting approval ------------------------------------


async def _paused(ran: list[str], path: Path | None = None) -> Agent:
    model = ScriptedModel(hello_then_read_a_and_write_b())
    agent = Agent(model, tools=file_tools(ran), before_tool_call=review_writes, session=path)
    await agent.run("hi")
    assert (await agent.run("Read a, then write b")).state is State.AWAITING_APPROVAL
    return agent


async def test_a_history_without_the_response_awaiting_approval_is_refused() -> None:
    agent = await _paused([])
    before = list(agent.messages)
    with pytest.raises(UsageError, match="calls w1 are awaiting approval"):
        agent.messages = before[:-1]  # drops the response holding r1 and w1
    with pytest.raises(UsageError, match="w1"):
        agent.messages = [*before, AssistantMessage(content=[])]
    assert agent.messages == before
    agent.messages = before[-2:]  # keeps the response: allowed
    done = await agent.run(decisions={"w1": Approve()})
    assert done.state is State.DONE, done.error
    assert_valid_history(agent.messages)


async def test_a_log_compacted_while_calls_await_approval_resumes_with_the_held_results(
    tmp_path: Path,
) -> None:
    ran: list[str] = []
    path = tmp_path / "run.jsonl"
    agent = await _paused(ran, path)
    assert await compact(agent, lambda old: "hi and hello", keep_last=1)
    agent.close()
    resumed = Agent.resume(
        path,
        model=ScriptedModel([text_response("Read a, wrote b.")]),
        tools=file_tools(ran),
        before_tool_call=review_writes,
    )
    assert resumed.state is State.AWAITING_APPROVAL
    assert [c.id for c in resumed.pending] == ["w1"]  # r1 ran: its result is held, not pending
    done = await resumed.run(decisions={"w1": Approve()})
    resumed.close()
    assert done.state is State.DONE, done.error
    assert ran == ["read a", "write b"]
    results = {m.tool_call_id: m.text for m in resumed.messages if isinstance(m, ToolResultMessage)}
    assert results == {"r1": "contents of a", "w1": "wrote b"}
    assert_valid_history(resumed.messages)


# -- a single call that ignores its cancellation does not hold an aborted run open --------------


@pytest.mark.timeout(60)
@pytest.mark.parametrize("mode", ["sequential", "parallel"])  # a batch of one: run inline
async def test_a_single_async_call_that_ignores_the_abort_is_left_and_the_run_ends(
    mode: str,
) -> None:
    entered = asyncio.Event()
    release = asyncio.Event()
    ended = asyncio.Event()
    finished: list[str] = []
    unretrieved: list[dict[str, Any]] = []
    loop = asyncio.get_running_loop()
    loop.set_exception_handler(lambda _loop, context: unretrieved.append(context))

    @tool
    async def stubborn() -> str:
        """Ignore every cancellation until released, then fail."""
        entered.set()
        while not release.is_set():
            with contextlib.suppress(asyncio.CancelledError):  # ignores the abort
                await release.wait()
        finished.append("late")
        ended.set()  # its task ends in this same step, the failure below caught or not
        raise RuntimeError("a late failure nobody waits for")

    model = ScriptedModel([tool_response(call("stubborn", id="s1"))])
    agent = Agent(model, tools=[stubborn], abort_grace_seconds=0.05, tool_execution=mode)  # type: ignore[arg-type]
    task = asyncio.ensure_future(agent.run("go"))
    try:
        await entered.wait()
        agent.abort("stop")
        # A failure guard only: the run must end while the tool still ignores the abort.
        done, _ = await asyncio.wait({task}, timeout=30)
        assert done, "the run waited for a tool that ignores its cancellation"
        result = task.result()
        assert finished == []  # the run ended while the call still ran
        assert result.state is State.ABORTED and result.error == "stop"
        [answer] = [m for m in agent.messages if isinstance(m, ToolResultMessage)]
        assert answer.tool_call_id == "s1" and answer.is_error and answer.text == INTERRUPTED
        assert_valid_history(agent.messages)
    finally:
        release.set()  # the straggler ends now, failing; its result is ignored
        # (on a regression too: the tool is released, so the test fails rather than hangs)
    await ended.wait()
    gc.collect()  # an unretrieved task exception is reported when the task is collected
    assert [m.text for m in agent.messages if isinstance(m, ToolResultMessage)] == [INTERRUPTED]
    assert not [c for c in unretrieved if "never retrieved" in str(c.get("message"))], unretrieved


# -- the default summarizer's requests count toward max_requests --------------------------------


@tool
def read_page(n: int) -> str:
    """Read one page.

    Args:
        n: the page's number.
    """
    return f"page {n}: " + "text " * 300


def _paging_model(sent: list[bool]) -> FunctionModel:
    def respond(messages: Sequence[Message], request: ModelRequest) -> Any:
        sent.append(bool(request.tools))
        if not request.tools:
            return "Pages read so far: several."
        if sent.count(True) > 12:
            return "All pages read."
        return tool_response(call("read_page", {"n": len(sent)}, id=f"p{len(sent)}"))

    return FunctionModel(respond, context_window=3_000)


async def test_the_default_summarizers_requests_count_toward_max_requests() -> None:
    sent: list[bool] = []
    agent = Agent(
        _paging_model(sent),
        tools=[read_page],
        max_turns=50,
        compaction=Compaction(threshold=0.6, keep_recent_turns=1),
    )
    result = await agent.run("Read every page.")
    assert result.state is State.DONE, result.error
    summaries = sent.count(False)
    assert summaries >= 2  # compacted, with the agent's own model
    assert result.counts.requests == len(sent)  # every request sent, the summarizer's too

    limit = len(sent) - summaries + 1  # enough for the turns alone, not with the summaries
    sent.clear()
    limited = Agent(
        _paging_model(sent),
        tools=[read_page],
        max_turns=50,
        limits=UsageLimits(max_requests=limit),
        compaction=Compaction(threshold=0.6, keep_recent_turns=1),
    )
    stopped = await limited.run("Read every page.")
    assert len(sent) <= limit  # no request past the limit, the summarizer's included
    assert stopped.counts.requests == len(sent)
    assert stopped.state is State.MAX_TURNS
    assert stopped.error is not None and f"max_requests={limit}" in stopped.error, stopped.error
    assert_valid_history(limited.messages)
