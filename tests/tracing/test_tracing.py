"""OpenTelemetry tracing (``statemachine_agent.otel``): spans of paused and resumed runs (also in
another process, from the session log), spans nested under a tool's or a request's span, spans
ended when instrumentation closes or a run is aborted."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
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
from statemachine_agent.session import SessionCorruptError, SessionTrace, read_session
from statemachine_agent.testing.steps import call, text_response, tool_response

pytest.importorskip("opentelemetry.sdk", reason="the [otel] extra is not installed")

import contextlib
import threading
import time
from collections.abc import Sequence

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (
    InMemorySpanExporter,
)
from opentelemetry.trace import StatusCode

from statemachine_agent import (
    Event,
    Message,
    ToolContext,
    ToolResultMessage,
)
from statemachine_agent.otel import instrument
from statemachine_agent.testing import (
    assert_valid_history,
)

CHILD = Path(__file__).with_name("otel_child.py")


SAFETY_SECONDS = 60.0  # only ends a hung child; nothing is asserted about time


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


async def test_a_deferred_call_has_an_execute_tool_span_only_where_it_runs(
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


async def test_a_run_resumed_in_another_process_links_to_the_paused_run(
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


def _child(mode: str, log: Path, out: Path) -> dict[str, Any]:
    """Run otel_child.py in a process of its own (it inherits PYTHONPATH); its spans as JSON."""
    done = subprocess.run(
        [sys.executable, str(CHILD), mode, str(log), str(out)],
        capture_output=True,
        text=True,
        timeout=SAFETY_SECONDS,
    )
    assert done.returncode == 0, done.stderr
    data: dict[str, Any] = json.loads(out.read_text(encoding="utf-8"))
    return data


def test_a_run_resumed_from_the_session_log_in_another_process_links_to_the_paused_run(
    tmp_path: Path,
) -> None:
    """Process 1 runs to ``awaiting_approval``; process 2 resumes the session log and approves.
    Neither passes a tracing argument: the log carries the paused run's span context and the
    conversation id."""
    log = tmp_path / "run.jsonl"
    first = _child("pause", log, tmp_path / "spans-1.json")
    second = _child("resume", log, tmp_path / "spans-2.json")
    assert (first["state"], second["state"]) == ("awaiting_approval", "done")

    [paused] = [s for s in first["spans"] if s["name"] == "invoke_agent"]
    [resumed] = [s for s in second["spans"] if s["name"] == "invoke_agent"]
    assert paused["attributes"]["statemachine_agent.pending_call_ids"] == ["t1"]
    [link] = resumed["links"]
    assert (link["trace_id"], link["span_id"]) == (paused["trace_id"], paused["span_id"])
    assert link["attributes"]["statemachine_agent.link.type"] == "resumes"
    conversation = paused["attributes"]["gen_ai.conversation.id"]
    assert resumed["attributes"]["gen_ai.conversation.id"] == conversation
    # t1's span exists only where it ran: in process 2, under the resumed run's span
    assert [s for s in first["spans"] if s["name"].startswith("execute_tool")] == []
    [t1] = [s for s in second["spans"] if s["name"] == "execute_tool deploy"]
    assert t1["attributes"]["gen_ai.tool.call.id"] == "t1"
    assert t1["parent_span_id"] == resumed["span_id"]
    # the log records it (a ``trace`` line); once decided, the pause is no longer there to link
    data = read_session(log)
    assert data.trace is not None and data.trace.conversation_id == conversation
    assert data.trace.paused is None


async def test_a_session_log_without_a_trace_line_still_resumes_traced(
    exporter: Any, tmp_path: Path
) -> None:
    """A log written untraced (or before the ``trace`` line existed) loads as before: the
    resumed run has no link and a conversation id of its own; t1 has one span."""
    path = tmp_path / "run.jsonl"
    agent = Agent(ScriptedModel(SCRIPT), tools=[_deploy_tool([])], session=path)
    assert (await agent.run("deploy to prod")).state is State.AWAITING_APPROVAL
    agent.close()
    assert "trace" not in [r.type for r in read_session(path).records]

    ran: list[str] = []
    resumed = Agent.resume(path, model=ScriptedModel(SCRIPT[1:]), tools=[_deploy_tool(ran)])
    assert resumed.session is not None and resumed.session.trace is None
    tracing = instrument(resumed, tracer_provider=exporter.provider)
    assert tracing.paused is None
    assert (await resumed.run(decisions={"t1": Approve()})).state is State.DONE
    resumed.close()
    spans = exporter.get_finished_spans()
    [run_span] = named(spans, "invoke_agent")
    assert run_span.links == ()
    assert run_span.attributes["gen_ai.conversation.id"] == tracing.conversation_id
    assert len(named(spans, "execute_tool deploy")) == 1 and ran == ["prod"]


async def test_a_pause_decided_since_is_not_linked_again(exporter: Any, tmp_path: Path) -> None:
    """The log's paused span is linked only by the run that decides its calls: resumed again
    after an untraced process decided them, the next run links to nothing (it keeps the
    conversation id); ``conversation_id=`` still overrides the log's."""
    path = tmp_path / "run.jsonl"
    agent = Agent(ScriptedModel(SCRIPT), tools=[_deploy_tool([])], session=path)
    tracing = instrument(agent, tracer_provider=exporter.provider)
    assert (await agent.run("deploy to prod")).state is State.AWAITING_APPROVAL
    agent.close()
    assert read_session(path).trace == SessionTrace(
        tracing.conversation_id,
        read_session(path).trace.paused,  # type: ignore[union-attr]
    )

    untraced = Agent.resume(path, model=ScriptedModel(SCRIPT[1:]), tools=[_deploy_tool([])])
    assert (await untraced.run(decisions={"t1": Approve()})).state is State.DONE
    untraced.close()
    assert read_session(path).trace == SessionTrace(tracing.conversation_id)
    exporter.clear()

    again = Agent.resume(path, model=ScriptedModel([text_response("ok")]), tools=[])
    traced = instrument(again, tracer_provider=exporter.provider)
    assert (traced.conversation_id, traced.paused) == (tracing.conversation_id, None)
    assert (await again.run("anything else?")).state is State.DONE
    [run_span] = named(exporter.get_finished_spans(), "invoke_agent")
    assert run_span.links == ()
    assert run_span.attributes["gen_ai.conversation.id"] == tracing.conversation_id
    traced.close()
    assert instrument(again, conversation_id="mine").conversation_id == "mine"
    again.close()


async def test_a_pause_a_later_untraced_run_left_waiting_is_not_linked(
    exporter: Any, tmp_path: Path
) -> None:
    """In one process: a traced run pauses on t1 and t2; tracing stops; an untraced run decides
    t1 and waits on t2. Traced again, the agent has nothing to link to: the recorded pause was
    the first run's, and a run started since (the log keeps what it records current)."""
    path = tmp_path / "run.jsonl"
    two = [
        tool_response(call("deploy", {"env": "a"}, id="t1"), call("deploy", {"env": "b"}, id="t2"))
    ]
    agent = Agent(
        ScriptedModel([*two, text_response("Done.")]), tools=[_deploy_tool([])], session=path
    )
    tracing = instrument(agent, tracer_provider=exporter.provider)
    assert (await agent.run("deploy both")).state is State.AWAITING_APPROVAL
    tracing.close()
    assert agent.session is not None and agent.session.trace is not None
    assert agent.session.trace.paused is not None
    assert agent.session.trace.paused.call_ids == ("t1", "t2")

    waiting = await agent.run(decisions={"t1": Approve()})  # untraced; t2 still waits
    assert waiting.state is State.AWAITING_APPROVAL
    assert agent.session.trace.paused is None
    again = instrument(agent, tracer_provider=exporter.provider)
    assert again.paused is None
    again.close()
    agent.close()


async def test_a_resumed_session_keeps_its_conversation_id(exporter: Any, tmp_path: Path) -> None:
    """A session is one conversation: resumed in a new agent and traced, its runs' spans carry
    the id the log records (written once, not per run)."""
    path = tmp_path / "run.jsonl"
    agent = Agent(ScriptedModel([text_response("one"), text_response("two")]), session=path)
    tracing = instrument(agent, tracer_provider=exporter.provider)
    await agent.run("first")
    await agent.run("second")
    agent.close()

    resumed = Agent.resume(path, model=ScriptedModel([text_response("three")]))
    again = instrument(resumed, tracer_provider=exporter.provider)
    await resumed.run("third")
    resumed.close()
    assert again.conversation_id == tracing.conversation_id
    runs = named(exporter.get_finished_spans(), "invoke_agent")
    assert [s.attributes["gen_ai.conversation.id"] for s in runs] == [tracing.conversation_id] * 3
    assert [r.type for r in read_session(path).records].count("trace") == 1


def test_a_hand_edited_trace_line_that_breaks_its_fields_is_unreadable(
    tmp_path: Path,
) -> None:
    path = tmp_path / "run.jsonl"
    agent = Agent(ScriptedModel([text_response("ok")]), session=path)
    agent.run_sync("hi")
    agent.close()
    good = {"type": "trace", "conversation_id": "c1", "paused": None}
    bad = {"type": "trace", "conversation_id": "c1", "paused": {"trace_id": "xyz", "span_id": "0"}}
    with path.open("a", encoding="utf-8") as f:
        f.write(json.dumps(good) + "\n" + json.dumps(bad) + "\n")
    with pytest.raises(SessionCorruptError, match="not a valid 'trace' line"):
        read_session(path)
    data = read_session(path, strict=False)
    assert data.trace == SessionTrace("c1")  # the readable line is kept


@pytest.mark.parametrize("calls", [1, 2], ids=["one_call", "a_batch_of_two"])
async def test_a_tools_own_spans_nest_under_its_execute_tool_span(
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


async def test_chat_spans_carry_the_request_settings_of_the_genai_conventions(
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


class Spans:
    """Every span started and ended under one tracer provider (a span processor's view)."""

    def __init__(self) -> None:
        otel_sdk = pytest.importorskip(
            "opentelemetry.sdk.trace", reason="the [otel] extra is not installed"
        )

        spans = self

        class Recorder(otel_sdk.SpanProcessor):  # type: ignore[name-defined,misc]
            def on_start(self, span: Any, parent_context: Any = None) -> None:
                spans.started.append(span)

            def on_end(self, span: Any) -> None:
                spans.ended.append(span)

        self.started: list[Any] = []
        self.ended: list[Any] = []
        self.provider = otel_sdk.TracerProvider()
        self.provider.add_span_processor(Recorder())

    def unended(self) -> list[str]:
        ended = {s.context.span_id for s in self.ended}  # on_end gets a copy: match by id
        return [s.name for s in self.started if s.context.span_id not in ended]


@tool
async def reports(ctx: ToolContext) -> str:
    """A tool that sends progress."""
    ctx.progress("half way")
    return "reported"


@tool
def looks_up(key: str) -> str:
    """A sync tool."""
    return f"value of {key}"


def traced_script() -> list[dict[str, Any]]:
    return [
        tool_response(call("reports", id="r1"), call("looks_up", {"key": "k"}, id="l1")),
        tool_response(call("looks_up", {"key": "j"}, id="l2")),
        text_response("done"),
    ]


async def traced_run(close_at: int | None) -> tuple[Spans, int, Agent]:
    from statemachine_agent.otel import instrument

    spans = Spans()
    agent = Agent(ScriptedModel(traced_script(), name="m"), tools=[reports, looks_up])
    tracing = instrument(agent, tracer_provider=spans.provider)
    seen = 0

    def count(event: Event) -> None:
        nonlocal seen
        seen += 1
        if seen == close_at:
            tracing.close()

    agent.subscribe(count)
    result = await agent.run("go")
    assert result.state is State.DONE
    return spans, seen, agent


async def test_instrumentation_closed_at_any_event_of_a_run_leaves_no_span_unended() -> None:
    full, events, _ = await traced_run(None)
    assert full.unended() == [] and len(full.started) == 7  # the run, 3 chats, 3 tool calls
    for close_at in range(1, events + 1):
        spans, _, _ = await traced_run(close_at)
        assert spans.unended() == [], f"closed at event {close_at}"
        assert len(spans.started) <= len(full.started)


async def test_instrumentation_closed_while_a_tool_runs_ends_its_spans_with_an_error() -> None:
    from opentelemetry.trace import StatusCode

    from statemachine_agent.otel import instrument

    started, release = asyncio.Event(), asyncio.Event()

    @tool
    async def slow() -> str:
        """Wait until the test lets it finish."""
        started.set()
        await release.wait()
        return "finished"

    spans = Spans()
    script = [tool_response(call("slow", id="s1")), text_response("done")]
    agent = Agent(ScriptedModel(script, name="m"), tools=[slow])
    tracing = instrument(agent, tracer_provider=spans.provider)
    run = asyncio.ensure_future(agent.run("go"))
    await started.wait()
    assert sorted(s.name for s in spans.started) == ["chat m", "execute_tool slow", "invoke_agent"]
    tracing.close()
    assert spans.unended() == []
    release.set()
    result = await run
    assert result.state is State.DONE
    assert spans.unended() == [] and len(spans.started) == 3  # nothing traced after close
    open_then = [s for s in spans.ended if s.name in ("execute_tool slow", "invoke_agent")]
    assert [(s.status.status_code, s.status.description) for s in open_then] == [
        (StatusCode.ERROR, "tracing was stopped")
    ] * 2


def result_ids(messages: Sequence[Message]) -> list[str]:
    return [m.tool_call_id for m in messages if isinstance(m, ToolResultMessage)]


GRACE = 0.2


IGNORES_FOR = 6.0
"""How long the stubborn tools go on after the abort (they stop by themselves then)."""


@pytest.mark.timeout(60)
@pytest.mark.parametrize("kind", ["sync", "async"])
async def test_an_abort_ends_the_runs_spans_even_when_a_tool_ignores_it(kind: str) -> None:
    """mastra-ai/mastra#21325: ``run.cancel()`` aborts the controller, but when a step does not
    honour ``abortSignal`` the step keeps running, ``execute()`` never returns and no span of
    the run is ever ended (exporters that act on span end see nothing). Here: two parallel
    calls of a tool that ignores the abort (a sync tool that does not read the signal; an async
    one that swallows its cancellation), ``abort_grace_seconds=0.2``. Expected: the run ends
    ``aborted`` within the grace period plus a margin, and by then its ``invoke_agent`` span
    and both ``execute_tool`` spans have ended with an error status; the calls are answered."""
    pytest.importorskip("opentelemetry.sdk", reason="the [otel] extra is not installed")
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from opentelemetry.trace import StatusCode

    from statemachine_agent.otel import instrument

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    entered = threading.Event()
    release = threading.Event()

    @tool
    def stubborn_sync(part: str) -> str:
        """Copy a part (does not read the abort signal).

        Args:
            part: the part.
        """
        entered.set()
        release.wait(IGNORES_FOR)
        return f"copied {part}"

    @tool
    async def stubborn_async(part: str) -> str:
        """Copy a part (swallows its cancellation).

        Args:
            part: the part.
        """
        entered.set()
        deadline = time.monotonic() + IGNORES_FOR
        while time.monotonic() < deadline and not release.is_set():
            with contextlib.suppress(asyncio.CancelledError):  # ignores the abort, as the
                await asyncio.sleep(0.02)  # report's step does
        return f"copied {part}"

    name = f"stubborn_{kind}"
    model = ScriptedModel(
        [tool_response(call(name, {"part": "1"}, id="p1"), call(name, {"part": "2"}, id="p2"))]
    )
    agent = Agent(
        model, tools=[stubborn_sync, stubborn_async], abort_grace_seconds=GRACE, max_turns=3
    )
    instrument(agent, tracer_provider=provider)
    handle = agent.start("Copy both parts.")
    waiter = asyncio.ensure_future(_result_of(handle))
    try:
        assert await asyncio.to_thread(entered.wait, 10)  # a failure guard, not a timing one
        aborted_at = time.monotonic()
        agent.abort("the user pressed stop")
        done, _ = await asyncio.wait({waiter}, timeout=GRACE + 1.5)
        took = time.monotonic() - aborted_at
        spans = exporter.get_finished_spans()
        runs = [s for s in spans if s.name == "invoke_agent"]
        tools = [s for s in spans if s.name.startswith("execute_tool")]
        assert done, (
            f"the run had not ended {took:.1f} s after the abort (grace {GRACE} s); finished "
            f"spans: {[s.name for s in spans]}"
        )
        assert len(runs) == 1 and runs[0].status.status_code is StatusCode.ERROR
        assert len(tools) == 2
        assert all(s.status.status_code is StatusCode.ERROR for s in tools)
        result = waiter.result()
        assert result.state is State.ABORTED
        assert result.error == "the user pressed stop"
        assert sorted(result_ids(agent.messages)) == ["p1", "p2"]  # every call answered
        assert_valid_history(agent.messages)
    finally:
        release.set()
        await asyncio.wait_for(waiter, IGNORES_FOR + 5)


async def _result_of(handle: Any) -> Any:
    return await handle
