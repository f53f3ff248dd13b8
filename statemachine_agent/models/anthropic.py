"""`AnthropicModel`: Claude through the official ``anthropic`` SDK (the only module importing it).

Each request is one streamed Messages API call (``messages.create(stream=True)``); its raw events
are assembled by `StreamAccumulator` and passed on to the engine as they arrive. Errors become the
library's `ModelError` family:

- 401 / 403: `ModelAuthError` (check the key); never retried;
- 400 and other client errors: `ModelError` quoting the API's message;
- 408 / 409 / 429 / 5xx / 529, and connection errors or timeouts before the response starts:
  retried by the SDK (``max_retries``, honouring ``retry-after``); when they are spent,
  `ModelError` with ``attempts`` set to the requests made (the engine does not retry again);
- an ``error`` event inside a 200 stream (``overloaded_error``, ...), a connection dropped or
  timing out mid-stream, or a stream that ends before ``message_stop``: `ModelRetryableError`,
  which the engine retries with backoff (the partial response is discarded).
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Mapping, Sequence
from types import TracebackType
from typing import Any, Self, cast

import anthropic
import httpx2

from .._errors import ModelAuthError, ModelError, ModelRetryableError, UsageError
from ._anthropic_format import StreamAccumulator, error_from_body
from ._anthropic_wire import RequestEncoder
from ._base import ModelRequest, ResponseComplete, StreamEvent

__all__ = ["AnthropicModel"]

DEFAULT_MAX_TOKENS = 8192
NO_KEY = (
    "No Anthropic API key found: set the ANTHROPIC_API_KEY environment variable, or pass "
    "AnthropicModel(..., api_key=...) or a ready client=anthropic.AsyncAnthropic(...)."
)
# Statuses the SDK itself retries (see anthropic's _base_client._should_retry).
_SDK_RETRIED = frozenset({408, 409, 429})


class AnthropicModel:
    """Claude via the Anthropic Messages API, streamed.

    Args:
        model: the model name, e.g. ``"claude-sonnet-4-5"``.
        client: a ready ``anthropic.AsyncAnthropic``; when given, ``api_key``, ``base_url``,
            ``max_retries`` and ``timeout_seconds`` are the client's business.
        api_key: the API key; default the ``ANTHROPIC_API_KEY`` environment variable (or any
            other credential the SDK finds: ``ANTHROPIC_AUTH_TOKEN``, a profile). It is handed
            to the SDK only: never stored on this object, logged or written to a session log.
        base_url: the API's address (default the SDK's: ``ANTHROPIC_BASE_URL`` or the public API).
        max_tokens: the output token limit of each response.
        max_retries: how many times the SDK retries 408/409/429/5xx/529 and connection errors
            (waiting as ``retry-after`` says) before the request fails.
        timeout_seconds: the SDK's request timeout (default the SDK's); a request that receives
            nothing for this long fails with `ModelRetryableError` kind ``"timeout"``.
        thinking: extended thinking: a token budget (``{"type": "enabled", "budget_tokens": n}``)
            or the API's ``thinking`` object as a dict.
        cache: prompt caching: breakpoints on the last tool, the system prompt and the last block
            of the newest message (three of the API's four).
        stop_sequences: custom stop sequences (a match ends the response with ``stop_sequence``).
        temperature: sampling temperature.
        server_tools: server tool definitions sent after the agent's tools, verbatim (e.g.
            ``{"type": "web_search_20250305", "name": "web_search"}``).
        extra_body: more request fields, sent verbatim. ``Agent(model_settings=...)`` values are
            merged over all of these for each request.

    Close it when done: ``await model.aclose()``, or ``async with AnthropicModel(...) as model:``.
    This closes the HTTP client the model created itself; a ``client`` passed in is left open
    (its owner closes it).

    Raises:
        UsageError: no credential was found (the message names ``ANTHROPIC_API_KEY``), or
            ``client`` was combined with ``api_key`` / ``base_url``.
    """

    def __init__(
        self,
        model: str,
        *,
        client: anthropic.AsyncAnthropic | None = None,
        api_key: str | None = None,
        base_url: str | None = None,
        max_tokens: int = DEFAULT_MAX_TOKENS,
        max_retries: int = 2,
        timeout_seconds: float | None = None,
        thinking: int | Mapping[str, Any] | None = None,
        cache: bool = True,
        stop_sequences: Sequence[str] | None = None,
        temperature: float | None = None,
        server_tools: Sequence[Mapping[str, Any]] = (),
        extra_body: Mapping[str, Any] | None = None,
    ) -> None:
        if client is not None and (api_key is not None or base_url is not None):
            raise UsageError("pass either client= or api_key= / base_url=, not both")
        self._owns_client = client is None
        if client is None:
            client = _make_client(api_key, base_url, max_retries, timeout_seconds)
        self._client = client
        self._model = model
        self.max_tokens = max_tokens
        self._encoder = RequestEncoder(cache=cache)
        self._server_tools = [dict(t) for t in server_tools]
        options: dict[str, Any] = {}
        if thinking is not None:
            options["thinking"] = (
                {"type": "enabled", "budget_tokens": thinking}
                if isinstance(thinking, int)
                else dict(thinking)
            )
        if stop_sequences:
            options["stop_sequences"] = list(stop_sequences)
        if temperature is not None:
            options["temperature"] = temperature
        options.update(extra_body or {})
        self._options = options

    @property
    def name(self) -> str:
        """The model name."""
        return self._model

    @property
    def client(self) -> anthropic.AsyncAnthropic:
        """The SDK client in use."""
        return self._client

    def __repr__(self) -> str:
        return f"AnthropicModel({self._model!r})"  # never the key

    async def aclose(self) -> None:
        """Close the HTTP client if this model created it (a ``client`` passed in is left open).

        Safe to call more than once. Without it, the client's open connections are torn down
        when the event loop is already closed ("Event loop is closed" noise at exit).
        """
        if self._owns_client:
            await self._client.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.aclose()

    def body(self, request: ModelRequest) -> dict[str, Any]:
        """The JSON body sent for ``request`` (``stream`` excluded)."""
        body: dict[str, Any] = {"model": self._model, "max_tokens": self.max_tokens}
        system = self._encoder.system(request.system)
        if system is not None:
            body["system"] = system
        if request.tools or self._server_tools:
            body["tools"] = self._encoder.tools(request.tools, self._server_tools)
        body.update(self._options)
        body.update(request.settings)
        body["messages"] = self._encoder.messages(request.messages)
        return body

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        """Stream the response to ``request``; the last item is `ResponseComplete`.

        Raises:
            ModelAuthError: the key is missing, wrong or lacks permission (401 / 403).
            ModelRetryableError: an error event in the stream, a connection dropped or timing
                out mid-stream, or a stream that ended before ``message_stop``.
            ModelError: any other failure (400, or the SDK's retries spent on a status, a
                connection error or a timeout: ``attempts`` says how many requests were made).
        """
        body = self.body(request)
        model, max_tokens, messages = (
            body.pop("model"),
            body.pop("max_tokens"),
            body.pop("messages"),
        )
        try:
            events = await self._client.messages.create(
                model=model,
                max_tokens=max_tokens,
                messages=cast(Any, messages),
                stream=True,
                extra_body=body,
            )
        except anthropic.APIStatusError as exc:
            raise _status_error(exc) from None
        except anthropic.APIConnectionError as exc:
            # The SDK has retried this (max_retries) already: the engine must not multiply it.
            raise _connection_error(exc, self._client.timeout, retried=True) from None
        accumulator = StreamAccumulator()
        async with events:
            iterator = events.__aiter__()
            while True:
                try:
                    event = await iterator.__anext__()
                except StopAsyncIteration:
                    break
                except anthropic.APIStatusError as exc:
                    raise _status_error(exc) from None
                except (anthropic.APIConnectionError, httpx2.TransportError) as exc:
                    raise _connection_error(exc, self._client.timeout) from None
                for item in accumulator.feed(event.to_dict(mode="json")):
                    yield item
        yield ResponseComplete(accumulator.message())


def _make_client(
    api_key: str | None, base_url: str | None, max_retries: int, timeout_seconds: float | None
) -> anthropic.AsyncAnthropic:
    kwargs: dict[str, Any] = {"base_url": base_url, "max_retries": max_retries}
    if timeout_seconds is not None:
        kwargs["timeout"] = timeout_seconds
    key = api_key if api_key is not None else os.environ.get("ANTHROPIC_API_KEY")
    if key is not None and not key.strip():
        raise UsageError(NO_KEY)
    try:
        client = anthropic.AsyncAnthropic(api_key=key, **kwargs)
    except anthropic.CredentialsError as exc:  # a profile the SDK looked for is broken
        raise UsageError(f"{NO_KEY} ({exc})") from None
    if not (client.api_key or client.auth_token or client.credentials):
        raise UsageError(NO_KEY)
    return client


def _attempts(exc: anthropic.APIStatusError) -> int:
    # The SDK numbers its attempts in this header on every request it sends.
    try:
        return int(exc.response.request.headers.get("x-stainless-retry-count", "0")) + 1
    except (ValueError, RuntimeError):
        return 1


def _status_error(exc: anthropic.APIStatusError) -> ModelError:
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


def _connection_error(exc: Exception, limit: object = None, *, retried: bool = False) -> ModelError:
    """A dropped connection or a timeout. Before the response started (``retried``), the SDK
    has already retried it: a plain `ModelError` counting the SDK's attempts. Mid-stream, the SDK
    cannot retry: a `ModelRetryableError` the engine retries."""
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
        message = f"connection error: {str(exc) or type(exc).__name__}"
    if not retried:
        return ModelRetryableError(message, kind=kind)
    request = getattr(exc, "request", None)
    try:
        attempts = int(request.headers.get("x-stainless-retry-count", "0")) + 1 if request else 1
    except (ValueError, RuntimeError, AttributeError):
        attempts = 1
    return ModelError(message, kind=kind, attempts=attempts)
