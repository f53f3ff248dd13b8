"""Issue 32, case 8: a chat span carries what the Anthropic response provides (its id, the model
that answered) and the request's ``max_tokens``, by the OTel GenAI semantic conventions."""

from __future__ import annotations

import anthropic
import pytest

from statemachine_agent import Agent, State
from statemachine_agent.models import AnthropicModel

from .replay_server import ReplayServer, closing_model, message, message_to_sse, sse_reply

pytest.importorskip("opentelemetry.sdk", reason="the [otel] extra is not installed")

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (
    InMemorySpanExporter,
)

from statemachine_agent.otel import instrument

RESPONSE = message(
    [{"type": "text", "text": "Hello."}],
    name="claude-sonnet-4-6-20260101",
    id="msg_01XFDUDYJgAACzvnptvVoYEL",
    usage={"input_tokens": 12, "output_tokens": 3},
)


async def test_chat_span_carries_response_id_and_request_max_tokens(
    server: ReplayServer,
) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    server.add(sse_reply(message_to_sse(RESPONSE)))
    model = closing_model(server, "claude-sonnet-4-6", max_tokens=777)
    agent = Agent(model)
    instrument(agent, tracer_provider=provider)
    result = await agent.run("hi")
    assert result.state is State.DONE
    [chat] = [s for s in exporter.get_finished_spans() if s.name.startswith("chat")]
    assert chat.attributes["gen_ai.response.id"] == "msg_01XFDUDYJgAACzvnptvVoYEL"
    assert chat.attributes["gen_ai.request.max_tokens"] == 777
    assert server.requests[0].body["max_tokens"] == 777  # the figure the request carried
    assert chat.attributes["gen_ai.response.model"] == "claude-sonnet-4-6-20260101"
    assert chat.attributes["gen_ai.request.model"] == "claude-sonnet-4-6"
    assert tuple(chat.attributes["gen_ai.response.finish_reasons"]) == ("end_turn",)
    assert chat.attributes["gen_ai.usage.input_tokens"] == 12
    assert chat.attributes["gen_ai.usage.output_tokens"] == 3


async def test_the_sdks_own_span_nests_under_the_chat_span_and_its_traceparent_is_the_runs(
    server: ReplayServer,
) -> None:
    """The Anthropic SDK (2.x) opens a span per API call (``anthropic.messages.create``, on by
    default; its ``open_telemetry`` client option names the tracer provider) and sends its trace
    context in a ``traceparent`` header. Both belong to the run: the SDK's span is a child of
    the turn's ``chat`` span and the header carries the run's trace id."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    server.add(sse_reply(message_to_sse(RESPONSE)))
    client = anthropic.AsyncAnthropic(
        api_key="test",
        base_url=server.url,
        max_retries=0,
        open_telemetry={"tracer_provider": provider},
    )
    try:
        agent = Agent(AnthropicModel("claude-sonnet-4-6", client=client))
        instrument(agent, tracer_provider=provider)
        result = await agent.run("hi")
    finally:
        await client.close()
    assert result.state is State.DONE
    spans = exporter.get_finished_spans()
    [run] = [s for s in spans if s.name == "invoke_agent"]
    [chat] = [s for s in spans if s.name.startswith("chat")]
    [sdk] = [s for s in spans if s.name == "anthropic.messages.create"]
    assert sdk.parent is not None and sdk.parent.span_id == chat.context.span_id
    assert sdk.context.trace_id == chat.context.trace_id == run.context.trace_id
    version, trace_id, parent_id, _flags = server.requests[0].headers["traceparent"].split("-")
    assert version == "00"
    assert int(trace_id, 16) == run.context.trace_id
    assert int(parent_id, 16) == sdk.context.span_id  # the SDK's span, under the chat span
