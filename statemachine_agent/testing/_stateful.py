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
a turn start), continuations and input queued between runs. After every step it checks the
invariants 1-6 (`check_run`) plus your own ``check(agent)``; with ``declared=Declared(...)`` (your
hooks described to the oracle) each oracle-scenario run is also compared with the `Oracle`'s
prediction. Other steps defer calls for approval and then decide them, abort while they wait or
hand them to a new agent. An agent with sub-agents built by ``kit.sub_agent(...)`` (your
sub-agent factory, hooks and all) gets nested runs too: the first batch calls its sub-agents,
each playing a random script, aborts land at either level, and `check_tree` checks the
sub-agents' level (every call answered in their runs, their events carrying the right
``parent``, in order). With ``compaction=kit_compaction()`` the agents compact during the
runs (a tiny threshold, a scripted summarizer) and every compaction is checked as it happens
(`CompactionWatch`). A failure shrinks to a short script.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Callable
from typing import Any, ClassVar

from hypothesis import Phase, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from .._agent import Agent
from .._compacting import Compaction
from .._machine import State
from .._messages import Message
from .._states import RUN_STOPS
from ._compaction import shift_past
from ._kit import (
    AgentKit,
    RunReport,
    ScriptPlayer,
    check_history,
    check_run,
    drive_run,
    prefix_ids,
)
from ._oracle import (
    Declared,
    Oracle,
    RunSpec,
    compare_run,
    drive_scenario_run,
    queue_input,
    run_ids,
    run_steps,
    tokens_of,
)
from .strategies import (
    AbortPoint,
    DeliveryMode,
    QueuedInput,
    abort_points,
    decisions,
    deferring_responses,
    delivery_modes,
    histories,
    oracle_runs,
    queued_inputs,
    scripts,
)

AgentFactory = Callable[[AgentKit], Agent]
"""Builds the agent under test from the kit's parts (``kit.agent(**options)``)."""

AgentCheck = Callable[[Agent], None]
"""An extra check after every step; raise `AssertionError` when it fails. The agent may start
from a seeded random history: `produced_messages` gives what the kit's runs added."""

_SEEDED: weakref.WeakKeyDictionary[Agent, int] = weakref.WeakKeyDictionary()


def produced_messages(agent: Agent) -> list[Message]:
    """The messages of ``agent``'s history that its runs produced, without the random starting
    history the kit seeded it with (for a user's ``check``: "at most 3 successful lookups"
    should count these, not the seed's). With compaction on (``agent_state_machine(compaction=
    ...)``) it is what is left of them after the last summary: the summaries and what they
    replaced are left out."""
    return list(agent.messages[_SEEDED.get(agent, 0) :])


class AgentStateMachine(RuleBasedStateMachine):
    """Runs an agent built by ``factory`` through random runs and checks invariants 1-6 after
    every step (and after every compaction, with ``compaction`` on). Use `agent_state_machine`
    to make one for your factory.

    Attributes:
        compaction: automatic compaction for the agents the kit builds (None: off).
        compactions: compactions that replaced history in this class's examples so far.
    """

    factory: ClassVar[AgentFactory] = staticmethod(lambda kit: kit.agent())
    check: ClassVar[AgentCheck | None] = None
    declared: ClassVar[Declared | None] = None
    compaction: ClassVar[Compaction | None] = None
    compactions: ClassVar[int] = 0
    max_responses: ClassVar[int] = 8
    seed_history: ClassVar[bool] = True

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
        steering=delivery_modes(),
        follow_ups=delivery_modes(),
    )
    def build(
        self,
        mode: str,
        history: list[Message],
        steering: DeliveryMode = "all",
        follow_ups: DeliveryMode = "one_at_a_time",
    ) -> None:
        """Build the agent (``mode`` is its tool execution; ``steering`` and ``follow_ups`` the
        delivery modes of queued input) and give it a random starting history (unless
        ``seed_history`` is off); `produced_messages` excludes it."""
        kit = AgentKit(
            ScriptPlayer(),
            tool_execution="parallel" if mode == "parallel" else "sequential",
            steering_mode=steering,
            follow_up_mode=follow_ups,
            compaction=type(self).compaction,
        )
        self.kit = kit
        self.agent = type(self).factory(kit)
        if history and type(self).seed_history:
            self.agent.messages = [*self.agent.messages, *history]
        _SEEDED[self.agent] = len(self.agent.messages)

    def _run(
        self,
        prompt: str | None,
        script: list[dict[str, Any]],
        abort: AbortPoint | None,
        inputs: list[QueuedInput],
    ) -> None:
        self.input_pending = self.input_pending or bool(inputs)
        self._play(prompt, script, abort, inputs=inputs)

    def _play(
        self,
        prompt: str | None,
        script: list[dict[str, Any]],
        abort: AbortPoint | None,
        *,
        inputs: list[QueuedInput] | None = None,
        decisions: dict[str, Any] | None = None,
    ) -> None:
        """One run of the agent under ``script`` (ids made unique per run), checked."""
        agent = self.agent
        assert agent is not None
        self.runs += 1
        model = agent.model
        if isinstance(model, ScriptPlayer):
            model.load(prefix_ids(script, f"r{self.runs}_"))
        self.last = self.runner.run(
            drive_run(agent, prompt, abort=abort, inputs=inputs or [], decisions=decisions)
        )
        self._compacted(agent, self.last.compaction_cuts)
        problems = check_run(agent, self.last)
        assert not problems, _explain(problems, agent)

    def _compacted(self, agent: Agent, cuts: list[int]) -> None:
        """Count a step's compactions (``compactions``, a hypothesis event) and move the
        seeded part of the history (`produced_messages`) past each one's summary."""
        if not cuts:
            return
        type(self).compactions += len(cuts)
        event("compacted")
        _SEEDED[agent] = shift_past(_SEEDED.get(agent, 0), cuts)  # the seed's rest, if any

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

    @precondition(
        lambda self: (
            self.kit is not None
            and bool(self.kit.sub_agents)
            and self.agent is not None
            and not self.agent.pending
        )
    )
    @rule(data=st.data(), abort=abort_points(), script=scripts(max_responses=2))
    def nested_run(
        self, data: st.DataObject, abort: AbortPoint | None, script: list[dict[str, Any]]
    ) -> None:
        """A run whose first batch calls the agent's sub-agents (`AgentKit.sub_agent`), each
        playing a random script of its own in every call, then ``script``; the abort point
        counts the sub-agents' events too, so it lands inside a sub-agent's run as well.
        Checked at both levels (`check_run`, `check_tree`)."""
        kit = self.kit
        assert kit is not None
        names = sorted(kit.sub_agents)
        chosen = data.draw(st.lists(st.sampled_from(names), min_size=1, max_size=2), label="calls")
        blocks = [
            {"type": "tool_use", "id": f"s{i}", "name": name, "input": {"prompt": f"part {i}"}}
            for i, name in enumerate(chosen, 1)
        ]
        # Half the sub-agents' scripts start with tool calls, so a fault in a sub-agent's hooks
        # (which only its calls reach) shows in a few dozen examples rather than a few hundred.
        child_scripts = st.one_of(
            scripts(max_responses=3), scripts(max_responses=3, working_start=True)
        )
        for name in names:
            kit.sub_agents[name].load(data.draw(child_scripts, label=name))
        self._run(
            "do the task", [{"content": blocks, "stop_reason": "tool_use"}, *script], abort, []
        )
        event("nested run")
        report = self.last
        if abort is not None and report is not None and report.events:
            at = report.events[min(abort.after_events, len(report.events)) - 1]
            if at.parent is not None:
                event("nested run: the abort landed inside a sub-agent's run")

    @precondition(lambda self: self.agent is not None and not self.agent.pending)
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
        # The oracle does not model compaction: a context-window stop with compaction on (which
        # compacts and goes on) is checked by the invariants only.
        compacting = agent.compaction is not None and any(
            step.kind == "model_context_window_exceeded" for step in spec.steps
        )
        if declared is not None and not self.input_pending and not compacting:
            oracle = Oracle(
                max_turns=agent.max_turns,
                max_continuations=declared.max_continuations,
                max_tokens_policy=declared.max_tokens_policy,
                mode=agent.tool_execution,
                model_retries=agent.model_retries,
                declared=declared,
                steering_mode=agent.steering_mode,
                follow_up_mode=agent.follow_up_mode,
            )
            oracle.world_from(tokens_of(agent.messages), str(agent.state))
        observed = self.runner.run(
            drive_scenario_run(agent, agent.model, spec, run_steps(spec, ids), kit.hooks)
        )
        self._compacted(agent, observed.compaction_cuts)
        problems = check_history(agent) + observed.compaction_problems
        if oracle is not None:
            prediction = oracle.predict_run(spec, ids)
            problems += [f"oracle: {p}" for p in compare_run(prediction, observed)]
            world = oracle.world
            self.input_pending = bool(world.steer or world.follow or world.uncertain)
        else:
            self.input_pending = self.input_pending or bool(spec.inputs)
        assert not problems, _explain(problems, agent)

    @precondition(lambda self: self.agent is not None and not self.agent.pending)
    @rule(
        first=deferring_responses(),
        script=scripts(max_responses=3),
        abort=abort_points(),
        data=st.data(),
    )
    def run_deferring(
        self,
        first: dict[str, Any],
        script: list[dict[str, Any]],
        abort: AbortPoint | None,
        data: st.DataObject,
    ) -> None:
        """A run whose first batch defers calls for a person's decision; then, usually, the
        decisions (or an abort while they wait, or a new agent taking over) right away."""
        self._run("do the task", [first, *script], abort, [])
        if self.agent is not None and self.agent.pending:
            next_step = data.draw(st.sampled_from(["decide", "resume", "wait"]), label="then")
            if next_step == "resume":
                self._resume_in_a_new_agent()
            if next_step != "wait":
                self._decide(data, None, data.draw(scripts(max_responses=3), label="script"))

    @precondition(lambda self: self.agent is not None and bool(self.agent.pending))
    @rule(data=st.data(), abort=abort_points(), script=scripts(max_responses=3))
    def decide(
        self, data: st.DataObject, abort: AbortPoint | None, script: list[dict[str, Any]]
    ) -> None:
        """Decide some calls awaiting approval (approve, edit, deny, deny and stop), or abort
        while they wait; the run then goes on with ``script``."""
        self._decide(data, abort, script)

    def _decide(
        self, data: st.DataObject, abort: AbortPoint | None, script: list[dict[str, Any]]
    ) -> None:
        agent = self.agent
        assert agent is not None
        ids = [call.id for call in agent.pending]
        if data.draw(st.integers(0, 4), label="abort while pending") == 0:
            assert agent.abort("aborted while pending by the kit")
            assert agent.state is State.ABORTED and not agent.pending
            problems = check_history(agent)
            assert not problems, _explain(problems, agent)
            return
        chosen = data.draw(decisions(ids), label="decisions")
        self._play(None, script, abort, decisions=chosen)

    @precondition(lambda self: self.agent is not None and bool(self.agent.pending))
    @rule()
    def resume_in_a_new_agent(self) -> None:
        """Another process takes the pending batch over: a new agent from the factory is given
        the history, the state and the pending calls (what `Agent.resume` does from a log)."""
        self._resume_in_a_new_agent()

    def _resume_in_a_new_agent(self) -> None:
        old = self.agent
        assert old is not None and old.conversation.held is not None
        held = old.conversation.held
        kit = AgentKit(
            ScriptPlayer(),
            tool_execution=old.tool_execution,
            steering_mode=old.steering_mode,
            follow_up_mode=old.follow_up_mode,
            compaction=type(self).compaction,
        )
        new = type(self).factory(kit)
        new.restore(
            old.messages,
            State.AWAITING_APPROVAL,
            pending=(held.calls, list(held.results.values())),
        )
        _SEEDED[new] = _SEEDED.get(old, 0)
        self.agent, self.kit = new, kit

    @rule(inputs=queued_inputs(max_events=0, max_size=1))
    def queue_between_runs(self, inputs: list[QueuedInput]) -> None:
        """Steering or follow-up input queued while no run is in progress."""
        agent = self.agent
        assert agent is not None
        self.input_pending = self.input_pending or bool(inputs)
        for item in inputs:
            queue_input(agent, item.kind, item.text)

    @invariant()
    def protocol_holds(self) -> None:
        """Invariants 1-4 on the history; between runs the agent is idle or terminal; the
        user's own check."""
        agent = self.agent
        if agent is None:
            return
        problems = check_history(agent)
        assert not problems, _explain(problems, agent)
        assert agent.state is State.IDLE or agent.state in RUN_STOPS, agent.state
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
    compaction: Compaction | None = None,
    max_runs: int = 4,
    max_examples: int | None = None,
    name: str = "AgentMachine",
    seed_history: bool = True,
) -> type[AgentStateMachine]:
    """A `RuleBasedStateMachine` class for the agent ``factory`` builds.

    Each example may start the agent from a random, valid history (seeded after the factory ran):
    runs must keep the protocol whatever came before. A ``check`` that counts what the runs did
    should read `produced_messages(agent)`, which leaves the seeded messages out.

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
        compaction: automatic compaction for the agents the kit builds (``kit.compaction``,
            which ``kit.agent(...)`` passes to `Agent`): `kit_compaction()` (a tiny threshold
            and the scripted `kit_summarize`) makes short scripted runs compact, often more than
            once. Every compaction is then checked as it happens (`CompactionWatch`: rules 1-4
            on the compacted history, the kept window is the old history's tail, the cut is a
            turn boundary); the class's ``compactions`` counts them (and a hypothesis
            ``event("compacted")`` marks each step that compacted), so a test can assert they
            happened. `produced_messages` then leaves out the summaries too.
        max_runs: steps per example (each is a run, a continuation or queued input).
        max_examples: examples to try (default: the current hypothesis profile's).
        name: the class name (shown in reports).
        seed_history: start some examples from a random history (default True).

    Returns:
        The class; its ``TestCase`` attribute is a `unittest.TestCase` pytest collects, and
        ``hypothesis.stateful.run_state_machine_as_test(cls)`` runs it directly.
    """
    attrs: dict[str, Any] = {
        "check": None if check is None else staticmethod(check),
        "declared": declared,
        "seed_history": seed_history,
        "compaction": compaction,
        "compactions": 0,
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
