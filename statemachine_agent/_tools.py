"""Tool definitions: `@tool` turns a typed function into a `Tool` with a JSON schema (pydantic).

A parameter annotated `ToolContext` is not part of the schema; it receives the abort signal, the call
id and a progress callback. Google-style ``Args:`` sections of the docstring describe the parameters.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import inspect
import re
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, get_type_hints, overload

import docstring_parser
from pydantic import BaseModel, ConfigDict, ValidationError, create_model
from pydantic.fields import FieldInfo

from ._cancel import AbortSignal
from ._errors import ToolDefinitionError
from ._messages import ImageBlock, TextBlock

_NAME_RE = re.compile(r"[a-zA-Z0-9_-]{1,64}")  # the providers' rule for a tool name

# Sync tools get their own pool: asyncio's default one has min(32, cpus + 4) workers (6 on two
# cores), which would silently serialise a larger parallel batch of blocking tools. Threads are
# started only as needed.
SYNC_TOOL_WORKERS = 64
_sync_tool_pool = ThreadPoolExecutor(
    SYNC_TOOL_WORKERS, thread_name_prefix="statemachine-agent-tool"
)


@dataclass(frozen=True, slots=True)
class ToolContext:
    """What a tool may receive besides its arguments (annotate a parameter with this type).

    Attributes:
        call_id: the id of the tool call being run.
        tool_name: the tool's name.
        signal: the run's abort signal.
        progress: ``progress(update)`` emits a tool-execution update event.
        deps: the ``deps`` object given to the `Agent`.
    """

    call_id: str
    tool_name: str
    signal: AbortSignal
    progress: Callable[[Any], None]
    deps: Any = None


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
            `ToolContext` parameter when it has one).
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

    Raises:
        ToolDefinitionError: the name is invalid.
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
    is_async: bool = field(init=False)
    input_schema: dict[str, Any] = field(init=False)
    _field_names: tuple[str, ...] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        if not _NAME_RE.fullmatch(self.name):
            raise ToolDefinitionError(
                f"tool name {self.name!r} must be 1-64 letters, digits, '_' or '-'"
            )
        if self.step_retries < 0:
            raise ToolDefinitionError(f"tool {self.name!r}: step_retries must be 0 or more")
        self.is_async = inspect.iscoroutinefunction(self.function)
        self._field_names = tuple(self.args_model.model_fields)
        schema = self.args_model.model_json_schema()
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
        model = self.args_model.model_validate(arguments)
        values = vars(model)  # the fields as validated (pydantic keeps extras and privates apart)
        if len(values) == len(self._field_names):
            return dict(values)
        # The model cached something in its __dict__ (a ``functools.cached_property``): not a
        # field, so not an argument of the function.
        return {name: values[name] for name in self._field_names}

    def call(self, kwargs: dict[str, Any], ctx: ToolContext | None) -> Awaitable[Any]:
        """Start the function; returns an awaitable of its return value. ``ctx`` is passed to
        the tool's `ToolContext` parameter (None only for a tool that has none)."""
        if self.context_param is not None:
            kwargs = {**kwargs, self.context_param: ctx}
        if self.is_async:
            return self.function(**kwargs)  # type: ignore[no-any-return]
        if self.run_in_thread:
            run = functools.partial(contextvars.copy_context().run, self.function, **kwargs)
            return asyncio.get_running_loop().run_in_executor(_sync_tool_pool, run)
        return _completed(self.function(**kwargs))


async def _completed(value: Any) -> Any:
    return value


class _ArgsBase(BaseModel):
    model_config = ConfigDict(extra="forbid", arbitrary_types_allowed=True)


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
    """Build a `Tool` from a typed function (see `tool`).

    Raises:
        ToolDefinitionError: a parameter has no annotation, or ``*args``/``**kwargs`` are used.
    """
    tool_name = name or function.__name__
    doc = docstring_parser.parse(inspect.getdoc(function) or "")
    param_docs = {p.arg_name: p.description for p in doc.params}
    try:
        # ToolContext resolves even where it was imported locally (string annotations).
        hints = get_type_hints(function, localns={"ToolContext": ToolContext})
    except Exception as exc:
        raise ToolDefinitionError(f"tool {tool_name!r}: cannot resolve annotations: {exc}") from exc
    fields: dict[str, Any] = {}
    context_param = None
    for param in inspect.signature(function).parameters.values():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            raise ToolDefinitionError(f"tool {tool_name!r}: *args and **kwargs are not supported")
        annotation = hints.get(param.name, inspect.Parameter.empty)
        if annotation is ToolContext:
            context_param = param.name
            continue
        if annotation is inspect.Parameter.empty:
            raise ToolDefinitionError(
                f"tool {tool_name!r}: parameter {param.name!r} needs a type annotation"
            )
        default = ... if param.default is inspect.Parameter.empty else param.default
        fields[param.name] = (
            annotation,
            FieldInfo(default=default, description=param_docs.get(param.name)),
        )
    args_model = create_model(f"{tool_name}_arguments", __base__=_ArgsBase, **fields)
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
    annotated parameters (pydantic), parameter descriptions from the docstring's ``Args:``.

    Raises:
        ToolDefinitionError: a parameter lacks an annotation or the name is invalid.
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


def repr_json(value: Any) -> str:
    """Compact JSON text of ``value`` (falls back to repr)."""
    import json

    try:
        return json.dumps(value, ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        return repr(value)


def _cap(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit] + f"... [{len(text) - limit} more chars]"
