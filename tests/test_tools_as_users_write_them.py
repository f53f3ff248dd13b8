"""Tools as users write them (issue 31, cases 1-4): generators, async behind a sync wrapper,
values that are not strings, and parameter names pydantic reserves. Each case is a small
scripted run with the issue's expected values."""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import functools
import gc
import inspect
import threading
import warnings
from collections.abc import AsyncIterator, Awaitable, Callable, Generator, Iterator
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from statemachine_agent import (
    Agent,
    RunResult,
    TextBlock,
    Tool,
    ToolDefinitionError,
    ToolResult,
    ToolResultMessage,
    tool,
)
from statemachine_agent._events import ToolExecutionUpdate
from statemachine_agent.models import ScriptedModel
from statemachine_agent.testing.steps import call, text_response, tool_response

# Bounds every wait on another thread or task: a regression fails the test instead of hanging
# it (nothing is asserted about time).
WAIT_SECONDS = 10.0


def run_one_call(
    t: Tool, arguments: dict[str, Any] | None = None, **agent_options: Any
) -> tuple[RunResult, ToolResultMessage, list[Any]]:
    """One scripted call of ``t`` then a final answer: the run, the call's result and the
    progress updates the call emitted."""
    model = ScriptedModel(
        [tool_response(call(t.name, arguments or {}, id="t1")), text_response("ok")]
    )
    agent = Agent(model, tools=[t], **agent_options)
    updates: list[Any] = []
    agent.subscribe(
        lambda event: (
            updates.append(event.update) if isinstance(event, ToolExecutionUpdate) else None
        )
    )
    result = agent.run_sync("go")
    (tool_result,) = [m for m in result.messages if isinstance(m, ToolResultMessage)]
    return result, tool_result, updates


def no_repr(text: str) -> bool:
    return " object at 0x" not in text and "<coroutine" not in text and "<generator" not in text


# -- Case 1: generator tools are consumed ---------------------------------------------------


def test_async_generator_tool_runs_each_value_a_progress_update_the_last_the_result() -> None:
    ran: list[str] = []

    @tool
    async def tail_log() -> AsyncIterator[str]:
        """Stream the log."""
        for i in range(2):
            ran.append(f"line {i}")
            yield f"line {i}"

    result, tool_result, updates = run_one_call(tail_log)
    assert result.state == "done"
    assert ran == ["line 0", "line 1"]  # the body ran
    assert updates == ["line 0", "line 1"]  # each yielded value a progress update
    assert (tool_result.text, tool_result.is_error) == ("line 1", False)  # the last, the result


@pytest.mark.parametrize("run_in_thread", [True, False], ids=["in_thread", "on_loop"])
def test_sync_generator_tool_runs_each_value_a_progress_update_the_last_the_result(
    run_in_thread: bool,
) -> None:
    threads: list[int] = []

    @tool(run_in_thread=run_in_thread)
    def tail_log() -> Iterator[str]:
        """Stream the log."""
        threads.append(threading.get_ident())
        yield "line 0"
        yield "line 1"

    result, tool_result, updates = run_one_call(tail_log)
    assert result.state == "done"
    assert updates == ["line 0", "line 1"]
    assert (tool_result.text, tool_result.is_error) == ("line 1", False)
    assert (threads[0] != threading.get_ident()) is run_in_thread  # consumed in the worker


def test_sync_generator_tool_return_value_is_the_result() -> None:
    @tool
    def count_lines() -> Iterator[str]:
        """Stream, then sum up."""
        yield "line 0"
        yield "line 1"
        return "2 lines"

    _, tool_result, updates = run_one_call(count_lines)
    assert updates == ["line 0", "line 1"]
    assert tool_result.text == "2 lines"


def test_generator_behind_wrappers_and_partials_is_consumed_never_a_repr() -> None:
    """The rule is about what a call returns, not how the function is spelled."""

    async def agen(prefix: str) -> AsyncIterator[str]:
        yield f"{prefix} 0"
        yield f"{prefix} 1"

    def gen(prefix: str) -> Iterator[str]:
        yield f"{prefix} 0"
        yield f"{prefix} 1"

    def passthrough(fn: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            return fn(*args, **kwargs)

        return wrapper

    shapes = [
        passthrough(agen),
        passthrough(gen),
        functools.partial(agen, prefix="line"),
        functools.partial(gen, prefix="line"),
    ]
    for shape in shapes:
        t = tool(shape, name="stream")
        arguments = {} if isinstance(shape, functools.partial) else {"prefix": "line"}
        result, tool_result, updates = run_one_call(t, arguments)
        assert result.state == "done", shape
        assert updates == ["line 0", "line 1"], shape
        assert (tool_result.text, tool_result.is_error) == ("line 1", False), shape


def test_sync_generator_tool_stops_at_its_next_value_once_its_call_is_cancelled() -> None:
    """An abort with no grace cancels the call: the generator running in its thread is
    closed at its next value (its ``finally`` runs) and yields nothing more."""
    reached: list[str] = []
    release, closed = threading.Event(), threading.Event()

    @tool
    def slow_stream() -> Iterator[str]:
        """Stream slowly."""
        try:
            yield "first"
            release.wait(WAIT_SECONDS)
            reached.append("resumed")
            yield "second"
            reached.append("after second")
        finally:
            closed.set()

    model = ScriptedModel([tool_response(call("slow_stream", id="t1")), text_response("ok")])
    agent = Agent(model, tools=[slow_stream], abort_grace_seconds=0)
    agent.subscribe(
        lambda event: (
            agent.abort("stop")
            if isinstance(event, ToolExecutionUpdate) and event.update == "first"
            else None
        )
    )
    result = agent.run_sync("go")
    assert result.state == "aborted"
    assert result.messages[-1].text.startswith("Interrupted while running")
    release.set()
    assert closed.wait(WAIT_SECONDS)
    # The abort reaches the thread either before it asks for the next value (the generator is
    # closed where it stands) or while it waits inside it ("second" is produced, then it is
    # closed): either way it never goes past its next value.
    assert reached in ([], ["resumed"])


# -- Case 2: async behind a sync wrapper -----------------------------------------------------


def logged(fn: Callable[..., Any]) -> Callable[..., Any]:
    """A plain decorator, as users write them: sync, ``functools.wraps``."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        return fn(*args, **kwargs)

    return wrapper


def find_shapes(calls: list[str]) -> dict[str, Callable[..., Any]]:
    """The same coroutine body reached through each shape of callable."""

    async def find(name: str) -> str:
        """Find a person."""
        calls.append(name)
        await asyncio.sleep(0)  # really a coroutine: it suspends once
        return f"found {name}"

    class Finder:
        """Find a person."""

        async def __call__(self, name: str) -> str:
            return await find(name)

        async def method(self, name: str) -> str:
            return await find(name)

    def sync_returning_awaitable(name: str) -> Awaitable[str]:
        """Find a person (returns an awaitable)."""
        return find(name)

    def sync_returning_a_task(name: str) -> Awaitable[str]:
        """Find a person (returns a Task scheduled on the running loop)."""
        return asyncio.ensure_future(find(name))

    class Pending:
        """Not a coroutine, not a Future: awaitable through ``__await__`` only."""

        def __init__(self, name: str) -> None:
            self.name = name

        def __await__(self) -> Generator[Any, None, str]:
            return find(self.name).__await__()

    def sync_returning_an_awaitable_object(name: str) -> Awaitable[str]:
        """Find a person (returns an object with ``__await__``)."""
        return Pending(name)

    return {
        "functools_wraps": logged(find),
        "async_call_instance": Finder(),
        "partial": functools.partial(find),
        "bound_async_method": Finder().method,
        "staticmethod": staticmethod(find),
        "sync_function_returning_a_coroutine": sync_returning_awaitable,
        "sync_function_returning_a_task": sync_returning_a_task,
        "sync_function_returning_an_object_with_await": sync_returning_an_awaitable_object,
    }


# A Task is created on a running event loop: a worker thread has none (``ensure_future`` raises
# there), so that shape is a tool only with ``run_in_thread=False``.
NEEDS_THE_LOOP = {"sync_function_returning_a_task"}


@pytest.mark.parametrize(
    ("shape", "run_in_thread"),
    [
        pytest.param(shape, in_thread, id=f"{shape}-{'in_thread' if in_thread else 'on_loop'}")
        for shape in find_shapes([])
        for in_thread in (True, False)
        if not (in_thread and shape in NEEDS_THE_LOOP)
    ],
)
def test_async_behind_a_sync_wrapper_runs_once_and_returns_its_value(
    shape: str, run_in_thread: bool
) -> None:
    calls: list[str] = []
    t = tool(find_shapes(calls)[shape], name="find", run_in_thread=run_in_thread)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result, tool_result, _ = run_one_call(t, {"name": "Ada"})
        gc.collect()  # an unawaited coroutine warns when it is collected
    assert calls == ["Ada"]  # the body ran once, with the model's arguments
    assert (tool_result.text, tool_result.is_error) == ("found Ada", False)
    assert result.state == "done"
    assert not [w for w in caught if "never awaited" in str(w.message)]


def test_coroutine_from_a_sync_wrapper_is_awaited_on_the_loop_and_cancelled_by_an_abort() -> None:
    """The wrapper runs in a worker thread; the coroutine it returns runs on the event loop,
    so an abort cancels it like any async tool (its ``finally`` runs, nothing left unawaited)."""
    where: dict[str, int] = {}
    cleaned: list[str] = []

    async def wait_forever() -> str:
        where["coroutine"] = threading.get_ident()
        agent.abort("stop")
        try:
            # Only the abort ends this wait; the bound makes a regression fail, never hang.
            async with asyncio.timeout(WAIT_SECONDS):
                await asyncio.Event().wait()
        finally:
            cleaned.append("finally")
        return "never"

    @logged
    def wait() -> Any:
        where["wrapper"] = threading.get_ident()
        return wait_forever()

    model = ScriptedModel([tool_response(call("wait", id="t1")), text_response("ok")])
    agent = Agent(model, tools=[tool(wait, name="wait")], abort_grace_seconds=0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = agent.run_sync("go")
        gc.collect()
    assert result.state == "aborted"
    assert result.messages[-1].text.startswith("Interrupted while running")
    assert cleaned == ["finally"]
    assert where["wrapper"] != where["coroutine"]  # wrapper in a thread, coroutine on the loop
    assert not [w for w in caught if "never awaited" in str(w.message)]


def test_which_callables_are_tools_and_their_default_names() -> None:
    async def lookup(key: str, limit: int = 3) -> str:
        """Look a key up."""
        return key

    class Search:
        """Search the web."""

        def __call__(self, query: str) -> str:
            return query

    partial = tool(functools.partial(lookup, limit=5))
    assert (partial.name, partial.description) == ("lookup", "Look a key up.")
    assert list(partial.input_schema["properties"]) == ["key"]  # bound arguments are fixed
    instance = tool(Search())
    assert (instance.name, instance.description) == ("Search", "Search the web.")
    assert list(instance.input_schema["properties"]) == ["query"]
    assert tool(logged(lookup)).name == "lookup"


# -- Case 3: values that are not strings ------------------------------------------------------


class P(BaseModel):
    x: int
    y: int


@dataclasses.dataclass
class Order:
    order: str
    eta: datetime.date


class Secret:
    def __str__(self) -> str:
        return "s3cret-token"


def test_pydantic_model_result_is_compact_json_of_the_data() -> None:
    @tool
    def point() -> P:
        """A point."""
        return P(x=1, y=2)

    result, tool_result, _ = run_one_call(point)
    assert (tool_result.text, tool_result.is_error) == ('{"x":1,"y":2}', False)
    assert result.state == "done"


def test_dataclass_result_is_compact_json_with_dates_in_iso_format() -> None:
    @tool
    def track() -> Order:
        """Track the order."""
        return Order("A-17", datetime.date(2024, 5, 1))

    _, tool_result, _ = run_one_call(track)
    assert (tool_result.text, tool_result.is_error) == (
        '{"order":"A-17","eta":"2024-05-01"}',
        False,
    )


def test_data_results_keep_non_ascii_and_nested_models() -> None:
    @tool
    def cities() -> dict[str, Any]:
        """Cities."""
        return {"city": "Zürich", "points": [P(x=1, y=2)], "when": (datetime.date(2024, 5, 1),)}

    _, tool_result, _ = run_one_call(cities)
    assert tool_result.text == '{"city":"Zürich","points":[{"x":1,"y":2}],"when":["2024-05-01"]}'


@pytest.mark.parametrize(
    "value", [Secret(), {"key": Secret()}, [1, Secret()]], ids=["value", "in_dict", "in_list"]
)
def test_value_pydantic_cannot_serialize_is_an_error_result_naming_its_type(value: Any) -> None:
    @tool
    def leak() -> Any:
        """Return something odd."""
        return value

    result, tool_result, _ = run_one_call(leak)
    assert tool_result.is_error
    assert "Secret" in tool_result.text  # its type (pydantic names the inner one)...
    assert "s3cret-token" not in tool_result.text and no_repr(tool_result.text)  # ...not its str()
    assert result.state == "done"  # the model reads the error; the run goes on


def test_text_none_blocks_and_tool_result_keep_their_meaning() -> None:
    block = TextBlock(text="block text")
    for value, expected in [
        ("plain text", "plain text"),
        (None, "(no output)"),
        (block, "block text"),
        ([block], "block text"),
        (ToolResult("made", details={"n": 1}), "made"),
        (b"bytes text", '"bytes text"'),
        ([1, 2.5, True, None], "[1,2.5,true,null]"),
    ]:

        @tool
        def give() -> Any:
            """Give the value."""
            return value  # noqa: B023 - called within this iteration

        _, tool_result, _ = run_one_call(give)
        assert (tool_result.text, tool_result.is_error) == (expected, False), value


# -- Case 4: reserved parameter names ----------------------------------------------------------


def test_parameters_named_path_and_model_config_work_under_those_names() -> None:
    seen: dict[str, Any] = {}

    @tool
    def read(_path: str, model_config: int = 0) -> str:
        """Read a file.

        Args:
            _path: the file.
            model_config: which model configuration.
        """
        seen.update(_path=_path, model_config=model_config)
        return f"read {_path}"

    schema = read.input_schema
    assert list(schema["properties"]) == ["_path", "model_config"]
    assert schema["required"] == ["_path"]
    assert schema["properties"]["_path"]["description"] == "the file."
    assert "param_" not in str(schema)  # the internal field names never show
    result, tool_result, _ = run_one_call(read, {"_path": "a.txt", "model_config": 3})
    assert (tool_result.text, tool_result.is_error) == ("read a.txt", False)
    assert seen == {"_path": "a.txt", "model_config": 3}
    assert result.state == "done"


def test_invalid_arguments_of_a_renamed_parameter_name_it() -> None:
    @tool
    def read(_path: str) -> str:
        """Read a file."""
        return _path

    _, tool_result, _ = run_one_call(read, {"param_0": "a.txt"})
    assert tool_result.is_error
    assert "- _path: Field required" in tool_result.text
    assert "- param_0: Extra inputs are not permitted" in tool_result.text  # not an alias


def awkward_function(names: list[str]) -> Callable[..., dict[str, Any]]:
    """A tool function whose parameters carry ``names`` (one ``int`` each), as a decorator or a
    code generator might build it."""

    def function(**kwargs: Any) -> dict[str, Any]:
        return kwargs

    params = [inspect.Parameter(n, inspect.Parameter.KEYWORD_ONLY, annotation=int) for n in names]
    function.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
    function.__annotations__ = {n: int for n in names}
    return function


# Python keywords (``from``, ``class``) cannot be parameter names, even in a built signature.
AWKWARD = sorted(
    {n for n in dir(BaseModel) if n.isidentifier()}
    | {"_path", "_", "__x", "model_config", "model_fields", "model_x", "param_0", "param_1"}
)


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.sampled_from(AWKWARD) | st.from_regex(r"_{0,2}[a-z][a-z0-9_]{0,8}", fullmatch=True),
        min_size=1,
        max_size=4,
        unique=True,
    )
)
def test_any_parameter_name_works_under_its_own_name_or_is_refused_clearly(
    names: list[str],
) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "shadows an attribute" warning either
        try:
            t = tool(awkward_function(names), name="awkward")
        except ToolDefinitionError as exc:  # the only exception type allowed
            assert "'awkward'" in str(exc)
            return
    assert list(t.input_schema["properties"]) == names
    arguments = {n: i for i, n in enumerate(names)}
    assert t.validate(arguments) == arguments
    assert asyncio.run(_settle(t.call(t.validate(arguments), None))) == arguments


async def _settle(awaitable: Awaitable[Any]) -> Any:
    return await awaitable


class Handle:
    """Not data: pydantic validates it only as an instance and has no JSON schema for it."""


def test_a_parameter_type_with_no_json_schema_is_a_definition_error() -> None:
    with pytest.raises(ToolDefinitionError, match=r"'hold'.*no JSON schema"):

        @tool
        def hold(handle: Handle) -> str:
            """Hold a handle."""
            return "held"
