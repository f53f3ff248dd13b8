"""Testing helpers: the protocol checker, hypothesis strategies and the stateful test kit.

- `assert_valid_history` / `find_violations`: the tool-use protocol's rules 1-5 on a history.
- `strategies`: hypothesis strategies for responses, scripts, tool behaviours, abort points,
  queued input and histories.
- `agent_state_machine(factory)`: a ready `RuleBasedStateMachine` for your agent and hooks;
  `AgentKit` is what your factory receives. It may seed a random starting history;
  `produced_messages(agent)` is what the runs added. ``kit.sub_agent(factory)`` gives your agent
  a sub-agent (`Agent.as_tool`) the kit drives and checks too (`check_tree`, `ChildPlayer`).
- `Oracle`: a reference model of the loop that predicts a `Scenario`'s outcome (calls run, result
  kinds, final state, turns, requests); `check_scenario` plays a scenario on a real agent and
  compares (`strategies.scenarios` generates them).
- `drive_run` / `check_run`: one run with aborts and queued input at chosen events, and the list
  of invariants (1-6) it broke, for your own ``@given`` tests.
- `kit_compaction()`: automatic compaction with a tiny threshold and a scripted summarizer
  (`kit_summarize`), for ``agent_state_machine(..., compaction=kit_compaction())`` or
  ``AgentKit(compaction=...)``; `CompactionWatch` checks every compaction as it happens.
- `FakeMessagesAPI`: a local fake of the Anthropic Messages API playing `ScriptedModel`'s steps
  on the real wire (SSE streams, error statuses, mid-stream errors, cut connections), for testing
  through `AnthropicModel` and the real SDK; it records every request (`RecordedRequest`).
"""

from __future__ import annotations

from .._protocol import assert_valid_history, find_violations
from . import strategies
from ._compaction import CompactionWatch
from ._fake_api import FakeMessagesAPI, RecordedRequest
from ._kit import (
    KIT_TOOLS,
    AgentKit,
    ChildPlayer,
    RunReport,
    ScriptPlayer,
    check_history,
    check_run,
    check_tree,
    drive_run,
    kit_before_tool_call,
    kit_compaction,
    kit_summarize,
    prefix_ids,
)
from ._oracle import (
    EXHAUSTIVE_OUTCOMES,
    JOURNAL,
    ORACLE_TOOLS,
    Anchor,
    Call,
    Child,
    Cut,
    Declared,
    Input,
    Oracle,
    Prediction,
    RunPrediction,
    RunSpec,
    Scenario,
    Step,
    check_scenario,
    classify,
    compare,
    exhaustive_scenarios,
    play,
    predict_resume,
    scenario_ids,
    tokens_of,
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
    "EXHAUSTIVE_OUTCOMES",
    "JOURNAL",
    "KIT_TOOLS",
    "ORACLE_TOOLS",
    "AbortPoint",
    "AgentCheck",
    "AgentFactory",
    "AgentKit",
    "AgentStateMachine",
    "Anchor",
    "Call",
    "Child",
    "ChildPlayer",
    "CompactionWatch",
    "Cut",
    "Declared",
    "FakeMessagesAPI",
    "Input",
    "Oracle",
    "Prediction",
    "QueuedInput",
    "RecordedRequest",
    "RunPrediction",
    "RunReport",
    "RunSpec",
    "Scenario",
    "ScriptPlayer",
    "Step",
    "agent_state_machine",
    "assert_valid_history",
    "check_history",
    "check_run",
    "check_scenario",
    "check_tree",
    "classify",
    "compare",
    "drive_run",
    "exhaustive_scenarios",
    "find_violations",
    "kit_before_tool_call",
    "kit_compaction",
    "kit_summarize",
    "play",
    "predict_resume",
    "prefix_ids",
    "produced_messages",
    "scenario_ids",
    "strategies",
    "tokens_of",
]
