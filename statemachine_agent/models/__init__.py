"""Model providers: the `Model` protocol, `AnthropicModel`, and the offline `ScriptedModel` and
`FunctionModel` (public test doubles)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._base import (
    Model,
    ModelRequest,
    ResponseComplete,
    ResponseStart,
    StreamEvent,
    TextDelta,
    ThinkingDelta,
    ToolCallDelta,
    ToolDefinition,
)
from ._offline import FunctionModel, ScriptedModel

if TYPE_CHECKING:
    from .anthropic import AnthropicModel

__all__ = [
    "AnthropicModel",
    "FunctionModel",
    "Model",
    "ModelRequest",
    "ResponseComplete",
    "ResponseStart",
    "ScriptedModel",
    "StreamEvent",
    "TextDelta",
    "ThinkingDelta",
    "ToolCallDelta",
    "ToolDefinition",
]


def __getattr__(name: str) -> Any:
    # AnthropicModel is imported on first use: only that adapter imports the anthropic SDK.
    if name == "AnthropicModel":
        from .anthropic import AnthropicModel

        return AnthropicModel
    raise AttributeError(name)
