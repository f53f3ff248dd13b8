"""Issue 37, item 1: a sub-agent's typed output becomes the call's result as the tool's JSON of
the model instance (`result_json`: every field by its serialization alias, as any tool returning
that model), not the text of the child's ``final_result`` answer (field names)."""

from __future__ import annotations

import json

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel

from statemachine_agent import Agent, ToolResultMessage
from statemachine_agent.models import ScriptedModel
from statemachine_agent.testing.steps import call, text_response, tool_response


class Finding(BaseModel):
    """A finding, its fields camelCase in JSON."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True)

    fact_text: str
    confidence_score: float


async def test_a_typed_output_crosses_the_call_as_the_models_json_by_alias() -> None:
    child = Agent(
        ScriptedModel(
            [
                tool_response(
                    call("final_result", {"factText": "otters hold hands", "confidenceScore": 0.9})
                )
            ]
        ),
        output_type=Finding,
    )
    parent = Agent(
        ScriptedModel(
            [
                tool_response(call("research", {"prompt": "otters"}, id="p1")),
                text_response("ok"),
            ]
        ),
        tools=[child.as_tool("research", "Research.")],
    )
    result = await parent.run("go")
    answer = next(
        m for m in result.messages if isinstance(m, ToolResultMessage) and m.tool_call_id == "p1"
    )
    assert answer.is_error is False
    assert json.loads(answer.text) == {"factText": "otters hold hands", "confidenceScore": 0.9}
