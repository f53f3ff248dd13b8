"""The Anthropic Messages API JSON shapes, without the SDK: parse a response dict into an
`AssistantMessage`, and map an error body to a `ModelError`.

Shared by `ScriptedModel` (whose steps are Anthropic-shaped responses, so a recorded real response
can serve as a step) and the `AnthropicModel` adapter.
"""

from __future__ import annotations

import json
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

RETRYABLE_ERROR_TYPES = frozenset(
    {"overloaded_error", "rate_limit_error", "api_error", "timeout_error"}
)
AUTH_ERROR_TYPES = frozenset({"authentication_error", "permission_error"})


def parse_tool_arguments(raw: str) -> tuple[Any, str | None]:
    """Parse streamed argument text: ``(object, None)``; ``(None, raw)`` when it is not JSON;
    ``(value, raw)`` when it is JSON but not an object.

    Empty text means no arguments (``{}``), as the Anthropic API streams a call without input.
    """
    if not raw.strip():
        return {}, None
    try:
        value = json.loads(raw)
    except ValueError:
        return None, raw
    # Keep the text of a value that is not an object: the error result quotes it as received.
    return value, (None if isinstance(value, dict) else raw)


def parse_block(data: dict[str, Any]) -> ContentBlock:
    """One Anthropic content block as ours; unknown types are kept verbatim as `ProviderBlock`."""
    kind = data.get("type")
    if kind == "text":
        return TextBlock(text=data.get("text", ""))
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
