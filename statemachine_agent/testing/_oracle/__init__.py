"""A reference model of the loop (the oracle) and a runner that plays the same scenario on an `Agent`.

The model is written from the loop's rules as the README and the public docstrings state them (what
the loop guarantees, the machine's transition table, the hooks' contracts, the session log), not
from the engine's code. Given a `Scenario` (responses, tool behaviours, hook behaviours, limits,
abort or cancellation anchored to an event, queued input, a second run, a session log cut and
resumed) it predicts, per run: whether it starts, the final state, turns, requests sent, the kind of
every tool result it adds, which calls run (and their order where the rules fix it). Where the
engine's outcome legitimately depends on timing (an abort while tools run, a task cancellation), it
predicts the set of allowed outcomes.

`play` plays a scenario on a real agent through the public API only (`Agent`, events,
`Agent.resume`, the session log file) and `compare` lists every difference from the prediction.

Modules, each with one subject (lower ones import only higher ones):

- `texts`: shared figures and texts (stop-reason sets, tool timings, hook texts, fixed results).
- `scenario`: the scenario's data types (`Scenario`, `RunSpec`, `Step`, `Call`, ...) and ids.
- `kinds`: result kinds (`classify`) and the abstract history (`tokens_of`).
- `tools`: the oracle's tools and the ``tool_use`` block of a call.
- `world`: what the predictor returns (`RunPrediction`, `Prediction`) and keeps (`World`).
- `calls`, `batch`, `turns`, `prediction`: the predictor (`Oracle`), in layers: one call's
  result, the usage limits and queued input; a tool batch (``executing_tools``) and decisions
  (``decided``); one run, a method per trigger of the transition table with each branch marked
  ``trigger [label] -> dest`` after the table's labels; a scenario's runs and cancellations.
- `resume`: what `Agent.resume` rebuilds from a session log.
- `subagent`: the ``delegate`` tool (a child agent, `Agent.as_tool`) and its run's prediction.
- `scenario_agent`, `play`: the agent a scenario runs on, and playing it.
- `comparison`: `compare`, `check_scenario`.
- `exhaustive`: every scenario over a small alphabet.

A new scenario class: its data in `scenario`, its prediction in the branch of `prediction` (or
`batch`) the table names, its label added there (`RunPrediction.labels`), and its generator in
`statemachine_agent.testing._scenario_strategies` (`FAMILIES` lists the scenario families).
"""

from __future__ import annotations

from .batch import BatchRules
from .calls import CallRules
from .comparison import (
    check_scenario,
    compare,
    compare_run,
    expected_text,
    oracle_for,
    text_problems,
)
from .exhaustive import EXHAUSTIVE_OUTCOMES, exhaustive_scenarios
from .kinds import Token, classify, tokens_of
from .play import RunObservation, RunTree, ScenarioObservation, drive_scenario_run, play
from .prediction import Oracle
from .resume import predict_resume, predict_resumed_turns
from .scenario import (
    AfterKind,
    Anchor,
    AnchorEvent,
    ArgsKind,
    BeforeKind,
    BehaviourName,
    Call,
    Child,
    Cut,
    DecisionKind,
    Input,
    Limits,
    RunSpec,
    Scenario,
    Step,
    StepKind,
    ToolName,
    run_ids,
    scenario_ids,
)
from .scenario_agent import (
    ScenarioHooks,
    ScenarioModel,
    agent_options,
    cut_stream,
    exhausted_stream,
    play_step,
    queue_input,
    render_step,
    rendered_steps,
    run_steps,
    still_reused,
)
from .texts import (
    CONTEXT_WINDOW,
    COOPERATE_CHUNKS,
    DENY_REASON,
    EDITED,
    ERROR_STEPS,
    GRACE_SECONDS,
    HANG_SECONDS,
    HOOK_DENIES,
    HOOK_TERMINATES,
    INPUT_TOKENS,
    KNOWN_STOPS,
    OUTPUT_TOKENS,
    PAUSE_TURN,
    REFUSAL,
    RETRYABLE,
    REWRITTEN,
    TIMEOUT_SECONDS,
    TRUNCATING,
    limit_text,
)
from .tools import JOURNAL, ORACLE_TOOLS, call_block, job, limited, write
from .turns import RunRules, Turns
from .world import Declared, Prediction, RunPrediction, World

__all__ = [
    "CONTEXT_WINDOW",
    "COOPERATE_CHUNKS",
    "DENY_REASON",
    "EDITED",
    "ERROR_STEPS",
    "EXHAUSTIVE_OUTCOMES",
    "GRACE_SECONDS",
    "HANG_SECONDS",
    "HOOK_DENIES",
    "HOOK_TERMINATES",
    "INPUT_TOKENS",
    "JOURNAL",
    "KNOWN_STOPS",
    "ORACLE_TOOLS",
    "OUTPUT_TOKENS",
    "PAUSE_TURN",
    "REFUSAL",
    "RETRYABLE",
    "REWRITTEN",
    "TIMEOUT_SECONDS",
    "TRUNCATING",
    "AfterKind",
    "Anchor",
    "AnchorEvent",
    "ArgsKind",
    "BatchRules",
    "BeforeKind",
    "BehaviourName",
    "Call",
    "CallRules",
    "Child",
    "Cut",
    "DecisionKind",
    "Declared",
    "Input",
    "Limits",
    "Oracle",
    "Prediction",
    "RunObservation",
    "RunPrediction",
    "RunRules",
    "RunSpec",
    "RunTree",
    "Scenario",
    "ScenarioHooks",
    "ScenarioModel",
    "ScenarioObservation",
    "Step",
    "StepKind",
    "Token",
    "ToolName",
    "Turns",
    "World",
    "agent_options",
    "call_block",
    "check_scenario",
    "classify",
    "compare",
    "compare_run",
    "cut_stream",
    "drive_scenario_run",
    "exhausted_stream",
    "exhaustive_scenarios",
    "expected_text",
    "job",
    "limit_text",
    "limited",
    "oracle_for",
    "play",
    "play_step",
    "predict_resume",
    "predict_resumed_turns",
    "queue_input",
    "render_step",
    "rendered_steps",
    "run_ids",
    "run_steps",
    "scenario_ids",
    "still_reused",
    "text_problems",
    "tokens_of",
    "write",
]
