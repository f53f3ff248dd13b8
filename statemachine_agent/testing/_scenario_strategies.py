"""Hypothesis strategies for the oracle's scenarios (`statemachine_agent.testing.Oracle`), and the
delivery modes of queued input. Public through `statemachine_agent.testing.strategies`.

`FAMILIES` lists the scenario families `scenarios` draws from, with their weights: a new family
of scenarios is added there (and drawn in `scenarios`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Literal

from hypothesis import strategies as st

from .._messages import (
    StopReason,
)
from ._oracle import (
    AfterKind,
    Anchor,
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
)

DeliveryMode = Literal["all", "one_at_a_time"]
DELIVERY_MODES: tuple[DeliveryMode, ...] = ("all", "one_at_a_time")
"""The ways queued input is delivered (``Agent(steering_mode=..., follow_up_mode=...)``)."""

FAMILIES: dict[str, int] = {
    "plain": 10,
    "limits": 6,
    "approval": 2,
    "cooperative": 1,
    "reopen": 1,
    "compacting": 1,
    "subagent": 3,
}
"""The scenario families `scenarios` draws, with their weights: plain ones, ones with usage limits
(no aborts), approval decisions (half of them with the session log reopened after each run), a
cooperative tool aborted mid-batch, plain ones with the session log reopened whole after each
run (`Scenario.reopen`), plain ones on an agent that compacts mid-run (`Scenario.compaction`),
ones with a sub-agent tool (`subagent_scenarios`)."""


def delivery_modes() -> st.SearchStrategy[DeliveryMode]:
    """A delivery mode for steering or follow-up input: ``"all"`` or ``"one_at_a_time"``."""
    return st.sampled_from(DELIVERY_MODES)


# -- scenarios for the oracle (`statemachine_agent.testing.Oracle`) ------------------------------
#
# A scenario is abstract (what each call and hook does, where the abort lands); the oracle predicts
# its outcome and `check_scenario` plays it on a real agent. Shrinking works on the abstract form,
# so a failure reads as "a batch of a raising call and a slow call, aborted at the 2nd tool start".

_CALL_TOOLS: tuple[ToolName, ...] = (
    "job",
    "job",
    "job",
    "limited",
    "limited",
    "write",
    "write",
    "nope",
)


_JOB_BEHAVIOURS: tuple[BehaviourName, ...] = (
    "return",
    "return",
    "raise",
    "tool_error",
    "sleep",
    "hang",
    "finish",  # a terminating result: the run ends done after the batch
    "cancel_itself",  # the tool's own CancelledError: an error result
    "cooperate",  # stops through ctx.signal.raise_if_aborted(): interrupted, never its own
    "cooperate",
    "message",  # a ToolResultMessage built with another call's id: it answers its own call
)


@st.composite
def oracle_calls(draw: st.DrawFn) -> Call:
    """A `Call`: mostly valid calls of the oracle's tools that run, with every behaviour (timeouts,
    raising, slow), invalid or unparsable arguments, and what each hook does with it."""
    tool_name = draw(st.sampled_from(_CALL_TOOLS))
    behaviour: BehaviourName
    if tool_name == "limited":
        behaviour = draw(st.sampled_from(("return", "raise", "slow", "slow")))
    elif tool_name == "job":
        behaviour = draw(st.sampled_from(_JOB_BEHAVIOURS))
    else:
        behaviour = "return"
    args: ArgsKind = draw(st.sampled_from(("valid",) * 10 + ("invalid", "unparsable")))
    before: BeforeKind = draw(
        st.sampled_from(
            ("allow",) * 8
            + ("rewrite", "deny", "terminate", "terminate", "raise", "raise", "abort")
        )
    )
    after: AfterKind = draw(st.sampled_from(("keep",) * 8 + ("rewrite", "readdress", "raise")))
    key = draw(st.sampled_from(("a", "a", "b")))
    return Call(tool_name, behaviour, args, before, after, key)


_GOING_ON: tuple[str, ...] = (
    "tool_use",
    "tool_use",
    "tool_use",
    "tool_use",
    "truncated",  # max_tokens with calls: the last one is truncated
    "truncated",
    "truncated",
    "max_tokens",  # without calls: a continuation (or past the cap, or policy "stop")
    "max_tokens",
    "brand_new_reason",  # an unknown stop reason with calls
    "writes",  # calls of the write-queue tool: their effects show the order
    "writes",
    "timeouts",  # a call that times out next to raising and slow calls
    "timeouts",
    "finishing",  # a call whose result ends the run (terminate=True) among others
    "finishing",
    "pause_turn",
    "pause_turn",
    "overloaded",
    "cut",
)
_FINAL: tuple[StepKind, ...] = (
    "end_turn",
    "end_turn",
    "end_turn",
    "stop_sequence",
    "refusal",
    "refusal",
    "refusal",
    "model_context_window_exceeded",  # cut by the context window, with or without calls
    "brand_new_reason",
    "invalid_request",
    "reused_id",
)


@st.composite
def oracle_steps(draw: st.DrawFn, *, max_steps: int = 4, max_calls: int = 4) -> tuple[Step, ...]:
    """Model steps for one run: 0 to ``max_steps - 1`` steps after which the run goes on (tool
    batches, truncated calls, continuations, retryable errors), then one that ends it (a final
    answer, a refusal with or without calls, a final error). No step is wasted after a final
    answer."""
    steps = []
    for _ in range(draw(st.integers(0, max_steps - 1))):
        kind = draw(st.sampled_from(_GOING_ON))
        calls: tuple[Call, ...] = ()
        if kind in ("tool_use", "brand_new_reason", "truncated"):
            n = draw(st.sampled_from((1, 2, 2, 3, 4)))
            calls = tuple(draw(oracle_calls()) for _ in range(min(n, max_calls)))
        if kind == "timeouts":
            neighbours = (
                Call("limited", "raise"),
                Call("job", "raise"),
                Call("job", "hang"),
                Call("job", "cooperate"),
            )
            calls = (
                replace(draw(oracle_calls()), tool="limited", behaviour="slow", args="valid"),
                *(draw(st.sampled_from(neighbours)) for _ in range(draw(st.integers(1, 2)))),
            )
            if draw(st.booleans()):
                calls = calls[::-1]
            kind = "tool_use"
        if kind == "finishing":
            finish = Call("job", "finish")
            others = [draw(oracle_calls()) for _ in range(draw(st.integers(0, 2)))]
            others.insert(draw(st.integers(0, len(others))), finish)
            calls = tuple(others)
            kind = "tool_use"
        if kind == "writes":
            calls = tuple(
                replace(draw(oracle_calls()), tool="write", args="valid")
                for _ in range(draw(st.integers(2, max(2, max_calls))))
            )
            kind = "tool_use"
        steps.append(Step("max_tokens" if kind == "truncated" else kind, calls))  # type: ignore[arg-type]
    final = draw(st.sampled_from(_FINAL))
    calls = ()
    with_calls = (  # final steps that may hold calls
        StopReason.REFUSAL.value,
        StopReason.MODEL_CONTEXT_WINDOW_EXCEEDED.value,
        "brand_new_reason",
    )
    if final in with_calls and draw(st.sampled_from((True, True, False))):
        calls = tuple(draw(oracle_calls()) for _ in range(draw(st.integers(1, 2))))
    steps.append(Step(final, calls))
    return tuple(steps)


@st.composite
def oracle_anchors(draw: st.DrawFn, steps: Sequence[Step], *, cancel: bool = True) -> Anchor | None:
    """An abort or a cancellation anchored to an event of the run these ``steps`` drive: the k-th
    tool start (landing inside a batch), the k-th response, the k-th turn start; or none."""
    n_calls = sum(len(s.calls) for s in steps)
    n_responses = max(1, len(steps))
    options = ["none", "none", "response", "turn_start"]
    if n_calls:
        options += ["tool_start", "tool_start", "tool_start", "tool_start"]
    event = draw(st.sampled_from(options))
    if event == "none":
        return None
    k = draw(st.integers(1, n_calls if event == "tool_start" else n_responses))
    # A cancellation at a tool start lands inside a batch, where calls that finished before it
    # must keep their results: drawn as often as an abort there.
    hows = ("abort", "cancel") if event == "tool_start" else ("abort", "cancel", "abort")
    how = draw(st.sampled_from(hows)) if cancel else "abort"
    return Anchor(event, k, how)  # type: ignore[arg-type]


@st.composite
def oracle_inputs(draw: st.DrawFn, steps: Sequence[Step]) -> tuple[Input, ...]:
    """Steering and follow-up input: queued before the run, at a tool start or at a response."""
    n_calls = sum(len(s.calls) for s in steps)
    out: list[Input] = []
    if draw(st.integers(0, 5)) == 0:
        # Steering and a follow-up queued together (the follow-up first): steering goes first.
        out += [Input("follow_up"), Input("steer")]
    for _ in range(draw(st.sampled_from((0, 0, 0, 1, 1, 2)))):
        kind: Literal["steer", "follow_up"] = draw(st.sampled_from(("steer", "follow_up")))
        events: list[str] = ["before", "response"] + (["tool_start"] if n_calls else [])
        event = draw(st.sampled_from(events))
        if event == "before":
            out.append(Input(kind))
        else:
            bound = n_calls if event == "tool_start" else len(steps)
            out.append(Input(kind, event, draw(st.integers(1, max(1, bound)))))  # type: ignore[arg-type]
    return tuple(out)


@st.composite
def oracle_runs(
    draw: st.DrawFn, *, prompt: bool = True, max_steps: int = 4, cancel: bool = True
) -> RunSpec:
    """One `RunSpec`: steps, an anchored abort or cancellation, queued input."""
    steps = draw(oracle_steps(max_steps=max_steps))
    anchor = draw(oracle_anchors(steps, cancel=cancel))
    inputs = draw(oracle_inputs(steps))
    return RunSpec(steps, prompt=prompt, abort=anchor, inputs=inputs)


def _without_aborts(spec: RunSpec) -> RunSpec:
    steps = tuple(
        replace(
            step,
            calls=tuple(
                replace(c, before="allow") if c.before == "abort" else c for c in step.calls
            ),
        )
        for step in spec.steps
    )
    return replace(spec, steps=steps, abort=None)


@st.composite
def oracle_limits(draw: st.DrawFn, steps: Sequence[Step]) -> Limits:
    """`Limits` of one kind, with a value the run these ``steps`` drive would cross:
    ``max_tool_calls`` under its calls, ``max_requests`` under its steps, ``max_output_tokens``
    or ``max_total_tokens`` under what its responses report (10 output, 20 input tokens each)."""
    n_steps = len(steps)
    n_calls = sum(len(step.calls) for step in steps)
    kind = draw(
        st.sampled_from(("max_tool_calls", "max_requests", "max_output_tokens", "max_total_tokens"))
    )
    if kind == "max_tool_calls" and n_calls:
        return Limits(max_tool_calls=draw(st.integers(0, n_calls - 1)))
    if kind in ("max_requests", "max_tool_calls"):
        return Limits(max_requests=draw(st.integers(0, max(0, n_steps - 1))))
    k = draw(st.integers(0, max(0, n_steps - 1)))
    if kind == "max_output_tokens":
        return Limits(max_output_tokens=10 * k + draw(st.sampled_from((5, 0))))
    return Limits(max_total_tokens=30 * k + draw(st.sampled_from((15, 0))))


_APPROVAL_CALLS: tuple[tuple[ToolName, BehaviourName], ...] = (
    ("job", "return"),
    ("job", "raise"),
    ("job", "tool_error"),
    ("job", "cooperate"),
    ("job", "message"),
    ("write", "return"),
    ("limited", "return"),
)


@st.composite
def approval_scenarios(draw: st.DrawFn) -> Scenario:
    """A batch some of whose calls a before hook defers (the others run, are denied or have
    their result rewritten), the run stopping in ``awaiting_approval``; then decisions
    (approve, edit, deny) on all of them, in any order, or on some first (partial: the run stays
    waiting) and the rest in a further run, which goes on to the model's next steps."""
    n = draw(st.sampled_from((2, 3, 1)))
    calls = []
    for _ in range(n):
        tool_name, behaviour = draw(st.sampled_from(_APPROVAL_CALLS))
        before: BeforeKind = draw(st.sampled_from(("defer", "defer", "defer", "allow", "deny")))
        after: AfterKind = draw(st.sampled_from(("keep", "keep", "keep", "rewrite", "readdress")))
        calls.append(
            Call(tool_name, behaviour, "valid", before, after, draw(st.sampled_from("ab")))
        )
    if not any(c.before == "defer" for c in calls):
        k = draw(st.integers(0, n - 1))
        calls[k] = replace(calls[k], before="defer")
    ids = [f"r1_{i}" for i in range(1, n + 1)]
    deferred = [i for i, c in zip(ids, calls, strict=True) if c.before == "defer"]
    chosen: list[tuple[str, DecisionKind]] = [
        (i, draw(st.sampled_from(("approve", "edit", "deny")))) for i in deferred
    ]
    runs = [RunSpec((Step("tool_use", tuple(calls)),))]
    # In any order: decisions are matched to calls by id, whatever the order they are given in,
    # and a partial decision may leave any of the calls waiting (not only the last ones).
    chosen = draw(st.permutations(chosen))
    if len(chosen) > 1 and draw(st.sampled_from((True, True, False))):
        cut = draw(st.integers(1, len(chosen) - 1))
        runs.append(RunSpec((), prompt=False, decisions=tuple(chosen[:cut])))
        chosen = chosen[cut:]
    later = draw(oracle_steps(max_steps=2))
    runs.append(RunSpec(later, prompt=False, decisions=tuple(chosen)))
    return Scenario(
        tuple(runs),
        mode=draw(st.sampled_from(("parallel", "sequential"))),
        max_turns=draw(st.sampled_from((50, 50, 1))),
        grace="realistic",
        reopen=draw(st.sampled_from((True, True, False))),  # resumed while the batch waits
    )


def _no_window_stops(spec: RunSpec) -> RunSpec:
    # A context-window stop is not modelled with compaction on (the agent compacts and retries).
    steps = tuple(
        replace(step, kind="end_turn", calls=())
        if step.kind == "model_context_window_exceeded"
        else step
        for step in spec.steps
    )
    return replace(spec, steps=steps)


_CHILD_BEHAVIOURS: tuple[BehaviourName, ...] = (
    "return",
    "return",
    "raise",
    "tool_error",
    "sleep",
    "cooperate",
)


@st.composite
def child_scripts(draw: st.DrawFn, *, tools: bool = False) -> Child:
    """A sub-agent's script (`Child`): 0-2 tool batches of ``job`` calls (1-2 each; at least
    one batch with ``tools``), then a final answer or a final provider error, with a turn cap
    of its own (often under its batches: it ends ``max_turns``)."""
    batches = draw(st.integers(1 if tools else 0, 2))
    steps = [
        Step(
            "tool_use",
            tuple(
                Call("job", draw(st.sampled_from(_CHILD_BEHAVIOURS)))
                for _ in range(draw(st.integers(1, 2)))
            ),
        )
        for _ in range(batches)
    ]
    steps.append(Step(draw(st.sampled_from(("end_turn",) * 3 + ("invalid_request",)))))
    return Child(tuple(steps), draw(st.sampled_from((50, 50, 1, 2))))


def _plain(call: Call) -> Call:
    # Next to a sub-agent call: a call of the oracle's own tools without an abort, a deferral
    # or a terminating denial in its hook (the sub-agent family's aborts are anchored in the
    # child; a sub-agent call always runs).
    tool_name: ToolName = "job" if call.tool == "nope" else call.tool
    before: BeforeKind = "allow" if call.before in ("abort", "defer") else call.before
    before = "deny" if before == "terminate" else before
    return replace(call, tool=tool_name, before=before)


@st.composite
def delegate_calls(draw: st.DrawFn, *, hooks: bool = True) -> Call:
    """A call of the ``delegate`` (sub-agent) tool: mostly valid and allowed, at times denied,
    with a raising before hook, its result rewritten or the after hook raising."""
    if not hooks:
        return Call("delegate")
    args: ArgsKind = draw(st.sampled_from(("valid",) * 10 + ("invalid",)))
    before: BeforeKind = draw(st.sampled_from(("allow",) * 8 + ("deny", "raise")))
    after: AfterKind = draw(st.sampled_from(("keep",) * 8 + ("rewrite", "raise")))
    return Call("delegate", args=args, before=before, after=after)


@st.composite
def subagent_runs(draw: st.DrawFn, *, hooks: bool = True, max_steps: int = 2) -> RunSpec:
    """A run whose first batch ends with a ``delegate`` call (after 0-1 other calls; at times
    followed by a call truncated by ``max_tokens``), then plain steps, at times with a second
    ``delegate`` batch."""
    others = tuple(_plain(draw(oracle_calls())) for _ in range(draw(st.integers(0, 1))))
    first = Step("tool_use", (*others, draw(delegate_calls(hooks=hooks))))
    if draw(st.integers(0, 2)) == 2:  # cut by max_tokens: a trailing call truncated
        first = Step("max_tokens", (*first.calls, _plain(draw(oracle_calls()))))
    rest = [
        replace(step, calls=tuple(_plain(c) for c in step.calls))
        for step in draw(oracle_steps(max_steps=max_steps))
    ]
    if draw(st.integers(0, 3)) == 3:
        rest.insert(0, Step("tool_use", (draw(delegate_calls(hooks=hooks)),)))
    return RunSpec((first, *rest))


@st.composite
def subagent_scenarios(draw: st.DrawFn) -> Scenario:
    """A parent agent one of whose tools is a sub-agent (``delegate``, `Agent.as_tool`,
    playing a `Child` script): plain; the parent aborted at a tool start inside the child run
    (``abort``); with usage limits the child's run reaches (``limit``); the session log cut
    (at times inside the child's records) and resumed, or reopened whole after each run."""
    variant = draw(
        st.sampled_from(("plain", "abort", "abort", "limit", "limit", "resume", "reopen"))
    )
    child = draw(child_scripts(tools=variant in ("abort", "limit")))
    first = draw(subagent_runs(hooks=variant != "abort"))
    limits, cut, reopen, grace = None, None, False, "realistic"
    runs = [first]
    if variant == "abort":
        k = draw(st.integers(1, len(child.steps[0].calls)))  # in the child's first batch
        runs[0] = replace(first, abort=Anchor("child_tool_start", k))
        grace = draw(st.sampled_from(("realistic", "realistic", "short")))
    elif variant == "limit":  # no aborts
        kind = draw(
            st.sampled_from(
                ("max_requests", "max_tool_calls", "max_output_tokens", "max_total_tokens")
            )
        )
        value = draw(st.integers(1, 3))  # the child's run reaches it, often
        if kind.endswith("_tokens"):
            value = (
                10 * value + draw(st.sampled_from((5, 0))) + (20 * value if "total" in kind else 0)
            )
        limits = Limits(**{kind: value})
    elif variant in ("resume", "reopen"):
        reopen = variant == "reopen"
        if variant == "resume":
            cut = Cut(draw(st.integers(0, 12)), draw(st.booleans()))
        runs.append(draw(subagent_runs(max_steps=2)))
    return Scenario(
        tuple(runs),
        draw(st.sampled_from(("parallel", "sequential"))),
        max_turns=draw(st.sampled_from((50, 50, 2))),
        cut=cut,
        limits=limits,
        grace=grace,  # type: ignore[arg-type]
        reopen=reopen,
        child=child,
    )


@st.composite
def scenarios(
    draw: st.DrawFn,
    *,
    max_steps: int = 4,
    second_run: bool = True,
    families: Sequence[str] = tuple(FAMILIES),
) -> Scenario:
    """A whole `Scenario`: agent options (tool execution, ``max_turns`` 1-3 or many, continuation
    cap 0-3, ``max_tokens_policy`` both ways, ``should_continue`` and ``transform_context``
    hooks, both delivery modes of steering and follow-ups), a starting history (none, clean, ending mid-batch), a first run, and maybe a second
    one: continued without a prompt (raising ``max_turns``), a new prompt, or a new prompt after
    the session log was cut at a random line (maybe mid-line) and resumed. ``families``: which
    kinds of scenario are drawn: plain ones, ones with usage limits (no aborts), approval
    decisions (`approval_scenarios`), a cooperative tool aborted mid-batch with a realistic
    grace."""
    mode: Literal["parallel", "sequential"] = draw(st.sampled_from(("parallel", "sequential")))
    max_turns = draw(st.sampled_from((50, 50, 1, 2, 3)))
    max_continuations = draw(st.sampled_from((3, 0, 1, 2)))
    policy: Literal["continue", "stop"] = draw(st.sampled_from(("continue", "stop")))
    history: Literal["none", "clean", "mid_batch"] = draw(
        st.sampled_from(("none", "none", "none", "clean", "mid_batch"))
    )
    should_continue: Literal["none", "stop", "raise"] = draw(
        st.sampled_from(("none",) * 8 + ("stop", "raise"))
    )
    transform: Literal["none", "rewrite", "raise"] = draw(
        st.sampled_from(("none",) * 8 + ("rewrite", "raise"))
    )
    steering: DeliveryMode = draw(delivery_modes())
    follow_ups: DeliveryMode = draw(delivery_modes())
    family = draw(st.sampled_from([f for f in families for _ in range(FAMILIES[f])]))
    if family == "approval":
        return draw(approval_scenarios())
    if family == "subagent":
        return draw(subagent_scenarios())
    grace: Literal["short", "realistic"] = draw(st.sampled_from(("short", "realistic")))
    first = draw(oracle_runs(max_steps=max_steps))
    limits = None
    if family == "limits":  # limits with aborts are not modelled: each alone
        first = _without_aborts(first)
        limits = draw(oracle_limits(first.steps))
    elif family == "cooperative":
        # A batch with a tool that stops through raise_if_aborted(), aborted at one of its
        # tool starts, with a realistic grace: the tool stops itself ("interrupted").
        calls = [Call("job", "cooperate"), draw(oracle_calls())]
        if draw(st.booleans()):
            calls.reverse()
        steps = (Step("tool_use", tuple(calls)), *draw(oracle_steps(max_steps=2)))
        first = RunSpec(steps, abort=Anchor("tool_start", draw(st.integers(1, 2))))
        grace = "realistic"
    if family == "reopen":  # queued input is the agent's, not the log's: none left to resume
        first = replace(first, inputs=())
    compacting = family == "compacting"
    if compacting:
        first = _no_window_stops(first)
        history = "none" if history == "mid_batch" else history
        if draw(st.sampled_from((True, True, False))):
            # A paused response, continued, then a batch: later requests carry it joined.
            paused = (Step("pause_turn"), Step("tool_use", (draw(oracle_calls()),)))
            first = replace(first, steps=(*paused, *first.steps))
    runs = [first]
    cut = None
    thens: tuple[str, ...] = ("none", "none", "continue", "prompt", "resume", "resume")
    if limits is not None:
        thens = ("none", "prompt")
    elif family in ("reopen", "compacting"):  # no cut log: reopened whole, or none
        thens = ("none", "continue", "prompt")
    then = draw(st.sampled_from(thens))
    if second_run and then != "none":
        second = draw(oracle_runs(prompt=then != "continue", max_steps=3, cancel=False))
        if then == "continue":
            second = replace(second, max_turns=max_turns + draw(st.integers(1, 2)))
        if compacting:
            second = _no_window_stops(second)
        runs.append(second if limits is None else _without_aborts(second))
        if then == "resume":
            cut = Cut(draw(st.integers(0, 12)), draw(st.booleans()))
    return Scenario(
        tuple(runs),
        mode,
        max_turns,
        max_continuations,
        policy,
        history,
        cut,
        should_continue,
        transform,
        steering,
        follow_ups,
        limits,
        grace,
        reopen=family == "reopen",
        compaction=compacting,
    )
