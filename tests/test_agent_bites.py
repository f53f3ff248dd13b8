"""Issue 15: one named test per engine bug a review put in by hand that the suite let through.

Each test asserts the exact history, texts and events its case names, through the public API only
(`Agent`, `RunResult`, events), so it outlives a redesign of the engine's internals.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import pytest

from statemachine_agent import (
    Agent,
    AssistantMessage,
    Deny,
    Event,
    RunEnd,
    State,
    StateChanged,
    StopReason,
    ToolCallInfo,
    ToolContext,
    ToolExecutionEnd,
    ToolExecutionStart,
    ToolResultMessage,
    tool,
)
from statemachine_agent.models import ScriptedModel
from statemachine_agent.testing import assert_valid_history
from statemachine_agent.testing.steps import call, text_response, tool_response

# The documented texts of calls that did not run (README "What the loop guarantees").
NOT_RUN = "Not run: the run was aborted before this call started."
NOT_RUN_AFTER_TERMINATION = "Not run: an earlier call of this batch ended the run."


def roles(messages: list[Any]) -> list[str]:
    return [m.role for m in messages]


def result_texts(messages: list[Any]) -> list[tuple[str, str, bool]]:
    return [
        (m.tool_call_id, m.text, m.is_error) for m in messages if isinstance(m, ToolResultMessage)
    ]


def tool_events(events: list[Event]) -> list[tuple[str, str]]:
    return [
        (e.type, e.call.id) for e in events if isinstance(e, ToolExecutionStart | ToolExecutionEnd)
    ]


def states(events: list[Event]) -> list[tuple[str, str]]:
    return [(e.source, e.dest) for e in events if isinstance(e, StateChanged)]


# -- bug 1: a tool swallowing the run task's cancellation in an inline batch -----------------------


@pytest.mark.parametrize("mode", ["parallel", "sequential"])  # one call: both run it inline
async def test_bug1_cancel_swallowed_by_tool_in_inline_batch_still_aborts(mode: str) -> None:
    started = asyncio.Event()

    @tool
    async def stubborn() -> str:
        """Wait, and swallow a cancellation."""
        started.set()
        try:
            await asyncio.Event().wait()  # never set: only the cancellation ends it
        except asyncio.CancelledError:
            return "cleaned up"
        return "finished"

    model = ScriptedModel([tool_response(call("stubborn", id="s")), text_response("next turn")])
    agent = Agent(model, tools=[stubborn], tool_execution=mode)  # type: ignore[arg-type]
    events: list[Event] = []
    agent.subscribe(events.append)
    task = asyncio.create_task(agent.run("go"))
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert model.calls == 1, "a second request was sent after the task was cancelled"
    assert roles(agent.messages) == ["user", "assistant", "tool_result"]
    assert agent.state is State.ABORTED
    (res,) = [m for m in agent.messages if isinstance(m, ToolResultMessage)]
    assert res.tool_call_id == "s"
    assert tool_events(events) == [("tool_execution_start", "s"), ("tool_execution_end", "s")]
    assert states(events)[-1] == ("executing_tools", "aborted")
    (end,) = [e for e in events if isinstance(e, RunEnd)]
    assert end.result.state is State.ABORTED
    assert_valid_history(agent.messages)


# -- bug 2: sequential mode, a terminating denial stops the batch ---------------------------------


async def test_bug2_sequential_terminating_denial_never_runs_the_next_call() -> None:
    ran: list[str] = []

    @tool
    def write(path: str) -> str:
        """Write."""
        ran.append(path)
        return f"wrote {path}"

    def guard(info: ToolCallInfo) -> Deny | None:
        return Deny("stop here", terminate=True) if info.call.id == "first" else None

    model = ScriptedModel(
        [
            tool_response(
                call("write", {"path": "a"}, id="first"), call("write", {"path": "b"}, id="second")
            ),
            text_response("never requested"),
        ]
    )
    agent = Agent(model, tools=[write], tool_execution="sequential", before_tool_call=guard)
    events: list[Event] = []
    agent.subscribe(events.append)
    result = await agent.run("go")
    assert ran == []
    assert result_texts(result.messages) == [
        ("first", "Denied: stop here", True),
        ("second", NOT_RUN_AFTER_TERMINATION, True),
    ]
    assert result.state is State.ABORTED and model.calls == 1
    assert result.error == "A tool call was denied and ended the run: stop here"
    # Only the denied call started; the second never did.
    assert tool_events(events) == [
        ("tool_execution_start", "first"),
        ("tool_execution_end", "first"),
    ]
    assert_valid_history(result.messages)


# -- bug 5: an after_tool_call hook that raises -------------------------------------------------


async def test_bug5_after_tool_call_hook_raising_gives_the_documented_error_result() -> None:
    @tool
    def echo(text: str) -> str:
        """Echo."""
        return text

    def after(info: ToolCallInfo, result: ToolResultMessage) -> None:
        raise RuntimeError("after bug")

    model = ScriptedModel([tool_response(call("echo", {"text": "x"}, id="e")), text_response("ok")])
    agent = Agent(model, tools=[echo], after_tool_call=after)
    events: list[Event] = []
    agent.subscribe(events.append)
    result = await agent.run("go")
    assert result_texts(result.messages) == [
        (
            "e",
            "The after_tool_call hook failed (RuntimeError: after bug); the call was not "
            "completed.",
            True,
        )
    ]
    assert result.state is State.DONE and result.text == "ok" and result.error is None
    assert roles(result.messages) == ["user", "assistant", "tool_result", "assistant"]
    ends = [e for e in events if isinstance(e, ToolExecutionEnd)]
    assert [e.result.text for e in ends] == [result_texts(result.messages)[0][1]]
    assert_valid_history(result.messages)


# -- bug 7: a before_tool_call hook that aborts, then awaits -------------------------------------


@pytest.mark.parametrize("mode", ["parallel", "sequential"])
async def test_bug7_hook_that_aborts_then_sleeps_runs_no_tool(mode: str) -> None:
    ran: list[str] = []

    @tool
    async def work(n: int) -> str:
        """Work."""
        ran.append(str(n))
        return f"worked {n}"

    async def before(info: ToolCallInfo) -> None:
        agent.abort("stopped by the permission hook")
        await asyncio.sleep(0.05)  # the hook goes on for a while after aborting (no race)

    model = ScriptedModel(
        [
            tool_response(call("work", {"n": 1}, id="w1"), call("work", {"n": 2}, id="w2")),
            text_response("never requested"),
        ]
    )
    agent = Agent(
        model,
        tools=[work],
        tool_execution=mode,  # type: ignore[arg-type]
        before_tool_call=before,
        abort_grace_seconds=5,
    )
    result = await agent.run("go")
    assert ran == []
    assert result_texts(result.messages) == [("w1", NOT_RUN, True), ("w2", NOT_RUN, True)]
    assert result.state is State.ABORTED and model.calls == 1
    assert result.error == "stopped by the permission hook"
    assert_valid_history(result.messages)


# -- bug 10: cooperative parallel tools keep their results within the grace period -----------------


async def test_bug10_two_cooperative_parallel_tools_keep_their_cleanup_results() -> None:
    started = {"a": asyncio.Event(), "b": asyncio.Event()}

    @tool
    async def worker(name: str, ctx: ToolContext) -> str:
        """Work until aborted, then clean up."""
        started[name].set()
        await ctx.signal.wait()
        await asyncio.sleep(0)  # clean-up takes a step after the abort
        await asyncio.sleep(0.01)
        return f"{name}: cleaned up"

    model = ScriptedModel(
        [
            tool_response(
                call("worker", {"name": "a"}, id="a"), call("worker", {"name": "b"}, id="b")
            ),
            text_response("never requested"),
        ]
    )
    agent = Agent(model, tools=[worker], abort_grace_seconds=5)
    events: list[Event] = []
    agent.subscribe(events.append)
    task = asyncio.create_task(agent.run("go"))
    await started["a"].wait()
    await started["b"].wait()
    agent.abort("user pressed stop")
    result = await task
    assert result_texts(result.messages) == [
        ("a", "a: cleaned up", False),
        ("b", "b: cleaned up", False),
    ]
    assert result.state is State.ABORTED and result.error == "user pressed stop"
    assert model.calls == 1
    assert sorted(tool_events(events)) == [
        ("tool_execution_end", "a"),
        ("tool_execution_end", "b"),
        ("tool_execution_start", "a"),
        ("tool_execution_start", "b"),
    ]
    assert_valid_history(result.messages)


# -- bugs the mutation check (tools/mutate.py) found uncaught -------------------------------------


async def test_arguments_changed_by_a_before_hook_are_validated_again() -> None:
    ran: list[Any] = []

    @tool
    def repeat(text: str, times: int) -> str:
        """Repeat."""
        ran.append((text, times))
        return text * times

    def before(info: ToolCallInfo) -> dict[str, Any]:
        if info.call.id == "bad":
            return {"text": "x", "times": "many"}  # not an int: must be refused
        return {"text": "y", "times": "2"}  # a numeric string: validated (coerced) to 2

    model = ScriptedModel(
        [
            tool_response(
                call("repeat", {"text": "a", "times": 1}, id="bad"),
                call("repeat", {"text": "b", "times": 1}, id="good"),
            ),
            text_response("ok"),
        ]
    )
    result = await Agent(model, tools=[repeat], before_tool_call=before).run("go")
    assert ran == [("y", 2)]
    (bad, good) = result_texts(result.messages)
    assert bad[0] == "bad" and bad[2] is True
    assert bad[1].startswith("Invalid arguments for tool 'repeat'") and "times" in bad[1]
    assert '"times": "many"' in bad[1]
    assert good == ("good", "yy", False)
    assert result.state is State.DONE
    assert_valid_history(result.messages)


class SwallowingModel:
    """A model whose stream catches the task's cancellation and answers anyway."""

    name = "swallowing"

    def __init__(self) -> None:
        self.calls = 0
        self.streaming = asyncio.Event()

    def stream(self, request: Any) -> Any:
        self.calls += 1
        return self._stream()

    async def _stream(self) -> Any:
        from statemachine_agent.models import ResponseComplete

        self.streaming.set()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.Event().wait()  # only the cancellation ends this wait
        yield ResponseComplete(
            AssistantMessage.model_validate(
                {"content": [{"type": "text", "text": "answer anyway"}], "stop_reason": "end_turn"}
            )
        )


async def test_a_model_swallowing_the_cancellation_still_ends_the_run_aborted() -> None:
    model = SwallowingModel()
    agent = Agent(model)  # type: ignore[arg-type]
    events: list[Event] = []
    agent.subscribe(events.append)
    task = asyncio.create_task(agent.run("go"))
    await model.streaming.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert model.calls == 1
    assert agent.state is State.ABORTED
    assert roles(agent.messages) == ["user", "assistant"]
    last = agent.messages[-1]
    assert isinstance(last, AssistantMessage) and last.stop_reason == StopReason.ABORTED
    assert states(events) == [("idle", "awaiting_model"), ("awaiting_model", "aborted")]
    (end,) = [e for e in events if isinstance(e, RunEnd)]
    assert end.result.state is State.ABORTED
    assert_valid_history(agent.messages)
