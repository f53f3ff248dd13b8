"""One process of the cross-process tracing test (issue 32, case 7):
``python otel_child.py pause|resume LOG SPANS``.

``pause`` runs a new session logged at LOG until the model's call ``t1`` (``deploy``, which
requires approval) waits for a decision; ``resume`` resumes LOG with `Agent.resume` and approves
``t1``. Both instrument the agent with no tracing argument (what links them is the session log)
and export to an in-memory exporter, which is per process: the finished spans are written to
SPANS as JSON, one object per span, with the run's final state last.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import format_span_id, format_trace_id

from statemachine_agent import Agent, Approve, tool
from statemachine_agent.models import ScriptedModel
from statemachine_agent.otel import instrument
from statemachine_agent.testing.steps import call, text_response, tool_response

SCRIPT = [
    tool_response(call("deploy", {"env": "prod"}, id="t1")),
    text_response("Deployed."),
]


@tool(requires_approval=True)
def deploy(env: str) -> str:
    """Deploy.

    Args:
        env: where to.
    """
    return f"deployed to {env}"


def as_json(span: ReadableSpan) -> dict[str, Any]:
    context = span.context
    assert context is not None
    return {
        "name": span.name,
        "trace_id": format_trace_id(context.trace_id),
        "span_id": format_span_id(context.span_id),
        "parent_span_id": None if span.parent is None else format_span_id(span.parent.span_id),
        "attributes": dict(span.attributes or {}),
        "links": [
            {
                "trace_id": format_trace_id(link.context.trace_id),
                "span_id": format_span_id(link.context.span_id),
                "attributes": dict(link.attributes or {}),
            }
            for link in span.links
        ],
    }


async def run(mode: str, log: Path) -> dict[str, Any]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    if mode == "pause":
        agent = Agent(ScriptedModel(SCRIPT), tools=[deploy], session=log)
        instrument(agent, tracer_provider=provider)
        result = await agent.run("deploy to prod")
    else:
        agent = Agent.resume(log, model=ScriptedModel(SCRIPT[1:]), tools=[deploy])
        instrument(agent, tracer_provider=provider)
        result = await agent.run(decisions={"t1": Approve()})
    agent.close()
    provider.shutdown()
    spans = [as_json(span) for span in exporter.get_finished_spans()]
    return {"spans": spans, "state": str(result.state)}


if __name__ == "__main__":
    data = asyncio.run(run(sys.argv[1], Path(sys.argv[2])))
    Path(sys.argv[3]).write_text(json.dumps(data), encoding="utf-8")
