"""Issue 32, case 8: a chat span carries what the Anthropic response provides (its id, the model
that answered) and the request's ``max_tokens``, by the OTel GenAI semantic conventions."""

from __future__ import annotations

import pytest

from statemachine_agent import Agent, State
from statemachine_agent.models import AnthropicModel

from .replay_server import ReplayServer, message_to_sse, sse_reply

pytest.importorskip("opentelemetry.sdk", reason="the [otel] extra is not installed")

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (
    InMemorySpanExporter,
)

from statemachine_agent.otel import instrument

RESPONSE = {
    "id": "msg_01XFDUDYJgAACzvnptvVoYEL",
    "type": "message",
    "role": "assistant",
    "model": "claude-sonnet-4-6-20260101",
    "content": [{"type": "text", "text": "Hello."}],
    "stop_reason": "end_turn",
    "stop_sequence": None,
    "usage": {"input_tokens": 12, "output_tokens": 3},
}


async def test_case8_chat_span_carries_response_id_and_request_max_tokens(
    server: ReplayServer,
) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    server.add(sse_reply(message_to_sse(RESPONSE)))
    model = server.closing(
        AnthropicModel(
            "claude-sonnet-4-6", base_url=server.url, api_key="test", max_retries=0, max_tokens=777
        )
    )
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
