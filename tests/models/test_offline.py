"""ScriptedModel and FunctionModel: offline models, checked up front."""

from __future__ import annotations

from typing import Any

import pytest

from statemachine_agent import Agent, AssistantMessage, State, UsageError
from statemachine_agent.models import FunctionModel, ScriptedModel
from statemachine_agent.testing.steps import text_response


@pytest.mark.parametrize(
    ("steps", "message"),
    [
        ([text_response("ok"), "hello"], "step 2: expected a response object"),
        ([{"foo": 1}], "step 1: needs 'content'"),
        ([{"content": "hello"}], "step 1: 'content' must be a list"),
        (
            [{"content": [{"type": "txt", "text": "x"}]}],
            "step 1, block 1: unknown block type 'txt'",
        ),
        (
            [{"content": [{"type": "tool_use", "name": "f"}]}],
            "step 1, block 1 (tool_use): missing id",
        ),
        ([{"content": [], "delay_seconds": -1}], "step 1: delay_seconds must be a number"),
        ([{"error": "overloaded"}], "step 1: error must be an object"),
    ],
)
def test_malformed_steps_are_refused_naming_the_step(steps: list[Any], message: str) -> None:
    with pytest.raises(UsageError, match=message.replace("(", r"\(").replace(")", r"\)")):
        ScriptedModel(steps)


def test_recorded_provider_blocks_are_accepted() -> None:
    ScriptedModel(
        [
            {
                "content": [
                    {"type": "server_tool_use", "id": "s", "name": "web_search", "input": {}},
                    {"type": "web_search_tool_result", "tool_use_id": "s", "content": []},
                ],
                "stop_reason": "pause_turn",
            }
        ]
    )


async def test_function_model_accepts_messages_dicts_and_strings() -> None:
    answers: list[Any] = [
        AssistantMessage.model_validate(
            {"content": [{"type": "text", "text": "a"}], "stop_reason": "max_tokens"}
        ),
        {"content": [{"type": "text", "text": "b"}], "stop_reason": "max_tokens"},
        "c",
    ]

    def respond(messages: Any, request: Any) -> Any:
        return answers.pop(0)

    result = await Agent(FunctionModel(respond)).run("go")
    assert (
        result.state is State.DONE and result.text == "abc"
    )  # the answer joined across its continuations
