"""statemachine_agent: the LLM agent loop as an explicit, property-tested state machine.

The public names are listed in ``__all__``; modules whose names start with ``_`` are private.
"""

from __future__ import annotations

from ._agent import Agent
from ._diagram import GraphvizNotFoundError, render_diagram
from ._errors import (
    AgentBusyError,
    AgentError,
    InvalidHistoryError,
    MachineDefinitionError,
    ModelAuthError,
    ModelError,
    ModelRetryableError,
    ScriptExhaustedError,
    ToolDefinitionError,
    ToolError,
    UsageError,
)
from ._events import (
    Event,
    MessageDelta,
    MessageEnd,
    MessageStart,
    ModelRetry,
    RunEnd,
    RunStart,
    StateChanged,
    ToolExecutionEnd,
    ToolExecutionStart,
    ToolExecutionUpdate,
    TurnEnd,
    TurnStart,
    event_to_dict,
)
from ._hooks import Allow, Deny, ToolCallInfo, TurnInfo
from ._machine import TERMINAL_STATES, LoopData, LoopMachine, State, TransitionSpec
from ._messages import (
    HISTORY_ADAPTER,
    AssistantMessage,
    ImageBlock,
    Message,
    ProviderBlock,
    StopReason,
    TextBlock,
    ThinkingBlock,
    ToolCallBlock,
    ToolResultMessage,
    Usage,
    UserMessage,
)
from ._result import RunResult
from ._tools import AbortSignal, Tool, ToolContext, ToolResult, tool

__version__ = "0.1.0"

__all__ = [
    "HISTORY_ADAPTER",
    "TERMINAL_STATES",
    "AbortSignal",
    "Agent",
    "AgentBusyError",
    "AgentError",
    "Allow",
    "AssistantMessage",
    "Deny",
    "Event",
    "GraphvizNotFoundError",
    "ImageBlock",
    "InvalidHistoryError",
    "LoopData",
    "LoopMachine",
    "MachineDefinitionError",
    "Message",
    "MessageDelta",
    "MessageEnd",
    "MessageStart",
    "ModelAuthError",
    "ModelError",
    "ModelRetry",
    "ModelRetryableError",
    "ProviderBlock",
    "RunEnd",
    "RunResult",
    "RunStart",
    "ScriptExhaustedError",
    "State",
    "StateChanged",
    "StopReason",
    "TextBlock",
    "ThinkingBlock",
    "Tool",
    "ToolCallBlock",
    "ToolCallInfo",
    "ToolContext",
    "ToolDefinitionError",
    "ToolError",
    "ToolExecutionEnd",
    "ToolExecutionStart",
    "ToolExecutionUpdate",
    "ToolResult",
    "ToolResultMessage",
    "TransitionSpec",
    "TurnEnd",
    "TurnInfo",
    "TurnStart",
    "Usage",
    "UsageError",
    "UserMessage",
    "event_to_dict",
    "render_diagram",
    "tool",
]
