"""The ready stateful test: point it at a factory that builds *your* agent with *your* hooks.

```python
from statemachine_agent.testing import agent_state_machine

def build(kit):  # kit: AgentKit (the kit's model, tools and tool_execution mode)
    return kit.agent(max_turns=3, should_continue=my_hook, after_tool_call=my_other_hook)

TestMyAgent = agent_state_machine(build).TestCase  # collected by pytest / unittest
```

Each example gets a fresh agent (from the factory) and a fresh event loop, in parallel or
sequential tool execution, optionally starting from a random history. Its steps are runs under
random scripts (tool failures, provider errors, aborts and task cancellation at any event, steering
and follow-up input), runs of oracle scenarios (`strategies.oracle_runs`: timeouts, raising and
rewriting hooks, truncated calls, refusals with calls, aborts anchored to a tool start, a response or
a turn start), continuations and input queued between runs. After every step it checks DESIGN
invariants 1-6 (`check_run`) plus your own ``check(agent)``; with ``declared=Declared(...)`` (your
hooks described to the oracle) each oracle-scenario run is also compared with the `Oracle`'s
prediction. A failure shrinks to a short script.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, ClassVar

from hypothesis import Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from .._agent import Agent
from .._machine import TERMINAL_STATES, State
from .._messages import Message
from ._kit import AgentKit, RunReport, ScriptPlayer, check_history, check_run, drive_run, prefix_ids
from ._oracle import (
    Declared,
    Oracle,
    RunSpec,
    compare_run,
    drive_scenario_run,
    run_ids,
    run_steps,
    tokens_of,
)
from .strategies import (
    AbortPoint,
    QueuedInput,
    abort_points,
    histories,
    oracle_runs,
    queued_inputs,
    scripts,
)

AgentFactory = Callable[[AgentKit], Agent]
"""Builds the agent under test from the kit's parts (``kit.agent(**options)``)."""

AgentCheck = Callable[[Agent], None]
"""An extra check after every step; raise `AssertionError` when it fails."""


class AgentStateMachine(RuleBasedStateMachine):
    """Runs an agent built by ``factory`` through random runs and checks invariants 1-6 after
    every step. Use `agent_state_machine` to make one for your factory."""

    factory: ClassVar[AgentFactory] = staticmethod(lambda kit: kit.agent())
    check: ClassVar[AgentCheck | None] = None
    declared: ClassVar[Declared | None] = None
    max_responses: ClassVar[int] = 8

    def __init__(self) -> None:
        super().__init__()
        self.runner = asyncio.Runner()  # a fresh event loop per example
        self.agent: Agent | None = None
        self.kit: AgentKit | None = None
        self.runs = 0
        self.last: RunReport | None = None
        self.input_pending = False  # steering or follow-up input the oracle cannot count

    @initialize(
        mode=st.sampled_from(["parallel", "sequential"]),
        history=st.one_of(st.just([]), histories()),
    )
    def build(self, mode: str, history: list[Message]) -> None:
        """Build the agent (``mode`` is its tool execution) and give it a starting history."""
        kit = AgentKit(
            ScriptPlayer(), tool_execution="parallel" if mode == "parallel" else "sequential"
        )
        self.kit = kit
        self.agent = type(self).factory(kit)
        if history:
            self.agent.messages = history

    def _run(
        self,
        prompt: str | None,
        script: list[dict[str, Any]],
        abort: AbortPoint | None,
        inputs: list[QueuedInput],
    ) -> None:
        agent = self.agent
        assert agent is not None
        self.runs += 1
        self.input_pending = self.input_pending or bool(inputs)
        model = agent.model
        if isinstance(model, ScriptPlayer):
            model.load(prefix_ids(script, f"r{self.runs}_"))
        self.last = self.runner.run(drive_run(agent, prompt, abort=abort, inputs=inputs))
        problems = check_run(agent, self.last)
        assert not problems, _explain(problems, agent)

    @rule(
        script=scripts(),
        abort=abort_points(),
        inputs=queued_inputs(),
    )
    def run(
        self, script: list[dict[str, Any]], abort: AbortPoint | None, inputs: list[QueuedInput]
    ) -> None:
        """A run from a new prompt."""
        self._run("do the task", script, abort, inputs)

    @precondition(lambda self: self.agent is not None and bool(self.agent.messages))
    @rule(script=scripts(max_responses=3), abort=abort_points(), inputs=queued_inputs())
    def continue_run(
        self, script: list[dict[str, Any]], abort: AbortPoint | None, inputs: list[QueuedInput]
    ) -> None:
        """``agent.run()`` without a prompt (it may refuse: nothing to continue)."""
        self._run(None, script, abort, inputs)

    @rule(spec=oracle_runs(max_steps=3))
    def oracle_run(self, spec: RunSpec) -> None:
        """A run of an oracle scenario from a new prompt (the oracle's tools and hooks, an abort
        or cancellation anchored to an event, queued input). Checked by the invariants, and
        compared with the oracle when the agent's hooks were declared
        (``agent_state_machine(declared=...)``) and no input of an earlier step may be pending."""
        agent, kit = self.agent, self.kit
        assert agent is not None and kit is not None
        self.runs += 1
        ids = run_ids(spec, f"k{self.runs}")
        for step, call_ids in zip(spec.steps, ids, strict=True):
            kit.hooks.calls.update(zip(call_ids, step.calls, strict=True))
        declared = type(self).declared
        oracle = None
        if declared is not None and not self.input_pending:
            oracle = Oracle(
                max_turns=agent.max_turns,
                max_continuations=declared.max_continuations,
                max_tokens_policy=declared.max_tokens_policy,
                mode=agent.tool_execution,
                model_retries=agent.model_retries,
                declared=declared,
            )
            oracle.world_from(tokens_of(agent.messages), agent.state.value)
        observed = self.runner.run(
            drive_scenario_run(agent, agent.model, spec, run_steps(spec, ids), kit.hooks)
        )
        problems = check_history(agent)
        if oracle is not None:
            prediction = oracle.predict_run(spec, ids)
            problems += [f"oracle: {p}" for p in compare_run(prediction, observed)]
            world = oracle.world
            self.input_pending = bool(world.steer or world.follow or world.uncertain)
        else:
            self.input_pending = self.input_pending or bool(spec.inputs)
        assert not problems, _explain(problems, agent)

    @rule(inputs=queued_inputs(max_events=0, max_size=1))
    def queue_between_runs(self, inputs: list[QueuedInput]) -> None:
        """Steering or follow-up input queued while no run is in progress."""
        agent = self.agent
        assert agent is not None
        self.input_pending = self.input_pending or bool(inputs)
        for item in inputs:
            (agent.steer if item.kind == "steer" else agent.follow_up)(item.text)

    @invariant()
    def protocol_holds(self) -> None:
        """Invariants 1-4 on the history; between runs the agent is idle or terminal; the
        user's own check."""
        agent = self.agent
        if agent is None:
            return
        problems = check_history(agent)
        assert not problems, _explain(problems, agent)
        assert agent.state is State.IDLE or agent.state in TERMINAL_STATES, agent.state
        check = type(self).check
        if check is not None:
            check(agent)

    def teardown(self) -> None:
        self.runner.close()


def _explain(problems: list[str], agent: Agent) -> str:
    lines = [f"{len(problems)} protocol violation(s):", *problems, "history:"]
    for i, message in enumerate(agent.messages):
        lines.append(f"  {i}: {_short(message)}")
    return "\n".join(lines)


def _short(message: Message) -> str:
    text = message.model_dump_json(exclude_defaults=True)
    return text if len(text) <= 160 else text[:157] + "..."


def agent_state_machine(
    factory: AgentFactory | None = None,
    *,
    check: AgentCheck | None = None,
    declared: Declared | None = None,
    max_runs: int = 4,
    max_examples: int | None = None,
    name: str = "AgentMachine",
) -> type[AgentStateMachine]:
    """A `RuleBasedStateMachine` class for the agent ``factory`` builds.

    Args:
        factory: ``factory(kit) -> Agent``; build it with ``kit.agent(...)`` (or pass ``kit.model``,
            ``kit.tools`` and ``kit.tool_execution`` to `Agent` yourself). Default: a plain agent.
        check: ``check(agent)`` after every step, for your hooks' own promises.
        declared: your hooks described to the oracle (`Declared`: ``before`` allow, deny,
            terminate, raise or rewrite; ``after`` keep, rewrite or raise; each a constant or a
            function of the tool name and arguments; your ``max_continuations`` and
            ``max_tokens_policy``). With it, the oracle-scenario runs are also compared with the
            oracle's prediction; without it (hooks it cannot describe: ``should_continue``,
            ``transform_context``, added transitions or guards), they are checked by the invariants.
            Build the agent with ``kit.agent(...)``: it installs the scenarios' hooks in front of
            yours.
        max_runs: steps per example (each is a run, a continuation or queued input).
        max_examples: examples to try (default: the current hypothesis profile's).
        name: the class name (shown in reports).

    Returns:
        The class; its ``TestCase`` attribute is a `unittest.TestCase` pytest collects, and
        ``hypothesis.stateful.run_state_machine_as_test(cls)`` runs it directly.
    """
    attrs: dict[str, Any] = {
        "check": None if check is None else staticmethod(check),
        "declared": declared,
    }
    if factory is not None:
        attrs["factory"] = staticmethod(factory)
    machine: type[AgentStateMachine] = type(name, (AgentStateMachine,), attrs)
    # No "explain" phase: it reruns every failure many times and adds little to a short script.
    phases = tuple(p for p in settings().phases if p is not Phase.explain)
    options: dict[str, Any] = {"stateful_step_count": max_runs, "phases": phases}
    if max_examples is not None:
        options["max_examples"] = max_examples
    machine.TestCase.settings = settings(**options)
    return machine
