"""The Anthropic Messages API JSON shapes, without the SDK: parse a response dict into an
`AssistantMessage`, assemble a streamed response from its raw events (`StreamAccumulator`), and map
an error body to a `ModelError`.

Shared by `ScriptedModel` (whose steps are Anthropic-shaped responses, so a recorded real response
can serve as a step) and the `AnthropicModel` adapter.
"""

from __future__ import annotations

from typing import Any

from .._errors import ModelAuthError, ModelError, ModelRetryableError
from .._messages import (
    AssistantMessage,
    ContentBlock,
    ProviderBlock,
    TextBlock,
    ThinkingBlock,
    ToolCallBlock,
    Usage,
)
from .._strict_json import loads_strict
from ._base import ResponseStart, StreamEvent, TextDelta, ThinkingDelta, ToolCallDelta

RETRYABLE_ERROR_TYPES = frozenset(
    {"overloaded_error", "rate_limit_error", "api_error", "timeout_error"}
)
AUTH_ERROR_TYPES = frozenset({"authentication_error", "permission_error"})


def parse_tool_arguments(raw: str) -> tuple[Any, str | None]:
    """Parse streamed argument text: ``(object, None)``; ``(None, raw)`` when it is not JSON
    (``NaN``, ``Infinity`` and numbers beyond the float range included: see `loads_strict`);
    ``(value, raw)`` when it is JSON but not an object.

    Empty text means no arguments (``{}``), as the Anthropic API streams a call without input.
    """
    if not raw.strip():
        return {}, None
    try:
        value = loads_strict(raw)
    except ValueError:
        return None, raw
    # Keep the text of a value that is not an object: the error result quotes it as received.
    return value, (None if isinstance(value, dict) else raw)


def parse_block(data: dict[str, Any]) -> ContentBlock:
    """One Anthropic content block as ours; unknown types are kept verbatim as `ProviderBlock`."""
    kind = data.get("type")
    if kind == "text":
        citations = data.get("citations")
        return TextBlock(
            text=data.get("text", ""), citations=list(citations) if citations else None
        )
    if kind == "thinking":
        return ThinkingBlock(thinking=data.get("thinking", ""), signature=data.get("signature"))
    if kind == "tool_use":
        raw = data.get("input")
        if isinstance(raw, str):
            # Argument text (e.g. assembled from input_json_delta fragments): parse it here.
            value, unparsed = parse_tool_arguments(raw)
            return ToolCallBlock(
                id=data["id"], name=data["name"], input=value, raw_arguments=unparsed
            )
        return ToolCallBlock(id=data["id"], name=data["name"], input=raw)
    return ProviderBlock(provider="anthropic", data=data)


def parse_usage(data: dict[str, Any] | None) -> Usage:
    """Anthropic ``usage`` as `Usage` (missing or null counts are 0)."""
    data = data or {}
    return Usage(
        input_tokens=data.get("input_tokens") or 0,
        output_tokens=data.get("output_tokens") or 0,
        cache_write_tokens=data.get("cache_creation_input_tokens") or 0,
        cache_read_tokens=data.get("cache_read_input_tokens") or 0,
    )


def parse_response(data: dict[str, Any]) -> AssistantMessage:
    """An Anthropic Messages API response (``{"content": [...], "stop_reason": ...}``) as an
    `AssistantMessage`. Stop reasons unknown to this library are kept as strings."""
    return AssistantMessage(
        content=[parse_block(block) for block in data.get("content") or []],
        stop_reason=data.get("stop_reason"),
        stop_sequence=data.get("stop_sequence"),
        stop_details=data.get("stop_details"),
        usage=parse_usage(data.get("usage")),
        model=data.get("model"),
    )


def error_from_body(
    body: dict[str, Any], *, status_code: int | None = None, attempts: int = 1
) -> ModelError:
    """The `ModelError` for an Anthropic error body ``{"error": {"type": ..., "message": ...}}``."""
    nested = body.get("error")
    error: dict[str, Any] = nested if isinstance(nested, dict) else body
    kind = str(error.get("type") or "api_error")
    message = str(error.get("message") or kind)
    if kind in AUTH_ERROR_TYPES or status_code in (401, 403):
        return ModelAuthError(
            f"{message} ({kind}): check the API key (ANTHROPIC_API_KEY) and its permissions.",
            kind=kind,
            status_code=status_code,
            attempts=attempts,
        )
    if kind in RETRYABLE_ERROR_TYPES or (status_code is not None and status_code >= 500):
        return ModelRetryableError(message, kind=kind, status_code=status_code, attempts=attempts)
    return ModelError(message, kind=kind, status_code=status_code, attempts=attempts)


# Block types whose ``input`` arrives as ``input_json_delta`` fragments.
_JSON_INPUT_BLOCKS = frozenset({"tool_use", "server_tool_use", "mcp_tool_use"})


class StreamAccumulator:
    """Assembles one streamed Messages API response from its raw events (JSON dicts).

    `feed` takes each event in order and returns the `StreamEvent` items to pass on at once;
    `message` builds the final `AssistantMessage` after ``message_stop``. Blocks are kept per
    content index, so a block is never added twice. Unknown event, block and delta types are
    ignored or kept verbatim, never a crash.

    A ``tool_use`` block that never received its ``content_block_stop`` (the response was cut
    off mid-arguments) becomes a `ToolCallBlock` with ``truncated=True``: whatever part of its
    arguments did arrive is never treated as complete.
    """

    def __init__(self) -> None:
        self.model: str | None = None
        self.stopped = False
        self._message: dict[str, Any] = {}
        self._usage: dict[str, Any] = {}
        self._blocks: dict[int, dict[str, Any]] = {}
        self._parts: dict[int, list[str]] = {}  # text, thinking or argument JSON fragments
        self._closed: set[int] = set()

    def feed(self, event: dict[str, Any]) -> list[StreamEvent]:
        """Take one raw event; return the stream events it produces (maybe none).

        Raises:
            ModelError: an ``error`` event (`ModelRetryableError` for overload and the like).
        """
        kind = event.get("type")
        if kind == "content_block_delta":
            return self._delta(event.get("index", 0), event.get("delta") or {})
        if kind == "content_block_start":
            return self._start(event.get("index", 0), event.get("content_block") or {})
        if kind == "content_block_stop":
            self._closed.add(event.get("index", 0))
        elif kind == "message_start":
            self._message = dict(event.get("message") or {})
            self._usage.update(_present(self._message.get("usage")))
            self.model = self._message.get("model")
            response_id = self._message.get("id")
            return [
                ResponseStart(self.model, response_id if isinstance(response_id, str) else None)
            ]
        elif kind == "message_delta":
            delta = event.get("delta") or {}
            for key in ("stop_reason", "stop_sequence", "stop_details"):
                if key in delta:
                    self._message[key] = delta[key]
            # message_delta usage counts are cumulative: they replace the message_start ones.
            self._usage.update(_present(event.get("usage")))
        elif kind == "message_stop":
            self.stopped = True
        elif kind == "error":
            raise error_from_body(event)
        return []

    def _start(self, index: int, block: dict[str, Any]) -> list[StreamEvent]:
        block = dict(block)
        self._blocks[index] = block
        kind = block.get("type")
        if kind == "text":
            self._parts[index] = [block.get("text") or ""]
            return [TextDelta(index, block["text"])] if block.get("text") else []
        if kind == "thinking":
            self._parts[index] = [block.get("thinking") or ""]
            return [ThinkingDelta(index, block["thinking"])] if block.get("thinking") else []
        if kind in _JSON_INPUT_BLOCKS:
            self._parts[index] = []
        return []

    def _delta(self, index: int, delta: dict[str, Any]) -> list[StreamEvent]:
        block = self._blocks.get(index)
        if block is None:
            return []  # a delta for a block that never started: nothing to add it to
        kind = delta.get("type")
        parts = self._parts.setdefault(index, [])
        if kind == "text_delta":
            text = delta.get("text") or ""
            parts.append(text)
            return [TextDelta(index, text)] if text else []
        if kind == "input_json_delta":
            fragment = delta.get("partial_json") or ""
            parts.append(fragment)
            if fragment and block.get("type") == "tool_use":
                return [ToolCallDelta(index, block.get("id", ""), block.get("name", ""), fragment)]
            return []
        if kind == "thinking_delta":
            thinking = delta.get("thinking") or ""
            parts.append(thinking)
            return [ThinkingDelta(index, thinking)] if thinking else []
        if kind == "signature_delta":
            block["signature"] = delta.get("signature")
        elif kind == "citations_delta" and delta.get("citation") is not None:
            block["citations"] = [*(block.get("citations") or []), delta["citation"]]
        return []

    def message(self) -> AssistantMessage:
        """The assembled response.

        Raises:
            ModelRetryableError: the stream ended before ``message_stop`` (incomplete response).
        """
        if not self.stopped:
            raise ModelRetryableError(
                "the response stream ended before message_stop (incomplete response)",
                kind="incomplete_stream",
            )
        content = [self._block(index) for index in sorted(self._blocks)]
        return AssistantMessage(
            content=content,
            stop_reason=self._message.get("stop_reason"),
            stop_sequence=self._message.get("stop_sequence"),
            stop_details=self._message.get("stop_details"),
            usage=parse_usage(self._usage),
            model=self.model,
        )

    def _block(self, index: int) -> ContentBlock:
        block = self._blocks[index]
        kind = block.get("type")
        parts = self._parts.get(index)
        if kind == "text":
            return parse_block({**block, "text": "".join(parts or ())})
        if kind == "thinking":
            return parse_block({**block, "thinking": "".join(parts or ())})
        if kind == "tool_use":
            # Arguments come from the fragments only; a start-event ``input`` is a placeholder.
            raw = "".join(parts) if parts else None
            call = parse_block({**block, "input": raw} if raw is not None else block)
            if index not in self._closed and isinstance(call, ToolCallBlock):
                # Cut off before its stop event: never complete, even if the text parses.
                raw_text = raw or ""
                return call.model_copy(
                    update={"input": None, "raw_arguments": raw_text, "truncated": True}
                )
            return call
        if kind in _JSON_INPUT_BLOCKS and parts:
            value, _ = parse_tool_arguments("".join(parts))
            return ProviderBlock(data={**block, "input": value if value is not None else {}})
        return parse_block(block)


def _present(usage: Any) -> dict[str, Any]:
    # Keep only the counts the event reports: a null count must not erase an earlier one.
    if not isinstance(usage, dict):
        return {}
    return {key: value for key, value in usage.items() if value is not None}
