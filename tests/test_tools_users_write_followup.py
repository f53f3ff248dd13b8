"""Issue 31 follow-up: what a fresh user met after the tools work (positional-only parameters,
progress updates that are not JSON, guards that raise, a lone tool result from
``transform_context``). Each case is a small scripted run with the expected values."""

from __future__ import annotations

import dataclasses
import datetime
import functools
import inspect
import json
import math
import threading
from collections.abc import AsyncIterator, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, Field

from statemachine_agent import (
    Agent,
    LoopData,
    MachineDefinitionError,
    RunResult,
    State,
    Tool,
    ToolContext,
    ToolDefinitionError,
    ToolExecutionUpdate,
    ToolResult,
    ToolResultMessage,
    TransitionSpec,
    event_to_dict,
    tool,
)
from statemachine_agent.models import ScriptedModel
from statemachine_agent.session import check_session
from statemachine_agent.testing import assert_valid_history
from statemachine_agent.testing.steps import call, text_response, tool_response


def run_one_call(t: Tool, arguments: dict[str, Any]) -> tuple[RunResult, ToolResultMessage]:
    """One scripted call of ``t`` with ``arguments``, then a final answer."""
    model = ScriptedModel([tool_response(call(t.name, arguments, id="t1")), text_response("ok")])
    result = Agent(model, tools=[t]).run_sync("go")
    (answer,) = [m for m in result.messages if isinstance(m, ToolResultMessage)]
    return result, answer


# -- case 1: positional-only parameters are passed positionally ------------------------------


def _sync_posonly(a: int, /, b: int) -> str:
    return f"{a}+{b}={a + b}"


async def _async_posonly(a: int, /, b: int) -> str:
    return f"{a}+{b}={a + b}"


async def _agen_posonly(a: int, /, b: int) -> AsyncIterator[str]:
    yield "adding"
    yield f"{a}+{b}={a + b}"


def _gen_posonly(a: int, /, b: int) -> Iterator[str]:
    yield "adding"
    return f"{a}+{b}={a + b}"


def _ctx_posonly(ctx: ToolContext, a: int, /, b: int) -> str:
    return f"{ctx.call_id}: {a}+{b}={a + b}"


def _reserved_posonly(_path: int, /, b: int) -> str:
    return f"{_path}+{b}={_path + b}"


def _defaulted_posonly(a: int, b: int = 2, /, *, c: int = 0) -> str:
    return f"{a}+{b}={a + b + c}"


class _Adder:
    def add(self, a: int, /, b: int) -> str:
        return f"{a}+{b}={a + b}"


@pytest.mark.parametrize(
    ("function", "expected"),
    [
        (_sync_posonly, "1+2=3"),
        (_async_posonly, "1+2=3"),
        (_agen_posonly, "1+2=3"),
        (_gen_posonly, "1+2=3"),
        (_ctx_posonly, "t1: 1+2=3"),
        (_Adder().add, "1+2=3"),
        (functools.partial(_defaulted_posonly, c=0), "1+2=3"),
    ],
    ids=["sync", "async", "async_generator", "generator", "context", "method", "partial"],
)
def test_positional_only_parameters_are_passed_positionally_and_named_in_the_schema(
    function: Any, expected: str
) -> None:
    posonly = tool(name="posonly")(function)
    assert posonly.input_schema["properties"].keys() >= {"a", "b"}
    assert "a" in posonly.input_schema["required"]
    result, answer = run_one_call(posonly, {"a": 1, "b": 2})
    assert result.state == "done"
    assert (answer.text, answer.is_error) == (expected, False)


def test_positional_only_parameter_with_a_reserved_name_keeps_it() -> None:
    reserved = tool(name="reserved")(_reserved_posonly)
    assert set(reserved.input_schema["properties"]) == {"_path", "b"}
    _, answer = run_one_call(reserved, {"_path": 1, "b": 2})
    assert (answer.text, answer.is_error) == ("1+2=3", False)


def test_positional_only_defaults_fill_in_in_order() -> None:
    defaulted = tool(name="defaulted")(_defaulted_posonly)
    _, answer = run_one_call(defaulted, {"a": 1})
    assert (answer.text, answer.is_error) == ("1+2=3", False)
    _, answer = run_one_call(defaulted, {"a": 1, "b": 5, "c": 1})
    assert (answer.text, answer.is_error) == ("1+5=7", False)


def _star_args(a: int, *rest: int) -> str:
    return str(a)


def _star_kwargs(a: int, **extra: int) -> str:
    return str(a)


@pytest.mark.parametrize(("function", "shown"), [(_star_args, "*rest"), (_star_kwargs, "**extra")])
def test_star_args_and_star_kwargs_are_refused_naming_the_tool_and_the_parameter(
    function: Any, shown: str
) -> None:
    with pytest.raises(ToolDefinitionError) as caught:
        tool(name="starry")(function)
    assert "'starry'" in str(caught.value) and shown in str(caught.value), caught.value


def test_a_tool_naming_an_unknown_positional_only_parameter_is_refused() -> None:
    model = tool(_sync_posonly).args_model
    with pytest.raises(ToolDefinitionError, match=r"'adder'.*\['zzz'\]"):
        Tool("adder", "adds", _sync_posonly, model, positional_only=("zzz",))


_KINDS = (
    inspect.Parameter.POSITIONAL_ONLY,
    inspect.Parameter.POSITIONAL_OR_KEYWORD,
    inspect.Parameter.KEYWORD_ONLY,
)


@settings(max_examples=60, deadline=None)
@given(
    kinds=st.lists(st.sampled_from(_KINDS), min_size=1, max_size=4).map(sorted),
    defaults_from=st.integers(0, 4),
    is_async=st.booleans(),
    omit_defaulted=st.booleans(),
)
def test_any_accepted_signature_of_named_parameters_gets_every_argument(
    kinds: list[inspect._ParameterKind], defaults_from: int, is_async: bool, omit_defaulted: bool
) -> None:
    """Every definition `tool` accepts can be called: each parameter kind in every order
    Python allows, with and without defaults, gets the model's value."""
    names = [f"p{i}" for i in range(len(kinds))]
    parameters = [
        inspect.Parameter(
            n,
            k,
            annotation=int,
            default=i if i >= defaults_from else inspect.Parameter.empty,
        )
        for i, (n, k) in enumerate(zip(names, kinds, strict=True))
    ]
    signature = inspect.Signature(parameters)
    source = f"{'async ' if is_async else ''}def probe{signature}:\n    return [{', '.join(names)}]"
    namespace: dict[str, Any] = {}
    exec(source, namespace)  # a real function with that signature, not a *args stand-in
    probe = tool(namespace["probe"])
    given_ = [i < defaults_from or not omit_defaulted for i in range(len(names))]
    arguments = {n: 100 + i for i, n in enumerate(names) if given_[i]}
    result, answer = run_one_call(probe, arguments)
    assert result.state == "done"
    expected = [100 + i if given_[i] else i for i in range(len(names))]
    assert (answer.text, answer.is_error) == (repr(expected).replace(" ", ""), False)
    assert_valid_history(result.messages)


# -- case 2: progress updates (and a result's details) that are not JSON -----------------------


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


# -- case 3: a guard or a user's callback that raises ------------------------------------------


@tool
def lookup(key: str) -> str:
    """Look a key up."""
    return f"value of {key}"


def _broken_guard(data: LoopData) -> bool:
    return bool(data.response.missing_attribute)  # type: ignore[union-attr]


def _broken_callback(data: LoopData) -> None:
    raise AttributeError("'LoopData' object has no attribute 'nag_count'")


def _broken_action(run: Any) -> None:
    raise AttributeError("'Run' object has no attribute 'nag_count'")


async def _nag(run: Any) -> str:
    return str(await run.request_model())


def _agent_with(where: str, tmp_path: Path) -> tuple[Agent, ScriptedModel, str]:
    """An agent whose user addition raises at ``where``, with a session log; the text its error
    must start with."""
    model = ScriptedModel(
        [
            tool_response(call("lookup", {"key": "k"}, id="c1")),
            tool_response(call("lookup", {"key": "k2"}, id="c2")),
            text_response("done"),
        ]
    )
    agent = Agent(model, tools=[lookup], session=tmp_path / "run.jsonl")
    machine = agent.machine
    into_nagging = TransitionSpec(
        "model_replied",
        (State.AWAITING_MODEL,),
        "nagging",
        (_has_calls,),
        label="nag",
        before="tool_calls",
    )
    out = TransitionSpec("model_replied", ("nagging",), State.EXECUTING_TOOLS, label="nagged")
    if where == "guard":
        machine.add_transition(replace(into_nagging, dest=State.DONE, guards=(_broken_guard,)))
        return agent, model, "The guard '_broken_guard' of transition 'nag' (model_replied) failed"
    if where == "start_guard":  # from idle, where no `fail` transition leads
        machine.add_transition(
            TransitionSpec("start", (State.IDLE,), State.DONE, (_broken_guard,), label="early")
        )
        return agent, model, "The guard '_broken_guard' of transition 'early' (start) failed"
    machine.add_state("nagging", _nag)
    machine.add_transition(into_nagging)
    if where == "action":
        machine.add_transition(replace(out, action=_broken_action))
        return (
            agent,
            model,
            "The action '_broken_action' of transition 'nagged' (model_replied) failed",
        )
    machine.add_transition(out)
    if where == "on_enter":
        machine.on_enter("nagging", _broken_callback)
        return agent, model, "The on_enter callback '_broken_callback' of state 'nagging' failed"
    if where == "on_exit":
        machine.on_exit("nagging", _broken_callback)
        return agent, model, "The on_exit callback '_broken_callback' of state 'nagging' failed"
    raise AssertionError(where)


def _has_calls(data: LoopData) -> bool:
    return data.response is not None and bool(data.response.tool_calls)


@pytest.mark.parametrize("where", ["guard", "start_guard", "on_enter", "on_exit", "action"])
def test_a_raising_guard_or_user_callback_ends_the_run_failed_naming_it_every_call_answered(
    where: str, tmp_path: Path
) -> None:
    agent, _, named = _agent_with(where, tmp_path)
    result = agent.run_sync("go")  # a result, not an exception
    agent.close()
    assert result.state is State.FAILED and agent.state is State.FAILED
    assert result.error is not None and result.error.startswith(named), result.error
    assert "AttributeError: " in result.error
    assert_valid_history(result.messages)  # every call answered
    assert check_session(tmp_path / "run.jsonl")[1] == []
    # the agent is usable afterwards: a fresh definition-free run would go on from ``failed``
    assert agent.machine.stops_run(str(agent.state))


def test_a_keyboard_interrupt_in_a_guard_aborts_the_run_answers_every_call_then_propagates(
    tmp_path: Path,
) -> None:
    def interrupting(data: LoopData) -> bool:
        raise KeyboardInterrupt

    model = ScriptedModel([tool_response(call("lookup", {"key": "k"}, id="c1"))])
    agent = Agent(model, tools=[lookup], session=tmp_path / "run.jsonl")
    agent.machine.add_transition(
        TransitionSpec(
            "model_replied",
            (State.AWAITING_MODEL,),
            State.DONE,
            (interrupting,),
            label="nag",
            before="tool_calls",
        )
    )
    errors: list[str | None] = []
    agent.subscribe(lambda e: errors.append(e.result.error) if e.type == "run_end" else None)
    with pytest.raises(KeyboardInterrupt):
        agent.run_sync("go")
    agent.close()
    assert agent.state is State.ABORTED
    assert errors == [
        "KeyboardInterrupt raised in the guard "
        "'test_a_keyboard_interrupt_in_a_guard_aborts_the_run_answers_every_call_then_propagates"
        ".<locals>.interrupting' of transition 'nag' (model_replied)"
    ]
    assert_valid_history(agent.messages)
    assert check_session(tmp_path / "run.jsonl")[1] == []


def test_a_new_states_transitions_may_be_added_in_any_order() -> None:
    model = ScriptedModel([text_response("first"), text_response("second")])
    agent = Agent(model)
    machine = agent.machine
    machine.add_state("nagging", _nag)
    # out of it first, then into it: the definition is complete only after both
    machine.add_transition(
        TransitionSpec("model_replied", ("nagging",), State.DONE, label="nagged")
    )
    machine.add_transition(
        TransitionSpec(
            "model_replied",
            (State.AWAITING_MODEL,),
            "nagging",
            (lambda d: d.requests == 1,),
            label="nag",
        )
    )
    result = agent.run_sync("go")
    assert result.state is State.DONE and len(model.requests) == 2
    assert [s.label for s in agent.machine.specs if "nag" in s.label] == ["nag", "nagged"]


def test_a_state_left_unreachable_is_refused_when_the_run_starts_saying_how_to_fix_it() -> None:
    agent = Agent(ScriptedModel([text_response("never")]))
    agent.machine.add_state("nagging", _nag)
    agent.machine.add_transition(
        TransitionSpec("model_replied", ("nagging",), State.DONE, label="nagged")
    )
    with pytest.raises(
        MachineDefinitionError,
        match=r"state 'nagging' is unreachable from 'idle' \(add a transition into it\)",
    ):
        agent.run_sync("go")
    assert agent.state is State.IDLE and agent.messages == []  # nothing started


# -- case 4: transform_context keeping only tool results ---------------------------------------


@pytest.mark.parametrize("keep", [1, 2], ids=["lone_result", "whole_batch_of_results"])
def test_transform_context_keeping_only_tool_results_names_the_hook_and_the_dropped_results(
    keep: int,
) -> None:
    calls = [call("lookup", {"key": f"k{i}"}, id=f"c{i}") for i in range(1, keep + 1)]
    model = ScriptedModel([tool_response(*calls), text_response("never")])
    agent = Agent(model, tools=[lookup], transform_context=lambda m: m[-keep:])
    result = agent.run_sync("go")
    assert result.state is State.FAILED
    assert len(model.requests) == 1  # the second request was refused before sending
    ids = ", ".join(f"c{i}" for i in range(1, keep + 1))
    assert result.error is not None
    assert (
        f"the transform_context hook returned only {keep} tool result(s) whose calls were "
        f"missing ({ids}), dropped from the request"
    ) in result.error, result.error
    assert_valid_history(result.messages)


# -- README decisions: what bytes, NaN and aliases become in a result --------------------------


class _Order(BaseModel):
    order_id: str = Field(alias="orderId")
    total: float


@pytest.mark.parametrize(
    ("returned", "text", "is_error"),
    [
        (_Order(orderId="A-17", total=math.nan), '{"orderId":"A-17","total":null}', False),
        ({"ratio": math.inf, "n": -math.nan}, '{"ratio":null,"n":null}', False),
        ("é".encode(), '"é"', False),
        (b"\xff", "The tool returned a value of type bytes that cannot be turned into JSON", True),
    ],
    ids=["alias_and_nan", "infinities", "utf8_bytes", "other_bytes"],
)
def test_result_data_uses_aliases_nan_as_null_and_bytes_as_utf8_text(
    returned: Any, text: str, is_error: bool
) -> None:
    @tool
    def give() -> Any:
        """Give a value."""
        return returned

    _, answer = run_one_call(give, {})
    assert answer.text.startswith(text), answer.text
    assert answer.is_error is is_error


def test_a_return_annotation_that_cannot_be_resolved_does_not_stop_a_tool() -> None:
    """A tool's schema reads its parameters only: a return type defined inside a function (a
    string annotation nothing can resolve later) is left out, while a parameter's is refused."""

    def make() -> tuple[Any, Any]:
        class Found:
            pass

        def find(name: str) -> Found:
            """Find someone."""
            return {"who": name}  # type: ignore[return-value]

        def lookup(who: Found) -> str:
            """Look someone up."""
            return "x"

        return find, lookup

    find, lookup = make()
    found = tool(find)
    model = ScriptedModel(
        [tool_response(call("find", {"name": "Ada"}, id="t1")), text_response("ok")]
    )
    result = Agent(model, tools=[found]).run_sync("go")
    assert (result.state, result.messages[2].text) == (State.DONE, '{"who":"Ada"}')
    with pytest.raises(ToolDefinitionError, match="'lookup': cannot resolve annotations"):
        tool(lookup)
