"""Helpers of the sub-agent tests: a two-level agent on scripted models."""

from __future__ import annotations

from typing import Any

from statemachine_agent import Agent, ToolResultMessage, tool
from statemachine_agent.models import ScriptedModel
from statemachine_agent.testing.steps import call, text_response, tool_response

USAGE = {"input_tokens": 10, "output_tokens": 5}


@tool
def lookup(topic: str) -> str:
    """Look a topic up."""
    return f"facts about {topic}"


def researcher(steps: list[dict[str, Any]] | None = None, **kwargs: Any) -> Agent:
    """A child agent: calls ``lookup`` once (call ``c1``), then answers."""
    if steps is None:
        steps = [
            tool_response(call("lookup", {"topic": "otters"}, id="c1"), usage=USAGE),
            text_response("Otters hold hands.", usage=USAGE),
        ]
    return Agent(ScriptedModel(steps), tools=[lookup], **kwargs)


def orchestrator(child: Agent, steps: list[dict[str, Any]] | None = None, **kwargs: Any) -> Agent:
    """A parent agent: asks the ``research`` sub-agent (call ``p1``), then answers."""
    if steps is None:
        steps = [
            tool_response(call("research", {"prompt": "otters"}, id="p1"), usage=USAGE),
            text_response("Done: otters hold hands.", usage=USAGE),
        ]
    research = child.as_tool("research", "Research a topic.")
    return Agent(ScriptedModel(steps), tools=[research, *kwargs.pop("tools", [])], **kwargs)


def result_of(messages: list[Any], call_id: str) -> ToolResultMessage:
    """The result of call ``call_id`` in ``messages``."""
    return next(
        m for m in messages if isinstance(m, ToolResultMessage) and m.tool_call_id == call_id
    )
