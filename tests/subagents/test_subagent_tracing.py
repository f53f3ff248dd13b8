"""Issue 37, item 4: the child's ``invoke_agent`` span nests under the parent's
``execute_tool`` span of the call running it (in-memory exporter)."""

from __future__ import annotations

from pathlib import Path

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from statemachine_agent.otel import instrument
from statemachine_agent.session import read_session

from .subagent_helpers import orchestrator, researcher


def _provider() -> tuple[TracerProvider, InMemorySpanExporter]:
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    return provider, memory


async def test_the_childs_invoke_agent_span_nests_under_the_parents_execute_tool() -> None:
    provider, memory = _provider()
    parent = orchestrator(researcher())
    instrument(parent, tracer_provider=provider)
    result = await parent.run("go")
    spans = memory.get_finished_spans()
    runs = [s for s in spans if s.name == "invoke_agent"]
    assert len(runs) == 2
    top = next(s for s in runs if s.attributes["statemachine_agent.run_id"] == result.run_id)
    nested = next(s for s in runs if s is not top)
    call = next(s for s in spans if s.name == "execute_tool research")
    assert call.parent is not None and call.parent.span_id == top.context.span_id
    assert nested.parent is not None and nested.parent.span_id == call.context.span_id
    assert nested.attributes["statemachine_agent.parent_call_id"] == "p1"
    assert nested.attributes["gen_ai.agent.name"] == "research"
    lookup = next(s for s in spans if s.name == "execute_tool lookup")
    chats = [s for s in spans if s.name.startswith("chat") and s.parent == nested.context]
    assert lookup.parent is not None and lookup.parent.span_id == nested.context.span_id
    assert len(chats) == 2  # the child's two requests, under its own run span
    assert {s.context.trace_id for s in spans} == {top.context.trace_id}  # one trace


async def test_a_childs_run_writes_no_trace_line_of_its_own(tmp_path: Path) -> None:
    provider, _memory = _provider()
    path = tmp_path / "s.jsonl"
    parent = orchestrator(researcher(), session=path)
    instrument(parent, tracer_provider=provider)
    await parent.run("go")
    parent.close()
    data = read_session(path)
    assert [r.type for r in data.records].count("trace") == 1  # the parent's run only
