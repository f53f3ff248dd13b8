"""Offline models for demos and tests: `ScriptedModel` plays back responses, `FunctionModel` asks a
function. Both stream like a real provider, so the engine's streaming path is exercised."""

from __future__ import annotations

import asyncio
import inspect
import json
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from typing import Any

from .._errors import ScriptExhaustedError
from .._messages import AssistantMessage, Message, TextBlock, ThinkingBlock, ToolCallBlock
from ._anthropic_format import error_from_body, parse_response
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
            raw = (
                block.raw_arguments if block.raw_arguments is not None else json.dumps(block.input)
            )
            yield ToolCallDelta(index, block.id, block.name, raw)
    yield ResponseComplete(message)


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

    Running out of steps raises `ScriptExhaustedError` in the request, which ends the run in
    ``failed`` with a message saying how many steps the script holds.
    """

    def __init__(
        self, steps: Sequence[Step], *, name: str = "scripted", record_requests: bool = True
    ) -> None:
        self._steps = list(steps)
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
        return self._play(index)

    async def _play(self, index: int) -> AsyncIterator[StreamEvent]:
        if index >= len(self._steps):
            raise ScriptExhaustedError(
                f"ScriptedModel has no step {index + 1}: the script holds {len(self._steps)} "
                "step(s). Add a step (for example a final end_turn answer)."
            )
        step = self._steps[index]
        if isinstance(step, AssistantMessage):
            message = step
        else:
            delay = step.get("delay_seconds", step.get("delay"))
            if delay:
                await asyncio.sleep(float(delay))
            if "error" in step:
                raise error_from_body(step, status_code=step.get("status_code"))
            message = parse_response(step)
        for event in _stream_message(message):
            yield event


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
    """

    def __init__(self, function: ModelFunction, *, name: str = "function") -> None:
        self._function = function
        self._name = name

    @property
    def name(self) -> str:
        """The model name reported."""
        return self._name

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        """Call the function and stream what it returned."""
        value = self._function(request.messages, request)
        if inspect.isawaitable(value):
            value = await value
        if isinstance(value, str):
            message = AssistantMessage(content=[TextBlock(text=value)], stop_reason="end_turn")
        elif isinstance(value, dict):
            message = parse_response(value)
        else:
            message = value
        for event in _stream_message(message):
            yield event
