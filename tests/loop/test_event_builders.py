"""Events built by `_events.stamped` (the events `Run` builds itself, stamped as they are
built) and by `_events.unstamped` (the stream's and the tool batch's events, which `Run.emit`
stamps) are the events their classes build."""

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
from statemachine_agent._events import stamped, unstamped
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


def test_an_event_built_unstamped_is_the_event_its_class_builds() -> None:
    """For every event class, ``unstamped(cls)(*fields)`` is ``cls(*fields)``, with
    ``run_id``/``seq``/``parent`` reading as their defaults; a wrong number of fields is a
    `TypeError`."""
    for cls in typing.get_args(Event):
        fields = _sample_fields(cls)
        built = unstamped(cls)(*fields)
        assert (built.run_id, built.seq, built.parent) == ("", 0, None)
        _assert_is_the_event(cls, built, cls(*fields))
        with pytest.raises(TypeError):
            unstamped(cls)(*fields, "one too many")


async def test_a_runs_stream_and_tool_events_are_stamped_public_events() -> None:
    """The events built unstamped in a run (``message_start``, ``message_delta``,
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
