"""Offline models for demos and tests: `ScriptedModel` plays back responses, `FunctionModel` asks a
function. Both stream like a real provider, so the engine's streaming path is exercised."""

from __future__ import annotations

import asyncio
import functools
import inspect
import json
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from typing import Any

from pydantic import ValidationError

from .._errors import ScriptExhaustedError, UsageError
from .._messages import AssistantMessage, Message, TextBlock, ThinkingBlock, ToolCallBlock
from ._anthropic_response import error_from_body, parse_response
from ._base import (
    ModelRequest,
    ResponseComplete,
    ResponseStart,
    StreamEvent,
    TextDelta,
    ThinkingDelta,
    ToolCallDelta,
)

Step = dict[str, Any] | AssistantMessage


def _stream_message(message: AssistantMessage) -> Iterator[StreamEvent]:
    # A plain generator: a nested async generator left unfinished would be closed by the event
    # loop's finalizer hook, one more task per response.
    yield ResponseStart(message.model)
    for index, block in enumerate(message.content):
        if isinstance(block, TextBlock):
            yield TextDelta(index, block.text)
        elif isinstance(block, ThinkingBlock):
            yield ThinkingDelta(index, block.thinking)
        elif isinstance(block, ToolCallBlock):
            raw = block.raw_arguments
            if raw is None:
                raw = json.dumps(block.input) if block.input else "{}"
            yield ToolCallDelta(index, block.id, block.name, raw)
    yield ResponseComplete(message)


class _Stream:
    """The stream events of one response, made when the first one is asked for: ``first()``
    gives the response (or raises, or waits).

    A class rather than an async generator: the event loop registers every async generator
    with its finalizer hooks on its first step and the consumer closes it afterwards, a cost on
    each response that a plain async iterator does not have.
    """

    __slots__ = ("_events", "_first")

    def __init__(self, first: Callable[[], Awaitable[AssistantMessage]]) -> None:
        self._first = first
        self._events: Iterator[StreamEvent] | None = None

    def __aiter__(self) -> _Stream:
        return self

    async def __anext__(self) -> StreamEvent:
        events = self._events
        if events is None:
            self._events = iter(())  # a first step that raises ends the stream, as a generator's
            events = self._events = _stream_message(await self._first())
        for event in events:
            return event
        raise StopAsyncIteration


class ScriptedModel:
    """Plays back a fixed list of steps, one per request.

    Args:
        steps: each an Anthropic Messages API response (``{"content": [...], "stop_reason": ...,
            "usage": {...}}``, so a recorded real response serves as a step), a recorded error
            (``{"error": {"type": "overloaded_error", "message": ...}}``, optionally with
            ``"status_code"``), or an `AssistantMessage`. A dict step may add ``"delay_seconds"``
            (or ``"delay"``): wait that long before answering. A ``tool_use`` block whose
            ``input`` is a string is argument text, parsed as a provider stream would be.
        name: the model name reported.
        record_requests: keep every request in ``requests`` (turn off for long benchmarks).
        context_window: the context window (tokens) the model claims, for context accounting
            and automatic compaction (None: unknown).

    Running out of steps raises `ScriptExhaustedError` in the request, which ends the run in
    ``failed`` with a message saying how many steps the script holds.

    The script's position is ``calls``: request ``n`` (counting from 1, over every run that
    uses this model) plays step ``n``, whether it is an answer, an error or a retry. A durable
    run (`statemachine_agent.durable`) records the position after each model request step; when
    DBOS replays recorded requests in a new process (a restarted or recovering worker), it
    moves this model there with `seek`, so the run continues with the step after the last
    recorded one and plays no step twice.

    Raises:
        UsageError: a step is malformed (not an object, neither ``content`` nor ``error``,
            ``content`` not a list of blocks, a block of an unknown type, a bad delay); the
            message names the step, counting from 1. Steps are checked here, not mid-run.
    """

    def __init__(
        self,
        steps: Sequence[Step],
        *,
        name: str = "scripted",
        record_requests: bool = True,
        context_window: int | None = None,
    ) -> None:
        self.context_window = context_window
        self._steps = [_checked_step(number, step) for number, step in enumerate(steps, 1)]
        self._name = name
        self._record = record_requests
        self.requests: list[ModelRequest] = []
        self.calls = 0

    @property
    def name(self) -> str:
        """The model name reported."""
        return self._name

    @property
    def remaining(self) -> int:
        """Steps not yet played."""
        return len(self._steps) - self.calls

    def seek(self, calls: int) -> None:
        """Continue the script as if ``calls`` requests had been asked: the next request plays
        step ``calls + 1``.

        For requests answered without asking this model: a durable run calls it when DBOS
        replays recorded model requests (their responses come from the database). ``calls`` and
        ``remaining`` follow; ``requests`` keeps only the requests this model was really asked.

        Args:
            calls: the number of steps already played (0: start again from the first step).

        Raises:
            UsageError: ``calls`` is negative or not an int.
        """
        if not isinstance(calls, int) or isinstance(calls, bool) or calls < 0:
            raise UsageError(f"ScriptedModel.seek: calls must be an int >= 0, got {calls!r}")
        self.calls = calls

    def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        """Play the next step (see the class docstring)."""
        index = self.calls
        self.calls += 1
        if self._record:
            self.requests.append(
                ModelRequest(
                    list(request.messages), request.system, request.tools, request.settings
                )
            )
        return _Stream(functools.partial(self._play, index))

    async def _play(self, index: int) -> AssistantMessage:
        if index >= len(self._steps):
            raise ScriptExhaustedError(
                f"ScriptedModel has no step {index + 1}: the script holds {len(self._steps)} "
                "step(s). Add a step (for example a final end_turn answer)."
            )
        delay, outcome = self._steps[index]
        if delay:
            await asyncio.sleep(delay)
        if not isinstance(outcome, AssistantMessage):
            raise error_from_body(outcome, status_code=outcome.get("status_code"))
        return outcome


# Block types a recorded Anthropic response may hold besides text, thinking and tool_use; they are
# kept verbatim as provider blocks. Anything else in a script is most likely a typo.
_PROVIDER_BLOCK_TYPES = frozenset(
    {"redacted_thinking", "server_tool_use", "mcp_tool_use", "mcp_tool_result", "container_upload"}
)
_REQUIRED_FIELDS = {"text": ("text",), "thinking": ("thinking",), "tool_use": ("id", "name")}


def _checked_step(
    number: int, step: Step, owner: str = "ScriptedModel"
) -> tuple[float, AssistantMessage | dict[str, Any]]:
    """``(delay_seconds, response or error body)`` for one step, or a UsageError naming it (and
    ``owner``, the class the script was given to)."""
    if isinstance(step, AssistantMessage):
        return 0.0, step
    where = f"{owner} step {number}"
    if not isinstance(step, dict):
        raise UsageError(f"{where}: expected a response object, got {type(step).__name__}")
    delay = step.get("delay_seconds", step.get("delay", 0)) or 0
    if not isinstance(delay, int | float) or isinstance(delay, bool) or delay < 0:
        raise UsageError(f"{where}: delay_seconds must be a number >= 0, got {delay!r}")
    if "error" in step:
        if not isinstance(step["error"], dict):
            raise UsageError(
                f"{where}: error must be an object like {{'type': ..., 'message': ...}}"
            )
        return float(delay), step
    content = step.get("content")
    if content is None:
        raise UsageError(
            f"{where}: needs 'content' (a list of blocks) or 'error'; got keys {sorted(step)}"
        )
    if not isinstance(content, list):
        raise UsageError(
            f"{where}: 'content' must be a list of blocks, got {type(content).__name__}"
        )
    for i, block in enumerate(content, 1):
        kind = block.get("type") if isinstance(block, dict) else None
        if not isinstance(kind, str):
            raise UsageError(f"{where}, block {i}: expected an object with a 'type'")
        known = (
            kind in _REQUIRED_FIELDS or kind in _PROVIDER_BLOCK_TYPES or kind.endswith("_result")
        )
        if not known:
            raise UsageError(
                f"{where}, block {i}: unknown block type {kind!r} (expected text, thinking, "
                "tool_use, or a provider block such as server_tool_use)"
            )
        missing = [f for f in _REQUIRED_FIELDS.get(kind, ()) if f not in block]
        if missing:
            raise UsageError(f"{where}, block {i} ({kind}): missing {', '.join(missing)}")
    try:
        return float(delay), parse_response(step)
    except (ValidationError, TypeError, KeyError) as exc:
        raise UsageError(f"{where}: not a valid response: {exc}") from None


ModelFunction = Callable[
    [Sequence[Message], ModelRequest],
    "AssistantMessage | dict[str, Any] | str | Awaitable[AssistantMessage | dict[str, Any] | str]",
]


class FunctionModel:
    """Asks a function for each response.

    Args:
        function: ``function(messages, request)``, sync or async, returning an `AssistantMessage`,
            an Anthropic-shaped response dict, or a string (a final text answer).
        name: the model name reported.
        context_window: the context window (tokens) the model claims, for context accounting
            and automatic compaction (None: unknown).
    """

    def __init__(
        self, function: ModelFunction, *, name: str = "function", context_window: int | None = None
    ) -> None:
        self.context_window = context_window
        self._function = function
        self._name = name

    @property
    def name(self) -> str:
        """The model name reported."""
        return self._name

    def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        """Call the function (when the first event is asked for) and stream what it returned."""
        return _Stream(functools.partial(self._respond, request))

    async def _respond(self, request: ModelRequest) -> AssistantMessage:
        value = self._function(request.messages, request)
        if isinstance(value, AssistantMessage):
            return value
        if inspect.isawaitable(value):
            value = await value
        if isinstance(value, str):
            return AssistantMessage(content=[TextBlock(text=value)], stop_reason="end_turn")
        if isinstance(value, dict):
            return parse_response(value)
        return value
