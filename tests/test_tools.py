"""Tool definitions from typed functions."""

from __future__ import annotations

import asyncio

import pytest
from pydantic import BaseModel, ValidationError, model_validator

from statemachine_agent import Tool, ToolContext, ToolDefinitionError, tool
from statemachine_agent._execution import to_result
from statemachine_agent._messages import TextBlock, ToolCallBlock


def test_schema_and_descriptions_from_signature_and_docstring() -> None:
    @tool
    def get_weather(city: str, ctx: ToolContext, days: int = 1) -> str:
        """Get the weather forecast.

        Args:
            city: the city name.
            days: how many days ahead.
        """
        return city

    assert get_weather.name == "get_weather"
    assert get_weather.description == "Get the weather forecast."
    schema = get_weather.input_schema
    assert set(schema["properties"]) == {"city", "days"}
    assert schema["required"] == ["city"]
    assert schema["properties"]["city"]["description"] == "the city name."
    assert get_weather.context_param == "ctx"


class Point(BaseModel):
    x: int
    y: int


def test_nested_pydantic_argument() -> None:
    @tool(name="move", timeout_seconds=3)
    async def move_to(point: Point) -> str:
        """Move."""
        return f"{point.x},{point.y}"

    assert isinstance(move_to, Tool) and move_to.name == "move" and move_to.timeout_seconds == 3
    assert move_to.validate({"point": {"x": 1, "y": 2}})["point"] == Point(x=1, y=2)


def test_a_tool_without_arguments_validates_as_its_model_does() -> None:
    # `validate` answers ``{}`` for a `tool`-made model without fields without running it: the
    # answer must be the model's, and anything else must still go through the model.
    @tool
    def ping(ctx: ToolContext) -> str:
        """Ping."""
        return "pong"

    assert ping._takes_nothing
    model = ping.args_model.__pydantic_validator__.validate_python({})
    assert ping.validate({}) == dict(vars(model)) == {}
    first = ping.validate({})
    first["x"] = 1  # each call's keywords are its own
    assert ping.validate({}) == {}
    for not_empty in ({"x": 1}, {"ctx": None}):
        with pytest.raises(ValidationError):
            ping.validate(not_empty)

    class Refuses(BaseModel):  # a model of the user's own: its validators run
        @model_validator(mode="after")
        def _never(self) -> Refuses:
            raise ValueError("refused")

    refusing = Tool(name="refusing", description="", function=lambda: None, args_model=Refuses)
    assert not refusing._takes_nothing
    with pytest.raises(ValidationError, match="refused"):
        refusing.validate({})


def test_definition_errors() -> None:
    with pytest.raises(ToolDefinitionError, match="annotation"):
        tool(lambda x: x)
    with pytest.raises(ToolDefinitionError, match="name"):

        @tool(name="has space")
        def f() -> None: ...


def test_return_values_become_results() -> None:
    call = ToolCallBlock(id="c", name="f", input={})
    assert to_result(call, "hi").text == "hi"
    assert to_result(call, None).text == "(no output)"
    assert to_result(call, {"a": 1}).text == '{"a":1}'  # compact JSON (issue 31)
    assert to_result(call, [TextBlock(text="x")]).text == "x"


def test_sync_tools_run_in_a_thread() -> None:
    import threading

    main = threading.get_ident()

    @tool
    def where() -> int:
        """Which thread."""
        return threading.get_ident()

    from statemachine_agent._tools import AbortSignal

    ctx = ToolContext("c", "where", AbortSignal(), lambda u: None)

    async def in_loop() -> object:
        return await where.call({}, ctx)

    assert asyncio.run(in_loop()) != main


async def test_eight_parallel_sync_tools_all_run_at_once() -> None:
    import threading

    from statemachine_agent import Agent
    from statemachine_agent.models import ScriptedModel
    from statemachine_agent.testing.steps import call, text_response, tool_response

    barrier = threading.Barrier(8, timeout=10)

    @tool
    def meet() -> str:
        """Wait until all eight calls are running at once."""
        barrier.wait()  # raises BrokenBarrierError if fewer than eight threads are available
        return "met"

    model = ScriptedModel(
        [tool_response(*(call("meet", {}) for _ in range(8))), text_response("ok")]
    )
    result = await Agent(model, tools=[meet]).run("go")
    texts = [m.text for m in result.messages if m.role == "tool_result"]
    assert texts == ["met"] * 8


def test_agent_refuses_what_is_not_a_tool() -> None:
    from statemachine_agent import Agent
    from statemachine_agent.models import ScriptedModel

    with pytest.raises(ToolDefinitionError, match="Tool objects or typed functions"):
        Agent(ScriptedModel([]), tools=[...])


def test_a_coroutine_made_after_its_call_was_cancelled_is_closed_not_left_unawaited() -> None:
    """A sync wrapper may return its coroutine after the call was cancelled (the thread kept
    running): whichever of the thread and the loop comes second closes it."""
    import inspect

    from statemachine_agent._tool_calls import Handoff as _Handoff

    async def body() -> str:
        return "never"

    late = _Handoff()
    late.stop()  # the loop stopped waiting first
    made_late = body()
    assert late.give(made_late) is None
    assert inspect.getcoroutinestate(made_late) == inspect.CORO_CLOSED

    early = _Handoff()
    made_early = body()
    assert early.give(made_early) is made_early  # handed over, then the wait was cancelled
    early.stop()
    assert inspect.getcoroutinestate(made_early) == inspect.CORO_CLOSED
