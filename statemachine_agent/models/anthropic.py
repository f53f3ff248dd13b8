"""`AnthropicModel`: Claude through the official ``anthropic`` SDK (its clients, one per event
loop, in ``_anthropic_clients``; its errors translated in ``_anthropic_errors``).

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

import inspect
import os
import re
import warnings
from collections.abc import AsyncIterator, Mapping, Sequence
from types import TracebackType
from typing import Any, Self, cast

import anthropic
import httpx2

from .._errors import ModelError, UsageError
from .._messages import AssistantMessage, UserMessage
from ._anthropic_clients import LoopClients, make_client
from ._anthropic_errors import connection_error, status_error
from ._anthropic_request import RequestEncoder, same_model, valid_json
from ._anthropic_response import StreamAccumulator
from ._base import ModelRequest, ResponseComplete, StreamEvent, ToolDefinition

__all__ = ["DEPRECATED_MODELS", "AnthropicModel"]

DEFAULT_MAX_TOKENS = 8192
# The Messages API's rule for a tool name (custom and server tools alike).
TOOL_NAME = re.compile(r"[a-zA-Z0-9_-]{1,64}")
DEPRECATED_MODELS: dict[str, str] = {
    "claude-opus-4-5": "January 22nd, 2027",
    "claude-opus-4-5-20251101": "January 22nd, 2027",
}
"""Deprecated model names and their end-of-life dates (as written on
https://docs.anthropic.com/en/docs/resources/model-deprecations). `AnthropicModel` warns once per
process for a name listed here (or in its ``deprecated_models=``); add entries as models are
deprecated: ``DEPRECATED_MODELS["claude-x"] = "June 1st, 2027"``. This package's own table: the
SDK's list is private and changes with the SDK's version."""
_warned_deprecated: set[str] = set()


class AnthropicModel:
    """Claude via the Anthropic Messages API, streamed.

    Args:
        model: the model name, e.g. ``"claude-sonnet-4-6"``. A model listed in
            ``deprecated_models`` gets one ``FutureWarning`` per process (with its end-of-life
            date), not one per request; the SDK's own per-request ``DeprecationWarning`` for it
            is silenced where this package sends the request.
        client: a ready ``anthropic.AsyncAnthropic``; when given, ``api_key``, ``base_url``,
            ``max_retries`` and ``timeout_seconds`` are the client's business. Such a client
            serves one event loop (the first this model sends a request on): see below.
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
        deprecated_models: model name -> end-of-life date of deprecated models; default the
            module's `DEPRECATED_MODELS` (read when the model is built). A table given replaces
            the module's (not merged with it); ``{}`` turns the warning off.

    Event loops: an SDK client's connections belong to the event loop that opened them, so the
    model keeps one client per event loop, built on first use with the same settings (the SDK's
    ``copy()`` with its default HTTP transport). It therefore works across any number of
    ``agent.run_sync`` / ``asyncio.run`` calls, in a thread's own loop, and in a sub-agent run
    with ``run_sync`` inside a tool. The client of a loop ended by ``asyncio.run`` (or an
    ``asyncio.Runner``) is closed as that loop shuts down its async generators; on a loop you
    close by hand, ``await model.aclose()`` first. A ``client`` passed in is used as given on the
    first loop and never copied (its transport may be the owner's own): a request on another
    loop raises `UsageError`; pass ``api_key=`` / ``base_url=`` instead to use several loops.

    Close it when done: ``await model.aclose()``, or ``async with AnthropicModel(...) as model:``.
    This closes the HTTP clients the model created itself (those of other loops still running
    are closed on their own loop; it may be used again afterwards, with new clients); a
    ``client`` passed in is left open (its owner closes it).

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
            valid ``name`` or shares one with another server tool. `stream` and
            `count_tokens` raise it when a ``client`` passed in is used on a second event loop.
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
        deprecated_models: Mapping[str, str] | None = None,
    ) -> None:
        if context_window is not None and context_window <= 0:
            raise UsageError(
                f"context_window must be a positive number of tokens, got {context_window}"
            )
        self.context_window = context_window or default_context_window(model)
        if client is not None and (api_key is not None or base_url is not None):
            raise UsageError("pass either client= or api_key= / base_url=, not both")
        owned = client is None
        if client is None:
            client = make_client(api_key, base_url, max_retries, timeout_seconds)
        self._clients = LoopClients(client, owned=owned)
        self._model = model
        self.max_tokens = max_tokens
        self._encoder = RequestEncoder(cache=cache, model=model)
        self._server_tools = [dict(t) for t in server_tools]
        self._server_tool_names = _server_tool_names(self._server_tools)
        _warn_if_deprecated(
            model, DEPRECATED_MODELS if deprecated_models is None else deprecated_models
        )
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
        """The SDK client serving the running event loop (outside a loop, or before a request
        on this one: the client built, or passed in, first)."""
        return self._clients.current

    async def aclose(self) -> None:
        """Close the HTTP clients this model created (a ``client`` passed in is left open): the
        running loop's here, those of other running loops on their own loop (waited for).

        Safe to call more than once; the model builds new clients if used again. Without it, a
        loop closed by hand (not by ``asyncio.run``) leaves its client's connections open.
        """
        await self._clients.aclose()

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
        client = await self._clients.get()
        try:
            counted = await client.messages.count_tokens(
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
            return status_error(exc)
        client = self.client
        return connection_error(exc, client.timeout, retried=True, url=str(client.base_url))

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
        client = await self._clients.get()
        try:
            events = await client.messages.create(
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
                    raise status_error(exc) from None
                except (anthropic.APIConnectionError, httpx2.TransportError) as exc:
                    raise connection_error(exc, client.timeout, url=str(client.base_url)) from None
                for item in accumulator.feed(event.to_dict(mode="json")):
                    yield item
        yield ResponseComplete(accumulator.message())


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


def _warn_if_deprecated(model: str, deprecated: Mapping[str, str]) -> None:
    """One ``FutureWarning`` per process for a model ``deprecated`` lists. The SDK's own warning
    for it, issued on every request, is silenced by its message where this package makes the
    request (the SDK attributes it to a frame a few levels up: the engine's, in this package)."""
    end = deprecated.get(model)
    if end is None:
        return
    warnings.filterwarnings(
        "ignore",
        f"The model '{re.escape(model)}' is deprecated",
        DeprecationWarning,
        r"statemachine_agent(\.|$)",
    )
    if model in _warned_deprecated:
        return
    _warned_deprecated.add(model)
    warnings.warn(
        f"The model {model!r} is deprecated and will reach end-of-life on {end}: use a current "
        "model such as 'claude-sonnet-4-6' (see "
        "https://docs.anthropic.com/en/docs/resources/model-deprecations).",
        FutureWarning,
        stacklevel=_stacklevel_outside_package(),
    )


_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep


def _stacklevel_outside_package() -> int:
    """The ``stacklevel`` that makes a warning issued by this function's caller point at the
    first frame outside this package: the user's line, whether it built the model itself or
    through a helper of the package (``FakeMessagesAPI.model``). Python 3.12's
    ``skip_file_prefixes`` does this, but the package supports 3.11."""
    frame = inspect.currentframe()
    frame = frame.f_back if frame is not None else None  # the caller: stacklevel 1
    level = 1
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(_PACKAGE_DIR):
        frame = frame.f_back
        level += 1
    return level


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
