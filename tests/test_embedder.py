"""Issue 16: what an embedder needs around the loop (usage limits, tracing, a graceful last
turn, typed results), each case of the issue checked on its exact expected values."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from loop_helpers import pydantic_message, results_of
from pydantic import BaseModel

from statemachine_agent import (
    FINAL_TURN_PROMPT,
    Agent,
    State,
    UsageError,
    UsageLimits,
    tool,
)
from statemachine_agent._output import OUTPUT_MISSING_PROMPT
from statemachine_agent.models import FunctionModel, ScriptedModel
from statemachine_agent.testing import assert_valid_history
from statemachine_agent.testing.steps import call, text_response, tool_response
from statemachine_agent.testing.strategies import final_results


@tool
def ping(n: int) -> str:
    """Answer a ping."""
    return f"pong {n}"


def forever_model(requests: list[Any]) -> FunctionModel:
    """A model that calls ``ping`` every turn (and answers in text when tools are disabled)."""

    def respond(messages: Any, request: Any) -> dict[str, Any]:
        requests.append(request)
        n = len(requests)
        if request.settings.get("tool_choice") == {"type": "none"}:
            return text_response(f"Summary after {n - 1} requests.", usage=usage(10, 5))
        return tool_response(call("ping", {"n": n}, id=f"c{n}"), usage=usage(10, 5))

    return FunctionModel(respond)


def usage(input_tokens: int, output_tokens: int) -> dict[str, int]:
    return {"input_tokens": input_tokens, "output_tokens": output_tokens}


# -- case 2: usage limits as guarded transitions ---------------------------------------------


MAX_TOOL_CALLS_ERROR = (
    "Stopped after 4 turn(s): the usage limit max_tool_calls=3 was reached: 3 used, 1 more "
    "wanted (4 request(s), 3 tool call(s), 60 token(s) so far). To continue, raise the limit "
    "(agent.limits = UsageLimits(...)) and call run() again without a prompt."
)


async def test_max_tool_calls_stops_before_the_fourth_call() -> None:
    requests: list[Any] = []
    agent = Agent(forever_model(requests), tools=[ping], limits=UsageLimits(max_tool_calls=3))
    result = await agent.run("go")
    assert result.state is State.MAX_TURNS
    assert result.error == MAX_TOOL_CALLS_ERROR
    results = results_of(result.new_messages)
    assert [r.text for r in results] == [
        "pong 1",
        "pong 2",
        "pong 3",
        "Not run: the usage limit max_tool_calls=3 was reached: 3 used, 1 more wanted.",
    ]
    assert results[-1].is_error
    assert len(requests) == 4
    assert_valid_history(result.messages)


async def test_continuing_with_a_higher_limit_goes_on() -> None:
    requests: list[Any] = []
    agent = Agent(forever_model(requests), tools=[ping], limits=UsageLimits(max_tool_calls=3))
    await agent.run("go")
    again = await agent.run()  # same limit: the next response's call is not run either
    assert again.state is State.MAX_TURNS
    assert len(requests) == 5
    assert again.error is not None and "max_tool_calls=3 was reached: 3 used" in again.error
    agent.limits = UsageLimits(max_tool_calls=5)
    result = await agent.run()
    assert result.state is State.MAX_TURNS
    assert len(requests) == 8  # calls 6 and 7 run, the 8th response's call does not
    assert [r.text for r in results_of(result.new_messages)] == [
        "pong 6",
        "pong 7",
        "Not run: the usage limit max_tool_calls=5 was reached: 5 used, 1 more wanted.",
    ]
    assert_valid_history(result.messages)


async def test_max_requests_sends_exactly_two_requests() -> None:
    requests: list[Any] = []
    agent = Agent(forever_model(requests), tools=[ping], limits=UsageLimits(max_requests=2))
    result = await agent.run("go")
    assert len(requests) == 2
    assert result.state is State.MAX_TURNS
    assert result.error == (
        "Stopped after 2 turn(s): the usage limit max_requests=2 was reached: 2 used, 1 more "
        "wanted (2 request(s), 2 tool call(s), 30 token(s) so far). To continue, raise the "
        "limit (agent.limits = UsageLimits(...)) and call run() again without a prompt."
    )
    assert [r.text for r in results_of(result.new_messages)] == ["pong 1", "pong 2"]
    assert_valid_history(result.messages)


async def test_token_limit_checked_after_each_response() -> None:
    requests: list[Any] = []
    agent = Agent(forever_model(requests), tools=[ping], limits=UsageLimits(max_total_tokens=20))
    result = await agent.run("go")
    # 15 tokens after the first response, 30 after the second: its call is not run.
    assert len(requests) == 2
    assert result.state is State.MAX_TURNS
    assert result.error is not None
    assert "the usage limit max_total_tokens=20 was reached: 30 used" in result.error
    assert [r.text for r in results_of(result.new_messages)] == [
        "pong 1",
        "Not run: the usage limit max_total_tokens=20 was reached: 30 used.",
    ]


async def test_a_final_answer_is_not_stopped_by_a_limit() -> None:
    model = ScriptedModel([text_response("hi", usage=usage(100, 100))])
    agent = Agent(model, limits=UsageLimits(max_total_tokens=10))
    result = await agent.run("hello")
    assert result.state is State.DONE
    assert result.text == "hi"


def test_bad_limit_is_refused() -> None:
    with pytest.raises(UsageError, match=r"max_requests=\.\.\.\) must be a non-negative"):
        UsageLimits(max_requests=-1)


# -- case 1: OpenTelemetry spans ---------------------------------------------------------------


@pytest.fixture
def exporter() -> Any:
    pytest.importorskip("opentelemetry.sdk", reason="the [otel] extra is not installed")
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    memory.provider = provider
    return memory


async def test_two_turn_run_spans(exporter: Any) -> None:
    from opentelemetry.trace import StatusCode

    from statemachine_agent.otel import instrument

    model = ScriptedModel(
        [
            tool_response(call("ping", {"n": 1}, id="c1"), usage=usage(12, 7)),
            text_response("Done.", usage=usage(30, 4)),
        ],
        name="claude-test",
    )
    agent = Agent(model, tools=[ping])
    instrument(agent, tracer_provider=exporter.provider)
    result = await agent.run("go")
    assert result.state is State.DONE
    spans = exporter.get_finished_spans()
    assert sorted(s.name for s in spans) == [
        "chat claude-test",
        "chat claude-test",
        "execute_tool ping",
        "invoke_agent",
    ]
    run = next(s for s in spans if s.name == "invoke_agent")
    assert run.parent is None
    for span in spans:
        if span is not run:
            assert span.parent is not None and span.parent.span_id == run.context.span_id
            assert span.context.trace_id == run.context.trace_id
    chats = sorted((s for s in spans if s.name.startswith("chat")), key=lambda s: s.start_time)
    assert [
        (
            c.attributes["gen_ai.operation.name"],
            c.attributes["gen_ai.request.model"],
            c.attributes["gen_ai.usage.input_tokens"],
            c.attributes["gen_ai.usage.output_tokens"],
            tuple(c.attributes["gen_ai.response.finish_reasons"]),
        )
        for c in chats
    ] == [
        ("chat", "claude-test", 12, 7, ("tool_use",)),
        ("chat", "claude-test", 30, 4, ("end_turn",)),
    ]
    tool_span = next(s for s in spans if s.name == "execute_tool ping")
    assert dict(tool_span.attributes) == {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": "ping",
        "gen_ai.tool.call.id": "c1",
        "gen_ai.tool.type": "function",
    }
    transitions = [
        (
            e.attributes["statemachine_agent.transition.source"],
            e.attributes["statemachine_agent.transition.destination"],
        )
        for e in run.events
        if e.name == "transition"
    ]
    assert transitions == [
        ("idle", "awaiting_model"),
        ("awaiting_model", "executing_tools"),
        ("executing_tools", "awaiting_model"),
        ("awaiting_model", "done"),
    ]
    assert run.attributes["gen_ai.usage.input_tokens"] == 42
    assert all(s.status.status_code is not StatusCode.ERROR for s in spans)
    # contents are not recorded unless asked for
    assert not any("gen_ai.input.messages" in s.attributes for s in spans)
    assert not any("gen_ai.tool.call.arguments" in s.attributes for s in spans)


async def test_abort_during_a_tool_ends_every_span_with_an_error(exporter: Any) -> None:
    import asyncio

    from opentelemetry.trace import StatusCode

    from statemachine_agent.otel import instrument

    started = asyncio.Event()

    @tool
    async def slow() -> str:
        """Wait for a long time."""
        started.set()
        await asyncio.sleep(60)
        return "never"

    model = ScriptedModel([tool_response(call("slow", {}, id="s1")), text_response("unused")])
    agent = Agent(model, tools=[slow], abort_grace_seconds=0.01)
    instrument(agent, tracer_provider=exporter.provider)
    handle = agent.start("go")
    await started.wait()
    agent.abort("user pressed stop")
    result = await handle
    assert result.state is State.ABORTED
    spans = {s.name: s for s in exporter.get_finished_spans()}
    assert set(spans) == {"invoke_agent", "chat scripted", "execute_tool slow"}
    run, tool_span = spans["invoke_agent"], spans["execute_tool slow"]
    assert (run.status.status_code, run.status.description) == (
        StatusCode.ERROR,
        "user pressed stop",
    )
    assert run.attributes["error.type"] == "aborted"
    assert (tool_span.status.status_code, tool_span.status.description) == (
        StatusCode.ERROR,
        "the run was aborted: user pressed stop",
    )
    assert tool_span.attributes["error.type"] == "aborted"
    assert spans["chat scripted"].status.status_code is not StatusCode.ERROR  # it had answered


async def test_contents_are_recorded_on_opt_in(exporter: Any) -> None:
    from statemachine_agent.otel import instrument

    model = ScriptedModel([tool_response(call("ping", {"n": 5}, id="c1")), text_response("ok")])
    agent = Agent(model, tools=[ping])
    instrument(agent, tracer_provider=exporter.provider, include_content=True)
    await agent.run("go")
    spans = {s.name: s for s in exporter.get_finished_spans()}
    tool_span = spans["execute_tool ping"]
    assert tool_span.attributes["gen_ai.tool.call.arguments"] == '{"n": 5}'
    assert tool_span.attributes["gen_ai.tool.call.result"] == "pong 5"
    assert '"go"' in spans["invoke_agent"].attributes["gen_ai.input.messages"]


async def test_an_uninstrumented_agent_builds_no_events() -> None:
    pytest.importorskip("opentelemetry", reason="the [otel] extra is not installed")
    from statemachine_agent.otel import instrument

    agent = Agent(ScriptedModel([text_response("a"), text_response("b")]))
    tracing = instrument(agent)
    assert agent.bus.listening()
    tracing.close()
    assert not agent.bus.listening()


# -- case 3: a graceful last turn --------------------------------------------------------------


async def test_final_turn_at_max_turns() -> None:
    requests: list[Any] = []
    agent = Agent(forever_model(requests), tools=[ping], max_turns=3, final_turn=True)
    result = await agent.run("go")
    assert len(requests) == 4
    assert [r.settings.get("tool_choice") for r in requests] == [None, None, None, {"type": "none"}]
    assert requests[3].system == FINAL_TURN_PROMPT
    assert [t.name for t in requests[3].tools] == ["ping"]  # sent: the history holds its calls
    assert result.text == "Summary after 3 requests."
    assert result.state is State.MAX_TURNS
    assert result.error is not None
    assert result.error.startswith("Stopped after 3 turn(s): the max_turns limit (3) was reached.")
    assert_valid_history(result.messages)


async def test_final_turn_off_by_default_and_at_a_usage_limit() -> None:
    requests: list[Any] = []
    agent = Agent(forever_model(requests), tools=[ping], max_turns=3)
    result = await agent.run("go")
    assert len(requests) == 3 and result.text == ""
    requests.clear()
    agent = Agent(
        forever_model(requests),
        tools=[ping],
        system="Be brief.",
        limits=UsageLimits(max_requests=2),
        final_turn="Wrap up.",
    )
    result = await agent.run("go")
    assert len(requests) == 3  # the final turn does not count against max_requests
    assert requests[2].system == "Be brief.\n\nWrap up."
    assert requests[2].settings == {"tool_choice": {"type": "none"}}
    assert result.state is State.MAX_TURNS
    assert result.text == "Summary after 2 requests."
    assert result.error is not None and "max_requests=2 was reached: 2 used" in result.error


# -- case 4: typed results ---------------------------------------------------------------------


class Invoice(BaseModel):
    """An invoice."""

    number: str
    total: Decimal


TOTAL_ERROR = (
    "Invalid arguments for tool 'final_result' (1 error(s)):\n"
    f"- total: {pydantic_message(Decimal, 'abc')}\n"
    'Arguments received: {"number": "A-17", "total": "abc"}\n'
    "Fix the arguments and call the tool again."
)


async def test_invalid_output_is_sent_back_then_validated() -> None:
    model = ScriptedModel(
        [
            tool_response(call("final_result", {"number": "A-17", "total": "abc"}, id="o1")),
            tool_response(call("final_result", {"number": "A-17", "total": "12.50"}, id="o2")),
        ]
    )
    agent = Agent(model, output_type=Invoice)
    result = await agent.run("Read the invoice.")
    assert result.state is State.DONE
    assert result.output == Invoice(number="A-17", total=Decimal("12.50"))
    first, second = results_of(result.new_messages)
    assert (first.is_error, first.text) == (True, TOTAL_ERROR)
    assert second.is_error is False
    assert model.requests[0].tools[0].name == "final_result"
    assert model.requests[0].tools[0].input_schema == {
        "description": "An invoice.",
        "properties": {
            "number": {"title": "Number", "type": "string"},
            "total": {
                "anyOf": [{"type": "number"}, {"type": "string"}],
                "title": "Total",
            },
        },
        "required": ["number", "total"],
        "type": "object",
    }
    assert_valid_history(result.messages)


async def test_output_retries_exhausted_fails_the_run() -> None:
    bad = {"number": "A-17", "total": "abc"}
    model = ScriptedModel(
        [
            tool_response(call("final_result", bad, id="o1")),
            text_response("The total is abc."),  # a text answer is sent back too
            tool_response(call("final_result", bad, id="o2")),
        ]
    )
    agent = Agent(model, output_type=Invoice, output_retries=2)
    result = await agent.run("Read the invoice.")
    assert len(model.requests) == 3
    assert result.state is State.FAILED
    assert result.output is None
    assert result.error == (
        "The model gave no valid final result after 3 invalid attempt(s) (output_retries=2); "
        f"the last validation error: {TOTAL_ERROR}. Raise output_retries, or check that the "
        "output type's schema is one the model can fill."
    )
    assert model.requests[2].messages[-1].text == OUTPUT_MISSING_PROMPT
    assert_valid_history(result.messages)


async def test_plain_text_output_stays_the_default() -> None:
    result = await Agent(ScriptedModel([text_response("hi")])).run("hello")
    assert (result.output, result.text) == ("hi", "hi")
    failed = await Agent(ScriptedModel([])).run("hello")  # the script is empty: failed
    assert (failed.state, failed.output) == (State.FAILED, None)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
async def test_kit_final_results_valid_and_invalid(data: st.DataObject) -> None:
    class Order(BaseModel):
        item: str
        quantity: int

    valid = data.draw(st.booleans())
    step = data.draw(final_results(Order, valid=valid, call_id="f1"))
    script = [step] if valid else [step, *[step] * 2]
    agent = Agent(ScriptedModel(script), output_type=Order, output_retries=1)
    result = await agent.run("order")
    if valid:
        assert result.state is State.DONE
        assert result.output == Order.model_validate(step["content"][0]["input"])
    else:
        assert (result.state, result.output) == (State.FAILED, None)
    assert_valid_history(result.messages)


async def test_a_failed_request_ends_its_chat_span_and_the_run_span_with_an_error(
    exporter: Any,
) -> None:
    from opentelemetry.trace import StatusCode

    from statemachine_agent.otel import instrument
    from statemachine_agent.testing.steps import error_step

    model = ScriptedModel([error_step("invalid_request_error", "bad request", status_code=400)])
    agent = Agent(model)
    instrument(agent, tracer_provider=exporter.provider)
    result = await agent.run("go")
    assert result.state is State.FAILED
    spans = {s.name: s for s in exporter.get_finished_spans()}
    assert set(spans) == {"invoke_agent", "chat scripted"}
    for span in spans.values():
        assert span.status.status_code is StatusCode.ERROR
        assert "bad request" in (span.status.description or "")
    assert spans["invoke_agent"].attributes["error.type"] == "failed"


async def test_a_cancelled_task_ends_every_span_with_an_error(exporter: Any) -> None:
    import asyncio

    from opentelemetry.trace import StatusCode

    from statemachine_agent.otel import instrument

    started = asyncio.Event()

    @tool
    async def slow() -> str:
        """Wait for a long time."""
        started.set()
        await asyncio.sleep(60)
        return "never"

    agent = Agent(ScriptedModel([tool_response(call("slow", {}, id="s1"))]), tools=[slow])
    instrument(agent, tracer_provider=exporter.provider)
    task = asyncio.create_task(agent.run("go"))
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    spans = {s.name: s for s in exporter.get_finished_spans()}
    assert set(spans) == {"invoke_agent", "chat scripted", "execute_tool slow"}
    run = spans["invoke_agent"]
    assert (run.status.status_code, run.status.description) == (
        StatusCode.ERROR,
        "the task running the agent was cancelled",
    )
    assert spans["execute_tool slow"].status.status_code is StatusCode.ERROR
