"""Events built by `_events.stamped` (the events `Run` builds itself, stamped as they are
built) and by `_events.drafted` (the stream's and the tool batch's events: drafts `Run.emit`
stamps and gives their class) are the events their classes build."""

from __future__ import annotations

import copy
import dataclasses
import itertools
import pickle
import types
import typing
from typing import Any

import pytest

from statemachine_agent import (
    Agent,
    AssistantMessage,
    Event,
    MessageDelta,
    MessageStart,
    State,
    ToolCallBlock,
    ToolExecutionEnd,
    ToolExecutionStart,
    event_to_dict,
    tool,
)
from statemachine_agent._events import drafted, stamped
from statemachine_agent._run import Run
from statemachine_agent.models import ScriptedModel


def _sample_fields(cls: type[Any]) -> list[str]:
    """A value for each positional field of event class ``cls`` (its name: any value will do)."""
    return [f"v_{f.name}" for f in dataclasses.fields(cls) if not f.kw_only]


def _assert_is_the_event(cls: type[Any], built: Any, expected: Any) -> None:
    """``built`` is ``expected`` as a user sees it: exactly ``cls`` (never the writable subclass
    it is written through), the same equality, hash, ``repr``, ``asdict``, ``event_to_dict``,
    copies, pickles and ``replace``, and frozen."""
    assert type(built) is cls, (cls, type(built))
    assert built == expected and hash(built) == hash(expected)
    assert repr(built) == repr(expected)
    assert dataclasses.asdict(built) == dataclasses.asdict(expected)
    assert event_to_dict(built) == event_to_dict(expected)
    for twin in (copy.copy(built), copy.deepcopy(built), pickle.loads(pickle.dumps(built))):
        assert type(twin) is cls and repr(twin) == repr(expected)
    assert repr(dataclasses.replace(built, seq=8)) == repr(dataclasses.replace(expected, seq=8))
    stamps = (built.run_id, built.seq, built.parent)
    for name in ("run_id", "seq", "parent", *(f.name for f in dataclasses.fields(cls))):
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(built, name, "changed")
        with pytest.raises(dataclasses.FrozenInstanceError):
            delattr(built, name)
    assert (built.run_id, built.seq, built.parent) == stamps


def test_an_event_built_stamped_is_the_event_its_class_builds_then_stamped() -> None:
    """`_events.stamped` (how `Run` builds its own events) gives, for every event class, the
    event ``cls(*fields)`` stamped with the run's id and next seq would be, ``parent`` None; a
    wrong number of fields is a `TypeError`."""
    for cls in typing.get_args(Event):
        fields = _sample_fields(cls)
        run = types.SimpleNamespace(id="run-1", seqs=itertools.count(7))  # a `Run`'s stamps
        built = stamped(cls)(run, *fields)
        assert (built.run_id, built.seq, built.parent) == ("run-1", 7, None)
        _assert_is_the_event(cls, built, cls(*fields, run_id="run-1", seq=7))
        with pytest.raises(TypeError):
            stamped(cls)(run, *fields, "one too many")


def _emitted(event: Any, run_id: str = "run-1", seq: int = 7) -> Any:
    """``event`` as `Run.emit` sends it to a subscriber, from a run with that id and next seq."""
    seen: list[Any] = []
    bus = types.SimpleNamespace(publish=seen.append)
    run: Any = types.SimpleNamespace(id=run_id, seqs=itertools.count(seq), bus=bus)  # a `Run`'s
    Run.emit(run, event)
    (sent,) = seen
    return sent


def test_a_draft_emitted_is_the_event_its_class_builds_emitted() -> None:
    """For every event class, a draft ``drafted(cls)(*fields)`` that `Run.emit` sends (plain
    stores, then its class set) is what ``cls(*fields)`` becomes through `Run.emit` (stamped
    through its slots): exactly ``cls``, stamped, equal, frozen; a wrong number of fields is a
    `TypeError`."""
    for cls in typing.get_args(Event):
        fields = _sample_fields(cls)
        built = _emitted(drafted(cls)(*fields))
        assert (built.run_id, built.seq, built.parent) == ("run-1", 7, None)
        expected = _emitted(cls(*fields))
        assert type(expected) is cls and (expected.run_id, expected.seq) == ("run-1", 7)
        _assert_is_the_event(cls, built, expected)
        with pytest.raises(TypeError):
            drafted(cls)(*fields, "one too many")


def test_an_event_built_without_its_optional_fields_takes_its_class_defaults() -> None:
    """For every event class, both builders given only the fields without a default build
    ``cls(*required)``: each optional field reads as its class's default (a text delta's
    ``tool_name`` is None, a message start's ``model`` and ``response_id`` are None)."""
    for cls in typing.get_args(Event):
        required = [
            f"v_{f.name}"
            for f in dataclasses.fields(cls)
            if not f.kw_only and f.default is dataclasses.MISSING
        ]
        defaults = {
            f.name: f.default
            for f in dataclasses.fields(cls)
            if not f.kw_only and f.default is not dataclasses.MISSING
        }
        run = types.SimpleNamespace(id="run-1", seqs=itertools.count(1))  # a `Run`'s stamps
        for built, expected in (
            (_emitted(drafted(cls)(*required), "", 0), cls(*required)),
            (stamped(cls)(run, *required), cls(*required, run_id="run-1", seq=1)),
        ):
            assert {name: getattr(built, name) for name in defaults} == defaults, cls
            assert built == expected and repr(built) == repr(expected)
            assert event_to_dict(built) == event_to_dict(expected)
    delta = drafted(MessageDelta)(0, "text", "hi")
    assert (delta.kind, delta.delta, delta.tool_name) == ("text", "hi", None)
    start = drafted(MessageStart)()
    assert (start.model, start.response_id) == (None, None)


async def test_a_runs_stream_and_tool_events_carry_each_blocks_kind_text_and_tool_name() -> None:
    """A subscriber sees a response's stream as its blocks: ``message_start`` with the model,
    a ``message_delta`` per block with its index, its kind (``thinking``, ``text`` or
    ``tool_call``), its text (a tool call's JSON arguments) and, for a tool call only, the
    tool's name; then ``tool_execution_start`` with the call and ``tool_execution_end`` with
    the same call and its result."""

    async def noop(a: int) -> str:
        """Do nothing."""
        return f"ok {a}"

    answer = {
        "model": "scripted-model",
        "content": [
            {"type": "thinking", "thinking": "weighing it", "signature": "sig"},
            {"type": "text", "text": "calling"},
            {"type": "tool_use", "id": "c1", "name": "noop", "input": {"a": 1}},
        ],
        "stop_reason": "tool_use",
    }
    final = {"model": "scripted-model", "content": [{"type": "text", "text": "done"}]}
    agent = Agent(ScriptedModel([answer, final]), tools=[tool(noop)])
    seen: list[Any] = []
    agent.subscribe(seen.append)
    result = await agent.run("go")
    assert result.state is State.DONE and result.text == "done"
    stream = [
        (e.model, e.response_id)
        if isinstance(e, MessageStart)
        else (e.index, e.kind, e.delta, e.tool_name)
        for e in seen
        if isinstance(e, MessageStart | MessageDelta)
    ]
    assert stream == [
        ("scripted-model", None),
        (0, "thinking", "weighing it", None),
        (1, "text", "calling", None),
        (2, "tool_call", '{"a": 1}', "noop"),
        ("scripted-model", None),
        (0, "text", "done", None),
    ]
    starts = [e for e in seen if isinstance(e, ToolExecutionStart)]
    ends = [e for e in seen if isinstance(e, ToolExecutionEnd)]
    assert [(e.call.id, e.call.name, e.call.input) for e in starts] == [("c1", "noop", {"a": 1})]
    assert [(e.call.id, e.result.tool_call_id, e.result.text) for e in ends] == [
        ("c1", "c1", "ok 1")
    ]


async def test_a_runs_stream_and_tool_events_are_stamped_public_events() -> None:
    """The events built as drafts in a run (``message_start``, ``message_delta``,
    ``tool_execution_start``/``end``) reach a subscriber as objects of their public classes,
    frozen, stamped with the run's id and their place in its ``seq``."""

    async def noop() -> str:
        """Do nothing."""
        return "ok"

    call = AssistantMessage(
        content=[ToolCallBlock(id="c1", name="noop", input={"a": 1})], stop_reason="tool_use"
    )
    agent = Agent(ScriptedModel([call, AssistantMessage(content=[])]), tools=[tool(noop)])
    seen: list[Any] = []
    agent.subscribe(seen.append)
    result = await agent.run("go")
    assert result.state is State.DONE
    classes = (MessageStart, MessageDelta, ToolExecutionStart, ToolExecutionEnd)
    built = [(i, e) for i, e in enumerate(seen, 1) if isinstance(e, classes)]
    assert {type(e) for _, e in built} == set(classes)
    for seq, event in built:
        assert (event.run_id, event.seq, event.parent) == (result.run_id, seq, None)
        with pytest.raises(dataclasses.FrozenInstanceError):
            event.seq = 0


async def test_a_subscriber_reads_each_events_run_id_and_seq_as_it_receives_it() -> None:
    """Every event, the stream's and the tool batch's included, is stamped before it reaches a
    subscriber: read inside the callback, ``run_id`` is the run's and ``seq`` counts 1, 2, 3...
    (not only once the run is over)."""

    async def noop() -> str:
        """Do nothing."""
        return "ok"

    call = AssistantMessage(
        content=[ToolCallBlock(id="c1", name="noop", input={})], stop_reason="tool_use"
    )
    answer = {"content": [{"type": "text", "text": "done"}]}
    agent = Agent(ScriptedModel([call, answer]), tools=[tool(noop)])
    stamps: list[tuple[str, str, int]] = []
    agent.subscribe(lambda event: stamps.append((event.type, event.run_id, event.seq)))
    result = await agent.run("go")
    assert result.state is State.DONE
    kinds = {kind for kind, _, _ in stamps}
    assert {"message_start", "message_delta", "tool_execution_start", "tool_execution_end"} <= kinds
    assert [(run_id, seq) for _, run_id, seq in stamps] == [
        (result.run_id, seq) for seq in range(1, len(stamps) + 1)
    ]
