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
from typing import Any

import pytest

from statemachine_agent import (
    Agent,
    AssistantMessage,
    State,
    StopReason,
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
