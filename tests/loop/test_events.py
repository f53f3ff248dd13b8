"""Events: their constructors and JSON form, and subscribers that raise."""

from __future__ import annotations

import dataclasses
import datetime
import inspect
import itertools
import json
import math
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from statemachine_agent import (
    Agent,
    AssistantMessage,
    RunResult,
    State,
    ToolCallBlock,
    ToolExecutionUpdate,
    ToolResult,
    ToolResultMessage,
    event_to_dict,
    tool,
)
from statemachine_agent.models import ScriptedModel
from statemachine_agent.session import check_session
from statemachine_agent.testing import assert_valid_history
from statemachine_agent.testing.steps import call, text_response, tool_response


def _call(i: int, name: str = "noop") -> AssistantMessage:
    return AssistantMessage(
        content=[ToolCallBlock(id=f"call_{i}", name=name, input={})], stop_reason="tool_use"
    )


async def noop() -> str:
    """Do nothing."""
    return "ok"


def test_events_and_stream_objects_keep_their_dataclass_constructors() -> None:
    """`fast_init` gives each class the signature ``dataclasses`` made: positional fields,
    defaults, keyword-only ``run_id``/``seq``, a fresh default from a factory, frozen objects."""
    import dataclasses

    from statemachine_agent import MessageDelta, StateChanged, TurnEnd
    from statemachine_agent.models import ModelRequest, ToolCallDelta

    delta = MessageDelta(2, "text", "hi")
    assert (delta.index, delta.kind, delta.delta, delta.tool_name) == (2, "text", "hi", None)
    assert (delta.run_id, delta.seq) == ("", 0)
    stamped = StateChanged("idle", "awaiting_model", "start", "start", run_id="r", seq=3)
    assert (stamped.run_id, stamped.seq, stamped.label) == ("r", 3, "start")
    assert stamped == StateChanged("idle", "awaiting_model", "start", "start")  # not compared
    assert dataclasses.replace(stamped, dest="done").dest == "done"
    with pytest.raises(dataclasses.FrozenInstanceError):
        stamped.dest = "done"  # type: ignore[misc]
    with pytest.raises(TypeError, match="missing"):
        StateChanged("idle")  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        StateChanged("a", "b", "c", "d", "e")  # type: ignore[call-arg]  # run_id is keyword-only
    assert str(inspect.signature(TurnEnd)).startswith("(turn: 'int', message:")
    first, second = ModelRequest([]), ModelRequest([])
    assert first.settings == {} and first.settings is not second.settings
    assert ModelRequest([], settings={"a": 1}).settings == {"a": 1}
    assert ToolCallDelta(0, "c1", "noop", "{}") == ToolCallDelta(0, "c1", "noop", "{}")


def test_an_events_unstamped_run_id_seq_and_parent_read_as_their_defaults_everywhere() -> None:
    """An event's ``__init__`` leaves ``run_id``, ``seq`` and ``parent`` unset when given their
    defaults (they are stamped later): every way of reading the event still sees the defaults,
    and a value given is kept."""
    import copy
    import dataclasses
    import pickle

    from statemachine_agent import ParentRef, TurnStart, event_to_dict

    bare = TurnStart(1)
    assert (bare.run_id, bare.seq, bare.parent) == ("", 0, None)
    assert getattr(bare, "parent", "missing") is None and hasattr(bare, "seq")
    assert dataclasses.asdict(bare) == {"run_id": "", "seq": 0, "parent": None, "turn": 1}
    assert repr(bare) == "TurnStart(run_id='', seq=0, parent=None, turn=1)"
    assert event_to_dict(bare) == {"type": "turn_start", "run_id": "", "seq": 0, "turn": 1}
    for twin in (copy.copy(bare), copy.deepcopy(bare), pickle.loads(pickle.dumps(bare))):
        assert (twin.run_id, twin.seq, twin.parent, twin.turn) == ("", 0, None, 1)
    ref = ParentRef("r0", "c1", "child")
    given = TurnStart(2, run_id="r1", seq=4, parent=ref)
    assert (given.run_id, given.seq, given.parent) == ("r1", 4, ref)
    assert dataclasses.replace(bare, turn=3).parent is None
    assert dataclasses.replace(given, turn=3).parent == ref
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        bare.nope  # type: ignore[attr-defined]  # noqa: B018


async def test_a_raising_subscriber_is_logged_with_its_traceback_and_the_event_type(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """`Run.emit` delivers inline: a subscriber's exception is logged (error level, traceback,
    the event's type) for each event it fails on, and the run goes on."""
    import logging

    agent = Agent(ScriptedModel([_call(1), AssistantMessage(content=[])]), tools=[tool(noop)])

    def bad(event: Any) -> None:
        if event.type == "tool_execution_end":
            raise RuntimeError("subscriber bug")

    agent.subscribe(bad)
    with caplog.at_level(logging.ERROR, logger="statemachine_agent"):
        result = await agent.run("go")
    assert result.state is State.DONE
    failed = [r for r in caplog.records if "failed on tool_execution_end" in r.getMessage()]
    assert len(failed) == 1 and failed[0].exc_info is not None
    assert "subscriber bug" in str(failed[0].exc_info[1])


class _Stop(BaseException):
    """Not an `Exception`: a subscriber raising it is not a subscriber failure to log."""


async def test_a_subscriber_raising_a_base_exception_is_not_swallowed() -> None:
    """`Run.emit` catches a subscriber's `Exception` only (as ``Agent._emit`` did): a
    `BaseException` such as ``KeyboardInterrupt`` or ``CancelledError`` comes out of the run."""
    agent = Agent(ScriptedModel([_call(1), AssistantMessage(content=[])]), tools=[tool(noop)])

    def stop(event: Any) -> None:
        if event.type == "tool_execution_start":
            raise _Stop

    agent.subscribe(stop)
    with pytest.raises(_Stop):
        await agent.run("go")


def strict_dumps(data: Any) -> str:
    return json.dumps(data, allow_nan=False)


@dataclasses.dataclass
class _Eta:
    order: str
    eta: datetime.date


class _Point(BaseModel):
    x: float
    y: float


_LOCK = threading.Lock()


@pytest.mark.parametrize(
    ("update", "expected"),
    [
        ({"when": datetime.date(2024, 5, 1)}, {"when": "2024-05-01"}),
        (_LOCK, "<unserializable _thread.lock>"),
        ({"lock": _LOCK, "n": 1}, {"lock": "<unserializable _thread.lock>", "n": 1}),
        (_Eta("A-17", datetime.date(2024, 5, 1)), {"order": "A-17", "eta": "2024-05-01"}),
        (_Point(x=1, y=math.nan), {"x": 1.0, "y": None}),
        ([math.inf, {1, 2}], [None, [1, 2]]),
        ({"raw": b"\xff", "ok": "é"}, {"raw": "<unserializable bytes>", "ok": "é"}),
        (10**30, 10**30),
    ],
    ids=["date", "lock", "nested_lock", "dataclass", "model_nan", "inf_set", "bad_bytes", "int"],
)
def test_event_to_dict_gives_json_ready_progress_updates_never_raising(
    update: Any, expected: Any
) -> None:
    event = ToolExecutionUpdate(call_id="t1", update=update)
    data = event_to_dict(event)
    assert data["update"] == expected
    assert json.loads(strict_dumps(data))["update"] == expected


def test_every_event_of_a_run_with_unserializable_updates_is_strict_json(tmp_path: Path) -> None:
    """A generator yielding a date and a lock, returning details holding both, with a session
    log: every event's JSON form dumps, the log is written whole, ``check`` passes, resume
    gives the same history."""

    @tool
    def report() -> Iterator[Any]:
        """Report with odd data."""
        yield {"when": datetime.date(2024, 5, 1)}
        yield _LOCK
        return ToolResult(
            "reported", details={"when": datetime.date(2024, 5, 1), "lock": _LOCK, "nan": math.nan}
        )

    path = tmp_path / "run.jsonl"
    model = ScriptedModel([tool_response(call("report", {}, id="t1")), text_response("ok")])
    agent = Agent(model, tools=[report], session=path)
    dumped: list[dict[str, Any]] = []
    agent.subscribe(lambda event: dumped.append(json.loads(strict_dumps(event_to_dict(event)))))
    result = agent.run_sync("go")
    agent.close()
    assert result.state == "done"
    updates = [d["update"] for d in dumped if d["type"] == "tool_execution_update"]
    assert updates == [{"when": "2024-05-01"}, "<unserializable _thread.lock>"]
    assert agent.session is not None and agent.session.errors == []  # every line written
    _, problems = check_session(path)
    assert problems == []
    resumed = Agent.resume(path, model=ScriptedModel([]), tools=[report])
    resumed.close()
    (answer,) = [m for m in resumed.messages if isinstance(m, ToolResultMessage)]
    assert (answer.text, answer.details) == (
        "reported",
        {"when": "2024-05-01", "lock": "<unserializable _thread.lock>", "nan": None},
    )
    assert len(resumed.messages) == len(agent.messages)
    assert_valid_history(resumed.messages)


async def _two_call_run() -> tuple[RunResult, list[Any]]:
    """A run of two turns with one call each, then an answer: its result (``done``) and every
    event a subscriber received."""
    agent = Agent(
        ScriptedModel([_call(1), _call(2), AssistantMessage(content=[])]), tools=[tool(noop)]
    )
    seen: list[Any] = []
    agent.subscribe(seen.append)
    result = await agent.run("go")
    assert result.state is State.DONE
    return result, seen


async def test_a_runs_events_are_its_frozen_public_events_numbered_one_by_one() -> None:
    """Every event a run sends a subscriber, whether `Run` built it stamped or stamped it in
    `Run.emit`, is an object of a public event class (frozen), carries the run's id, and the
    ``seq`` of the run's events counts 1, 2, 3... with no gap or repeat."""
    import typing

    from statemachine_agent import Event

    result, seen = await _two_call_run()
    public = set(typing.get_args(Event))
    assert {type(event) for event in seen} <= public
    assert {"run_start", "turn_start", "state_changed", "message_end", "turn_end", "run_end"} <= {
        event.type for event in seen
    }
    assert [event.seq for event in seen] == list(range(1, len(seen) + 1))
    assert {event.run_id for event in seen} == {result.run_id}
    for event in seen:
        with pytest.raises(dataclasses.FrozenInstanceError):
            event.seq = 0


async def test_a_runs_own_events_carry_its_turns_messages_and_results_in_their_fields() -> None:
    """The events `Run` builds itself (stamped) hold the run's values in the right fields: each
    ``turn_end`` its turn's response as ``message`` and that turn's results as
    ``tool_results``; ``turn_start``/``turn_end`` the turn number; ``message_end`` each message
    of the history in order; ``run_start`` the prompt, ``run_end`` the result; the
    ``state_changed`` events chain (each leaves the state the previous one entered)."""
    from statemachine_agent import MessageEnd, RunEnd, RunStart, StateChanged, TurnEnd, TurnStart

    result, seen = await _two_call_run()
    responses = [m for m in result.messages if isinstance(m, AssistantMessage)]
    results = [m for m in result.messages if isinstance(m, ToolResultMessage)]
    assert [r.tool_call_id for r in results] == ["call_1", "call_2"]
    ends = [e for e in seen if isinstance(e, TurnEnd)]
    assert [e.turn for e in ends] == [1, 2, 3]
    assert [e.message for e in ends] == responses
    assert [e.tool_results for e in ends] == [(results[0],), (results[1],), ()]
    assert [e.turn for e in seen if isinstance(e, TurnStart)] == [1, 2, 3]
    assert [e.message for e in seen if isinstance(e, MessageEnd)] == result.messages
    (start,) = [e for e in seen if isinstance(e, RunStart)]
    assert start.prompt == result.messages[0]
    (end,) = [e for e in seen if isinstance(e, RunEnd)]
    assert end.result is seen[-1].result and end.result.messages == result.messages
    changes = [e for e in seen if isinstance(e, StateChanged)]
    assert changes[-1].dest == str(State.DONE)
    assert all(a.dest == b.source for a, b in itertools.pairwise(changes))
    assert all(isinstance(e.trigger, str) and e.trigger for e in changes)
