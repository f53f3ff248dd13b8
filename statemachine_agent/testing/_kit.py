"""The pieces of the property-test kit: the kit's tools and model, one run driven with aborts and
queued input at chosen events, and the checks of what that run left (the protocol's rules 1-5, one run end in a
terminal state, matching event pairs).

`AgentKit` is what a user's factory receives: ``kit.agent(**their_options)`` builds an `Agent` on the
kit's model and tools (adding their tools and hooks); ``kit.sub_agent(...)`` a sub-agent tool
(`Agent.as_tool`) whose agent plays the kit's scripts too (`ChildPlayer`). `drive_run` runs it
once; `check_run` lists every invariant it broke (empty when all hold), at both levels of a run
tree (`check_tree`).
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .._agent import Agent
from .._compacting import Compaction
from .._errors import ToolError, UsageError
from .._events import (
    Event,
    RunEnd,
    RunStart,
    ToolExecutionEnd,
    ToolExecutionStart,
    TurnEnd,
    TurnStart,
)
from .._execution import ToolExecution, resolve
from .._hooks import BeforeToolCall, Decision, Defer, Deny, ToolCallInfo
from .._messages import AssistantMessage, Message
from .._protocol import find_violations, with_open_batch
from .._result import RunResult
from .._states import RUN_STOPS
from .._tools import Tool, ToolContext, ToolResult, tool
from ..models._base import ModelRequest, StreamEvent
from ..models._offline import ScriptedModel
from ._compaction import CompactionWatch
from ._oracle import (
    ORACLE_TOOLS,
    RunTree,
    ScenarioHooks,
    cut_stream,
    play_step,
    queue_input,
)
from .strategies import AbortPoint, Behaviour, DeliveryMode, QueuedInput


@tool
async def act(
    behaviour: Behaviour, ctx: ToolContext, seconds: float = 0.0, text: str = "ok"
) -> str | ToolResult:
    """Do what the arguments say (the kit's test tool).

    Args:
        behaviour: return, raise, tool_error, sleep, ignore_abort, deny, deny_stop or finish
            (return ``text`` as a result that ends the run).
        seconds: how long sleep and ignore_abort take.
        text: what to return (or the error message).
    """
    if behaviour == "finish":
        return ToolResult(text, terminate=True)
    if behaviour == "raise":
        raise RuntimeError(f"act raised: {text}")
    if behaviour == "tool_error":
        raise ToolError(f"act failed: {text}")
    if behaviour == "sleep":
        try:
            await asyncio.wait_for(ctx.signal.wait(), seconds)
        except TimeoutError:
            return text
        return "stopped early: the run was aborted"
    if behaviour == "ignore_abort":
        await asyncio.sleep(seconds)
    return text


@tool(resource="key")
def lookup(key: str) -> str:
    """Look a key up (a sync tool run in a worker thread; calls on one key queue).

    Args:
        key: what to look up.
    """
    return f"value of {key}"


KIT_TOOLS: tuple[Tool, ...] = (act, lookup)
"""The kit's tools: ``act`` (does what its arguments say) and ``lookup`` (sync, keyed resource)."""


def kit_before_tool_call(info: ToolCallInfo) -> Deny | Defer | None:
    """Deny ``act`` calls whose behaviour is ``deny`` (or ``deny_stop``: ``terminate=True``);
    defer those whose behaviour is ``defer`` (the run stops in ``awaiting_approval``)."""
    behaviour = info.arguments.get("behaviour") if info.tool.name == "act" else None
    if behaviour == "defer":
        return Defer("the kit defers this call")
    if behaviour == "deny":
        return Deny("the kit denies this call")
    if behaviour == "deny_stop":
        return Deny("the kit denies this call and stops the run", terminate=True)
    return None


def _chain(first: BeforeToolCall, then: BeforeToolCall | None) -> BeforeToolCall:
    if then is None:
        return first

    async def chained(info: ToolCallInfo) -> Any:
        decision = await resolve(first(info))
        return decision if decision is not None else await resolve(then(info))

    chained.__name__ = getattr(then, "__name__", "before_tool_call")
    return chained


def kit_summarize(old: Sequence[Message]) -> str:
    """The kit's scripted summarizer: names how many messages it replaced."""
    return f"kit summary of {len(old)} message(s)"


def kit_compaction(
    threshold: int = 40, keep_recent: int = 30, *, keep_recent_turns: int | None = None
) -> Compaction:
    """Automatic compaction for the kit: a tiny threshold (estimated tokens) so that short
    scripted runs compact, often more than once, with the scripted `kit_summarize`.

    Args:
        threshold: compact before a request whose context reaches this many tokens.
        keep_recent: estimated tokens of recent history kept (ignored with ``keep_recent_turns``).
        keep_recent_turns: keep this many newest turns instead of ``keep_recent`` tokens.
    """
    if keep_recent_turns is not None:
        return Compaction(
            threshold=threshold, keep_recent_turns=keep_recent_turns, summarize=kit_summarize
        )
    return Compaction(threshold=threshold, keep_recent=keep_recent, summarize=kit_summarize)


class ScriptPlayer:
    """A `Model` that plays the script loaded last (a `ScriptedModel` per run) and keeps every
    request it received."""

    def __init__(self) -> None:
        self._steps: list[dict[str, Any] | None] = []
        self._played = 0
        self.requests: list[ModelRequest] = []

    @property
    def name(self) -> str:
        """The model name reported."""
        return "kit-script"

    def load(self, steps: Sequence[dict[str, Any] | None]) -> None:
        """Play ``steps`` from now on (an exhausted script fails the request; a None step is a
        stream that ends before its stop event)."""
        ScriptedModel([step for step in steps if step is not None])  # its errors, now
        self._steps = list(steps)
        self._played = 0

    def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        """Record the request and play the next step."""
        self.requests.append(request)
        index = self._played
        self._played += 1
        return play_step("the kit's script", self._steps, index, request)


class ChildPlayer(ScriptPlayer):
    """The model of a sub-agent the kit builds (`AgentKit.sub_agent`): each of its runs (one
    per call of its tool, on a fresh history) plays the script loaded last from its start (the
    step is the number of responses in the request's history), its tool-call ids prefixed
    ``c<run>_`` (unique across its runs)."""

    def __init__(self) -> None:
        super().__init__()
        self._steps: list[dict[str, Any] | None] = []
        self.runs = 0

    @property
    def name(self) -> str:
        """The model name reported."""
        return "kit-sub-agent-script"

    def load(self, steps: Sequence[dict[str, Any] | None]) -> None:
        """Play ``steps`` in every run from now on (None: a stream cut short)."""
        self._steps = list(steps)

    def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        """Record the request and play the step its history has reached."""
        self.requests.append(request)
        index = sum(isinstance(m, AssistantMessage) for m in request.messages)
        if index == 0:
            self.runs += 1  # a new run (or its first request again, retried)
        step = self._steps[index] if index < len(self._steps) else {}
        if step is None:
            return cut_stream()
        played = prefix_ids([step], f"c{self.runs}_") if step else []
        return ScriptedModel(played, record_requests=False).stream(request)


@dataclass(slots=True)
class AgentKit:
    """What a factory receives to build the agent under test.

    Attributes:
        model: the kit's model; each run plays its own script.
        tool_execution: ``"parallel"`` or ``"sequential"`` (drawn per example).
        tools: the kit's tools and the oracle's (`ORACLE_TOOLS`).
        abort_grace_seconds: short, so tools that ignore an abort are cancelled quickly.
        hooks: the oracle scenarios' ``before_tool_call`` / ``after_tool_call`` hooks; they pass
            every call they do not handle on to the hooks given to `agent`.
        steering_mode: how queued steering is delivered (drawn per example).
        follow_up_mode: how queued follow-ups are delivered (drawn per example).
        compaction: automatic compaction for the agents it builds (e.g. `kit_compaction`);
            `drive_run` checks the history after every compaction.
        sub_agents: the sub-agent tools built by `sub_agent`, by tool name: their models.
    """

    model: ScriptPlayer
    tool_execution: ToolExecution = "parallel"
    tools: tuple[Tool, ...] = (*KIT_TOOLS, *ORACLE_TOOLS)
    abort_grace_seconds: float = 0.002
    hooks: ScenarioHooks = field(default_factory=ScenarioHooks)
    steering_mode: DeliveryMode = "all"
    follow_up_mode: DeliveryMode = "one_at_a_time"
    compaction: Compaction | None = None
    sub_agents: dict[str, ChildPlayer] = field(default_factory=dict)

    def sub_agent(
        self,
        factory: Callable[[AgentKit], Agent] | None = None,
        *,
        name: str = "helper",
        description: str = "Hand a sub-task to a helper agent.",
        max_turns: int | None = None,
    ) -> Tool:
        """A sub-agent tool (``agent.as_tool(name, description, max_turns=...)``) for the agent
        under test: ``factory(kit)`` builds the sub-agent (with *your* hooks and options) on a
        kit of its own whose model is a `ChildPlayer`; default a plain ``kit.agent()``. The
        kit's rule machine then calls it (``{"prompt": ...}``) with random scripts for both
        levels and checks the run tree (`check_tree`).

        Raises:
            ValueError: ``name`` is already one of this kit's sub-agents.
        """
        if name in self.sub_agents:
            raise ValueError(f"the kit already has a sub-agent named {name!r}: pass another name")
        player = ChildPlayer()
        kit = AgentKit(
            player,
            tool_execution=self.tool_execution,
            steering_mode=self.steering_mode,
            follow_up_mode=self.follow_up_mode,
        )
        child = kit.agent() if factory is None else factory(kit)
        self.sub_agents[name] = player
        return child.as_tool(name, description, max_turns=max_turns)

    def agent(
        self,
        *,
        tools: Sequence[Tool | Callable[..., Any]] = (),
        before_tool_call: BeforeToolCall | None = None,
        **options: Any,
    ) -> Agent:
        """An `Agent` on the kit's model and tools plus ``tools``; ``before_tool_call`` runs after
        the kit's own (which denies ``deny`` calls) and the oracle scenarios' (which handle only
        the calls of an oracle scenario that say so), ``after_tool_call`` after the scenarios';
        other ``options`` go to `Agent` as they are."""
        options.setdefault("abort_grace_seconds", self.abort_grace_seconds)
        options.setdefault("tool_execution", self.tool_execution)
        options.setdefault("steering_mode", self.steering_mode)
        options.setdefault("follow_up_mode", self.follow_up_mode)
        options.setdefault("model_retries", 1)
        options.setdefault("retry_backoff_seconds", 0.001)
        self.hooks.user_before = before_tool_call
        self.hooks.user_after = options.pop("after_tool_call", None)
        options.setdefault("compaction", self.compaction)
        return Agent(
            self.model,
            tools=[*self.tools, *tools],
            before_tool_call=_chain(kit_before_tool_call, self.hooks.before),
            after_tool_call=self.hooks.after,
            **options,
        )


@dataclass(slots=True)
class RunReport:
    """What one driven run left.

    Attributes:
        started: False when ``run`` refused to start (nothing to continue).
        result: the `RunResult` (from ``RunEnd`` when the task was cancelled).
        cancelled: the task running the agent was cancelled.
        events: every event of the run, in order.
        requests: the requests the model received in the run.
        history_before: the history's length before the run.
        compaction_cuts: how many messages each compaction of the run replaced, in order.
        compaction_problems: what broke at a compaction (`CompactionWatch`: rules 1-4 on the
            compacted history, the kept window, the cut at a turn boundary).
    """

    started: bool = True
    result: RunResult | None = None
    cancelled: bool = False
    events: list[Event] = field(default_factory=list)
    requests: list[ModelRequest] = field(default_factory=list)
    history_before: int = 0
    compaction_cuts: list[int] = field(default_factory=list)
    compaction_problems: list[str] = field(default_factory=list)

    @property
    def compactions(self) -> int:
        """Compactions that replaced history during the run."""
        return len(self.compaction_cuts)


def prefix_ids(script: Sequence[dict[str, Any]], prefix: str) -> list[dict[str, Any]]:
    """``script`` with every tool-call id prefixed (ids stay unique across several runs)."""
    out = []
    for step in script:
        content = step.get("content")
        if isinstance(content, list):
            step = {
                **step,
                "content": [
                    {**b, "id": f"{prefix}{b['id']}"} if b.get("type") == "tool_use" else b
                    for b in content
                ],
            }
        out.append(step)
    return out


async def drive_run(
    agent: Agent,
    prompt: str | None,
    *,
    abort: AbortPoint | None = None,
    inputs: Sequence[QueuedInput] = (),
    decisions: Mapping[str, Decision] | None = None,
) -> RunReport:
    """Run ``agent`` once (``prompt=None`` continues; with ``decisions``, decides calls awaiting
    approval), aborting and queueing input when the run's n-th event is emitted. A cancelled
    run's `asyncio.CancelledError` is caught and reported.

    Returns:
        The `RunReport`; ``started`` is False when ``run`` raised `UsageError` up front.
    """
    model = agent.model
    first_request = len(model.requests) if isinstance(model, ScriptPlayer) else 0
    report = RunReport(history_before=len(agent.messages))
    task: asyncio.Future[RunResult] | None = None
    for item in inputs:
        if item.after_events == 0:
            queue_input(agent, item.kind, item.text)

    watch = CompactionWatch(agent, report.compaction_cuts, report.compaction_problems)

    def on_event(event: Event) -> None:
        report.events.append(event)
        watch(event)
        count = len(report.events)
        for item in inputs:
            if item.after_events == count:
                queue_input(agent, item.kind, item.text)
        if abort is not None and abort.after_events == count:
            if abort.how == "abort" or task is None:
                agent.abort("aborted by the property-test kit")
            else:
                task.cancel()

    unsubscribe = agent.subscribe(on_event)
    try:
        try:
            task = asyncio.ensure_future(agent.run(prompt, decisions=decisions))  # raises up front
        except UsageError:
            report.started = False
        else:
            try:
                report.result = await task
            except asyncio.CancelledError:
                if not task.cancelled():
                    raise  # the kit's own task was cancelled, not the run
                report.cancelled = True
                ends = [e for e in report.events if isinstance(e, RunEnd)]
                report.result = ends[-1].result if ends else None
    finally:
        unsubscribe()
    if isinstance(model, ScriptPlayer):
        report.requests = model.requests[first_request:]
    return report


def check_history(agent: Agent) -> list[str]:
    """Invariants 1-4 on the agent's whole history (with a batch awaiting approval, on what it
    holds so far: its results and its waiting calls, in declaration order)."""
    messages: list[Message] = agent.messages
    held = agent.conversation.held
    if held is not None:
        messages = with_open_batch(
            messages, list(held.results.values()), {call.id for call in held.calls}
        )
    return [f"history: {p}" for p in find_violations(messages)]


def check_run(agent: Agent, report: RunReport) -> list[str]:
    """Every invariant the run broke (empty when all hold).

    1-4 on the history and on each request sent; 5: the report holds exactly one run (one
    ``run_start`` and one ``run_end``, every event of one ``run_id``: a report with no run or
    with two fails, saying so), whose result's state is the agent's state and terminal; 6: tool-execution starts and ends pair up by call id, turn starts
    and ends alternate with matching numbers.
    """
    problems = check_history(agent) + report.compaction_problems
    if not report.started:
        return problems
    for n, request in enumerate(report.requests, 1):
        problems += [f"request {n}: {p}" for p in find_violations(request.messages, request=True)]
    own = [e for e in report.events if e.parent is None]  # a sub-agent's are check_tree's
    problems += _check_ending(agent, report, own)
    problems += _check_pairs(own)
    problems += check_tree(report.events)
    return problems


def check_tree(events: Sequence[Event]) -> list[str]:
    """The invariants at the sub-agents' level of a run's events (those with ``parent``): each
    names the run and one call of it (whose tool started) for its whole run, in order; each of its runs starts and
    ends once, its tool-execution starts and ends and its turns pair up (invariant 6), and its
    history answers every call (rules 1-4 on ``RunEnd.result.messages``). (An event of another
    run without ``parent`` is the parent level's: invariant 5 of `check_run` names it.)"""
    tree = RunTree()
    runs: dict[str, list[Event]] = {}
    for event in events:
        if event.parent is None:
            if isinstance(event, RunStart) and tree.parent_run is None:
                tree.parent_run = event.run_id
            elif isinstance(event, ToolExecutionStart) and event.run_id == tree.parent_run:
                tree.parent_calls.add(event.call.id)
            continue
        tree.see(event, [])
        if event.parent.run_id == tree.parent_run:
            runs.setdefault(event.run_id, []).append(event)
    problems = tree.problems()
    for run, child in runs.items():
        call = tree.call_of.get(run, "?")
        problems += [f"sub-agent run of call {call}: {p}" for p in _check_pairs(child)]
    return problems


def _check_ending(agent: Agent, report: RunReport, events: Sequence[Event]) -> list[str]:
    problems = []
    starts = sum(isinstance(e, RunStart) for e in events)
    ends = [e for e in events if isinstance(e, RunEnd)]
    run_ids = list(dict.fromkeys(e.run_id for e in events))  # in order of appearance
    if starts != 1 or len(ends) != 1:
        runs = max(starts, len(ends))
        held = "no run" if runs == 0 else f"{runs} runs" if runs > 1 else "a broken run"
        problems.append(
            f"invariant 5: the report holds {held}: {starts} run_start and {len(ends)} run_end "
            "events (expected exactly one of each, of one run)"
        )
    elif len(run_ids) != 1:
        problems.append(
            f"invariant 5: the report holds {len(run_ids)} runs: its events come from runs "
            f"{', '.join(run_ids)} (expected one run)"
        )
    if agent.state not in RUN_STOPS:
        problems.append(f"invariant 5: the run ended in non-terminal state {str(agent.state)!r}")
    if report.result is not None and report.result.state != agent.state:
        problems.append(
            f"invariant 5: RunResult.state {report.result.state.value!r} != agent.state "
            f"{str(agent.state)!r}"
        )
    if agent.is_running:
        problems.append("invariant 5: the agent still says it is running")
    return problems


def _check_pairs(events: Sequence[Event]) -> list[str]:
    problems = []
    started: Counter[str] = Counter()
    ended: Counter[str] = Counter()
    open_turn: int | None = None
    for event in events:
        if isinstance(event, ToolExecutionStart):
            started[event.call.id] += 1
        elif isinstance(event, ToolExecutionEnd):
            if not started[event.call.id]:
                problems.append(f"invariant 6: tool {event.call.id!r} ended before it started")
            ended[event.call.id] += 1
        elif isinstance(event, TurnStart):
            if open_turn is not None:
                problems.append(f"invariant 6: turn {event.turn} started inside turn {open_turn}")
            open_turn = event.turn
        elif isinstance(event, TurnEnd):
            if open_turn != event.turn:
                problems.append(f"invariant 6: turn_end {event.turn} without its turn_start")
            open_turn = None
    if open_turn is not None:
        problems.append(f"invariant 6: turn {open_turn} never ended")
    for call_id in sorted(set(started) | set(ended)):
        if started[call_id] != 1 or ended[call_id] != 1:
            problems.append(
                f"invariant 6: tool {call_id!r} started {started[call_id]}x, "
                f"ended {ended[call_id]}x"
            )
    return problems
