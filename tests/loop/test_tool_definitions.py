"""Tool definitions as users write them: parameter kinds (positional-only, defaults, ``*args``),
partials and bound methods, the args model's values, return annotations."""

from __future__ import annotations

import functools
import inspect
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from loop_helpers import results_of
from pydantic import BaseModel, model_validator

from statemachine_agent import (
    Agent,
    AssistantMessage,
    RunResult,
    State,
    Tool,
    ToolCallBlock,
    ToolContext,
    ToolDefinitionError,
    ToolResultMessage,
    tool,
)
from statemachine_agent.models import ScriptedModel
from statemachine_agent.testing import assert_valid_history
from statemachine_agent.testing.steps import call, text_response, tool_response


def run_one_call(t: Tool, arguments: dict[str, Any]) -> tuple[RunResult, ToolResultMessage]:
    """One scripted call of ``t`` with ``arguments``, then a final answer."""
    model = ScriptedModel([tool_response(call(t.name, arguments, id="t1")), text_response("ok")])
    result = Agent(model, tools=[t]).run_sync("go")
    (answer,) = [m for m in result.messages if isinstance(m, ToolResultMessage)]
    return result, answer


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


@tool
def lookup(key: str) -> str:
    """Look a key up."""
    return f"value of {key}"


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


def greet(greeting: str, name: str) -> str:
    """Greet someone.

    Args:
        greeting: the greeting word.
        name: who to greet.
    """
    return f"{greeting}, {name}!"


async def test_a_functools_partial_is_a_tool_with_its_functions_description() -> None:
    """pydantic/pydantic-ai#2347 (also langchain-ai/langchain#27500): a ``functools.partial``
    could not be a tool: schema generation raised on it (a partial has no ``__name__`` and is not
    a function for ``get_type_hints``), or the description became the boilerplate docstring of
    ``functools.partial`` itself.

    Expected: ``tool(partial(greet, "Hello"), name="say_hello")`` is a tool whose description is
    ``greet``'s docstring, whose schema holds only the unbound parameter ``name``, and a scripted
    call of it returns ``"Hello, Ada!"`` and the run ends ``done``. Without ``name=`` it is
    either a tool named after ``greet`` or a `ToolDefinitionError` asking for a name: no
    ``AttributeError`` / ``TypeError`` from `tool`.
    """
    hello = tool(functools.partial(greet, "Hello"), name="say_hello")
    assert hello.name == "say_hello"
    assert hello.description == "Greet someone."
    assert set(hello.input_schema["properties"]) == {"name"}
    assert hello.input_schema["required"] == ["name"]

    model = ScriptedModel(
        [tool_response(call("say_hello", {"name": "Ada"}, id="p1")), text_response("Greeted.")]
    )
    result = await Agent(model, tools=[hello]).run("Greet Ada.")
    assert result.state is State.DONE, result.error
    (answer,) = results_of(result.messages)
    assert (answer.is_error, answer.text) == (False, "Hello, Ada!")

    try:
        unnamed = tool(functools.partial(greet, "Hello"))
    except ToolDefinitionError as exc:
        assert "name" in str(exc)
    else:
        assert unnamed.name == "greet"


class Inventory:
    def __init__(self) -> None:
        self.stock = {"apple": 3}

    def count(self, item: str) -> int:
        """Count an item in stock.

        Args:
            item: the item's name.
        """
        return self.stock[item]


async def test_a_bound_method_is_a_tool_without_self_in_its_schema() -> None:
    """openai/openai-agents-python#94 (also huggingface/smolagents#681): a method used as a tool
    leaked ``self`` into the JSON schema (the API refused it: "schema for 'self' must have a
    'type' key"), or the call failed for want of ``self``.

    Expected: ``tool(Inventory().count)`` has a schema holding only ``item``, a scripted call
    runs on that instance (result ``"3"``, the run ``done``), and the unbound function
    ``Inventory.count`` is refused with a `ToolDefinitionError` naming ``self``.
    """
    inventory = Inventory()
    count = tool(inventory.count)
    assert count.name == "count"
    assert count.description == "Count an item in stock."
    assert set(count.input_schema["properties"]) == {"item"}
    assert "self" not in str(count.input_schema)

    model = ScriptedModel(
        [tool_response(call("count", {"item": "apple"}, id="m1")), text_response("3 apples.")]
    )
    result = await Agent(model, tools=[count]).run("How many apples?")
    assert result.state is State.DONE, result.error
    (answer,) = results_of(result.messages)
    assert (answer.is_error, answer.text) == (False, "3")

    with pytest.raises(ToolDefinitionError, match="'self'"):
        tool(Inventory.count)


class _Point(BaseModel):
    x: int
    y: int = 0


class _PlaceArgs(BaseModel):
    at: _Point
    limit: int = 10


def _place(at: _Point, limit: int = 99) -> str:
    """Place something."""
    return f"{at!r} {limit}"


def test_a_tool_gets_its_args_model_s_defaults_and_nested_models() -> None:
    """`Tool.validate` gives every field as the model holds it: defaults of the args model (not
    of the function) and nested models as model instances (not dumped to dicts)."""
    from statemachine_agent import Tool

    placed = Tool(name="place", description="Place.", function=_place, args_model=_PlaceArgs)
    kwargs = placed.validate({"at": {"x": 1}})
    assert kwargs == {"at": _Point(x=1, y=0), "limit": 10}
    assert type(kwargs["at"]) is _Point and list(kwargs) == ["at", "limit"]
    made = tool(_place)
    assert made.validate({"at": {"x": 2}, "limit": 3}) == {"at": _Point(x=2), "limit": 3}
    assert type(made.validate({"at": {"x": 2}})["at"]) is _Point


class _PathArgs(BaseModel):
    path: str

    @functools.cached_property
    def parts(self) -> list[str]:
        return self.path.split("/")

    @model_validator(mode="after")
    def _named(self) -> _PathArgs:
        if not self.parts[-1]:
            raise ValueError("the path names no file")
        return self


def _read(path: str) -> str:
    """Read a file."""
    return f"read {path}"


async def test_a_tool_gets_only_its_args_model_s_fields() -> None:
    """`Tool.validate` returns the args model's fields only: a value the model caches in its
    ``__dict__`` (a ``functools.cached_property`` read by a validator) is not an argument of the
    function."""
    from statemachine_agent import Tool

    read = Tool(name="read", description="Read.", function=_read, args_model=_PathArgs)
    assert read.validate({"path": "a/b"}) == {"path": "a/b"}
    call = AssistantMessage(
        content=[ToolCallBlock(id="c1", name="read", input={"path": "a/b"})],
        stop_reason="tool_use",
    )
    result = await Agent(ScriptedModel([call, AssistantMessage(content=[])]), tools=[read]).run(
        "go"
    )
    assert not result.messages[2].is_error and result.messages[2].text == "read a/b"
