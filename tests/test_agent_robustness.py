"""Robustness of the loop under adversarial but legitimate use (found by a review; each of these
failed before its fix): aborts that land between steps, the write queue behind slow permission
hooks, exceptions escaping tools or models, given histories that end mid-batch, blank tool output,
cancellation swallowed by a tool, progress from worker threads, the turn cap on text-only turns."""

import asyncio
import threading
from typing import Any

import pytest

from statemachine_agent import (
    Agent,
    AssistantMessage,
    Event,
    RunEnd,
    State,
    StateChanged,
    TextBlock,
    ToolCallBlock,
    ToolContext,
    ToolResultMessage,
    UserMessage,
    tool,
)
from statemachine_agent._errors import ModelRetryableError
from statemachine_agent._events import ToolExecutionUpdate, TurnStart
from statemachine_agent.models import ScriptedModel
from statemachine_agent.models._base import ResponseComplete
from statemachine_agent.testing import assert_valid_history
from statemachine_agent.testing.steps import call, text_response, tool_response

INTERRUPTED = (
    "Interrupted while running: the run was aborted. The call may have partly completed; "
    "check its effects before retrying."
)
NO_RESULT = (
    "no result recorded: the run ended before this call finished; it may or may not have run; "
    "check before retrying"
)


ABORTED_BEFORE_THE_REQUEST = [
    "run_start",
    "message_end",  # the prompt
    "state_changed",
    "turn_start",
    "state_changed",
    "turn_end",
    "run_end",
]


def transitions(events: list[Event]) -> list[tuple[str, str]]:
    return [(e.source, e.dest) for e in events if isinstance(e, StateChanged)]


def tool_texts(messages: list[Any]) -> list[str]:
    return [m.text for m in messages if isinstance(m, ToolResultMessage)]


# 1. abort() that lands after the top-of-loop check but before the stream suspends is lost
async def test_abort_during_transform_context_is_lost():
    model = ScriptedModel([text_response("hello")])

    async def transform(msgs):
        agent.abort("stop")  # e.g. user presses Esc while a slow compaction hook runs
        await asyncio.sleep(0.01)
        return msgs

    agent = Agent(model, transform_context=transform)
    events: list[Event] = []
    agent.subscribe(events.append)
    result = await agent.run("hi")
    assert model.calls == 0, "a request was sent after abort()"
    assert result.state is State.ABORTED and result.error == "stop"
    assert [m.role for m in result.messages] == ["user"]
    assert [e.type for e in events] == ABORTED_BEFORE_THE_REQUEST
    assert transitions(events) == [("idle", "awaiting_model"), ("awaiting_model", "aborted")]


async def test_abort_from_turnstart_subscriber_is_lost():
    model = ScriptedModel([text_response("hello")])
    agent = Agent(model)
    agent.subscribe(lambda e: isinstance(e, TurnStart) and agent.abort("x"))
    events: list[Event] = []
    agent.subscribe(events.append)
    result = await agent.run("hi")
    assert model.calls == 0, "a request was sent after abort()"
    assert result.state is State.ABORTED and result.error == "x"
    assert [m.role for m in result.messages] == ["user"]
    assert [e.type for e in events] == ABORTED_BEFORE_THE_REQUEST
    assert transitions(events) == [("idle", "awaiting_model"), ("awaiting_model", "aborted")]


# 2. per-resource write queue is not in declaration order when before_tool_call suspends
async def test_resource_queue_order_with_async_permission_hook():
    order = []

    @tool(resource="path")
    async def write(path: str, content: str) -> str:
        order.append(content)
        return "ok"

    second_approved = asyncio.Event()

    async def before(info):  # e.g. asks a human; the 2nd approval comes first
        if info.arguments["content"] == "1":
            await second_approved.wait()
        else:
            second_approved.set()

    model = ScriptedModel(
        [
            tool_response(
                call("write", {"path": "x", "content": "1"}, id="a"),
                call("write", {"path": "x", "content": "2"}, id="b"),
            ),
            text_response("done"),
        ]
    )
    agent = Agent(model, tools=[write], before_tool_call=before)
    result = await agent.run("hi")
    assert order == ["1", "2"]
    assert second_approved.is_set()
    assert tool_texts(result.messages) == ["ok", "ok"]
    assert result.state is State.DONE and result.text == "done"


# 3. unexpected exception escaping the batch / request leaves the machine mid-run forever
class Boom(BaseException):
    pass


async def test_baseexception_from_tool_leaves_state_executing_tools():
    @tool
    async def bad() -> str:
        raise Boom()

    model = ScriptedModel([tool_response(call("bad", id="a")), text_response("x")])
    agent = Agent(model, tools=[bad])
    events: list[Event] = []
    agent.subscribe(events.append)
    with pytest.raises(Boom):
        await agent.run("hi")
    # A bug escaping a tool batch ends the run failed (``fail`` leaves every active state), with
    # the call answered, then propagates.
    assert agent.state is State.FAILED and not agent.is_running
    assert [m.role for m in agent.messages] == ["user", "assistant", "tool_result"]
    assert tool_texts(agent.messages) == [INTERRUPTED]
    assert model.calls == 1
    (end,) = [e for e in events if isinstance(e, RunEnd)]
    assert end.result.state is State.FAILED and end.result.error == "Boom: "
    assert transitions(events)[-1] == ("executing_tools", "failed")


async def test_resource_function_error_leaves_state_executing_tools():
    def key(args):
        raise KeyError("path")

    @tool(resource=key)
    async def w(x: int) -> str:
        return "ok"

    model = ScriptedModel(
        [tool_response(call("w", {"x": 1}, id="a")), text_response("x"), text_response("y")]
    )
    agent = Agent(model, tools=[w])
    result = await agent.run("hi")
    assert result.state is State.DONE and result.text == "x"
    assert tool_texts(result.messages) == ["Could not prepare the call: KeyError: 'path'"]
    assert [m.role for m in result.messages] == ["user", "assistant", "tool_result", "assistant"]
    again = await agent.run("again")  # the agent is not stuck mid-run
    assert again.state is State.DONE and again.text == "y"


class EagerModel:
    """A Model whose stream() validates eagerly (a plain def, like ScriptedModel.stream)."""

    name = "eager"

    def __init__(self):
        self.n = 0

    def stream(self, request):
        self.n += 1
        if self.n == 1:
            raise ModelRetryableError("overloaded", kind="overloaded")
        return self._gen()

    async def _gen(self):
        yield ResponseComplete(
            AssistantMessage(content=[TextBlock(text="hi")], stop_reason="end_turn")
        )


async def test_model_stream_raising_synchronously():
    agent = Agent(EagerModel(), retry_backoff_seconds=0.01)
    events = []
    agent.subscribe(events.append)
    result = await agent.run("hi")
    assert result.state is State.DONE and result.text == "hi"
    assert agent.model.n == 2  # the failed attempt and its retry
    kinds = [e.type for e in events]
    # Before the fix: a turn_start without its turn_end, and no run_end.
    assert kinds.count("model_retry") == 1
    assert kinds.count("turn_start") == kinds.count("turn_end") == 1
    assert kinds[0] == "run_start" and kinds[-1] == "run_end" and kinds.count("run_end") == 1
    assert [m.role for m in result.messages] == ["user", "assistant"]


# 4. history produced by the engine violates invariant 1/4
async def test_dangling_calls_in_given_history():
    hist = [
        UserMessage("do"),
        AssistantMessage(
            content=[ToolCallBlock(id="t1", name="x", input={})], stop_reason="tool_use"
        ),
    ]
    model = ScriptedModel([text_response("ok")])
    agent = Agent(model, messages=hist)
    result = await agent.run("next")
    assert [(m.role, m.text) for m in result.messages] == [
        ("user", "do"),
        ("assistant", ""),
        ("tool_result", NO_RESULT),
        ("user", "next"),
        ("assistant", "ok"),
    ]
    assert [m.role for m in result.new_messages] == ["tool_result", "user", "assistant"]
    assert [m.role for m in model.requests[0].messages] == [
        "user",
        "assistant",
        "tool_result",
        "user",
    ]
    assert_valid_history(result.messages)


@pytest.mark.parametrize(
    "value",
    [
        TextBlock(text="  "),
        ToolResultMessage(tool_call_id="?", tool_name="?", content=[TextBlock(text="")]),
    ],
)
async def test_tool_value_with_blank_text(value):
    @tool
    async def t() -> object:
        return value

    model = ScriptedModel([tool_response(call("t", id="a")), text_response("done")])
    agent = Agent(model, tools=[t])
    result = await agent.run("hi")
    (res,) = [m for m in result.messages if isinstance(m, ToolResultMessage)]
    assert (res.tool_call_id, res.text, res.is_error) == ("a", "(empty output)", False)
    assert model.requests[1].messages[-1] == res  # what the provider got: no blank text
    assert result.state is State.DONE
    assert_valid_history(result.messages)


# 5. task cancellation swallowed when a tool swallows CancelledError in inline mode
@pytest.mark.parametrize("mode", ["sequential", "parallel"])  # parallel = single call -> inline
async def test_cancel_swallowed_inline(mode):
    started = asyncio.Event()

    @tool
    async def stubborn() -> str:
        started.set()
        try:
            await asyncio.Event().wait()  # only the cancellation ends this wait
        except asyncio.CancelledError:
            return "cleaned up"
        return "finished"

    model = ScriptedModel([tool_response(call("stubborn", id="s")), text_response("done")])
    agent = Agent(model, tools=[stubborn], tool_execution=mode)
    task = asyncio.create_task(agent.run("hi"))
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert model.calls == 1 and agent.state is State.ABORTED
    assert [m.role for m in agent.messages] == ["user", "assistant", "tool_result"]


# 6. progress from a sync tool (a worker thread) reaches subscribers on the loop's thread, while
# the tool still runs
async def test_progress_from_sync_tool_is_delivered_on_the_loop_thread():
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


# 7. the turn cap bounds text-only turns driven by queued input too
async def test_turn_cap_with_queued_followups():
    agent = Agent(ScriptedModel([text_response(f"a{i}") for i in range(10)]), max_turns=2)
    for i in range(5):
        agent.follow_up(f"more {i}")
    r = await agent.run("go")
    assert r.state is State.MAX_TURNS and r.turns == 2
    assert "max_turns limit (2)" in (r.error or "")
    assert [(m.role, m.text) for m in r.messages] == [
        ("user", "go"),
        ("assistant", "a0"),
        ("user", "more 0"),
        ("assistant", "a1"),
    ]
    assert_valid_history(r.messages)


# 8. a should_continue hook failing after a terminating denial keeps the denial's reason
async def test_terminating_denial_reason_survives_a_failing_should_continue() -> None:
    from statemachine_agent import Deny

    @tool
    async def w() -> str:
        """Write."""
        return "ok"

    def deny(info: object) -> Deny:
        return Deny("not here", terminate=True)

    def broken(info: object) -> bool:
        raise RuntimeError("hook bug")

    agent = Agent(
        ScriptedModel([tool_response(call("w", id="a")), text_response("x")]),
        tools=[w],
        before_tool_call=deny,
        should_continue=broken,
    )
    result = await agent.run("go")
    assert result.state is State.ABORTED
    assert result.error == (
        "A tool call was denied and ended the run: not here. "
        "The should_continue hook failed: RuntimeError: hook bug"
    )
    assert tool_texts(result.messages) == ["Denied: not here"]
