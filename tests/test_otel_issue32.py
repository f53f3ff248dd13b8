"""Issue 32, cases 7 and 8: traces of paused and resumed runs, and spans a tool can nest under.

Spans go to the OpenTelemetry SDK's in-memory exporter."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from statemachine_agent import (
    Agent,
    Approve,
    AssistantMessage,
    Compaction,
    ModelError,
    State,
    UserMessage,
    tool,
)
from statemachine_agent.models import FunctionModel, ScriptedModel
from statemachine_agent.testing.steps import call, text_response, tool_response

pytest.importorskip("opentelemetry.sdk", reason="the [otel] extra is not installed")

from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (
    InMemorySpanExporter,
)
from opentelemetry.trace import StatusCode

from statemachine_agent.otel import instrument


@pytest.fixture
def exporter() -> Any:
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    memory.provider = provider
    return memory


def named(spans: Any, name: str) -> list[ReadableSpan]:
    return [s for s in spans if s.name == name]


def _deploy_tool(ran: list[str]) -> Any:
    @tool(requires_approval=True)
    def deploy(env: str) -> str:
        """Deploy.

        Args:
            env: where to.
        """
        ran.append(env)
        return f"deployed to {env}"

    return deploy


SCRIPT = [
    tool_response(call("deploy", {"env": "prod"}, id="t1")),
    text_response("Deployed."),
]


# -- case 7: traces of paused and resumed runs ---------------------------------------------------


async def test_case7_a_deferred_call_has_an_execute_tool_span_only_where_it_runs(
    exporter: Any,
) -> None:
    ran: list[str] = []
    agent = Agent(ScriptedModel(SCRIPT), tools=[_deploy_tool(ran)])
    tracing = instrument(agent, tracer_provider=exporter.provider)

    paused = await agent.run("deploy to prod")
    assert paused.state is State.AWAITING_APPROVAL
    first = exporter.get_finished_spans()
    assert named(first, "execute_tool deploy") == []  # t1 did not run here
    [paused_span] = named(first, "invoke_agent")
    assert tuple(paused_span.attributes["statemachine_agent.pending_call_ids"]) == ("t1",)
    assert tracing.paused == paused_span.context
    exporter.clear()

    resumed = await agent.run(decisions={"t1": Approve()})
    assert resumed.state is State.DONE and ran == ["prod"]
    second = exporter.get_finished_spans()
    [tool_span] = named(second, "execute_tool deploy")  # once: where it runs
    assert tool_span.attributes["gen_ai.tool.call.id"] == "t1"
    [resumed_span] = named(second, "invoke_agent")
    assert tool_span.parent is not None
    assert tool_span.parent.span_id == resumed_span.context.span_id
    [link] = resumed_span.links
    assert link.context == paused_span.context
    assert link.attributes["statemachine_agent.link.type"] == "resumes"
    conversation = tracing.conversation_id
    assert paused_span.attributes["gen_ai.conversation.id"] == conversation
    assert resumed_span.attributes["gen_ai.conversation.id"] == conversation
    assert "statemachine_agent.pending_call_ids" not in resumed_span.attributes
    assert tracing.paused is None  # linked once


async def test_case7_a_run_resumed_in_another_process_links_to_the_paused_run(
    exporter: Any, tmp_path: Path
) -> None:
    """Across processes the paused run's span context and the conversation id are handed over
    (``Instrumentation.paused``, ``conversation_id``): ``instrument(..., resumes=...)``."""
    path = tmp_path / "run.jsonl"
    agent = Agent(ScriptedModel(SCRIPT), tools=[_deploy_tool([])], session=path)
    tracing = instrument(agent, tracer_provider=exporter.provider, conversation_id="order-42")
    assert (await agent.run("deploy to prod")).state is State.AWAITING_APPROVAL
    handed_over = tracing.paused
    assert handed_over is not None
    agent.close()
    [paused_span] = named(exporter.get_finished_spans(), "invoke_agent")
    exporter.clear()

    ran: list[str] = []
    resumed_agent = Agent.resume(path, model=ScriptedModel(SCRIPT[1:]), tools=[_deploy_tool(ran)])
    instrument(
        resumed_agent,
        tracer_provider=exporter.provider,
        conversation_id="order-42",
        resumes=handed_over,
    )
    result = await resumed_agent.run(decisions={"t1": Approve()})
    assert result.state is State.DONE and ran == ["prod"]
    spans = exporter.get_finished_spans()
    assert len(named(spans, "execute_tool deploy")) == 1
    [resumed_span] = named(spans, "invoke_agent")
    assert [link.context for link in resumed_span.links] == [paused_span.context]
    assert paused_span.attributes["gen_ai.conversation.id"] == "order-42"
    assert resumed_span.attributes["gen_ai.conversation.id"] == "order-42"
    resumed_agent.close()


# -- case 8: spans a tool can nest under ---------------------------------------------------------


@pytest.mark.parametrize("calls", [1, 2], ids=["one_call", "a_batch_of_two"])
async def test_case8_a_tools_own_spans_nest_under_its_execute_tool_span(
    exporter: Any, calls: int
) -> None:
    """An async tool (run in the batch's task) and a sync one (run in a worker thread) each open
    a span of their own: it is a child of the call's ``execute_tool`` span."""
    tracer = exporter.provider.get_tracer("the tools' own")

    @tool
    async def fetch(url: str) -> str:
        """Fetch a page.

        Args:
            url: the page.
        """
        with tracer.start_as_current_span("fetch inner"):
            await asyncio.sleep(0)
            return f"page {url}"

    @tool
    def parse(text: str) -> str:
        """Parse a text.

        Args:
            text: the text.
        """
        with tracer.start_as_current_span("parse inner"):
            return text.upper()

    batches = [
        [call("fetch", {"url": "a"}, id="f1"), call("parse", {"text": "b"}, id="p1")][:calls],
        [call("parse", {"text": "c"}, id="p2")],
    ]
    model = ScriptedModel([*(tool_response(*b) for b in batches), text_response("ok")])
    agent = Agent(model, tools=[fetch, parse])
    instrument(agent, tracer_provider=exporter.provider)
    assert (await agent.run("go")).state is State.DONE
    spans = exporter.get_finished_spans()
    tool_spans = {
        s.attributes["gen_ai.tool.call.id"]: s for s in spans if s.name.startswith("execute_tool")
    }
    inner = [s for s in spans if s.name.endswith(" inner")]
    expected = {"f1": "fetch inner", "p1": "parse inner", "p2": "parse inner"}
    assert len(inner) == len(tool_spans) == calls + 1
    for call_id, tool_span in tool_spans.items():
        [child] = [s for s in inner if s.parent and s.parent.span_id == tool_span.context.span_id]
        assert child.name == expected[call_id]
        assert child.context.trace_id == tool_span.context.trace_id
    # after the calls nothing of theirs stays current: the run's next spans are the run's own
    [run] = named(spans, "invoke_agent")
    for chat in (s for s in spans if s.name.startswith("chat")):
        assert chat.parent is not None and chat.parent.span_id == run.context.span_id


async def test_case8_chat_spans_carry_the_request_settings_of_the_genai_conventions(
    exporter: Any,
) -> None:
    settings = {"max_tokens": 512, "temperature": 0.2, "top_p": 0.9, "stop_sequences": ["END"]}
    model = ScriptedModel([text_response("hi")], name="claude-test")
    agent = Agent(model, model_settings=settings)
    tracing = instrument(agent, tracer_provider=exporter.provider)
    await agent.run("hello")
    [chat] = named(exporter.get_finished_spans(), "chat claude-test")
    attributes = chat.attributes
    assert attributes["gen_ai.request.max_tokens"] == 512
    assert attributes["gen_ai.request.temperature"] == 0.2
    assert attributes["gen_ai.request.top_p"] == 0.9
    assert tuple(attributes["gen_ai.request.stop_sequences"]) == ("END",)
    assert attributes["gen_ai.conversation.id"] == tracing.conversation_id
    assert "gen_ai.response.id" not in attributes  # a scripted response has no id


# -- follow-up: the chat span is current while its request runs -------------------------------


async def test_a_span_opened_in_a_models_stream_nests_under_its_chat_span(exporter: Any) -> None:
    """A model's own spans (as a provider SDK or an instrumented HTTP client opens them while
    the stream is read) are children of the turn's ``chat`` span, in the run's trace; once the
    run ends no span of it is current in the caller's task."""
    tracer = exporter.provider.get_tracer("the model's own")
    requests = 0

    async def answer(messages: Any, request: Any) -> Any:
        nonlocal requests
        requests += 1
        with tracer.start_as_current_span(f"model request {requests}"):
            await asyncio.sleep(0)
        if requests == 1:
            return tool_response(call("echo", {"text": "a"}, id="e1"))
        return "done"

    @tool
    def echo(text: str) -> str:
        """Echo.

        Args:
            text: the text.
        """
        return text

    agent = Agent(FunctionModel(answer, name="fn"), tools=[echo])
    instrument(agent, tracer_provider=exporter.provider)
    assert (await agent.run("go")).state is State.DONE
    assert trace.get_current_span() is trace.INVALID_SPAN  # nothing left attached
    spans = exporter.get_finished_spans()
    [run] = named(spans, "invoke_agent")
    chats = sorted(named(spans, "chat fn"), key=lambda s: s.attributes["statemachine_agent.turn"])
    assert len(chats) == 2
    for turn, chat in enumerate(chats, start=1):
        [inner] = named(spans, f"model request {turn}")
        assert inner.parent is not None and inner.parent.span_id == chat.context.span_id
        assert inner.context.trace_id == chat.context.trace_id == run.context.trace_id
    [tool_span] = named(spans, "execute_tool echo")  # the chat span is not current for the tool
    assert tool_span.parent is not None and tool_span.parent.span_id == run.context.span_id


async def test_a_failed_request_leaves_no_chat_span_current(exporter: Any) -> None:
    """A request that fails for good (the model raises) ends its chat span and makes it not
    current: the caller's next span is not a child of the run's."""

    current: list[Any] = []

    def broken(messages: Any, request: Any) -> Any:
        current.append(trace.get_current_span())
        raise RuntimeError("no connection")

    agent = Agent(FunctionModel(broken, name="broken"))
    instrument(agent, tracer_provider=exporter.provider)
    result = await agent.run("go")
    assert result.state is State.FAILED
    assert trace.get_current_span() is trace.INVALID_SPAN
    [chat] = named(exporter.get_finished_spans(), "chat broken")
    assert [span.get_span_context() for span in current] == [chat.context]
    assert chat.status.status_code is StatusCode.ERROR


async def test_a_refused_requests_chat_span_is_not_current_while_the_run_compacts(
    exporter: Any,
) -> None:
    """A request refused as too long leaves the awaiting_model state for compacting: what the
    summarizer opens is not a child of the refused request's ``chat`` span."""
    tracer = exporter.provider.get_tracer("the summarizer's own")
    requests = 0

    def respond(messages: Any, request: Any) -> Any:
        nonlocal requests
        requests += 1
        if requests == 1:
            raise ModelError("prompt is too long: 300000 tokens > 200000 maximum", status_code=400)
        return "ok"

    def summarize(old: Any) -> str:
        with tracer.start_as_current_span("summarize"):
            return "summary"

    agent = Agent(
        FunctionModel(respond, name="fn"),
        messages=[UserMessage("old"), AssistantMessage(content=[]), UserMessage("older")],
        compaction=Compaction(threshold=10**9, keep_recent=0, summarize=summarize),
    )
    instrument(agent, tracer_provider=exporter.provider)
    assert (await agent.run("go")).state is State.DONE
    spans = exporter.get_finished_spans()
    refused, _answered = sorted(named(spans, "chat fn"), key=lambda s: s.start_time or 0)
    [summary] = named(spans, "summarize")
    assert summary.parent is None or summary.parent.span_id != refused.context.span_id
    assert trace.get_current_span() is trace.INVALID_SPAN
