"""The tool-call path of a turn, where it was made cheaper (issue 39): each shortcut keeps what
the longer path did (results, holds, events)."""

from __future__ import annotations

import asyncio

import pytest
from loop_helpers import NOT_RUN, results_of

from statemachine_agent import Agent, Defer, State, ToolCallBlock, ToolCallInfo, tool
from statemachine_agent._strict_json import NonFiniteNumberError, loads_strict
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


async def test_a_timeout_and_a_task_group_a_tool_enters_before_its_first_await_are_its_own() -> (
    None
):
    # An async tool's call runs in a task of its own from its first step: what the tool binds
    # to the current task before it first suspends (asyncio.timeout, a TaskGroup) acts on its
    # call, never on the task running the agent (an eager first step in the run's task would).
    @tool
    async def bounded() -> str:
        """Gives up after a short timeout."""
        try:
            async with asyncio.timeout(0):
                await asyncio.Event().wait()
        except TimeoutError:
            return "timed out inside"
        return "never"

    @tool
    async def grouped() -> str:
        """A task group whose child fails."""

        async def fails() -> None:
            raise ValueError("child failed")

        try:
            async with asyncio.TaskGroup() as group:
                group.create_task(fails())
                await asyncio.Event().wait()
        except ExceptionGroup as exc:
            return f"group failed inside: {exc.exceptions[0]}"
        return "never"

    model = ScriptedModel(
        [
            tool_response(call("bounded", id="b1")),
            tool_response(call("grouped", id="g1")),
            text_response("done"),
        ]
    )
    agent = Agent(model, tools=[bounded, grouped])
    result = await agent.run("Go")
    assert result.state is State.DONE
    assert [(r.tool_call_id, r.is_error, r.text) for r in results_of(result.messages)] == [
        ("b1", False, "timed out inside"),
        ("g1", False, "group failed inside: child failed"),
    ]
    assert_valid_history(result.messages)


@pytest.mark.parametrize(
    ("raw", "path", "shown"),
    [
        ('{"a": {"b": [1, 2, {"c": NaN}]}}', "'a.b[2].c'", "NaN"),
        ('{"items": [{"x": 1.5}, {"x": -Infinity}]}', "'items[1].x'", "-Infinity"),
        ('{"ok": "text", "n": 3, "flag": true, "deep": [[1e400]]}', "'deep[0][0]'", "1e400"),
        ('[0.5, {"k": Infinity}]', "'[1].k'", "Infinity"),
        ("NaN", "(the whole value)", "NaN"),
    ],
)
def test_a_number_json_cannot_hold_is_found_at_any_depth_and_named_by_its_path(
    raw: str, path: str, shown: str
) -> None:
    # The input scan looks into every dict and list (and skips what cannot hold a number).
    with pytest.raises(NonFiniteNumberError) as caught:
        loads_strict(raw)
    assert (caught.value.path, caught.value.text) == (path, shown)
    data = {"a": [{"b": 1.0}, {"c": [2.5, float("nan")]}], "s": "x"}
    block = ToolCallBlock(id="t", name="n", input=data)
    assert (block.input, block.raw_arguments) == (
        None,
        '{"a": [{"b": 1.0}, {"c": [2.5, NaN]}], "s": "x"}',
    )


def test_finite_nested_input_is_kept_as_data() -> None:
    data = {"a": [{"b": 1.0}, {"c": [2.5, -3, True, None, "inf"]}], "e": {}, "l": []}
    assert loads_strict('{"a": [{"b": 1e300}], "s": "NaN"}') == {"a": [{"b": 1e300}], "s": "NaN"}
    block = ToolCallBlock(id="t", name="n", input=data)
    assert (block.input, block.raw_arguments) == (data, None)


def test_check_call_answers_the_arguments_parsed_from_the_raw_text() -> None:
    """A call whose arguments are held as text (``raw_arguments``, ``input`` unset) that parse as
    a JSON object gets its tool and those parsed arguments, not the unset ``input``."""
    from statemachine_agent import Tool, ToolCallBlock, tool
    from statemachine_agent._call_results import check_call

    @tool
    def ping(n: int) -> str:
        """Ping."""
        return str(n)

    assert isinstance(ping, Tool)
    block = ToolCallBlock(id="c", name="ping", raw_arguments='{"n": 3}')
    assert block.input is None
    assert check_call(block, {"ping": ping}) == (ping, {"n": 3})
