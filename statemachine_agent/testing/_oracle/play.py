"""Playing a scenario on a real agent through the public API (`play`, `drive_scenario_run`) and
what it observes (`RunObservation`, `ScenarioObservation`)."""

from __future__ import annotations

import asyncio
import json
import tempfile
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# Public names only (the engine's internals may change under it): the oracle sees the loop as a
# user does.
from ... import (
    Agent,
    AssistantMessage,
    Event,
    Message,
    MessageEnd,
    RunEnd,
    RunResult,
    RunStart,
    ToolExecutionStart,
    ToolResultMessage,
    TurnStart,
    Usage,
    UsageError,
    UserMessage,
)
from ..._protocol import find_violations
from .._compaction import CompactionWatch, shift_past
from .kinds import Token, classify, tokens_of
from .scenario import AnchorEvent, Cut, RunSpec, Scenario, scenario_ids
from .scenario_agent import (
    ScenarioHooks,
    ScenarioModel,
    agent_options,
    queue_input,
    rendered_steps,
    run_decisions,
    starting_history,
)
from .tools import JOURNAL


@dataclass
class RunObservation:
    """What one run of the engine did, in the oracle's terms: ``ran`` lists the calls whose tool
    started (in start order), ``finished`` those whose tool and ``after_tool_call`` hook then
    returned (None when the scenario's hooks were not the agent's: not observed)."""

    started: bool = True
    state: str = ""
    cancelled: bool = False
    turns: int = 0
    requests: int = 0
    results: list[tuple[str, str]] = field(default_factory=list)
    ran: list[str] = field(default_factory=list)
    finished: list[str] | None = None
    users: int = 0
    user_texts: list[str] = field(default_factory=list)
    texts: dict[str, tuple[str, str]] = field(default_factory=dict)
    new_messages: list[Message] = field(default_factory=list)
    compaction_cuts: list[int] = field(default_factory=list)
    compaction_problems: list[str] = field(default_factory=list)
    sent: list[tuple[list[Message], list[Message]]] = field(default_factory=list)
    result_problems: list[str] = field(default_factory=list)
    child_problems: list[str] = field(default_factory=list)
    tree_requests: int | None = None


@dataclass
class ScenarioObservation:
    """Every run, plus the history and state right after a resume; ``reopen_problems``: what
    an intact session log reopened after a run (`Scenario.reopen`) did not give back."""

    runs: list[RunObservation] = field(default_factory=list)
    resumed: list[Token] | None = None
    resumed_state: str | None = None
    log_lines: list[dict[str, Any]] | None = None
    histories: list[list[Message]] = field(default_factory=list)
    agent: Agent | None = None
    reopen_problems: list[str] = field(default_factory=list)


async def drive_scenario_run(
    agent: Agent,
    model: Any,
    spec: RunSpec,
    steps: Sequence[Any],
    hooks: ScenarioHooks,
    *,
    sync: bool = False,
) -> RunObservation:
    """Play one run of a scenario on ``agent`` (anchored abort or cancellation and input).

    Args:
        agent: an agent with the oracle's tools and ``hooks`` installed.
        model: the agent's model: a `ScenarioModel`, or the kit's `ScriptPlayer`; ``load(steps)``
            plays the run's steps, ``requests`` counts (or lists) the requests.
        spec: the run.
        steps: its rendered steps (`run_steps`).
        hooks: the scenario's hooks (they learn the agent, for the hook-anchored abort).
        sync: run it with `Agent.run_sync` in a worker thread (its own event loop), unless it
            is cancelled at an anchor.
    """
    obs = RunObservation()
    model.load(steps)
    first_request = request_count(model)
    journal: list[str] = []
    token = JOURNAL.set(journal)
    counters: Counter[str] = Counter()
    task: asyncio.Future[RunResult] | None = None
    end: list[RunResult] = []
    for item in spec.inputs:
        if item.event is None:
            queue_input(agent, item.kind, f"queued {item.kind}")

    def on_event(event: Event) -> None:
        name: AnchorEvent | None = None
        if isinstance(event, RunStart) and event.parent is None and tree.parent_run is None:
            tree.parent_run = event.run_id  # the run's own (the first to start)
        if isinstance(event, ToolExecutionStart) and event.run_id == tree.parent_run:
            tree.parent_calls.add(event.call.id)
        if event.parent is None and tree.parent_run not in (None, event.run_id):
            tree.orphan(event)  # another run's event (a sub-agent's) without ``parent``
            return
        if event.parent is not None:
            tree.see(event, journal)
            if isinstance(event, ToolExecutionStart) and event.parent.run_id == tree.parent_run:
                name = "child_tool_start"  # counted across the run's child runs
        elif isinstance(event, TurnStart):
            name = "turn_start"
        elif isinstance(event, MessageEnd) and isinstance(event.message, AssistantMessage):
            if event.message.stop_reason not in ("aborted", "error"):
                name = "response"
        elif isinstance(event, ToolExecutionStart):
            name = "tool_start"
        elif isinstance(event, RunEnd):
            end.append(event.result)
        if name is None:
            return
        counters[name] += 1
        for item in spec.inputs:
            if item.event == name and item.k == counters[name]:
                queue_input(agent, item.kind, f"queued {item.kind}")
        anchor = spec.abort
        if anchor is not None and anchor.event == name and anchor.k == counters[name]:
            if anchor.how == "abort" or task is None:
                agent.abort("aborted by the oracle scenario")
            else:
                task.cancel()

    tree = RunTree()
    hooks.agent = agent
    hooks.finished = []
    if isinstance(model, ScenarioModel):
        model.agent = agent  # each request is kept beside the history it was sent with
    before = len(agent.messages)
    watch = CompactionWatch(agent)
    unsubscribe = agent.subscribe(on_event)
    unwatch = agent.subscribe(watch)
    try:
        result: RunResult | None = None
        prompt = "do the task" if spec.prompt else None
        decisions = None if spec.decisions is None else run_decisions(spec, hooks)
        if decisions is not None:
            result = await agent.run(decisions=decisions)
        elif sync and (spec.abort is None or spec.abort.how != "cancel"):
            try:
                result = await asyncio.to_thread(agent.run_sync, prompt, max_turns=spec.max_turns)
            except UsageError:  # run_sync claims the agent first: a refusal raises before
                obs.started = False
        else:
            try:  # run() claims the agent when called: a refusal raises here, not when awaited
                task = asyncio.ensure_future(agent.run(prompt, max_turns=spec.max_turns))
            except UsageError:
                obs.started = False
            else:
                try:
                    result = await task
                except asyncio.CancelledError:
                    if not task.cancelled():
                        raise
                    obs.cancelled = True
                    result = end[-1] if end else None
    finally:
        unwatch()
        unsubscribe()
        JOURNAL.reset(token)
    obs.ran = [c for c in journal if c not in tree.child_calls]  # the parent's own calls
    obs.child_problems = tree.problems()
    obs.compaction_cuts, obs.compaction_problems = watch.cuts, watch.problems
    if agent.after_tool_call == hooks.after:
        obs.finished = [c for c in hooks.finished if c in journal]
    obs.requests = request_count(model) - first_request
    if isinstance(model, ScenarioModel):
        obs.sent, model.agent = list(model.sent), None
    if result is not None:
        obs.state = result.state.value
        obs.turns = result.turns
        obs.tree_requests = result.counts.requests
        obs.new_messages = list(result.new_messages)
        obs.result_problems = result_problems(agent, result, before, watch)
    else:
        obs.new_messages = list(agent.messages[before:])
    if watch.cuts:  # what the run added, those messages its compactions replaced included
        obs.new_messages = watch.added_since(before)
    for message in obs.new_messages:
        if isinstance(message, ToolResultMessage):
            kind = classify(message)
            obs.results.append((message.tool_call_id, kind))
            obs.texts.setdefault(message.tool_call_id, (kind, message.text))
            obs.child_problems += tree.result_problems(message.tool_call_id, kind)
        elif isinstance(message, UserMessage):
            obs.users += 1
            obs.user_texts.append(message.text)
    return obs


class RunTree:
    """What the sub-agent runs of a parent run show through the parent's subscribers (their
    events carry ``parent``, `ParentRef`), checked as each arrives: each names the parent's
    run and one call for the whole child run, in order (``seq`` rising), starts and ends, and
    its history answers every call (the protocol at the child's level)."""

    def __init__(self) -> None:
        self.parent_run: str | None = None
        self.child_calls: set[str] = set()  # the child runs' own tool-call ids
        self.call_of: dict[str, str] = {}  # child run id -> the parent's call id
        self.states: dict[str, list[str]] = {}  # the parent's call id -> its child runs' ends
        self.last_seq: dict[str, int] = {}
        self.open: set[str] = set()
        self.parent_calls: set[str] = set()  # the calls whose tool started in the parent's run
        self._problems: list[str] = []

    def see(self, event: Event, journal: list[str]) -> None:
        """Check one forwarded event (a direct child's; a grandchild's is passed on as is)."""
        ref = event.parent
        assert ref is not None
        if ref.run_id != self.parent_run:
            if ref.run_id not in self.call_of:  # not a grandchild's either
                self._problems.append(
                    f"a sub-agent event ({type(event).__name__}) names parent run "
                    f"{ref.run_id!r}, not {self.parent_run!r}"
                )
            return
        run = event.run_id
        if isinstance(event, RunStart):
            self.call_of[run] = ref.call_id
            self.open.add(run)
            if ref.call_id not in self.parent_calls:
                self._problems.append(
                    f"sub-agent run {run} names call {ref.call_id!r}, not a call the parent's "
                    f"run started ({sorted(self.parent_calls)})"
                )
            journal.append(ref.call_id)  # the call's tool (the child run) started
        elif run not in self.call_of:
            self._problems.append(f"a sub-agent event ({type(event).__name__}) before its start")
            self.call_of[run] = ref.call_id
        if self.call_of[run] != ref.call_id:
            self._problems.append(
                f"sub-agent run {run}: an event names call {ref.call_id!r}, its start "
                f"{self.call_of[run]!r}"
            )
        last = self.last_seq.get(run, 0)
        if event.seq <= last:
            self._problems.append(f"sub-agent run {run}: seq {event.seq} after {last}")
        self.last_seq[run] = event.seq
        if isinstance(event, ToolExecutionStart):
            self.child_calls.add(event.call.id)
        if isinstance(event, RunEnd):
            self.open.discard(run)
            self.states.setdefault(ref.call_id, []).append(event.result.state.value)
            self._problems += [
                f"sub-agent run of call {ref.call_id}: {p}"
                for p in find_violations(list(event.result.messages))
            ]

    def orphan(self, event: Event) -> None:
        """An event of another run than the parent's that does not say it is a sub-agent's."""
        if event.run_id not in self.call_of:
            self.call_of[event.run_id] = "?"
            self._problems.append(
                f"events of run {event.run_id} (a sub-agent's) reach the parent's subscribers "
                f"without parent (the first: {type(event).__name__})"
            )

    def result_problems(self, call_id: str, kind: str) -> list[str]:
        """A parent call's result against its child run's end: ``ok`` for ``done``,
        ``child_<state>`` for ``<state>``."""
        if not (kind.startswith("child_") or (kind.startswith("ok[") and kind != "ok[*]")):
            return []  # a hook's result, an interruption: not the child's own
        states = self.states.get(call_id)
        if not states:
            if kind.startswith("child_"):
                return [f"call {call_id}: result {kind!r} without a sub-agent run"]
            return []
        want = "ok" if states[-1] == "done" else f"child_{states[-1]}"
        if not kind.startswith(want):
            return [f"call {call_id}: result {kind!r}, its sub-agent run ended {states[-1]!r}"]
        return []

    def problems(self) -> list[str]:
        """Everything seen so far, with the child runs that never ended."""
        return self._problems + [f"sub-agent run {run} never ended" for run in sorted(self.open)]


def result_problems(
    agent: Agent, result: RunResult, before: int, watch: CompactionWatch
) -> list[str]:
    """What `RunResult` says unlike the rules: ``messages`` is the history after the run;
    ``new_messages`` what the run added that is still in it (a compaction replaced the rest
    with its summary: the start moves as `shift_past` says); ``usage`` the sum of the usage
    its responses reported, those a compaction replaced included."""
    problems: list[str] = []
    history = list(agent.messages)
    if list(result.messages) != history:
        problems.append("RunResult.messages is not the agent's history after the run")
    start = shift_past(before, watch.cuts)
    if list(result.new_messages) != history[start:]:
        problems.append(
            f"RunResult.new_messages has {len(result.new_messages)} messages, "
            f"{tokens_of(result.new_messages)[:2]}...; the run added {len(history) - start} "
            f"still in the history (from index {start} after compactions cutting {watch.cuts})"
        )
    added = watch.added_since(before)
    usage = Usage()
    for message in added:
        if isinstance(message, AssistantMessage):
            usage = usage + message.usage
    got, want = result.usage, usage
    if (got.input_tokens, got.output_tokens) != (want.input_tokens, want.output_tokens):
        problems.append(
            f"RunResult.usage {got.input_tokens} in / {got.output_tokens} out, the run's "
            f"responses reported {want.input_tokens} / {want.output_tokens}"
        )
    return problems


def request_count(model: Any) -> int:
    requests = model.requests
    return requests if isinstance(requests, int) else len(requests)


async def play(
    scenario: Scenario,
    workdir: Path | None = None,
    *,
    model: Any = None,
    sync_runs: bool = False,
) -> ScenarioObservation:
    """Play ``scenario`` on a fresh agent (a session log in ``workdir`` when it has a cut).

    Args:
        scenario: what to play.
        workdir: where the session log goes (default a temporary folder).
        model: plays each run's steps (``load(steps)``, ``requests``, as `ScenarioModel`, the
            default, does); e.g. one that serves them over HTTP to a real SDK.
        sync_runs: play each run with `Agent.run_sync` in a worker thread (a new event loop per
            run, as a synchronous caller has), except a run cancelled at an anchor (it needs
            its task).
    """
    model = ScenarioModel() if model is None else model
    hooks = ScenarioHooks()
    ids = scenario_ids(scenario)
    for r, run in enumerate(scenario.runs):
        for step, call_ids in zip(run.steps, ids[r], strict=True):
            for call, call_id in zip(step.calls, call_ids, strict=True):
                hooks.calls[call_id] = call
    steps = rendered_steps(scenario)
    obs = ScenarioObservation()
    tmp: tempfile.TemporaryDirectory[str] | None = None
    path: Path | None = None
    if scenario.cut is not None or scenario.reopen:
        if workdir is None:
            tmp = tempfile.TemporaryDirectory(prefix="oracle-")
            workdir = Path(tmp.name)
        path = workdir / "session.jsonl"
        if path.exists():
            path.unlink()
    try:
        agent = Agent(
            model,
            messages=starting_history(scenario.history),
            session=path,
            **agent_options(scenario, hooks),
        )
        for r, run in enumerate(scenario.runs):
            if r and scenario.cut is not None:
                assert path is not None and agent.session is not None
                agent.session.close()
                obs.log_lines = cut_log(path, scenario.cut)
                agent = Agent.resume(path, model=model, **agent_options(scenario, hooks))
                obs.resumed = tokens_of(agent.messages)
                obs.resumed_state = str(agent.state)
            obs.runs.append(
                await drive_scenario_run(agent, model, run, steps[r], hooks, sync=sync_runs)
            )
            obs.histories.append(list(agent.messages))
            if scenario.reopen:
                assert path is not None
                agent = reopen(agent, path, model, scenario, hooks, r + 1, obs.reopen_problems)
        obs.agent = agent
        if agent.session is not None:
            agent.session.close()
    finally:
        if tmp is not None:
            tmp.cleanup()
    return obs


def held(agent: Agent) -> tuple[Any, ...]:
    """What a resume of an intact log must give back: the history (each message's role, text,
    call ids and result), the state and the pending calls (id, tool, arguments)."""
    return (
        [(m.role, m.text, tokens_of([m])[0]) for m in agent.messages],
        str(agent.state),
        [(p.id, p.tool_name, p.arguments) for p in agent.pending],
    )


def reopen(
    agent: Agent,
    path: Path,
    model: Any,
    scenario: Scenario,
    hooks: ScenarioHooks,
    run: int,
    problems: list[str],
) -> Agent:
    """Close ``agent``'s session log and `Agent.resume` it whole; the resumed agent must hold
    the same history, state and pending calls (what differs goes to ``problems``)."""
    was = held(agent)
    assert agent.session is not None
    agent.session.close()
    resumed = Agent.resume(path, model=model, **agent_options(scenario, hooks))
    now = held(resumed)
    for name, a, b in zip(("history", "state", "pending calls"), was, now, strict=True):
        if a != b:
            problems.append(f"after run {run}: the resumed log's {name} is {b}, the agent held {a}")
    return resumed


def cut_log(path: Path, cut: Cut) -> list[dict[str, Any]]:
    """Cut the log as ``cut`` says; return the complete lines kept, parsed."""
    raw = path.read_bytes().split(b"\n")
    lines = [line for line in raw if line]
    keep = max(1, len(lines) - cut.lines)
    kept = lines[:keep]
    data = b"".join(line + b"\n" for line in kept)
    if cut.torn and keep < len(lines):
        nxt = lines[keep]
        data += nxt[: max(1, len(nxt) // 2)]
    path.write_bytes(data)
    parsed = [json.loads(line) for line in kept[1:]]
    # A sub-agent's records (``child`` lines) are its run's, not the parent's history.
    return [line for line in parsed if line.get("type") != "child"]
