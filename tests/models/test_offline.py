"""ScriptedModel and FunctionModel: offline models, checked up front."""

from __future__ import annotations

from typing import Any

import pytest

from statemachine_agent import (
    Agent,
    AssistantMessage,
    MessageDelta,
    ProviderBlock,
    State,
    UsageError,
)
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


async def test_recorded_provider_blocks_are_accepted() -> None:
    server_use = {"type": "server_tool_use", "id": "s", "name": "web_search", "input": {}}
    search_result = {"type": "web_search_tool_result", "tool_use_id": "s", "content": []}
    model = ScriptedModel(
        [
            {"content": [server_use, search_result], "stop_reason": "pause_turn"},
            text_response("Found nothing."),
        ]
    )
    result = await Agent(model).run("search")
    assert result.state is State.DONE and result.text == "Found nothing."
    paused = result.messages[1]
    assert isinstance(paused, AssistantMessage) and paused.stop_reason == "pause_turn"
    # Kept verbatim, as blocks the engine does not interpret, and sent back as they came.
    assert paused.content == [ProviderBlock(data=server_use), ProviderBlock(data=search_result)]
    assert model.requests[1].messages[-1] == paused
    assert [m.role for m in result.messages] == ["user", "assistant", "assistant"]


async def test_function_model_accepts_messages_dicts_and_strings() -> None:
    answers: list[Any] = [
        AssistantMessage.model_validate(
            {"content": [{"type": "text", "text": "a"}], "stop_reason": "max_tokens"}
        ),
        {"content": [{"type": "text", "text": "b"}], "stop_reason": "max_tokens"},
        "c",
    ]

    seen: list[list[str]] = []

    def respond(messages: Any, request: Any) -> Any:
        seen.append([m.text for m in messages])
        return answers.pop(0)

    result = await Agent(FunctionModel(respond)).run("go")
    assert (
        result.state is State.DONE and result.text == "abc" and result.error is None
    )  # joined across continuations
    # Each form became the same assistant message; a max_tokens answer was asked to continue.
    assert [(m.role, m.text) for m in result.messages] == [
        ("user", "go"),
        ("assistant", "a"),
        ("user", CONTINUE),
        ("assistant", "b"),
        ("user", CONTINUE),
        ("assistant", "c"),
    ]
    assert [m.stop_reason for m in result.messages if isinstance(m, AssistantMessage)] == [
        "max_tokens",
        "max_tokens",
        "end_turn",
    ]
    assert seen == [["go"], ["go", "a", CONTINUE], ["go", "a", CONTINUE, "b", CONTINUE]]


CONTINUE = (
    "Your response was cut off by the output token limit. Continue exactly where you stopped."
)


async def test_a_scripted_response_streams_each_block_kind_as_a_delta() -> None:
    answer = {
        "content": [
            {"type": "thinking", "thinking": "weighing it", "signature": "sig"},
            {"type": "text", "text": "the answer"},
        ]
    }
    agent = Agent(ScriptedModel([answer]))
    deltas: list[tuple[int, str, str]] = []
    agent.subscribe(
        lambda e: deltas.append((e.index, e.kind, e.delta)) if isinstance(e, MessageDelta) else None
    )
    result = await agent.run("think")
    assert deltas == [(0, "thinking", "weighing it"), (1, "text", "the answer")]
    assert result.state is State.DONE and result.text == "the answer"
