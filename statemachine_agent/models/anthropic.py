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
import re
import warnings
from collections.abc import AsyncIterator, Mapping, Sequence
from types import TracebackType
from typing import Any, Self, cast

import anthropic
import httpx2

from .._errors import ModelAuthError, ModelError, ModelRetryableError, UsageError
from .._messages import AssistantMessage, UserMessage
from ._anthropic_request import RequestEncoder, same_model, valid_json
from ._anthropic_response import StreamAccumulator, error_from_body
from ._base import ModelRequest, ResponseComplete, StreamEvent, ToolDefinition

__all__ = ["AnthropicModel"]

DEFAULT_MAX_TOKENS = 8192
NO_KEY = (
    "No Anthropic API key found: set the ANTHROPIC_API_KEY environment variable, or pass "
    "AnthropicModel(..., api_key=...) or a ready client=anthropic.AsyncAnthropic(...)."
)
# Statuses the SDK itself retries (see anthropic's _base_client._should_retry).
_SDK_RETRIED = frozenset({408, 409, 429})
# The Messages API's rule for a tool name (custom and server tools alike).
TOOL_NAME = re.compile(r"[a-zA-Z0-9_-]{1,64}")
_DEPRECATION = r"The model '.*' is deprecated and will reach end-of-life"
_warned_deprecated: set[str] = set()


class AnthropicModel:
    """Claude via the Anthropic Messages API, streamed.

    Args:
        model: the model name, e.g. ``"claude-sonnet-4-6"``. A model the SDK lists as
            deprecated gets one ``FutureWarning`` per process (with its end-of-life date), not
            one per request.
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
            ``{"type": "web_search_20250305", "name": "web_search"}``). Their names, and those
            of the agent's tools (`check_tools`), must follow the API's rule (1-64 letters,
            digits, ``_`` or ``-``) and be unique across both.
        extra_body: more request fields, sent verbatim. ``Agent(model_settings=...)`` values are
            merged over all of these for each request.
        context_window: the model's context window in tokens (what a request may hold, input
            and output). Default: `default_context_window` of the model's family (200,000 for
            every current Claude model). Automatic compaction's fractional threshold is taken of it.

    Close it when done: ``await model.aclose()``, or ``async with AnthropicModel(...) as model:``.
    This closes the HTTP client the model created itself; a ``client`` passed in is left open
    (its owner closes it).

    Thinking in a resumed history: thinking and redacted-thinking blocks signed by another model
    (an `AssistantMessage` whose ``model`` is not this one) are not sent, as the API checks each
    signature against the model it is sent to; their text and tool blocks are. When the request
    continues a tool-use turn whose last response came from another model (a session resumed
    mid-turn on a new model), that turn cannot be given the thinking the API requires of it, so
    the request is sent with ``thinking`` disabled; the next prompt starts a turn with the
    configured thinking again.

    Text sent is always valid UTF-8: a lone surrogate in any string of the request (prompts,
    tool results, tool arguments, the system prompt, tool definitions, settings) is replaced by
    U+FFFD; the history and the session log keep the original text.

    Raises:
        UsageError: no credential was found (the message names ``ANTHROPIC_API_KEY``),
            ``client`` was combined with ``api_key`` / ``base_url``, or a server tool has no
            valid ``name`` or shares one with another server tool.
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
        context_window: int | None = None,
    ) -> None:
        if context_window is not None and context_window <= 0:
            raise UsageError(
                f"context_window must be a positive number of tokens, got {context_window}"
            )
        self.context_window = context_window or default_context_window(model)
        if client is not None and (api_key is not None or base_url is not None):
            raise UsageError("pass either client= or api_key= / base_url=, not both")
        self._owns_client = client is None
        if client is None:
            client = _make_client(api_key, base_url, max_retries, timeout_seconds)
        self._client = client
        self._model = model
        self.max_tokens = max_tokens
        self._encoder = RequestEncoder(cache=cache, model=model)
        self._server_tools = [dict(t) for t in server_tools]
        self._server_tool_names = _server_tool_names(self._server_tools)
        _warn_if_deprecated(model)
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
        self._options = valid_json(options)  # cleaned once: they do not change per request

    provider_name = "anthropic"
    """The provider's name in traces (``gen_ai.provider.name``)."""

    @property
    def server_tools(self) -> tuple[dict[str, Any], ...]:
        """The server tool definitions sent with every request (``server_tools=``)."""
        return tuple(self._server_tools)

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

    def check_tools(self, tools: Sequence[ToolDefinition]) -> None:
        """Check the agent's tools against the API's rules before any request is sent (`Agent`
        calls it when built; every request checks again).

        Raises:
            UsageError: a name breaks the API's rule (1-64 letters, digits, ``_`` or ``-``), is
                used twice, or is also the name of one of ``server_tools``; the message names it.
        """
        seen: set[str] = set()
        for definition in tools:
            name = definition.name
            if not isinstance(name, str) or not TOOL_NAME.fullmatch(name):
                raise UsageError(
                    f"tool name {name!r} is not valid for the Anthropic API: use 1-64 letters, "
                    "digits, '_' or '-'"
                )
            if name in seen:
                raise UsageError(f"two tools are named {name!r}: tool names must be unique")
            if name in self._server_tool_names:
                raise UsageError(
                    f"the tool {name!r} has the name of a server tool in "
                    f"AnthropicModel(server_tools=...): the API refuses two tools named {name!r}; "
                    "rename the tool or drop the server tool"
                )
            seen.add(name)

    def body(self, request: ModelRequest) -> dict[str, Any]:
        """The JSON body sent for ``request`` (``stream`` excluded).

        Raises:
            UsageError: a tool name breaks the API's rules (see `check_tools`).
        """
        self.check_tools(request.tools)
        body: dict[str, Any] = {"model": self._model, "max_tokens": self.max_tokens}
        system = self._encoder.system(request.system)
        if system is not None:
            body["system"] = system
        if request.tools or self._server_tools:
            body["tools"] = self._encoder.tools(request.tools, self._server_tools)
        body.update(self._options)
        body.update(valid_json(request.settings))
        if not body.get("tools"):
            body.pop("tool_choice", None)  # the API refuses tool_choice without tools
        body["messages"] = self._encoder.messages(request.messages)
        thinking = body.get("thinking")
        if (
            isinstance(thinking, dict)
            and thinking.get("type") != "disabled"
            and self._turn_answered_by_another_model(request)
        ):
            body["thinking"] = {"type": "disabled"}
        return body

    def _turn_answered_by_another_model(self, request: ModelRequest) -> bool:
        """The request continues a turn (tool results or a ``pause_turn``) whose last response
        came from another model: its thinking cannot be sent, and the API requires it."""
        for message in reversed(request.messages):
            if isinstance(message, UserMessage):
                return False  # a new turn: the model answers it with its own thinking
            if isinstance(message, AssistantMessage):
                return not same_model(message.model, self._model)
        return False

    async def count_tokens(self, request: ModelRequest) -> int:
        """The input tokens ``request`` would use, counted by the API's token-counting endpoint
        (``messages.count_tokens``: messages, system prompt, tools and thinking; free, but rate
        limited like requests).

        Raises:
            ModelAuthError: the key is missing, wrong or lacks permission (401 / 403).
            ModelError: the count failed (the status's message; a connection error).
        """
        body = self.body(request)
        fields = {k: body[k] for k in ("system", "tools", "thinking") if k in body}
        try:
            counted = await self._client.messages.count_tokens(
                model=body["model"], messages=cast(Any, body["messages"]), extra_body=fields
            )
        except (anthropic.APIStatusError, anthropic.APIConnectionError) as exc:
            raise self._request_error(exc) from None
        return int(counted.input_tokens)

    def _request_error(
        self, exc: anthropic.APIStatusError | anthropic.APIConnectionError
    ) -> ModelError:
        """The `ModelError` of a request the SDK gave up on. A connection error has been retried
        by the SDK (max_retries) already: the engine must not multiply it."""
        if isinstance(exc, anthropic.APIStatusError):
            return _status_error(exc)
        return _connection_error(
            exc, self._client.timeout, retried=True, url=str(self._client.base_url)
        )

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
        except (anthropic.APIStatusError, anthropic.APIConnectionError) as exc:
            raise self._request_error(exc) from None
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
                    raise _connection_error(
                        exc, self._client.timeout, url=str(self._client.base_url)
                    ) from None
                for item in accumulator.feed(event.to_dict(mode="json")):
                    yield item
        yield ResponseComplete(accumulator.message())


def _unreachable(exc: Exception, url: str | None, *, retried: bool) -> str:
    """What a connection error says: which address failed, why, and where it came from."""
    cause = exc.__cause__ or exc.__context__
    why = str(cause) if cause is not None and str(cause) else ""
    if not why or why == str(exc):
        why = str(exc) if str(exc) and str(exc) != "Connection error." else type(exc).__name__
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


def _server_tool_names(tools: Sequence[dict[str, Any]]) -> frozenset[str]:
    names: set[str] = set()
    for number, definition in enumerate(tools, 1):
        name = definition.get("name")
        if not isinstance(name, str) or not TOOL_NAME.fullmatch(name):
            raise UsageError(
                f"server_tools[{number - 1}] needs a 'name' of 1-64 letters, digits, '_' or '-' "
                f"(e.g. {{'type': 'web_search_20250305', 'name': 'web_search'}}), got {name!r}"
            )
        if name in names:
            raise UsageError(f"two server tools are named {name!r}: tool names must be unique")
        names.add(name)
    return frozenset(names)


def _warn_if_deprecated(model: str) -> None:
    """One warning per process for a model the SDK lists as deprecated. The SDK's own warning,
    issued on every request, is silenced where this package makes the request (the SDK attributes
    it to a frame a few levels up: the engine's, which is in this package too)."""
    try:
        from anthropic._data import DEPRECATED_MODELS  # the SDK's list; private, may move
    except ImportError:  # pragma: no cover - an SDK without the list: its own warning stays
        return
    warnings.filterwarnings("ignore", _DEPRECATION, DeprecationWarning, r"statemachine_agent(\.|$)")
    end = DEPRECATED_MODELS.get(model)
    if end is None or model in _warned_deprecated:
        return
    _warned_deprecated.add(model)
    warnings.warn(
        f"The model {model!r} is deprecated and will reach end-of-life on {end}: use a current "
        "model such as 'claude-sonnet-4-6' (see "
        "https://docs.anthropic.com/en/docs/resources/model-deprecations).",
        FutureWarning,
        stacklevel=3,
    )


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


_CONTEXT_WINDOWS: tuple[tuple[str, int], ...] = (("claude-", 200_000),)
"""Context windows by model-name prefix (first match wins): every current Claude model has
200,000 tokens (a larger beta window is opt-in: pass ``context_window=``)."""

DEFAULT_CONTEXT_WINDOW = 200_000
"""The context window assumed for a model name no prefix matches."""


def default_context_window(model: str) -> int:
    """The context window (tokens) of the ``model`` family (see ``_CONTEXT_WINDOWS``)."""
    for prefix, window in _CONTEXT_WINDOWS:
        if model.startswith(prefix):
            return window
    return DEFAULT_CONTEXT_WINDOW


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


def _connection_error(
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
