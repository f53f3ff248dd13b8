"""Messages: discriminated pydantic models that round-trip through one TypeAdapter."""

from __future__ import annotations

import json
import math

import pytest
from pydantic import BaseModel, ValidationError

from statemachine_agent import (
    HISTORY_ADAPTER,
    AssistantMessage,
    ImageBlock,
    ProviderBlock,
    StopReason,
    TextBlock,
    ThinkingBlock,
    ToolCallBlock,
    ToolResultMessage,
    Usage,
    UserMessage,
)
from statemachine_agent._strict_json import non_finite_at


def sample_history() -> list:
    return [
        UserMessage("hello"),
        UserMessage(
            content=[TextBlock(text="see"), ImageBlock(media_type="image/png", data="aGk=")]
        ),
        AssistantMessage(
            content=[
                ThinkingBlock(thinking="hmm", signature="sig"),
                TextBlock(text="Calling."),
                ToolCallBlock(id="c1", name="f", input={"a": 1}),
                ToolCallBlock(id="c2", name="g", input=None, raw_arguments='{"a":'),
                ProviderBlock(data={"type": "server_tool_use", "id": "s", "input": {}}),
            ],
            stop_reason="tool_use",
            usage=Usage(input_tokens=3, output_tokens=4, cache_write_tokens=5, cache_read_tokens=6),
            model="claude",
        ),
        ToolResultMessage(tool_call_id="c1", tool_name="f", content=[TextBlock(text="ok")]),
        ToolResultMessage(
            tool_call_id="c2", tool_name="g", content=[TextBlock(text="bad")], is_error=True
        ),
        AssistantMessage(content=[TextBlock(text="?")], stop_reason="some_future_reason"),
    ]


def test_history_round_trips_unchanged() -> None:
    history = sample_history()
    data = HISTORY_ADAPTER.dump_json(history)
    back = HISTORY_ADAPTER.validate_json(data)
    assert back == history
    assert HISTORY_ADAPTER.dump_json(back) == data


def test_stop_reasons_known_and_unknown() -> None:
    known = AssistantMessage(stop_reason="end_turn")
    assert known.stop_reason is StopReason.END_TURN
    unknown = AssistantMessage(stop_reason="brand_new")
    assert unknown.stop_reason == "brand_new" and not isinstance(unknown.stop_reason, StopReason)
    assert {r.value for r in StopReason} >= {
        "end_turn",
        "tool_use",
        "max_tokens",
        "stop_sequence",
        "pause_turn",
        "refusal",
        "model_context_window_exceeded",
        "aborted",
        "error",
    }


@pytest.mark.parametrize(
    "value",
    [
        {},
        [],
        0.0,
        1.5,
        "text",
        None,
        {"a": 1, "b": "x", "c": None, "d": True},
        {"a": [1, 2.5, {"b": "c"}]},
        math.nan,
        -math.inf,
        {"x": math.nan},
        [math.inf],
        {"a": {"b": [1, -math.inf]}},
    ],
)
def test_tool_call_input_check_skips_only_what_holds_no_non_finite_number(value: object) -> None:
    # The check before validation skips a value that cannot hold a non-finite number (empty, or
    # not a dict, list or float) without scanning it: the block must be what the full scan says.
    block = ToolCallBlock(id="c", name="f", input=value)
    if non_finite_at(value) is None:
        assert block.input == value and block.raw_arguments is None
    else:
        assert block.input is None and block.raw_arguments == json.dumps(value)


def test_usage_adds() -> None:
    total = Usage(input_tokens=1, cache_read_tokens=2) + Usage(
        output_tokens=3, cache_write_tokens=4
    )
    assert total == Usage(
        input_tokens=1, output_tokens=3, cache_write_tokens=4, cache_read_tokens=2
    )
    assert total.total_tokens == 10


def test_message_helpers() -> None:
    message = sample_history()[2]
    assert [c.id for c in message.tool_calls] == ["c1", "c2"]
    assert message.text == "Calling."


def test_an_image_needs_one_source_and_inline_data_its_media_type() -> None:
    import pytest
    from pydantic import ValidationError

    ImageBlock(url="https://example.com/a.png")
    ImageBlock(media_type="image/png", data="aGk=")
    for bad in ({}, {"data": "aGk="}, {"data": "aGk=", "media_type": "image/png", "url": "u"}):
        with pytest.raises(ValidationError):
            ImageBlock(**bad)


def _built_as_validated(model: object, cls: type, data: dict) -> None:
    # The reference is validated without the class's own ``__init__`` (``model_validate`` of a
    # class defining one calls it: it would compare the shortcut with itself).
    validated = cls.__new__(cls)
    BaseModel.__init__(validated, **data)
    assert model == validated
    assert list(vars(model).items()) == list(vars(validated).items())
    assert model.model_fields_set == validated.model_fields_set
    assert type(model.stop_reason if cls is AssistantMessage else None) is type(
        validated.stop_reason if cls is AssistantMessage else None
    )
    assert repr(model) == repr(validated)
    assert model.model_dump_json() == validated.model_dump_json()


@pytest.mark.parametrize(
    "data",
    [
        {"id": "c", "name": "f", "input": {}},
        {"id": "c", "name": "f", "input": {"a": [1, 2.5]}},
        {"id": "c", "name": "f", "input": {"x": math.nan}},
        {"id": "c", "name": "f", "input": []},
        {"id": "c", "name": "f", "input": {}, "truncated": True},
        {"name": "f", "input": {}, "id": "c"},
    ],
)
def test_a_tool_call_built_by_its_constructor_is_the_block_validation_builds(data: dict) -> None:
    # The usual call (str id and name, a dict input) is built without validating: the same block
    block = ToolCallBlock(**data)
    _built_as_validated(block, ToolCallBlock, data)
    if type(data["input"]) is dict and not non_finite_at(data["input"]):
        assert block.input is data["input"]  # kept as given, as validation keeps an Any


@pytest.mark.parametrize(
    ("content", "stop_reason"),
    [
        ([ToolCallBlock(id="c", name="f", input={})], "tool_use"),
        ([TextBlock(text="done")], "end_turn"),
        ([ThinkingBlock(thinking="t"), TextBlock(text="x")], "a_new_reason"),
        ([], "end_turn"),
        ([TextBlock(text="x")], StopReason.MAX_TOKENS),
    ],
)
def test_a_response_built_by_its_constructor_is_the_message_validation_builds(
    content: list, stop_reason: str
) -> None:
    message = AssistantMessage(content=content, stop_reason=stop_reason)
    _built_as_validated(message, AssistantMessage, {"content": content, "stop_reason": stop_reason})
    assert message.content is not content  # a copy, as validation makes


def test_constructors_refuse_what_validation_refuses_with_the_same_errors() -> None:
    cases = [
        (ToolCallBlock, {"id": 1, "name": "f", "input": {}}),
        (ToolCallBlock, {"id": "c", "name": "f", "inputs": {}}),
        (AssistantMessage, {"content": [{"type": "nope"}], "stop_reason": "end_turn"}),
        (AssistantMessage, {"content": [UserMessage("hi")], "stop_reason": "end_turn"}),
        # a block whose tag is not its class's (model_construct skips validation)
        (
            AssistantMessage,
            {
                "content": [TextBlock.model_construct(type="tool_call", text="x")],
                "stop_reason": "x",
            },
        ),
    ]
    for cls, data in cases:
        with pytest.raises(ValidationError) as built:
            cls(**data)
        with pytest.raises(ValidationError) as validated:
            cls.model_validate(data)
        assert built.value.errors() == validated.value.errors()


def test_a_subclass_of_a_message_is_built_by_validation() -> None:
    class Tagged(ToolCallBlock):
        tag: str = "t"

    class Answer(AssistantMessage):
        note: str = "n"

    call = Tagged(id="c", name="f", input={})
    assert call.tag == "t" and call.model_fields_set == {"id", "name", "input"}
    answer = Answer(content=[call], stop_reason="tool_use")
    assert answer.note == "n" and answer.content == [call]


def test_a_response_built_by_its_constructor_holds_its_blocks_compact() -> None:
    # built compact at once, its blocks too (as a history keeps them)
    message = AssistantMessage(
        content=[TextBlock(text="x"), ToolCallBlock(id="c", name="f", input={})],
        stop_reason="tool_use",
    )
    assert type(message.model_fields_set) is not set
    assert all(type(block.model_fields_set) is not set for block in message.content)


def test_a_response_built_by_its_constructor_holds_the_stop_reason_member() -> None:
    # a known stop reason given as a str is the `StopReason` member, as validation makes it
    message = AssistantMessage(content=[TextBlock(text="x")], stop_reason="end_turn")
    assert type(message.stop_reason) is StopReason
    assert message.stop_reason is StopReason.END_TURN
    assert message.model_dump()["stop_reason"] is StopReason.END_TURN


def test_a_subclass_of_a_response_holding_plain_blocks_is_built_by_validation() -> None:
    class Answer(AssistantMessage):
        note: str = "n"

    answer = Answer(content=[TextBlock(text="x")], stop_reason="end_turn")
    assert answer.note == "n" and answer.model_fields_set == {"content", "stop_reason"}
    assert answer.model_dump()["note"] == "n"
