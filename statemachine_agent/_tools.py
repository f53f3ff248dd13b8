"""Tool definitions: `@tool` turns a typed callable into a `Tool` with a JSON schema (pydantic).

A parameter annotated `ToolContext` is not part of the schema; it receives the abort signal, the call
id and a progress callback. Google-style ``Args:`` sections of the docstring describe the parameters.

Which callables are tools: functions and methods, sync or ``async``; generator functions, sync or
``async`` (consumed: see `tool`); a `functools.partial` (its bound arguments are not in the schema);
an object with a ``__call__`` method; a sync wrapper (a decorator) whose return value is awaitable,
an async generator or a generator: it is called like any sync tool, then what it returned is
awaited or consumed on the event loop.
"""

from __future__ import annotations

import functools
import inspect
import keyword
import re
import types
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, get_type_hints, overload

import docstring_parser
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, create_model

from ._cancel import AbortSignal
from ._errors import ToolDefinitionError
from ._messages import ImageBlock, TextBlock
from ._tool_calls import ToolKind, in_thread, kind_of, last_of, no_progress, settled

_NAME_RE = re.compile(r"[a-zA-Z0-9_-]{1,64}")  # the providers' rule for a tool name


@dataclass(frozen=True, slots=True)
class ToolContext:
    """What a tool may receive besides its arguments (annotate a parameter with this type).

    Attributes:
        call_id: the id of the tool call being run.
        tool_name: the tool's name.
        signal: the run's abort signal.
        progress: ``progress(update)`` emits a tool-execution update event.
        deps: the ``deps`` object given to the `Agent`.
        run: the `Run` executing the call (None when the tool is called outside a run): a
            sub-agent (`Agent.as_tool`) reads its id, event bus, counts and limits to join the
            run tree.
    """

    call_id: str
    tool_name: str
    signal: AbortSignal
    progress: Callable[[Any], None]
    deps: Any = None
    run: Any = None


@dataclass(frozen=True, slots=True)
class ToolResult:
    """What a tool may return when plain text is not enough.

    Attributes:
        content: text or blocks the model reads.
        is_error: report a failure the model should act on.
        details: structured data for the application, not sent to the model.
        terminate: end the run once the batch has its results: the run ends ``done`` and this
            result's text is the run's final answer (``RunResult.text``); no further model
            request is sent. The other calls of the batch keep their results.
    """

    content: str | list[TextBlock | ImageBlock]
    is_error: bool = False
    details: Any = None
    terminate: bool = False


ToolFunction = Callable[..., Any]
ResourceKey = Callable[[dict[str, Any]], str | None]


@dataclass(eq=False)
class Tool:
    """A tool the model can call.

    Args:
        name: 1-64 characters of letters, digits, ``_`` or ``-`` (Anthropic tool-name rule).
        description: what the tool does, for the model.
        function: sync or async; called with the validated arguments as keywords (plus the
            `ToolContext` parameter when it has one), except those named in ``positional_only``.
        args_model: the pydantic model that validates the arguments and gives the JSON schema.
        timeout_seconds: cancel a call that runs longer; its result says so.
        resource: names the resource a call mutates, from the validated arguments (a parameter name
            or a function); calls on the same resource run one after another in declaration order.
        run_in_thread: run a sync function in a worker thread (default; a pool of up to
            `SYNC_TOOL_WORKERS` threads, so a parallel batch really runs in parallel) so it does
            not block the event loop.
        requires_approval: every call waits for a person's decision (the run stops in
            ``awaiting_approval``) unless a ``before_tool_call`` hook returns `Allow` for it.
        sequential: a batch holding a call of this tool runs one call after another, in
            declaration order (for a tool that must not overlap with anything).
        idempotent: running a call twice has the effect of running it once. A durable run
            (`statemachine_agent.durable`) re-runs an idempotent call that was in flight when its
            worker died; any other such call is answered "no result recorded" instead.
        step_retries: in a durable run, how many times a failed call (an error result) is run
            again by the workflow engine before its error result is kept (default 0: none).
        durable_steps: in a durable run, a call is not one step: the steps it takes itself are
            the workflow's (a sub-agent's model requests and tool calls, `Agent.as_tool`), and
            the batch's next call starts its steps once it has ended.
        positional_only: the function's positional-only parameters (``def f(a, /, b)``), in
            order: passed positionally, before the keywords. Each is an argument's keyword (its
            name in the schema) or ``context_param``; `tool` fills it in.

    Raises:
        ToolDefinitionError: the name is invalid, or ``positional_only`` names a parameter that
            is neither an argument nor ``context_param``.
    """

    name: str
    description: str
    function: ToolFunction
    args_model: type[BaseModel]
    timeout_seconds: float | None = None
    resource: str | ResourceKey | None = None
    run_in_thread: bool = True
    context_param: str | None = None
    requires_approval: bool = False
    sequential: bool = False
    idempotent: bool = False
    step_retries: int = 0
    durable_steps: bool = False
    positional_only: tuple[str, ...] = ()
    is_async: bool = field(init=False)
    needs_context: bool = field(init=False)
    input_schema: dict[str, Any] = field(init=False)
    _kind: ToolKind = field(init=False, repr=False)
    _field_names: tuple[str, ...] = field(init=False, repr=False)
    _keywords: tuple[str, ...] = field(init=False, repr=False)
    _renamed: bool = field(init=False, repr=False)
    _takes_nothing: bool = field(init=False, repr=False)

    def __post_init__(self) -> None:
        if not _NAME_RE.fullmatch(self.name):
            raise ToolDefinitionError(
                f"tool name {self.name!r} must be 1-64 letters, digits, '_' or '-'"
            )
        if self.step_retries < 0:
            raise ToolDefinitionError(f"tool {self.name!r}: step_retries must be 0 or more")
        self._kind = kind_of(self.function)
        # Called on the event loop (a coroutine or async generator function); else in a thread.
        self.is_async = self._kind != "sync"
        # A `ToolContext` is made for the call when the function takes one, or when what it
        # returns may be a generator whose values become progress updates.
        self.needs_context = self.context_param is not None or self._kind != "async"
        fields = self.args_model.model_fields
        self._field_names = tuple(fields)
        # A model built by `tool` names an awkward parameter (``_path``, ``model_config``...)
        # by its alias: the function is called with the alias.
        renamed = issubclass(self.args_model, _ArgsBase)
        self._keywords = tuple(
            (info.alias or name) if renamed else name for name, info in fields.items()
        )
        self._renamed = self._keywords != self._field_names
        # A model `tool` built for a function without arguments (no validators of its own, extra
        # arguments forbidden) validates ``{}`` to no keywords: `validate` answers it without it.
        self._takes_nothing = not fields and self.args_model.__bases__ == (_ArgsBase,)
        unknown = set(self.positional_only) - {*self._keywords, self.context_param}
        if unknown:
            raise ToolDefinitionError(
                f"tool {self.name!r}: positional_only names {sorted(unknown)}, which are neither "
                f"arguments ({list(self._keywords)}) nor the ToolContext parameter"
            )
        try:
            schema = self.args_model.model_json_schema()
        except Exception as exc:  # pydantic's schema errors: a type with no JSON schema
            raise ToolDefinitionError(
                f"tool {self.name!r}: its arguments have no JSON schema: {exc}"
            ) from exc
        schema.pop("title", None)
        schema.setdefault("properties", {})
        self.input_schema = schema

    def resource_of(self, args: dict[str, Any]) -> str | None:
        """The resource a call with ``args`` mutates, or None."""
        if self.resource is None:
            return None
        if isinstance(self.resource, str):
            value = args.get(self.resource)
            return None if value is None else f"{self.name}:{value}"
        return self.resource(args)

    def validate(self, arguments: dict[str, Any]) -> dict[str, Any]:
        """Validate ``arguments``; returns the keywords to call the function with.

        Raises:
            pydantic.ValidationError: with every field error.
        """
        if self._takes_nothing and type(arguments) is dict and not arguments:
            return {}  # what validation gives (a model instance and its dict not built)
        # The model's validator itself (``model_validate`` adds a Python call and a failing
        # isinstance on a pydantic class per call).
        model = self.args_model.__pydantic_validator__.validate_python(arguments)
        values = vars(model)  # the fields as validated (pydantic keeps extras and privates apart)
        if not self._renamed and len(values) == len(self._field_names):
            return dict(values)
        # The model cached something in its __dict__ (a ``functools.cached_property``): not a
        # field, so not an argument of the function. A renamed field is passed by its alias.
        return {
            kw: values[name] for name, kw in zip(self._field_names, self._keywords, strict=True)
        }

    def call(self, kwargs: dict[str, Any], ctx: ToolContext | None) -> Awaitable[Any]:
        """Start the function; returns an awaitable of its result. ``ctx`` is passed to the
        tool's `ToolContext` parameter; its ``progress`` gets a generator's values (None only
        for a tool whose `needs_context` is False).

        What the function returns is settled first: an awaitable is awaited on the event loop,
        a generator or async generator is consumed (see `tool`)."""
        if self.context_param is not None:
            kwargs = {**kwargs, self.context_param: ctx}
        args: tuple[Any, ...] = ()
        if self.positional_only:  # ``def f(a, /, b)``: ``a`` cannot be given as a keyword
            kwargs = dict(kwargs)
            args = tuple(kwargs.pop(name) for name in self.positional_only)
        if self._kind == "async":
            return self.function(*args, **kwargs)  # type: ignore[no-any-return]
        progress = no_progress if ctx is None else ctx.progress
        if self._kind == "async_generator":
            return last_of(self.function(*args, **kwargs), progress)
        if self.run_in_thread:
            return in_thread(functools.partial(self.function, *args, **kwargs), progress)
        return settled(self.function(*args, **kwargs), progress)


class _ArgsBase(BaseModel):
    model_config = ConfigDict(extra="forbid", arbitrary_types_allowed=True)


def _parameter_hints(annotated: Any) -> dict[str, Any]:
    """The resolved annotations of ``annotated``'s parameters. ``ToolContext`` resolves even
    where it was imported locally (string annotations); the return annotation, which a tool's
    schema does not use, is left out when it alone cannot be resolved (a class defined in a
    function, under ``from __future__ import annotations``)."""
    localns = {"ToolContext": ToolContext}
    try:
        return get_type_hints(annotated, localns=localns)
    except NameError:
        raw = dict(getattr(annotated, "__annotations__", None) or {})
        if raw.pop("return", None) is None:
            raise
        target = inspect.unwrap(annotated) if callable(annotated) else annotated
        holder = types.SimpleNamespace(
            __annotations__=raw, __globals__=getattr(target, "__globals__", {})
        )
        return get_type_hints(holder, localns=localns)


def _parts(function: ToolFunction) -> tuple[str, str | None, Any]:
    """A callable's default tool name, its docstring and what holds its annotations: a
    partial's come from its function, an instance's from its ``__call__`` (name: its class's)."""
    if isinstance(function, functools.partial):
        return _parts(function.func)
    if inspect.isroutine(function) or isinstance(function, type):
        return getattr(function, "__name__", ""), inspect.getdoc(function), function
    call = getattr(function, "__call__", None)  # noqa: B004 (an instance: its method)
    doc = getattr(call, "__doc__", None) or type(function).__doc__
    name = getattr(function, "__name__", None) or type(function).__name__
    return name, inspect.cleandoc(doc) if doc else None, call


def _renames(name: str) -> bool:
    """A parameter name pydantic refuses or warns about as a field name (leading underscore,
    ``model_`` prefix, a `BaseModel` attribute, a keyword): the field gets another name and
    this one as its alias (the schema and the function keep it)."""
    return (
        name.startswith(("_", "model_"))
        or hasattr(_ArgsBase, name)
        or not name.isidentifier()
        or keyword.iskeyword(name)
    )


def _args_model(tool_name: str, params: dict[str, tuple[Any, Any, str | None]]) -> type[BaseModel]:
    """The arguments model of ``params`` (name: annotation, default, description).

    Raises:
        ToolDefinitionError: naming the parameter pydantic refuses.
    """
    fields: dict[str, Any] = {}
    taken = set(params)
    for index, (param, (annotation, default, description)) in enumerate(params.items()):
        field_name = param
        alias = None
        if _renames(param):
            field_name = f"param_{index}"
            while field_name in taken:
                field_name += "_"
            taken.add(field_name)
            alias = param
        fields[field_name] = (annotation, Field(default, alias=alias, description=description))
    try:
        return create_model(f"{tool_name}_arguments", __base__=_ArgsBase, **fields)
    except Exception as exc:
        for (param, spec), item in zip(params.items(), fields.items(), strict=True):
            try:
                create_model("probe", __base__=_ArgsBase, **dict([item]))
            except Exception:
                raise ToolDefinitionError(
                    f"tool {tool_name!r}: parameter {param!r} (type {spec[0]!r}) "
                    f"cannot be validated: {exc}"
                ) from exc
        raise ToolDefinitionError(f"tool {tool_name!r}: invalid parameters: {exc}") from exc


def tool_from_function(
    function: ToolFunction,
    *,
    name: str | None = None,
    description: str | None = None,
    timeout_seconds: float | None = None,
    resource: str | ResourceKey | None = None,
    run_in_thread: bool = True,
    requires_approval: bool = False,
    sequential: bool = False,
    idempotent: bool = False,
    step_retries: int = 0,
) -> Tool:
    """Build a `Tool` from a typed callable (see `tool`).

    Raises:
        ToolDefinitionError: a parameter has no annotation or a type with no JSON schema,
            ``*args``/``**kwargs`` are used (naming the parameter), or the name is invalid.
    """
    own_name, documented, annotated = _parts(function)
    tool_name = name or own_name
    doc = docstring_parser.parse(documented or "")
    param_docs = {p.arg_name: p.description for p in doc.params}
    try:
        hints = _parameter_hints(annotated)
    except Exception as exc:
        raise ToolDefinitionError(f"tool {tool_name!r}: cannot resolve annotations: {exc}") from exc
    try:
        parameters = inspect.signature(function).parameters.values()
    except (TypeError, ValueError) as exc:
        raise ToolDefinitionError(f"tool {tool_name!r}: no signature: {exc}") from exc
    bound = set(function.keywords) if isinstance(function, functools.partial) else set()
    fields: dict[str, Any] = {}
    context_param = None
    positional_only: list[str] = []
    for param in parameters:
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            # The model sends one JSON object of named arguments: nothing could fill ``*args``,
            # and a ``**kwargs`` would take keys no schema describes.
            star = "*" if param.kind == param.VAR_POSITIONAL else "**"
            raise ToolDefinitionError(
                f"tool {tool_name!r}: parameter {star}{param.name} is not supported: the model "
                "sends named arguments only; declare each one as a named, annotated parameter"
            )
        if param.name in bound:  # fixed by the partial: not the model's to choose
            continue
        if param.kind == param.POSITIONAL_ONLY:
            positional_only.append(param.name)
        annotation = hints.get(param.name, inspect.Parameter.empty)
        if annotation is ToolContext:
            context_param = param.name
            continue
        if annotation is inspect.Parameter.empty:
            raise ToolDefinitionError(
                f"tool {tool_name!r}: parameter {param.name!r} needs a type annotation"
            )
        default = ... if param.default is inspect.Parameter.empty else param.default
        fields[param.name] = (annotation, default, param_docs.get(param.name))
    args_model = _args_model(tool_name, fields)
    text = description
    if text is None:
        text = "\n\n".join(part for part in (doc.short_description, doc.long_description) if part)
    return Tool(
        name=tool_name,
        description=text or tool_name,
        function=function,
        args_model=args_model,
        timeout_seconds=timeout_seconds,
        resource=resource,
        run_in_thread=run_in_thread,
        context_param=context_param,
        requires_approval=requires_approval,
        sequential=sequential,
        idempotent=idempotent,
        step_retries=step_retries,
        positional_only=tuple(positional_only),
    )


@overload
def tool(function: ToolFunction, /) -> Tool: ...


@overload
def tool(
    *,
    name: str | None = None,
    description: str | None = None,
    timeout_seconds: float | None = None,
    resource: str | ResourceKey | None = None,
    run_in_thread: bool = True,
    requires_approval: bool = False,
    sequential: bool = False,
    idempotent: bool = False,
    step_retries: int = 0,
) -> Callable[[ToolFunction], Tool]: ...


def tool(
    function: ToolFunction | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    timeout_seconds: float | None = None,
    resource: str | ResourceKey | None = None,
    run_in_thread: bool = True,
    requires_approval: bool = False,
    sequential: bool = False,
    idempotent: bool = False,
    step_retries: int = 0,
) -> Tool | Callable[[ToolFunction], Tool]:
    """Turn a typed function into a `Tool`: ``@tool`` or ``@tool(timeout_seconds=5)``;
    ``@tool(sequential=True)`` makes any batch holding one of its calls run one call at a time.

    ``idempotent=True`` lets a durable run re-run a call interrupted by a dead worker, and
    ``step_retries`` asks the durable engine to retry a failed call (see `Tool`).

    The name is the function's, the description its docstring, the JSON schema comes from the
    annotated parameters (pydantic), parameter descriptions from the docstring's ``Args:``. A
    parameter pydantic reserves as a field name (``_path``, ``model_config``, ``json``...) keeps
    its name in the schema and in the call (the model field takes it as its alias). A
    positional-only parameter (``def f(a, /, b)``) is named in the schema as usual and passed
    positionally, in order. ``*args`` and ``**kwargs`` are refused (the model sends named
    arguments only), so every accepted definition can be called.

    Which callables: see the module docstring (functions, methods, partials, objects with a
    ``__call__``, decorated functions; sync ones run in a worker thread).

    What a call's return value becomes (the call's result):

    - ``str``: the text; ``None``: ``(no output)``; a `TextBlock`/`ImageBlock` or a list of them:
      sent as is; a `ToolResult`: its content, ``is_error``, ``details`` and ``terminate``.
    - any other value: compact JSON through pydantic (`result_json`), e.g. ``{"x":1,"y":2}``; a
      value pydantic cannot serialize: an error result naming its type.
    - an awaitable (a sync wrapper of a coroutine function): awaited on the event loop, once.
    - a generator or async generator: consumed; each yielded value is a progress update
      (``ToolExecutionUpdate``, as `ToolContext.progress` sends) and the result is the **last**
      yielded value, or a sync generator's ``return`` value when it is not None. A cancelled
      call (abort past its grace, timeout) stops a generator at its next value.

    Raises:
        ToolDefinitionError: naming the tool: a parameter lacks an annotation, has a type with no
            JSON schema, is ``*args``/``**kwargs`` (naming it), or the name is invalid. No other
            exception.
    """

    def wrap(fn: ToolFunction) -> Tool:
        return tool_from_function(
            fn,
            name=name,
            description=description,
            timeout_seconds=timeout_seconds,
            resource=resource,
            run_in_thread=run_in_thread,
            requires_approval=requires_approval,
            sequential=sequential,
            idempotent=idempotent,
            step_retries=step_retries,
        )

    return wrap(function) if function is not None else wrap


def format_validation_error(tool_name: str, error: ValidationError, arguments: Any) -> str:
    """Every field error of ``error`` on its own line, then the arguments received."""
    lines = [f"Invalid arguments for tool {tool_name!r} ({error.error_count()} error(s)):"]
    for item in error.errors(include_url=False):
        where = ".".join(str(part) for part in item["loc"]) or "(arguments)"
        lines.append(f"- {where}: {item['msg']}")
    lines.append(f"Arguments received: {_cap(repr_json(arguments), 500)}")
    lines.append("Fix the arguments and call the tool again.")
    return "\n".join(lines)


_ANY = TypeAdapter(Any)


def result_json(value: Any) -> tuple[str, bool]:
    """The text the model reads for a tool's return value that is not text or blocks.

    Compact JSON of the data through pydantic's own serialization (a pydantic model, a
    dataclass, a date, a dict, a list... nested too; non-ASCII kept; bytes as UTF-8 text;
    NaN and infinities as ``null``, as pydantic writes them in JSON; a pydantic model's fields
    by their serialization alias, as an API built on the model expects), e.g. ``{"x":1,"y":2}``.

    Returns:
        ``(text, is_error)``: for a value pydantic cannot serialize, an error text naming the
        value's type (never its ``str()``) and True.
    """
    try:
        return _ANY.dump_json(value, by_alias=True).decode(), False
    except Exception as exc:  # PydanticSerializationError, or a custom serializer's own error
        kind = type(value)
        where = "" if kind.__module__ == "builtins" else f"{kind.__module__}."
        return (
            f"The tool returned a value of type {where}{kind.__qualname__} that cannot be "
            f"turned into JSON ({exc}). A tool returns text, content blocks, a ToolResult, a "
            "pydantic model, a dataclass or JSON-like data (dict, list, str, number, bool, None).",
            True,
        )


def repr_json(value: Any) -> str:
    """Compact JSON text of ``value`` (falls back to repr)."""
    import json

    try:
        return json.dumps(value, ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        return repr(value)


def _cap(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit] + f"... [{len(text) - limit} more chars]"
