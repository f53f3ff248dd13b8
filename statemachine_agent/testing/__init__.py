"""Testing helpers: the protocol checker, hypothesis strategies and the stateful test kit.

- `assert_valid_history` / `find_violations`: DESIGN invariants 1-4 on a history.
- `strategies`: hypothesis strategies for responses, scripts, tool behaviours, abort points,
  queued input and histories.
- `agent_state_machine(factory)`: a ready `RuleBasedStateMachine` for your agent and hooks;
  `AgentKit` is what your factory receives.
- `drive_run` / `check_run`: one run with aborts and queued input at chosen events, and the list
  of invariants (1-6) it broke, for your own ``@given`` tests.
"""

from __future__ import annotations

from .._protocol import assert_valid_history, find_violations
from . import strategies
from ._kit import (
    KIT_TOOLS,
    AgentKit,
    RunReport,
    ScriptPlayer,
    check_history,
    check_run,
    drive_run,
    kit_before_tool_call,
    prefix_ids,
)
from ._stateful import AgentCheck, AgentFactory, AgentStateMachine, agent_state_machine
from .strategies import AbortPoint, QueuedInput

__all__ = [
    "KIT_TOOLS",
    "AbortPoint",
    "AgentCheck",
    "AgentFactory",
    "AgentKit",
    "AgentStateMachine",
    "QueuedInput",
    "RunReport",
    "ScriptPlayer",
    "agent_state_machine",
    "assert_valid_history",
    "check_history",
    "check_run",
    "drive_run",
    "find_violations",
    "kit_before_tool_call",
    "prefix_ids",
    "strategies",
]
