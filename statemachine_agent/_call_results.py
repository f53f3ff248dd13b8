"""What a tool call turns into: the checks that need no I/O (`check_call`), a tool's return value
as its result message (`to_result`), the placeholder of a deferred call, the batch a run holds
while calls wait for decisions (`PendingBatch`), and the helpers the batch uses around a hook or
a failing tool (argument copies, hook failure results, the warning logged), for a resource's
queue (`release_after`) and for an abandoned call (`retrieve`). The batch that runs calls is
`_execution`."""

from __future__ import annotations

import asyncio
import copy
import difflib
import inspect
import logging
from dataclasses import dataclass, field
from typing import Any, Literal

from ._hooks import Approve, Deny, PendingCall
from ._messages import (
    AssistantMessage,
    ImageBlock,
    TextBlock,
    ToolCallBlock,
    ToolResultMessage,
    text_block,
    text_result,
    tool_result,
)
from ._protocol import (
    EMPTY_OUTPUT,
    NO_OUTPUT,
    TRUNCATED,
    without_blank_text,
)
from ._strict_json import NonFiniteNumberError, loads_strict
from ._tools import Tool, ToolResult, repr_json, result_json

logger = logging.getLogger("statemachine_agent")

ToolExecution = Literal["parallel", "sequential"]

RAW_ARGUMENTS_CAP = 200

DEFERRED = {"awaiting_approval": True}
"""The ``details`` of the placeholder result a deferred call's end event shows."""

_JSON_KINDS = {
    "NoneType": "null",
    "list": "array",
    "str": "string",
    "int": "number",
    "float": "number",
    "bool": "boolean",
}


async def resolve(value: Any) -> Any:
    """Await ``value`` if it is awaitable (hooks may be sync or async)."""
    if inspect.isawaitable(value):
        return await value
    return value


def awaits_decision(result: ToolResultMessage) -> bool:
    """``result`` is the placeholder a deferred call's ``tool_execution_end`` carries (its real
    result comes with the decision), not a final result."""
    return bool(result.details == DEFERRED)


def _cap(text: str, limit: int = RAW_ARGUMENTS_CAP) -> str:
    return text if len(text) <= limit else text[:limit] + f"... [{len(text) - limit} more chars]"


def check_call(call: ToolCallBlock, tools: dict[str, Tool]) -> str | tuple[Tool, dict[str, Any]]:
    """The checks that need no I/O: the error text of a call that must not run, or its tool and
    its arguments (the call's fields read once: a message's field read is not cheap, `_messages`).

    Covers truncated calls, unknown tools (naming the available ones and the closest), arguments
    that are not valid JSON or not a JSON object (quoting the parse problem and the raw text),
    and numbers JSON cannot hold (``NaN``, ``Infinity``, ``1e400``: naming the field and the
    value, see `loads_strict`).
    """
    if call.truncated:
        return TRUNCATED
    name = call.name
    tool = tools.get(name)
    if tool is None:
        names = sorted(tools)
        text = f"Unknown tool {name!r}."
        text += f" Available tools: {', '.join(names)}." if names else " No tools are available."
        close = difflib.get_close_matches(name, names, n=1)
        if close:
            text += f" Did you mean {close[0]!r}?"
        return text
    value = call.input
    raw = call.raw_arguments
    if raw is not None:
        try:
            value = loads_strict(raw)
        except NonFiniteNumberError as exc:
            return (
                f"Invalid arguments for tool {name!r}: {exc}; the call was not run. Send "
                f"a finite number for {exc.path} (or the value as a string)."
            )
        except ValueError as exc:
            return (
                f"Invalid arguments for tool {name!r}: not valid JSON ({exc}). "
                f"Raw arguments: {_cap(raw)}. Send the arguments as one JSON object."
            )
    if not isinstance(value, dict):
        kind = _JSON_KINDS.get(type(value).__name__, type(value).__name__)
        shown = raw if raw is not None else repr_json(value)
        return (
            f"Invalid arguments for tool {name!r}: expected a JSON object, got {kind}: "
            f"{_cap(shown)}. Send the arguments as one JSON object."
        )
    return tool, value


def _clean(blocks: list[TextBlock | ImageBlock]) -> list[TextBlock | ImageBlock]:
    # Blank text is invalid for a provider (protocol rule 4); an output with nothing left says so.
    return without_blank_text(blocks, EMPTY_OUTPUT)


def _text_blocks(text: str) -> list[TextBlock | ImageBlock]:
    """A tool's text output as its result's blocks (blank text cleaned, checked once)."""
    block = text_block(text)
    return [block] if text.strip() else _clean([block])


def to_result(call: ToolCallBlock, value: Any) -> ToolResultMessage:
    """Turn what a tool returned into its result message."""
    if isinstance(value, str):  # the common case: no check of a pydantic class
        return tool_result(call, _text_blocks(value), False, None)
    is_error = False
    details = None
    if isinstance(value, ToolResultMessage):
        # Re-addressed to this call (the protocol pairs by id) and cleaned like any output.
        return value.model_copy(
            update={
                "tool_call_id": call.id,
                "tool_name": call.name,
                "content": _clean(list(value.content)),
            }
        )
    if isinstance(value, ToolResult):
        is_error, details, value = value.is_error, value.details, value.content
    if value is None:
        blocks: list[TextBlock | ImageBlock] = [TextBlock(text=NO_OUTPUT)]
    elif isinstance(value, str):
        blocks = _text_blocks(value)
    elif isinstance(value, TextBlock | ImageBlock):
        blocks = _clean([value])
    elif isinstance(value, list) and all(isinstance(b, TextBlock | ImageBlock) for b in value):
        blocks = _clean(value)
    else:  # data: compact JSON (pydantic); what cannot be serialized is an error result
        text, failed = result_json(value)
        blocks, is_error = [text_block(text)], is_error or failed
    return tool_result(call, blocks, is_error, details)  # compact for the history (issue 39)


@dataclass(slots=True)
class PendingBatch:
    """A tool batch waiting for decisions: what an agent in ``awaiting_approval`` holds.

    Attributes:
        response: the assistant message whose calls these are (the last message of the history).
        results: the results the batch already has, by call id (appended, in declaration order,
            once every call is decided and run).
        calls: the calls still waiting, in declaration order.
        decisions: the decisions given for the next run, by call id.
    """

    response: AssistantMessage
    results: dict[str, ToolResultMessage]
    calls: list[PendingCall]
    decisions: dict[str, Approve | Deny] = field(default_factory=dict)


OWN_CANCELLATION = (
    "the tool raised asyncio.CancelledError itself (the run was not aborted or cancelled); "
    "the call may have partly completed."
)


def log_tool_exception(call: ToolCallBlock, exc: BaseException) -> None:
    """One warning record on the package's logger, with the traceback, the tool and the call."""
    logger.warning(
        "tool %r raised %s (call %s)",
        call.name,
        type(exc).__name__,
        call.id,
        exc_info=exc,
        extra={"tool_name": call.name, "call_id": call.id},
    )


def copied_arguments(arguments: dict[str, Any]) -> dict[str, Any]:
    """A deep copy of ``arguments`` (a shallow one when a value cannot be copied)."""
    try:
        return copy.deepcopy(arguments)
    except Exception:
        return dict(arguments)


def arguments_differ(seen: dict[str, Any], original: dict[str, Any]) -> bool:
    """A hook changed its copy of the arguments (an equality that fails counts as changed)."""
    try:
        return bool(seen != original)
    except Exception:
        return True


def hook_failed_result(hook: str, call: ToolCallBlock, exc: BaseException) -> ToolResultMessage:
    logger.warning(
        "the %s hook raised %s (tool %r, call %s)",
        hook,
        type(exc).__name__,
        call.name,
        call.id,
        exc_info=exc,
        extra={"tool_name": call.name, "call_id": call.id},
    )
    return text_result(
        call,
        f"The {hook} hook failed ({type(exc).__name__}: {exc}); the call was not completed.",
        is_error=True,
    )


def retrieve(task: asyncio.Future[None]) -> None:
    """Retrieve what an abandoned call's task ended with ("Task exception was never retrieved")."""
    if not task.cancelled():
        task.exception()


def release_after(previous: asyncio.Future[None] | None, turn: asyncio.Future[None]) -> None:
    """Give up a call's place on its resource once the call before it has given up its own: a
    call that never waited for its turn (denied, a hook failed, deferred) must not let a later
    call on the same resource overtake an earlier one still running."""
    if previous is None or previous.done():
        turn.set_result(None)
    else:
        previous.add_done_callback(lambda _: None if turn.done() else turn.set_result(None))
