"""Turning a model's stream into a response the engine can act on.

`request_response` sends one request with the engine's retries, under the run's abort scope;
`consume` reads a `Model` stream, passing deltas on as events and keeping the streamed text in a
`Partial` (what an aborted response keeps); `normalize` makes a finished response safe to act on
without changing what the model said.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass

from ._cancel import AbortSignal, abort_scope, cancelling
from ._errors import ModelError, ModelRetryableError, UsageError
from ._events import NEW_MESSAGE_DELTA, NEW_MESSAGE_START, Event, ModelRetry
from ._messages import (
    TRUNCATING_STOP_REASONS,
    AssistantMessage,
    ContentBlock,
    Message,
    StopReason,
    TextBlock,
    ToolCallBlock,
)
from .models._base import (
    Model,
    ModelRequest,
    ResponseComplete,
    ResponseStart,
    StreamEvent,
    TextDelta,
    ThinkingDelta,
    ToolCallDelta,
)

logger = logging.getLogger("statemachine_agent")


class Partial:
    """What a response has streamed so far: kept when it is aborted (text only)."""

    __slots__ = ("model", "texts")

    def __init__(self) -> None:
        self.texts: dict[int, list[str]] = {}
        self.model: str | None = None

    def message(self, reason: str) -> AssistantMessage:
        """The aborted assistant message: the streamed text blocks as streamed, never a partial
        tool call (blank ones are dropped when a request is built, see `is_blank`)."""
        blocks: list[ContentBlock] = [
            TextBlock(text="".join(parts)) for _, parts in sorted(self.texts.items())
        ]
        return AssistantMessage(
            content=blocks,
            stop_reason=StopReason.ABORTED,
            model=self.model,
            error=reason,
        )


@dataclass(frozen=True, slots=True)
class RequestFailed:
    """The request failed for good; ``message`` is the run's error text; ``prompt_too_long``: the
    provider said the request does not fit the context window."""

    message: str
    prompt_too_long: bool = False


@dataclass(frozen=True, slots=True)
class RequestAborted:
    """The run was aborted during the request; ``partial`` is what had streamed."""

    partial: AssistantMessage


async def request_response(
    model: Model,
    request: ModelRequest,
    *,
    signal: AbortSignal,
    used_ids: set[str],
    emit: Callable[[Event], None],
    listening: Callable[[], bool],
    retries: int,
    backoff_seconds: float,
    on_cancel: Callable[[AssistantMessage], None],
) -> AssistantMessage | RequestFailed | RequestAborted:
    """Send ``request`` and return the normalized response, retrying a `ModelRetryableError` up
    to ``retries`` times (the delay starts at ``backoff_seconds`` and doubles).

    The stream is read in the caller's task under `abort_scope`: an abort cancels it at once and
    the streamed text is returned as `RequestAborted`. A model's own failure is `RequestFailed`
    with a message saying how many requests were made (the provider's own retries included).

    Raises:
        asyncio.CancelledError: the task was cancelled; ``on_cancel`` got the partial response
            first.
    """
    attempt = 0
    requests_made = 0
    error: BaseException
    while True:
        attempt += 1
        partial = Partial()
        try:
            with abort_scope(signal) as scope:
                message = await consume(model.stream(request), partial, used_ids, emit, listening)
            if not scope.aborted:
                return message
            return RequestAborted(partial.message(signal.reason or "aborted"))
        except asyncio.CancelledError as exc:
            if cancelling():
                on_cancel(partial.message("the task running the agent was cancelled"))
                raise
            if signal.aborted:  # a model that stopped on the abort by raising
                return RequestAborted(partial.message(signal.reason or "aborted"))
            error = exc  # the model's own CancelledError (nothing cancelled the run): a failure
        except Exception as exc:
            error = exc
        requests_made += error.attempts if isinstance(error, ModelError) else 1
        if isinstance(error, ModelRetryableError) and attempt <= retries:
            delay = backoff_seconds * 2 ** (attempt - 1)
            emit(ModelRetry(attempt, delay, str(error)))
            with abort_scope(signal) as scope:
                await asyncio.sleep(delay)
            if scope.aborted:
                return RequestAborted(Partial().message(signal.reason or "aborted"))
            continue
        if isinstance(error, ModelError):
            status = f", HTTP {error.status_code}" if error.status_code else ""
            return RequestFailed(
                f"Model request failed ({error.kind}{status}) after {requests_made} attempt(s): "
                f"{error.message}",
                prompt_too_long=_too_long(error),
            )
        if isinstance(error, UsageError):  # explained, expected: its message says what to do
            logger.error("model %r refused the request: %s", model, error)
        else:  # unexpected: the traceback is what finds the bug
            logger.error("model %r raised", model, exc_info=error)
        return RequestFailed(f"Model request failed: {type(error).__name__}: {error}")


async def consume(
    stream: AsyncIterator[StreamEvent],
    partial: Partial,
    used_ids: set[str],
    emit: Callable[[Event], None],
    listening: Callable[[], bool],
) -> AssistantMessage:
    """Read ``stream`` to its `ResponseComplete` and return the normalized response.

    Raises:
        ModelRetryableError: the stream ended before its stop event (an incomplete response is
            never acted on as complete).
        ModelError: from `normalize`, or whatever the model raised.
    """
    try:
        async for event in stream:
            # The subscriber checks skip building event objects when nobody listens.
            if isinstance(event, TextDelta):
                partial.texts.setdefault(event.index, []).append(event.text)
                if listening():
                    emit(NEW_MESSAGE_DELTA(event.index, "text", event.text))
            elif isinstance(event, ResponseComplete):
                return normalize(event.message, used_ids)
            elif isinstance(event, ToolCallDelta):
                if listening():
                    emit(NEW_MESSAGE_DELTA(event.index, "tool_call", event.arguments, event.name))
            elif isinstance(event, ThinkingDelta):
                if listening():
                    emit(NEW_MESSAGE_DELTA(event.index, "thinking", event.thinking))
            elif isinstance(event, ResponseStart):
                partial.model = event.model
                if listening():
                    emit(NEW_MESSAGE_START(event.model, event.id))
    finally:
        aclose = getattr(stream, "aclose", None)
        if aclose is not None:
            await aclose()
    raise ModelRetryableError(
        "the response stream ended before its stop event (incomplete response)",
        kind="incomplete_stream",
    )


def _too_long(error: ModelError) -> bool:
    """The API's "prompt is too long" 400 (an ``invalid_request_error``)."""
    return error.status_code in (400, 413, None) and "prompt is too long" in error.message.lower()


def refusal_text(response: AssistantMessage) -> str:
    """The run's error text for a refusal, with the provider's category and explanation."""
    details = response.stop_details or {}
    parts = [str(details[k]) for k in ("category", "explanation") if details.get(k)]
    return "The model refused" + (f": {'; '.join(parts)}" if parts else ".")


def normalize(message: AssistantMessage, used_ids: set[str]) -> AssistantMessage:
    """Make a response safe to act on: mark a trailing tool call cut off by the token limit as
    truncated. Every other block is kept as the model sent it, whitespace-only text included (the
    stored response is what the model said; blank text is removed only when a request is built,
    see ``_protocol.is_blank``).

    Raises:
        ModelError: the response reuses a tool-call id (invariant 3); acting on it would corrupt
            the history.
    """
    content = message.content
    changed = False
    last = content[-1] if content else None
    if (
        message.stop_reason in TRUNCATING_STOP_REASONS
        and isinstance(last, ToolCallBlock)
        and not last.truncated
    ):
        content = [*content[:-1], last.model_copy(update={"truncated": True})]
        changed = True
    ids: list[str] = []
    for block in content:  # (a loop: see `_messages`)
        if isinstance(block, ToolCallBlock):
            ids.append(block.id)
    if ids and (not used_ids.isdisjoint(ids) or len(set(ids)) < len(ids)):
        clash = sorted({i for i in ids if i in used_ids or ids.count(i) > 1})
        raise ModelError(
            f"the response reuses tool-call id(s) {', '.join(clash)}", kind="invalid_response"
        )
    return message.model_copy(update={"content": content}) if changed else message


def call_ids(messages: Sequence[Message]) -> set[str]:
    """Every tool-call id in ``messages``."""
    return {c.id for m in messages if isinstance(m, AssistantMessage) for c in m.tool_calls}
