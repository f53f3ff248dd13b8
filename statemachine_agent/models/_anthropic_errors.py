"""The library's `ModelError` family for the ``anthropic`` SDK's errors: a status the API sent
(`status_error`) and a connection dropped or timing out (`connection_error`); see the
`statemachine_agent.models.anthropic` module docstring for which is retried where."""

from __future__ import annotations

import functools
import os
from typing import Any

import anthropic
import httpx2

from .._errors import ModelAuthError, ModelError, ModelRetryableError
from ._anthropic_response import error_from_body

# Statuses the SDK itself retries (see anthropic's _base_client._should_retry).
_SDK_RETRIED = frozenset({408, 409, 429})


def status_error(exc: anthropic.APIStatusError) -> ModelError:
    body: dict[str, Any] = exc.body if isinstance(exc.body, dict) else {}
    nested = body.get("error")
    error: dict[str, Any] = nested if isinstance(nested, dict) else {}
    kind = str(error.get("type") or exc.type or "api_error")
    message = str(error.get("message") or exc.api_message or exc.message)
    status = exc.status_code
    if status < 400:
        # An `error` event inside a 200 stream: overload and the like are worth retrying.
        return error_from_body({"error": {"type": kind, "message": message}})
    attempts = _attempts(exc)
    if status in (401, 403):
        return ModelAuthError(
            f"{message} ({kind}): check the API key (ANTHROPIC_API_KEY) and its permissions.",
            kind=kind,
            status_code=status,
            attempts=attempts,
        )
    if status in _SDK_RETRIED or status >= 500:
        tries = "attempt" if attempts == 1 else "attempts"
        why = "the SDK's retries spent"
        if exc.response.headers.get("x-should-retry") == "false":
            why = "the API said not to retry"
        return ModelError(
            f"{message} (gave up after {attempts} {tries}, {why})",
            kind=kind,
            status_code=status,
            attempts=attempts,
        )
    return ModelError(message, kind=kind, status_code=status, attempts=attempts)


def connection_error(
    exc: Exception, limit: object = None, *, retried: bool = False, url: str | None = None
) -> ModelError:
    """A dropped connection or a timeout. Before the response started (``retried``), the SDK
    has already retried it: a plain `ModelError` counting the SDK's attempts. Mid-stream, the SDK
    cannot retry: a `ModelRetryableError` the engine retries. The message names ``url`` (and
    ``ANTHROPIC_BASE_URL`` when that is where it came from) and the underlying cause."""
    if isinstance(exc, anthropic.APITimeoutError | httpx2.TimeoutException):
        # The SDK's own text also covers cancellations; say plainly that the time ran out.
        seconds = getattr(limit, "read", limit)
        within = f" within {seconds:g} s" if isinstance(seconds, int | float) else ""
        kind = "timeout"
        message = (
            f"the request timed out: nothing received from the API{within} "
            "(raise timeout_seconds for slow responses)"
        )
    else:
        kind = "connection_error"
        message = _unreachable(exc, url, retried=retried)
    if not retried:
        return ModelRetryableError(message, kind=kind)
    request = getattr(exc, "request", None)
    try:
        attempts = int(request.headers.get("x-stainless-retry-count", "0")) + 1 if request else 1
    except (ValueError, RuntimeError, AttributeError):
        attempts = 1
    return ModelError(message, kind=kind, attempts=attempts)


def _attempts(exc: anthropic.APIStatusError) -> int:
    # The SDK numbers its attempts in this header on every request it sends.
    try:
        return int(exc.response.request.headers.get("x-stainless-retry-count", "0")) + 1
    except (ValueError, RuntimeError):
        return 1


def _unreachable(exc: Exception, url: str | None, *, retried: bool) -> str:
    """What a connection error says: which address failed, why, and where it came from."""
    cause = exc.__cause__ or exc.__context__
    why = str(cause) if cause is not None and str(cause) else ""
    if not why or why == str(exc):
        # No text of its own: the SDK's generic sentence says nothing, the underlying error's
        # type (ConnectError, ReadError, ...) says what failed.
        named = type(cause if cause is not None else exc).__name__
        why = str(exc) if str(exc) and str(exc) != _sdk_connection_text() else named
    where = (url or "the Anthropic API").rstrip("/")
    text = (
        f"could not reach {where} ({why})"
        if retried
        else f"the connection to {where} dropped mid-response ({why})"
    )
    env = os.environ.get("ANTHROPIC_BASE_URL", "").strip()
    if env and url is not None and env.rstrip("/") == url.rstrip("/"):
        text += "; the address comes from the ANTHROPIC_BASE_URL environment variable: check it"
    return text


@functools.cache
def _sdk_connection_text() -> str:
    """The SDK's generic text of a connection error ("Connection error." today), which says
    nothing the message does not: taken from the SDK, so a new wording stays recognised."""
    return str(anthropic.APIConnectionError(request=httpx2.Request("POST", "http://localhost")))
