"""Offline models for demos and tests: `ScriptedModel` plays back responses, `FunctionModel` asks a
function. Both stream like a real provider, so the engine's streaming path is exercised."""

from __future__ import annotations

import asyncio
import difflib
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
        kind = block.type  # (not isinstance: see `_messages`)
        if kind == "text":
            assert isinstance(block, TextBlock)
            yield TextDelta(index, block.text)
        elif kind == "thinking":
            assert isinstance(block, ThinkingBlock)
            yield ThinkingDelta(index, block.thinking)
        elif kind == "tool_call":
            assert isinstance(block, ToolCallBlock)
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
            A step may hold only the keys of the API's response object and error body (``id``,
            ``type``, ``role``, ``model``, ``usage``, ``stop_sequence``, ``stop_details``,
            ``container``, ... as the installed SDK's ``Message`` has them) and those above: a
            typo is refused, not ignored. A response without ``stop_reason`` (the API always
            sends one) is a response whose stop reason is missing: the loop goes on by its
            content (its tool calls run; without any the run ends ``done``). The whole script
            may also be a script file's object, ``{"steps": [...]}``.
        name: the model name reported.
        record_requests: keep every request in ``requests`` (turn off for long benchmarks).
        context_window: the context window (tokens) the model claims, for context accounting
            and automatic compaction (None: unknown).

    Running out of steps raises `ScriptExhaustedError` in the request, which ends the run in
    ``failed`` with a message saying how many steps the script holds.

    A ``tool_use`` id must be new to the agent's history (the Anthropic tool-use protocol pairs
    each ``tool_result`` with one call by id): a step reusing an id the history already holds
    (a script played twice on one agent, say) ends the run ``failed`` with an
    ``invalid_response`` error naming the ids. Give each run its own ids, e.g. with
    `statemachine_agent.testing.prefix_ids`.

    The script's position is ``calls``: request ``n`` (counting from 1, over every run that
    uses this model) plays step ``n``, whether it is an answer, an error or a retry. A durable
    run (`statemachine_agent.durable`) records the position after each model request step; when
    DBOS replays recorded requests in a new process (a restarted or recovering worker), it
    moves this model there with `seek`, so the run continues with the step after the last
    recorded one and plays no step twice.

    Raises:
        UsageError: a step is malformed (not an object, an unknown key, neither ``content``
            nor ``error``, ``content`` not a list of blocks, a block of an unknown type, a bad
            delay); the message names the step, counting from 1. Steps are checked here, not
            mid-run. Or ``steps`` is not a list of steps (a string, say).
    """

    def __init__(
        self,
        steps: Sequence[Step] | dict[str, Any],
        *,
        name: str = "scripted",
        record_requests: bool = True,
        context_window: int | None = None,
    ) -> None:
        self.context_window = context_window
        self._steps = [
            checked_step(number, step)
            for number, step in enumerate(script_steps(steps, "ScriptedModel"), 1)
        ]
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


SCRIPT_KEYS = ("delay_seconds", "delay", "status_code")
"""A step's own keys besides the API's: a wait before answering, an error's HTTP status."""

# The keys of the Messages API's response object (`anthropic.types.Message`, and the beta
# `BetaMessage` with ``context_management``) and of its error body (``ErrorResponse``), so a
# recorded response or error serves as a step as it is. A key outside these is looked up in the
# installed SDK's types (`step_keys`) before it is refused: a field the API added later is known.
_API_KEYS = frozenset(
    {
        "id",
        "type",
        "role",
        "model",
        "content",
        "stop_reason",
        "stop_sequence",
        "stop_details",
        "usage",
        "container",
        "context_management",
        "diagnostics",
        "error",
        "request_id",
    }
)


@functools.cache
def _sdk_keys() -> frozenset[str]:
    """The field names of the installed SDK's response and error types (imported on first use:
    only a step with a key outside `_API_KEYS` pays for importing the SDK)."""
    import anthropic.types
    import anthropic.types.beta

    fields: set[str] = set()
    for kind in (anthropic.types.Message, anthropic.types.beta.BetaMessage):
        fields.update(kind.model_fields)
    fields.update(anthropic.types.ErrorResponse.model_fields)
    return frozenset(fields)


def step_keys(wire_keys: Sequence[str] = ()) -> list[str]:
    """Every top-level key a step may hold, sorted: the Messages API response's and error
    body's (as the installed ``anthropic`` SDK types them), `SCRIPT_KEYS`, and ``wire_keys``
    (`FakeMessagesAPI`'s ``headers`` and ``cut_after_events``)."""
    return sorted(_API_KEYS | _sdk_keys() | set(SCRIPT_KEYS) | set(wire_keys))


def _refuse_unknown_keys(where: str, step: dict[Any, Any], wire_keys: Sequence[str]) -> None:
    """A UsageError naming a top-level key of ``step`` no step may hold (a typo such as
    ``cut_after_event`` would otherwise be ignored silently)."""
    fast = _API_KEYS.union(SCRIPT_KEYS, wire_keys)
    unknown = [key for key in step if key not in fast]
    if unknown:
        unknown = [key for key in unknown if key not in _sdk_keys()]
    if not unknown:
        return
    key = unknown[0]
    known = step_keys(wire_keys)
    hint = ""
    close = difflib.get_close_matches(str(key), known, n=1)
    if close:
        hint = f" (did you mean {close[0]!r}?)"
    if str(key).lower().replace("_", "-") in _HEADER_KEYS:
        hint = (
            " (response headers go in 'headers', e.g. {'headers': {'retry-after-ms': '1'}}, "
            "which FakeMessagesAPI sends)"
        )
    elif key in _FAKE_API_KEYS and not wire_keys:
        hint = f" ({key!r} is FakeMessagesAPI's: ScriptedModel has no HTTP wire to apply it to)"
    raise UsageError(f"{where}: unknown key {key!r}{hint}; a step may hold only {', '.join(known)}")


_FAKE_API_KEYS = frozenset({"headers", "cut_after_events"})
_HEADER_KEYS = frozenset({"retry-after", "retry-after-ms", "x-should-retry", "request-id"})


def script_steps(script: Any, owner: str) -> list[Any]:
    """The steps of ``script``: a sequence of steps, or a script file's JSON object
    ``{"steps": [...]}`` (the form ``--model script:FILE`` reads).

    Raises:
        UsageError: ``script`` is neither (a string, say: a file's name or text, not its steps).
    """
    if isinstance(script, dict) and "steps" in script:
        extra = sorted(str(key) for key in script if key != "steps")
        steps = script["steps"]
        if not isinstance(steps, list | tuple):
            raise UsageError(
                f"{owner}: a script object's 'steps' must be a list of steps, got "
                f"{type(steps).__name__}"
            )
        if extra and extra != ["prompt"]:
            raise UsageError(
                f"{owner}: a script object holds 'steps' (and at most 'prompt'), got also "
                f"{', '.join(extra)}"
            )
        return list(steps)
    if isinstance(script, str | bytes | dict) or not isinstance(script, Sequence):
        raise UsageError(
            f"{owner} takes a list of steps (or a script object {{'steps': [...]}}), got "
            f"{type(script).__name__}; for a script file, pass json.loads(path.read_text())"
        )
    return list(script)


def checked_step(
    number: int, step: Step, owner: str = "ScriptedModel", wire_keys: Sequence[str] = ()
) -> tuple[float, AssistantMessage | dict[str, Any]]:
    """``(delay_seconds, response or error body)`` for one step, or a UsageError naming it (and
    ``owner``, the class the script was given to). ``wire_keys``: the owner's own step keys,
    known besides `step_keys` (the caller checks their values)."""
    if isinstance(step, AssistantMessage):
        return 0.0, step
    where = f"{owner} step {number}"
    if not isinstance(step, dict):
        raise UsageError(f"{where}: expected a response object, got {type(step).__name__}")
    if "content" in step or "error" in step:  # else: "needs 'content' or 'error'" below
        _refuse_unknown_keys(where, step, wire_keys)
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
