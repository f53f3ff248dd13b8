"""Testing helpers: the protocol checker, hypothesis strategies and the stateful test kit.

- `assert_valid_history` / `find_violations`: the tool-use protocol's rules 1-5 on a history.
- `strategies`: hypothesis strategies for responses, scripts, tool behaviours, abort points,
  queued input and histories.
- `agent_state_machine(factory)`: a ready `RuleBasedStateMachine` for your agent and hooks;
  `AgentKit` is what your factory receives. It may seed a random starting history;
  `produced_messages(agent)` is what the runs added.
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
    kit_compaction,
    kit_summarize,
    prefix_ids,
)
from ._stateful import (
    AgentCheck,
    AgentFactory,
    AgentStateMachine,
    agent_state_machine,
    produced_messages,
)
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
    "kit_compaction",
    "kit_summarize",
    "prefix_ids",
    "produced_messages",
    "strategies",
]
