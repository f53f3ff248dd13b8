"""Issue 39, item 2: messages hold their fields compactly (a call + result pair at most 1.5 KiB,
an idle agent under 10 KiB) and nothing public about them changes: the same pydantic models, the
same ``model_dump`` output and the same session log bytes as before (a golden dump written by the
code before the change, ``golden_messages_issue39.txt``)."""

from __future__ import annotations

import copy
import json
import pickle
import platform
import sys
from pathlib import Path

import pytest
from pydantic import TypeAdapter

from statemachine_agent import (
    HISTORY_ADAPTER,
    Agent,
    AssistantMessage,
    ImageBlock,
    Message,
    ProviderBlock,
    TextBlock,
    ThinkingBlock,
    ToolCallBlock,
    ToolResultMessage,
    Usage,
    UserMessage,
)
from statemachine_agent.models import ScriptedModel
from statemachine_agent.testing.steps import text_response

GOLDEN = Path(__file__).with_name("golden_messages_issue39.txt")
BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"

MESSAGE_ADAPTER: TypeAdapter[Message] = TypeAdapter(Message)  # one session-log line's message

cpython_only = pytest.mark.skipif(
    platform.python_implementation() != "CPython",
    reason="the byte budgets are CPython's object sizes (tracemalloc), as the benchmark's",
)


def kept(history: list) -> list:
    """``history`` as an agent's history keeps it (compacted when it joins the history)."""
    return Agent(ScriptedModel([text_response("hi")]), messages=history).messages


def golden_history() -> list:
    """Every message and block shape, default and non-default fields, details that JSON cannot
    hold as they are; as the history keeps them."""
    return kept(built_history())


def built_history() -> list:
    """`golden_history` as built, before any history keeps it."""
    return [
        UserMessage("hello"),
        UserMessage(
            content=[
                TextBlock(text="see", citations=[{"type": "x", "url": "https://e.org"}]),
                ImageBlock(media_type="image/png", data="aGk="),
                ImageBlock(url="https://e.org/a.png"),
            ]
        ),
        AssistantMessage(
            content=[
                ThinkingBlock(thinking="hmm", signature="sig"),
                ThinkingBlock(thinking="more"),
                TextBlock(text="Calling."),
                ToolCallBlock(id="c1", name="f", input={"a": 1, "b": [1.5, None, "é"]}),
                ToolCallBlock(id="c2", name="g", input=None, raw_arguments='{"a":'),
                ToolCallBlock(id="c3", name="h", input={"x": float("nan")}),
                ToolCallBlock(id="c4", name="h", input={}, truncated=True),
                ProviderBlock(data={"type": "server_tool_use", "id": "s", "input": {}}),
            ],
            stop_reason="tool_use",
            usage=Usage(input_tokens=3, output_tokens=4, cache_write_tokens=5, cache_read_tokens=6),
            model="claude",
        ),
        ToolResultMessage(tool_call_id="c1", tool_name="f", content=[TextBlock(text="ok")]),
        ToolResultMessage(
            tool_call_id="c2",
            tool_name="g",
            content=[TextBlock(text="bad")],
            is_error=True,
            details={"rows": [1, 2], "when": {1, 2}, "obj": object},
        ),
        AssistantMessage(
            content=[TextBlock(text="done")],
            stop_reason="a_new_reason",
            stop_sequence=None,
            stop_details={"category": "x"},
            error="e",
        ),
        AssistantMessage(),
    ]


def golden_text(history: list) -> str:
    """What the golden file holds for ``history``: each message's session-log JSON, Python
    dumps (all, unset excluded, defaults excluded), fields set and repr; the whole history as
    JSON and as a session log's history line encodes it."""
    lines = []
    for message in history:
        lines += [
            MESSAGE_ADAPTER.dump_json(message).decode(),
            repr(message.model_dump()),
            repr(message.model_dump(exclude_unset=True)),
            repr(message.model_dump(exclude_defaults=True)),
            repr(message.model_dump(mode="json")),
            repr(sorted(message.model_fields_set)),
            repr(message),
        ]
    lines.append(HISTORY_ADAPTER.dump_json(history).decode())
    lines.append(log_messages_bytes(history).decode())
    return "\n".join(lines) + "\n"


def log_messages_bytes(history: list) -> bytes:
    """The bytes a session log's history line holds for ``history`` (its ``messages`` value)."""
    messages = HISTORY_ADAPTER.dump_python(history, mode="json")
    return json.dumps(messages, ensure_ascii=False, separators=(",", ":")).encode()


def test_model_dump_output_is_unchanged_from_the_golden_dump() -> None:
    assert golden_text(golden_history()) == GOLDEN.read_text()


def test_messages_as_built_dump_the_same_as_the_golden_dump() -> None:
    assert golden_text(built_history()) == GOLDEN.read_text()


def test_the_history_keeps_what_it_is_given_compactly_and_equal() -> None:
    built = built_history()
    history = golden_history()
    assert all(type(m.model_fields_set) is not set for m in history)  # compact: shared sets
    assert history[:4] == built[:4]  # the same objects, now compact (details hold an object)


def test_messages_read_back_from_json_dump_the_same_json_as_before() -> None:
    history = golden_history()
    loaded = HISTORY_ADAPTER.validate_json(HISTORY_ADAPTER.dump_json(history))
    golden_lines = GOLDEN.read_text().splitlines()
    assert HISTORY_ADAPTER.dump_json(loaded).decode() == golden_lines[-2]
    assert log_messages_bytes(loaded).decode() == golden_lines[-1]
    assert loaded[:4] == history[:4]  # details read back as their JSON form, the rest equal


def test_the_session_log_holds_the_same_bytes_as_before(tmp_path: Path) -> None:
    log = tmp_path / "s.jsonl"
    history = golden_history()
    agent = Agent(ScriptedModel([text_response("hi")]), messages=history, session=log)
    assert agent.session is not None
    agent.session.close()
    (history_line,) = [
        line for line in log.read_bytes().splitlines() if b'"type":"history"' in line
    ]
    golden_log_bytes = GOLDEN.read_text().splitlines()[-1].encode()
    assert golden_log_bytes in history_line


def test_compact_messages_still_copy_compare_hash_and_pickle() -> None:
    kept_message = kept(
        [AssistantMessage(content=[ToolCallBlock(id="c1", name="f", input={"a": 1})])]
    )
    (call,) = kept_message[0].content
    assert call == ToolCallBlock(id="c1", name="f", input={"a": 1})
    assert call != ToolCallBlock(id="c1", name="f", input={"a": 2})
    assert call.model_fields_set == {"id", "name", "input"}
    changed = call.model_copy(update={"truncated": True})
    assert changed.truncated and not call.truncated
    assert changed.model_fields_set == {"id", "name", "input", "truncated"}
    assert call.model_fields_set == {"id", "name", "input"}  # the shared set was not touched
    assert copy.deepcopy(call) == call and copy.copy(call) == call
    assert pickle.loads(pickle.dumps(call)) == call
    assert pickle.loads(pickle.dumps(call)).model_fields_set == call.model_fields_set
    with pytest.raises(TypeError, match="shared"):
        call.model_fields_set.add("name")
    (message,) = kept([AssistantMessage(content=[call], stop_reason="tool_use")])
    assert pickle.loads(pickle.dumps(message)) == message
    (usage_message,) = kept([AssistantMessage(usage=Usage(input_tokens=1))])
    assert hash(usage_message.usage) == hash(Usage(input_tokens=1))
    with pytest.raises(ValueError, match="frozen"):
        call.id = "c2"


@cpython_only
def test_a_call_and_result_pair_costs_at_most_1_5_kib() -> None:
    sys.path.insert(0, str(BENCHMARKS))
    try:
        import bench_bytes
    finally:
        sys.path.remove(str(BENCHMARKS))
    assert bench_bytes.pair_bytes() <= 1.5 * 1024


@cpython_only
def test_an_idle_agent_stays_under_10_kib() -> None:
    sys.path.insert(0, str(BENCHMARKS))
    try:
        import bench_bytes
    finally:
        sys.path.remove(str(BENCHMARKS))
    assert bench_bytes.idle_bytes(200) < 10 * 1024


def validated_result(call: ToolCallBlock, text: str, **fields: object) -> ToolResultMessage:
    """The result as validation builds it (the code before the engine built results directly)."""
    return ToolResultMessage(
        tool_call_id=call.id, tool_name=call.name, content=[TextBlock(text=text)], **fields
    )


def same_message(built: ToolResultMessage, validated: ToolResultMessage) -> None:
    assert built == validated
    assert built.model_fields_set == validated.model_fields_set
    for block, expected in zip(built.content, validated.content, strict=True):
        assert block.model_fields_set == expected.model_fields_set
    assert built.model_dump() == validated.model_dump()
    assert built.model_dump(exclude_unset=True) == validated.model_dump(exclude_unset=True)
    assert MESSAGE_ADAPTER.dump_json(built) == MESSAGE_ADAPTER.dump_json(validated)
    assert repr(built) == repr(validated)
    assert pickle.loads(pickle.dumps(built)) == validated
    assert copy.deepcopy(built).model_fields_set == validated.model_fields_set


def test_the_engines_text_results_are_the_messages_validation_builds() -> None:
    from statemachine_agent._messages import text_result

    call = ToolCallBlock(id="c1", name="f", input={})
    same_message(
        text_result(call, "bad", is_error=True), validated_result(call, "bad", is_error=True)
    )
    same_message(text_result(call, "ok"), validated_result(call, "ok", is_error=False))


def test_the_engines_tool_results_are_the_messages_validation_builds() -> None:
    from statemachine_agent._call_results import to_result
    from statemachine_agent._tools import ToolResult

    call = ToolCallBlock(id="c1", name="f", input={})
    fields = {"is_error": False, "details": None}
    same_message(to_result(call, "ok"), validated_result(call, "ok", **fields))
    same_message(to_result(call, {"a": 1}), validated_result(call, '{"a":1}', **fields))
    details = {"rows": [1]}
    same_message(
        to_result(call, ToolResult("no", is_error=True, details=details)),
        validated_result(call, "no", is_error=True, details=details),
    )
    # A non-bool is_error goes through validation, as it did: coerced where pydantic coerces.
    same_message(
        to_result(call, ToolResult("no", is_error=1)),  # type: ignore[arg-type]
        validated_result(call, "no", is_error=True, details=None),
    )


def test_results_with_values_of_the_wrong_type_raise_the_same_validation_error() -> None:
    from pydantic import ValidationError

    from statemachine_agent._call_results import to_result
    from statemachine_agent._messages import text_result
    from statemachine_agent._tools import ToolResult

    call = ToolCallBlock(id="c1", name="f", input={})
    with pytest.raises(ValidationError) as built:
        text_result(call, 5)  # type: ignore[arg-type]
    with pytest.raises(ValidationError) as validated:
        validated_result(call, 5)  # type: ignore[arg-type]
    assert built.value.errors() == validated.value.errors()
    with pytest.raises(ValidationError, match="is_error"):
        to_result(call, ToolResult("no", is_error="maybe"))  # type: ignore[arg-type]


def test_a_kept_message_copied_with_an_update_has_its_own_fields_set() -> None:
    (message,) = kept([AssistantMessage(content=[TextBlock(text="a")], stop_reason="end_turn")])
    changed = message.model_copy(update={"model": "m"})
    assert changed.model == "m" and message.model is None
    assert changed.model_fields_set == {"content", "stop_reason", "model"}
    assert message.model_fields_set == {"content", "stop_reason"}
    (other,) = kept([AssistantMessage(content=[TextBlock(text="b")], stop_reason="end_turn")])
    assert other.model_fields_set == {"content", "stop_reason"}  # the shared set is unchanged
    assert eval(repr(message.model_fields_set)) == {"content", "stop_reason"}  # a set's repr
