"""The `Model` protocol: what the engine needs from a provider.

A model streams one response per request as `StreamEvent` items and ends with `ResponseComplete`.
A stream that ends without it is incomplete: the engine never treats it as a finished response.
Failures are raised as `ModelError` (see `_errors`).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, get_args, runtime_checkable

from .._dataclasses import fast_init
from .._messages import AssistantMessage, Message


@dataclass(frozen=True, slots=True)
class ToolDefinition:
    """A tool as a provider sees it: name, description and JSON schema of the arguments."""

    name: str
    description: str
    input_schema: dict[str, Any]


@dataclass(frozen=True, slots=True)
class ModelRequest:
    """One request to a model.

    Attributes:
        messages: the projected history (valid for a provider; do not mutate).
        system: the system prompt.
        tools: the tools the model may call.
        settings: per-agent provider options.
    """

    messages: Sequence[Message]
    system: str | None = None
    tools: Sequence[ToolDefinition] = ()
    settings: dict[str, Any] = field(default_factory=dict)


def without_tool_choice(request: ModelRequest, model: object = None) -> ModelRequest:
    """``request`` without ``tool_choice`` in its settings when it offers no tool: a request
    without tools never carries one (the Messages API refuses ``tool_choice`` without
    ``tools``). A summary request, the final turn of an agent without tools and a user state's
    request all pass through it (`Run.send`). A model that adds tools of its own to every
    request (``model.server_tools``, as `AnthropicModel` does) keeps it.

    Args:
        request: the request (unchanged when it has tools or no ``tool_choice``).
        model: the model it goes to.
    """
    if request.tools or "tool_choice" not in request.settings:
        return request
    if getattr(model, "server_tools", None):
        return request
    settings = {k: v for k, v in request.settings.items() if k != "tool_choice"}
    return ModelRequest(request.messages, request.system, request.tools, settings)


@dataclass(frozen=True, slots=True)
class ResponseStart:
    """The provider began a response (``id``: the provider's id of the response, if any)."""

    model: str | None = None
    id: str | None = None


@dataclass(frozen=True, slots=True)
class TextDelta:
    """More text for the block at ``index``."""

    index: int
    text: str


@dataclass(frozen=True, slots=True)
class ThinkingDelta:
    """More thinking for the block at ``index``."""

    index: int
    thinking: str


@dataclass(frozen=True, slots=True)
class ToolCallDelta:
    """A fragment of the JSON arguments of the tool call at ``index``."""

    index: int
    id: str
    name: str
    arguments: str


@dataclass(frozen=True, slots=True)
class ResponseComplete:
    """The whole response, after the provider's stop event. Always the last item."""

    message: AssistantMessage


StreamEvent = ResponseStart | TextDelta | ThinkingDelta | ToolCallDelta | ResponseComplete

for _built_per_turn in (ModelRequest, *get_args(StreamEvent)):
    fast_init(_built_per_turn)


@runtime_checkable
class Model(Protocol):
    """A model provider.

    Implementations: `AnthropicModel`, and `ScriptedModel` / `FunctionModel` for offline runs.
    """

    @property
    def name(self) -> str:
        """The model's name (for logs and session headers)."""
        ...

    def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        """Stream the response to ``request``; the last item is `ResponseComplete`.

        Raises:
            ModelAuthError: credentials are missing or rejected (not retried).
            ModelRetryableError: a failure that may pass (retried by the engine).
            ModelError: any other failure that ends the run in ``failed``.
        """
        ...
