"""Each async tool call runs in an asyncio task of its own: `asyncio.current_task()` is not the
run's, a context variable the tool sets stays in the call, and a loop's own task factory makes the
task. On Python 3.12+ the task starts at once (``eager_start``): a call that does not wait ends
before anything else on the loop runs; on 3.11 its first step runs in the next loop pass."""

from __future__ import annotations

import asyncio
import contextvars
import sys
from typing import Any

from statemachine_agent import (
    Agent,
    RunStart,
    State,
    StateChanged,
    ToolExecutionEnd,
    ToolExecutionStart,
    TurnEnd,
    tool,
)
from statemachine_agent.models import ScriptedModel
from statemachine_agent.testing import assert_valid_history
from statemachine_agent.testing.steps import call, text_response, tool_response

EAGER = sys.version_info >= (3, 12)
SEEN: contextvars.ContextVar[str] = contextvars.ContextVar("SEEN", default="unset")


def _model(*ids: str) -> ScriptedModel:
    return ScriptedModel(
        [tool_response(*(call("probe", {"name": i}, id=i) for i in ids)), text_response("ok")]
    )


async def test_an_async_tool_call_runs_in_a_task_of_its_own_and_keeps_its_context() -> None:
    tasks: dict[str, Any] = {}
    after_call: list[str] = []

    @tool
    async def probe(name: str) -> str:
        """Note the task running this call and set a context variable."""
        tasks[name] = asyncio.current_task()
        SEEN.set(name)
        return name

    def on_event(event: object) -> None:
        if isinstance(event, RunStart):
            tasks["run"] = asyncio.current_task()
        if isinstance(event, TurnEnd) and event.tool_results:
            after_call.append(SEEN.get())

    agent = Agent(_model("c1"), tools=[probe])
    agent.subscribe(on_event)
    result = await agent.run("go")
    assert result.state is State.DONE
    assert tasks["c1"] is not None and tasks["c1"] is not tasks["run"]
    assert after_call == ["unset"]  # the call's context is a copy: the run's is unchanged
    assert SEEN.get() == "unset"


async def test_a_call_that_does_not_wait_starts_at_once_on_python_3_12() -> None:
    # A callback scheduled on the loop just before the batch starts (the state change into
    # executing_tools is emitted in the run's task, right before it) runs before the call's
    # first step on 3.11 (the call's task is scheduled after it); on 3.12+ the call's task is
    # started at once and the tool has run before the loop runs anything else.
    marked: list[bool] = []
    flag: list[bool] = []

    @tool
    async def probe(name: str) -> str:
        """Note whether the loop ran the callback before this call."""
        flag.append(bool(marked))
        return name

    def on_event(event: object) -> None:
        if isinstance(event, StateChanged) and event.dest == "executing_tools":
            asyncio.get_running_loop().call_soon(marked.append, True)

    agent = Agent(_model("c1"), tools=[probe])
    agent.subscribe(on_event)
    result = await agent.run("go")
    assert result.state is State.DONE and result.text == "ok"
    assert flag == [not EAGER]


async def test_a_parallel_batch_started_at_once_keeps_its_event_order_and_runs_calls_together() -> (
    None
):
    # c1 waits for c2 (started after it): calls still run at the same time. Events: each
    # call's start in declaration order; ends in completion order.
    gate = asyncio.Event()
    order: list[tuple[str, str]] = []

    @tool
    async def probe(name: str) -> str:
        """c1 waits until c2 ran; the others end at once."""
        if name == "c1":
            await gate.wait()
        if name == "c2":
            gate.set()
        return name

    def on_event(event: object) -> None:
        if isinstance(event, ToolExecutionStart | ToolExecutionEnd):
            order.append((event.type, event.call.id))

    agent = Agent(_model("c1", "c2", "c3"), tools=[probe])
    agent.subscribe(on_event)
    result = await asyncio.wait_for(agent.run("go"), timeout=30)
    assert result.state is State.DONE
    assert order == [
        ("tool_execution_start", "c1"),
        ("tool_execution_start", "c2"),
        ("tool_execution_end", "c2"),
        ("tool_execution_start", "c3"),
        ("tool_execution_end", "c3"),
        ("tool_execution_end", "c1"),
    ]
    assert [m.text for m in result.messages if m.role == "tool_result"] == ["c1", "c2", "c3"]
    assert_valid_history(result.messages)


async def test_a_task_factory_of_the_loop_makes_the_call_tasks() -> None:
    loop = asyncio.get_running_loop()
    made: list[asyncio.Task[Any]] = []

    def factory(loop: asyncio.AbstractEventLoop, coro: Any, **kwargs: Any) -> asyncio.Task[Any]:
        made.append(asyncio.Task(coro, loop=loop, **kwargs))
        return made[-1]

    @tool
    async def probe(name: str) -> str:
        """Return the name."""
        return name

    previous = loop.get_task_factory()
    loop.set_task_factory(factory)
    try:
        result = await Agent(_model("c1", "c2"), tools=[probe]).run("go")
    finally:
        loop.set_task_factory(previous)
    assert result.state is State.DONE
    assert [task.get_name() for task in made] == ["statemachine_agent tool call"] * 2


class _RecordingLoop(asyncio.SelectorEventLoop):
    """An event loop with a ``create_task`` of its own (as a loop that is not asyncio's has)."""

    def __init__(self) -> None:
        super().__init__()
        self.made: list[str] = []

    def create_task(self, coro: Any, **kwargs: Any) -> asyncio.Task[Any]:  # type: ignore[override]
        task = super().create_task(coro, **kwargs)
        self.made.append(task.get_name())
        return task


def test_an_event_loop_with_a_create_task_of_its_own_makes_the_call_tasks() -> None:
    @tool
    async def probe(name: str) -> str:
        """Return the name."""
        return name

    loop = _RecordingLoop()
    try:
        result = loop.run_until_complete(Agent(_model("c1", "c2"), tools=[probe]).run("go"))
    finally:
        loop.close()
    assert result.state is State.DONE
    assert loop.made.count("statemachine_agent tool call") == 2
