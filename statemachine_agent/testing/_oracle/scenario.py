"""A scenario: what one example does (responses, tool and hook behaviours, limits, aborts,
queued input, runs, a session-log cut), and the tool-call ids it uses."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

# -- the scenario ------------------------------------------------------------------------------

ToolName = Literal["job", "limited", "write", "nope", "delegate"]
"""``job`` (does what ``behaviour`` says), ``limited`` (``timeout_seconds=0.002``), ``write`` (a
write queue: calls on one ``key`` run in declaration order), ``nope`` (no such tool),
``delegate`` (a sub-agent, `Agent.as_tool`, playing `Scenario.child`)."""
BehaviourName = Literal[
    "return",
    "raise",
    "tool_error",
    "sleep",
    "hang",
    "slow",
    "finish",
    "cancel_itself",
    "cooperate",
    "message",
]
BeforeKind = Literal["allow", "rewrite", "deny", "terminate", "raise", "abort", "defer"]
DecisionKind = Literal["approve", "edit", "deny"]
"""A person's decision on a deferred call: approve it, approve it with edited arguments (its text
becomes ``out-edited``), deny it."""
AfterKind = Literal["keep", "rewrite", "readdress", "raise"]
"""What ``after_tool_call`` does: keep the result, rewrite it (a `ToolResultMessage` built for
this call), readdress (the same replacement built with another call's id: the engine answers the
call the hook ran for), raise."""
ArgsKind = Literal["valid", "invalid", "unparsable"]
StepKind = Literal[
    "end_turn",
    "tool_use",
    "stop_sequence",
    "max_tokens",
    "pause_turn",
    "refusal",
    "model_context_window_exceeded",  # cut by the context window (compaction off): not continued
    "brand_new_reason",
    "overloaded",  # a retryable provider error
    "cut",  # a stream that ends before its stop event (retryable)
    "invalid_request",  # a final provider error
    "reused_id",  # a response reusing an earlier tool-call id (the run fails)
]
AnchorEvent = Literal["turn_start", "response", "tool_start", "child_tool_start"]
"""The parent run's own events, or (``child_tool_start``) a tool start inside a ``delegate``
call's child run, counted across the run's child runs."""


@dataclass(frozen=True, slots=True)
class Call:
    """One tool call of a response.

    Attributes:
        tool: which tool (`ToolName`).
        behaviour: ``job``: return, raise, tool_error, sleep (stops early on abort), hang (ignores
            an abort), cooperate (works in chunks, stopping through
            ``ctx.signal.raise_if_aborted()``: "interrupted while running"), finish (returns ``ToolResult(..., terminate=True)``: the run ends ``done``
            after the batch), cancel_itself (raises its own `asyncio.CancelledError`: an error
            result, the batch goes on), message (returns its text as a `ToolResultMessage` built
            with another call's id: the engine addresses it to its own call); ``limited``:
            return, raise (`ValueError`), slow (times out); ignored for ``write``.
        args: valid, invalid (fails validation) or unparsable (JSON text cut short).
        before: what the ``before_tool_call`` hook does with it: allow, rewrite (its ``text``
            argument), deny, terminate (deny and end the run), raise, abort (calls
            ``agent.abort()`` and allows it), defer (the run stops in ``awaiting_approval``
            until a `RunSpec.decisions` run decides it).
        after: what ``after_tool_call`` does (`AfterKind`): keep, rewrite the result, readdress
            (a replacement built with another call's id), raise.
        key: the ``write`` tool's resource.
    """

    tool: ToolName = "job"
    behaviour: BehaviourName = "return"
    args: ArgsKind = "valid"
    before: BeforeKind = "allow"
    after: AfterKind = "keep"
    key: str = "a"


@dataclass(frozen=True, slots=True)
class Step:
    """One model step: a response (its stop reason and calls) or an error.

    A response with a ``max_tokens`` stop and calls has its last call truncated (never run).
    """

    kind: StepKind = "end_turn"
    calls: tuple[Call, ...] = ()


@dataclass(frozen=True, slots=True)
class Anchor:
    """Abort (``agent.abort``) or cancel (the task running the agent) when the run's ``k``-th
    event of ``event`` is emitted: a turn start (before its request), a response (its assistant
    message recorded), a tool-execution start."""

    event: AnchorEvent
    k: int
    how: Literal["abort", "cancel"] = "abort"


@dataclass(frozen=True, slots=True)
class Input:
    """Steering or follow-up input queued before the run (``event=None``) or at an anchor."""

    kind: Literal["steer", "follow_up"]
    event: AnchorEvent | None = None
    k: int = 0


@dataclass(frozen=True, slots=True)
class RunSpec:
    """One run: ``agent.run(prompt)`` (``prompt=False`` continues with ``agent.run()``) playing
    ``steps``, with the turn cap ``max_turns`` for this run only when given (``run(max_turns=N)``
    does not change the agent's cap). With ``decisions`` (call id, `DecisionKind`) the run is
    ``agent.run(decisions=...)`` on calls a ``defer`` hook held; a deferred call left out stays
    pending."""

    steps: tuple[Step, ...]
    prompt: bool = True
    abort: Anchor | None = None
    inputs: tuple[Input, ...] = ()
    max_turns: int | None = None
    decisions: tuple[tuple[str, DecisionKind], ...] | None = None


@dataclass(frozen=True, slots=True)
class Limits:
    """The scenario's `UsageLimits` (None: no limit). Each response reports ``INPUT_TOKENS``
    input and ``OUTPUT_TOKENS`` output tokens, so a token limit is crossed after a known
    response."""

    max_requests: int | None = None
    max_tool_calls: int | None = None
    max_output_tokens: int | None = None
    max_total_tokens: int | None = None


@dataclass(frozen=True, slots=True)
class Cut:
    """Between the runs: close the session log, drop its last ``lines`` lines (never the header),
    with ``torn`` keep the first half of the next one without its newline (a crash mid-write),
    then `Agent.resume` it."""

    lines: int = 1
    torn: bool = False


@dataclass(frozen=True, slots=True)
class Child:
    """The sub-agent every ``delegate`` call runs (a fresh history per call).

    Attributes:
        steps: its model's steps, the same for every call: ``tool_use`` with ``job`` calls
            (ids ``k<parent call>_<n>``), ``end_turn`` (its final text is the parent call's
            ``out-<id>``, so the call's result is ``ok[out-<id>]``), ``invalid_request`` (a
            final provider error: the child ends ``failed``).
        max_turns: the child's own turn cap.
    """

    steps: tuple[Step, ...]
    max_turns: int = 50


@dataclass(frozen=True, slots=True)
class Scenario:
    """Everything one example does.

    Attributes:
        runs: one or two runs.
        mode: tool execution.
        max_turns, max_continuations, max_tokens_policy: the `Agent` options.
        history: the history the agent starts from: none, a clean one, or one that ends
            mid-batch (a call without its result).
        cut: resume from the session log between the runs (None: the same agent goes on).
        should_continue: no hook, a hook that says stop after the first batch, one that raises.
        transform: no ``transform_context`` hook, one that rewrites what is sent (adds a note),
            one that raises.
        steering_mode, follow_up_mode: how queued input is delivered (the `Agent` options).
        limits: the agent's `UsageLimits` (`Limits`), None for none.
        grace: ``abort_grace_seconds``: short (2 ms) or realistic (1 s: a tool that stops on the
            abort always gets to).
        reopen: run with a session log, closed and `Agent.resume`-d whole after every run: the
            resumed agent holds the same history, state and pending calls (a batch waiting for
            decisions waits on, the same ids), and the runs go on as one agent's would.
        compaction: automatic compaction with a tiny threshold (`kit_compaction`): the runs
            compact mid-run; `RunResult` ``new_messages``, ``messages`` and ``usage`` are checked
            (each response then reports its usage).
        child: the sub-agent the ``delegate`` tool runs (None: no such tool).
    """

    runs: tuple[RunSpec, ...]
    mode: Literal["parallel", "sequential"] = "parallel"
    max_turns: int = 50
    max_continuations: int = 3
    max_tokens_policy: Literal["continue", "stop"] = "continue"
    history: Literal["none", "clean", "mid_batch"] = "none"
    cut: Cut | None = None
    should_continue: Literal["none", "stop", "raise"] = "none"
    transform: Literal["none", "rewrite", "raise"] = "none"
    steering_mode: Literal["all", "one_at_a_time"] = "all"
    follow_up_mode: Literal["all", "one_at_a_time"] = "one_at_a_time"
    limits: Limits | None = None
    grace: Literal["short", "realistic"] = "short"
    reopen: bool = False
    compaction: bool = False
    child: Child | None = None


def run_ids(spec: RunSpec, prefix: str) -> list[list[str]]:
    """The tool-call ids of a run's steps: ``<prefix>_<n>``."""
    counter = 0
    out = []
    for step in spec.steps:
        ids = []
        for _ in step.calls:
            counter += 1
            ids.append(f"{prefix}_{counter}")
        out.append(ids)
    return out


def scenario_ids(scenario: Scenario) -> list[list[list[str]]]:
    """The tool-call ids of each run's steps: ``r<run>_<n>``, unique across the scenario."""
    return [run_ids(run, f"r{r}") for r, run in enumerate(scenario.runs, 1)]
