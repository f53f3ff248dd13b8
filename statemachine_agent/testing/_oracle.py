"""A reference model of the loop (the oracle) and a runner that plays the same scenario on an `Agent`.

The model is written from the loop's rules as the README and the public docstrings state them (what
the loop guarantees, the machine's transition table, the hooks' contracts, the session log), not
from the engine's code. Given a `Scenario` (responses, tool behaviours, hook behaviours, limits,
abort or cancellation anchored to an event, queued input, a second run, a session log cut and
resumed) it predicts, per run: whether it starts, the final state, turns, requests sent, the kind of
every tool result it adds, which calls run (and their order where the rules fix it). Where the
engine's outcome legitimately depends on timing (an abort while tools run, a task cancellation), it
predicts the set of allowed outcomes.

`run_scenario` plays a scenario on a real agent through the public API only (`Agent`, events,
`Agent.resume`, the session log file) and `compare` lists every difference from the prediction.
"""

from __future__ import annotations

import asyncio
import contextvars
import copy
import inspect
import json
import re
import tempfile
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

# Public names only (the engine's internals may change under it): the oracle sees the loop as a
# user does.
from .. import (
    HISTORY_ADAPTER,
    Agent,
    Allow,
    Approve,
    AssistantMessage,
    Defer,
    Deny,
    Event,
    Message,
    MessageEnd,
    RunEnd,
    RunResult,
    TextBlock,
    Tool,
    ToolCallBlock,
    ToolCallInfo,
    ToolContext,
    ToolError,
    ToolExecutionStart,
    ToolResult,
    ToolResultMessage,
    TurnInfo,
    TurnStart,
    UsageError,
    UsageLimits,
    UserMessage,
    tool,
)
from .._compacting import CUT_BY_WINDOW, NOT_RUN_WINDOW
from .._execution import OWN_CANCELLATION
from .._messages import StopReason
from .._protocol import (
    AFTER_TERMINATION,
    INTERRUPTED,
    NO_RESULT,
    NOT_RUN,
    NOT_RUN_PENDING,
    REFUSED,
    STOPPED_NOT_RUN,
    TRUNCATED,
    find_violations,
    unknown_stop_reason_text,
)
from ..models import ModelRequest, ResponseStart, ScriptedModel, StreamEvent, TextDelta
from ._compaction import CompactionWatch

# -- the scenario ------------------------------------------------------------------------------

ToolName = Literal["job", "limited", "write", "nope"]
"""``job`` (does what ``behaviour`` says), ``limited`` (``timeout_seconds=0.002``), ``write`` (a
write queue: calls on one ``key`` run in declaration order), ``nope`` (no such tool)."""
BehaviourName = Literal[
    "return", "raise", "tool_error", "sleep", "hang", "slow", "finish", "cancel_itself", "cooperate"
]
BeforeKind = Literal["allow", "rewrite", "deny", "terminate", "raise", "abort", "defer"]
DecisionKind = Literal["approve", "edit", "deny"]
"""A person's decision on a deferred call: approve it, approve it with edited arguments (its text
becomes ``out-edited``), deny it."""
AfterKind = Literal["keep", "rewrite", "raise"]
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
AnchorEvent = Literal["turn_start", "response", "tool_start"]

CONTEXT_WINDOW = "model_context_window_exceeded"
TRUNCATING = frozenset({"max_tokens", CONTEXT_WINDOW})
PAUSE_TURN = StopReason.PAUSE_TURN.value
REFUSAL = StopReason.REFUSAL.value
KNOWN_STOPS = frozenset(
    {"end_turn", "tool_use", "stop_sequence", "pause_turn", "refusal", *TRUNCATING}
)
ERROR_STEPS = frozenset({"overloaded", "cut", "invalid_request"})
RETRYABLE = frozenset({"overloaded", "cut"})
TIMEOUT_SECONDS = 0.002
HANG_SECONDS = 0.02
COOPERATE_CHUNKS = 3
"""The cooperative job's chunks of work (1 ms each), with ``ctx.signal.raise_if_aborted()``
before each."""
GRACE_SECONDS = {"short": 0.002, "realistic": 1.0}
"""``abort_grace_seconds`` of a scenario's agent, by `Scenario.grace`."""
INPUT_TOKENS, OUTPUT_TOKENS = 20, 10
"""The usage each response reports in a scenario with `Limits` (tokens)."""
EDITED = "out-edited"
"""The text argument an ``edit`` decision gives the call (``Approve(arguments=...)``)."""
DENY_REASON = "a person denies call"
"""A ``deny`` decision's reason, followed by the call's id."""
HOOK_DENIES = "the oracle's hook denies call"
"""The scenario's before hook's denial reason (``deny``), followed by the call's id."""
HOOK_TERMINATES = "the oracle's hook ends the run at call"
"""The reason of its terminating denial (``terminate``), followed by the call's id."""
REWRITTEN = "after-rewritten"
"""The result text the scenario's after hook gives (``rewrite``), followed by the call's id."""


@dataclass(frozen=True, slots=True)
class Call:
    """One tool call of a response.

    Attributes:
        tool: which tool (`ToolName`).
        behaviour: ``job``: return, raise, tool_error, sleep (stops early on abort), hang (ignores
            an abort), cooperate (works in chunks, stopping through
            ``ctx.signal.raise_if_aborted()``: "interrupted while running"), finish (returns ``ToolResult(..., terminate=True)``: the run ends ``done``
            after the batch), cancel_itself (raises its own `asyncio.CancelledError`: an error
            result, the batch goes on); ``limited``: return, raise (`ValueError`), slow (times out); ignored for
            ``write``.
        args: valid, invalid (fails validation) or unparsable (JSON text cut short).
        before: what the ``before_tool_call`` hook does with it: allow, rewrite (its ``text``
            argument), deny, terminate (deny and end the run), raise, abort (calls
            ``agent.abort()`` and allows it), defer (the run stops in ``awaiting_approval``
            until a `RunSpec.decisions` run decides it).
        after: what ``after_tool_call`` does: keep, rewrite the result, raise.
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


# -- result kinds ------------------------------------------------------------------------------

_TAG = re.compile(r"out-[A-Za-z0-9]+")

_PREFIXES: tuple[tuple[str, str], ...] = (
    ("not run: the arguments of this call were truncated", "truncated"),
    ("not run: the call was cut off by the model's context window", "window_cut"),
    ("not run: the response was cut off by the model's context window", "window_not_run"),
    ("not run: the response was cut off by the output token limit", "stopped_not_run"),
    ("not run: the response's stop reason", "unknown_stop"),
    # The safety net of a terminal state: no built-in path leaves a call for it to answer, so a
    # result of this kind is an engine fault the oracle must see, not another "not run".
    ("not run: the run ended in state", "ended_by_transition"),
    ("not run: an earlier call of this batch ended the run", "after_termination"),
    ("not run: the usage limit", "limit"),
    ("not run: the run was aborted while this call was awaiting approval", "not_run_pending"),
    ("not run", "not_run"),
    ("interrupted while running", "interrupted"),
    ("not executed: the model's response was a refusal", "refused"),
    ("no result recorded", "no_result"),
    ("cancellederror:", "own_cancel"),
    ("timed out", "timeout"),
    ("denied:", "denied"),
    ("the before_tool_call hook failed", "before_failed"),
    ("the after_tool_call hook failed", "after_failed"),
    ("unknown tool", "unknown_tool"),
    ("invalid arguments", "invalid"),
    ("stopped early", "stopped"),
    ("after-rewritten", "rewritten"),
)


def classify(result: ToolResultMessage) -> str:
    """The kind of a tool result, read from its text as the README and docstrings word it:
    ``ok[tag]``, ``error[tag]`` (an exception), ``tool_error[tag]``, ``timeout``, ``denied``,
    ``before_failed``, ``after_failed``, ``rewritten``, ``unknown_tool``, ``invalid``,
    ``truncated``, ``stopped_not_run`` (a cut response under ``max_tokens_policy="stop"``),
    ``unknown_stop`` (calls of a response with an unknown stop reason), ``window_cut`` and
    ``window_not_run`` (calls of a response cut by the context window), ``refused``,
    ``not_run``, ``ended_by_transition`` (never predicted: the terminal states' safety net),
    ``interrupted``, ``own_cancel`` (a tool's own `asyncio.CancelledError`), ``stopped``, ``no_result``.
    The tag is the ``out-...`` text the call was given, so a result sent to the wrong call shows."""
    text = result.text.strip()
    low = text.lower()
    for prefix, kind in _PREFIXES:
        if low.startswith(prefix):
            return kind
    match = _TAG.search(text)
    tag = match.group(0) if match else "?"
    if not result.is_error:
        return f"ok[{tag}]"
    if low.startswith("job failed"):
        return f"tool_error[{tag}]"
    if re.match(r"^[A-Za-z_][A-Za-z0-9_]*(Error|Exception):", text):
        return f"error[{tag}]"
    return f"other[{text[:60]}]"


def _matches(kind: str, allowed: Iterable[str]) -> bool:
    for pattern in allowed:
        if pattern == kind or (pattern.endswith("[*]") and kind.startswith(pattern[:-2])):
            return True
    return False


# -- the tools ---------------------------------------------------------------------------------

JOURNAL: contextvars.ContextVar[list[str] | None] = contextvars.ContextVar(
    "oracle_journal", default=None
)
"""The call ids of the oracle's tools, appended as each tool function starts (set by the runner)."""


def _record(ctx: ToolContext) -> None:
    journal = JOURNAL.get()
    if journal is not None:
        journal.append(ctx.call_id)


@tool
async def job(
    behaviour: Literal[
        "return", "raise", "tool_error", "sleep", "hang", "finish", "cancel_itself", "cooperate"
    ],
    ctx: ToolContext,
    text: str = "out-x",
) -> str | ToolResult:
    """Do what ``behaviour`` says (the oracle's test tool).

    Args:
        behaviour: return ``text``; raise `RuntimeError`; raise `ToolError`; sleep 2 ms (stopping
            early on abort); hang 20 ms ignoring an abort; finish: return ``text`` marked
            ``terminate=True`` (the run ends after the batch); cancel_itself: raise its own
            `asyncio.CancelledError` (nothing was aborted: an error result); cooperate: work in
            three 1 ms chunks, calling ``ctx.signal.raise_if_aborted()`` before each and at the
            end (an abort makes it raise: "interrupted while running").
        text: what to return (or the error message).
    """
    _record(ctx)
    if behaviour == "raise":
        raise RuntimeError(f"job raised: {text}")
    if behaviour == "finish":
        return ToolResult(text, terminate=True)
    if behaviour == "cancel_itself":
        raise asyncio.CancelledError(f"job cancelled itself: {text}")
    if behaviour == "tool_error":
        raise ToolError(f"job failed: {text}")
    if behaviour == "sleep":
        try:
            await asyncio.wait_for(ctx.signal.wait(), 0.002)
        except TimeoutError:
            return text
        return "stopped early: the run was aborted"
    if behaviour == "hang":
        await asyncio.sleep(HANG_SECONDS)
    if behaviour == "cooperate":
        for _ in range(COOPERATE_CHUNKS):
            ctx.signal.raise_if_aborted()
            await asyncio.sleep(0.001)  # a chunk of the tool's work
        ctx.signal.raise_if_aborted()
    return text


@tool(timeout_seconds=TIMEOUT_SECONDS)
async def limited(
    behaviour: Literal["return", "raise", "slow"], ctx: ToolContext, text: str = "out-x"
) -> str:
    """A tool with a 2 ms timeout.

    Args:
        behaviour: return ``text``; raise `ValueError`; slow (sleeps 1 s, so it times out).
        text: what to return (or the error message).
    """
    _record(ctx)
    if behaviour == "raise":
        raise ValueError(text)
    if behaviour == "slow":
        await asyncio.sleep(1)
    return text


@tool(resource="key")
async def write(key: str, ctx: ToolContext, text: str = "out-x") -> str:
    """Write ``text`` under ``key`` (calls on one key queue: the journal shows their order).

    Args:
        key: the resource written.
        text: what to write (returned).
    """
    _record(ctx)
    await asyncio.sleep(0)
    return text


ORACLE_TOOLS: tuple[Tool, ...] = (job, limited, write)
"""The tools the oracle's scenarios call."""


def call_block(call: Call, call_id: str) -> dict[str, Any]:
    """The ``tool_use`` block of ``call`` (its text argument is ``out-<id>``)."""
    tag = f"out-{call_id.replace('_', '')}"
    if call.args == "unparsable":
        arguments: Any = '{"behaviour": "ret'
    elif call.args == "invalid":
        arguments = {"behaviour": "explode", "key": 3}
    elif call.tool == "write":
        arguments = {"key": call.key, "text": tag}
    elif call.tool == "limited":
        arguments = {"behaviour": _limited_behaviour(call), "text": tag}
    else:
        arguments = {"behaviour": _job_behaviour(call), "text": tag}
    return {"type": "tool_use", "id": call_id, "name": call.tool, "input": arguments}


def _limited_behaviour(call: Call) -> str:
    return call.behaviour if call.behaviour in ("return", "raise", "slow") else "return"


def _job_behaviour(call: Call) -> str:
    return call.behaviour if call.behaviour != "slow" else "hang"


def _tag(call_id: str) -> str:
    return f"out-{call_id.replace('_', '')}"


# -- the reference model -----------------------------------------------------------------------


@dataclass
class RunPrediction:
    """What the rules say one run does.

    Attributes:
        started: False when ``run()`` refuses (nothing to continue).
        states: the allowed final states.
        cancelled: the allowed values of "the task was cancelled".
        turns: the allowed ``RunResult.turns``.
        requests: the allowed numbers of model requests.
        results: per call answered in the run, the allowed result kinds.
        order: the calls of each answered batch, in declaration order.
        ran_must, ran_may: calls whose tool must run / may run (no other may).
        ran_order: sequences of call ids whose tools must start in that order.
        users: the allowed numbers of user messages the run adds (prompt, steering, follow-ups,
            continue prompts), None when not predicted.
        exact: no timing-dependent outcome (an example the exhaustive mode can pin down).
        labels: what the scenario exercised (for `hypothesis.event` and coverage).
        finished: per call that may run, the kinds its result may have when the runner saw its
            tool and its ``after_tool_call`` hook return (the call finished): a finished call's
            result is kept whenever the run stops, by an abort or a cancellation. A call whose
            tool started and never finished is "interrupted".
        texts: per call a usage limit kept from running, the limit's exact text.
        deliveries: the queued input the run delivers, in order (``steer``, ``follow_up``),
            None when not predicted.
        approved: per call a decision of this run approved, how (approve or edit).
    """

    started: bool = True
    states: set[str] = field(default_factory=set)
    cancelled: set[bool] = field(default_factory=lambda: {False})
    turns: set[int] = field(default_factory=set)
    requests: set[int] = field(default_factory=set)
    results: dict[str, set[str]] = field(default_factory=dict)
    order: list[list[str]] = field(default_factory=list)
    ran_must: set[str] = field(default_factory=set)
    ran_may: set[str] = field(default_factory=set)
    ran_order: list[list[str]] = field(default_factory=list)
    users: set[int] | None = None
    exact: bool = True
    labels: set[str] = field(default_factory=set)
    loose: dict[str, set[str]] = field(default_factory=dict)
    ran_may_after: set[str] = field(default_factory=set)
    results_optional: set[str] = field(default_factory=set)
    finished: dict[str, set[str]] = field(default_factory=dict)
    texts: dict[str, str] = field(default_factory=dict)
    deliveries: list[str] | None = None
    approved: dict[str, DecisionKind] = field(default_factory=dict)


@dataclass
class Prediction:
    """The oracle's answer for a scenario: one `RunPrediction` per run. None for a run after a
    cancellation (the first run's end is timing-dependent: checked by the invariants only) and, until
    `compare` fills it in, for the run after a session-log cut (what `Agent.resume` rebuilds is
    predicted from the log's lines once they exist, `predict_resume`)."""

    runs: list[RunPrediction | None]
    labels: set[str] = field(default_factory=set)


Token = tuple[Any, ...]
"""An abstract message: ``("user",)``, ``("assistant", stop_reason, call_ids)``, ``("result",
call_id, kind)``."""


@dataclass
class _World:
    """The model's state between runs."""

    turns: int = 0
    last: str = "none"  # none, user, result, answer (cannot continue), open (can continue),
    # cut (an answer cut by the token limit or the context window: continued with a prompt to go on)
    dangling: list[str] = field(default_factory=list)
    steer: int = 0
    follow: int = 0
    uncertain: bool = False  # input may have been queued at an event the rules do not fix
    paused: bool = False  # the last complete response paused: the next request continues it
    # What the run counted toward its usage limits (a prompt starts again from zero).
    requests: int = 0
    tool_calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    # A batch held for decisions: (its calls, their ids, the held kinds by id, the waiting ids).
    pending: tuple[tuple[Call, ...], list[str], dict[str, str], list[str]] | None = None


def _last_of(tokens: Sequence[Token]) -> tuple[str, list[str]]:
    """(the last message's status, calls of the last assistant message without a result)."""
    if not tokens:
        return "none", []
    answered: set[str] = set()
    for token in reversed(tokens):
        if token[0] == "result":
            answered.add(token[1])
        elif token[0] == "assistant":
            stop, ids = token[1], token[2]
            if stop in ("aborted", "error"):
                return ("open" if tokens[-1] is token else "result"), []
            dangling = [i for i in ids if i not in answered]
            if tokens[-1] is token:
                return ("open", dangling) if ids else (_after_answer(stop), [])
            return "result", dangling
        else:
            return ("user" if tokens[-1] is token else "result"), []
    return "result", []


def _after_answer(stop: str) -> str:
    """The world's ``last`` after a response without calls that stopped with ``stop``: ``open``
    (paused: sent back as it is), ``cut`` (the token limit or the context window cut it: a run
    without a prompt asks the model to go on) or ``answer`` (complete: nothing to continue)."""
    if stop == PAUSE_TURN:
        return "open"
    return "cut" if stop in TRUNCATING else "answer"


def _paused(tokens: Sequence[Token]) -> bool:
    # The engine's `Run.awaits_continuation`: the last complete response (partial ones skipped)
    # paused without calls, and nothing came after it.
    for token in reversed(tokens):
        if token[0] != "assistant":
            return False
        if token[1] not in ("aborted", "error"):
            return bool(token[1] == PAUSE_TURN and not token[2])
    return False


def tokens_of(messages: Sequence[Message]) -> list[Token]:
    """The abstract form of a history (result kinds by `classify`)."""
    out: list[Token] = []
    for message in messages:
        if isinstance(message, ToolResultMessage):
            out.append(("result", message.tool_call_id, classify(message)))
        elif isinstance(message, AssistantMessage):
            out.append(
                (
                    "assistant",
                    str(message.stop_reason),
                    tuple(c.id for c in message.tool_calls),
                )
            )
        else:
            out.append(("user",))
    return out


@dataclass(frozen=True, slots=True)
class Declared:
    """The user's own hooks, described to the oracle (`agent_state_machine(declared=...)`).

    Each is a constant or a function of ``(tool_name, arguments)``; the scenario's own hook
    behaviour for a call is applied first, the declared one only to calls it allows (``before``) or
    keeps (``after``). A ``rewrite`` by a user hook is checked as "some ok result".

    Attributes:
        before: allow, deny, terminate, raise or rewrite.
        after: keep, rewrite or raise.
        max_continuations, max_tokens_policy: the agent's options (not readable from an `Agent`).
    """

    before: str | Callable[[str, dict[str, Any]], str] = "allow"
    after: str | Callable[[str, dict[str, Any]], str] = "keep"
    max_continuations: int = 3
    max_tokens_policy: Literal["continue", "stop"] = "continue"

    def before_of(self, name: str, arguments: dict[str, Any]) -> str:
        """The declared before decision for a call."""
        return self.before(name, arguments) if callable(self.before) else self.before

    def after_of(self, name: str, arguments: dict[str, Any]) -> str:
        """The declared after decision for a call."""
        return self.after(name, arguments) if callable(self.after) else self.after


class Oracle:
    """The reference model. ``Oracle(...).predict(scenario)``, or `predict_run` run by run.

    Args:
        max_turns, max_continuations, max_tokens_policy, mode: the agent's options.
        model_retries: retries of a retryable model failure (the kit uses 1).
        declared: the user's hooks (`Declared`), for kit runs.
    """

    def __init__(
        self,
        *,
        max_turns: int = 50,
        max_continuations: int = 3,
        max_tokens_policy: str = "continue",
        mode: str = "parallel",
        model_retries: int = 1,
        declared: Declared | None = None,
        should_continue: str = "none",
        transform: str = "none",
        steering_mode: str = "all",
        follow_up_mode: str = "one_at_a_time",
        limits: Limits | None = None,
    ) -> None:
        self.limits = limits
        self.steering_mode = steering_mode
        self.follow_up_mode = follow_up_mode
        self.should_continue = should_continue
        self.transform = transform
        self.max_turns = max_turns
        self.max_continuations = max_continuations
        self.policy = max_tokens_policy
        self.mode = mode
        self.model_retries = model_retries
        self.declared = declared or Declared()
        self.world = _World()

    # -- per call -------------------------------------------------------------------------

    def _before(self, call: Call, call_id: str) -> str:
        if call.before != "allow":
            return call.before
        name, args = call.tool, call_block(call, call_id)["input"]
        decision = self.declared.before_of(name, args)
        return "user_rewrite" if decision == "rewrite" else decision

    def _after(self, call: Call, call_id: str) -> str:
        if call.after != "keep":
            return call.after
        decision = self.declared.after_of(call.tool, call_block(call, call_id)["input"])
        return "user_rewrite" if decision == "rewrite" else decision

    def static(self, call: Call, call_id: str, truncated: bool) -> str | None:
        """The result of a call that never reaches its tool, or None when it would run."""
        if truncated:
            return "truncated"
        if call.tool == "nope":
            return "unknown_tool"
        if call.args != "valid":
            return "invalid"
        before = self._before(call, call_id)
        if before in ("deny", "terminate"):
            return "denied"
        if before == "raise":
            return "before_failed"
        return None

    def _tag_of(self, call: Call, call_id: str) -> str:
        before = self._before(call, call_id)
        if before == "rewrite":
            return "out-rw"
        if before == "user_rewrite":
            return "*"
        return _tag(call_id)

    def executed(self, call: Call, call_id: str) -> str:
        """What the tool itself gives when it runs undisturbed."""
        tag = self._tag_of(call, call_id)
        if call.tool == "limited":
            behaviour = _limited_behaviour(call)
            if behaviour == "slow":
                return "timeout"
            return f"error[{tag}]" if behaviour == "raise" else f"ok[{tag}]"
        if call.tool == "write":
            return f"ok[{tag}]"
        behaviour = _job_behaviour(call)
        if behaviour == "cancel_itself":
            return "own_cancel"
        if behaviour == "raise":
            return f"error[{tag}]"
        if behaviour == "tool_error":
            return f"tool_error[{tag}]"
        return f"ok[{tag}]"

    def graceful(self, call: Call, call_id: str) -> set[str]:
        """What the tool may give when the run is aborted while it runs (it sees the signal and
        gets the grace period, then is cancelled: interrupted)."""
        normal = self.executed(call, call_id)
        out = {normal, "interrupted"}
        if call.tool == "job" and call.behaviour == "sleep":
            out.add("stopped")
        return out

    def finished_kinds(self, call: Call, call_id: str, *, signalled: bool) -> set[str]:
        """The kinds of a call whose tool ran to its end and whose ``after_tool_call`` hook
        returned: what it gives undisturbed. With ``signalled`` (the run's abort signal may have
        been set while it ran) also what a tool that sees the signal gives: the sleeping job stops
        early, a tool's own `asyncio.CancelledError` counts as interrupted."""
        kinds = {self.executed(call, call_id)}
        if signalled and call.tool == "job":
            if call.behaviour == "sleep":
                kinds.add("stopped")
            if call.behaviour in ("cancel_itself", "cooperate"):
                kinds.add("interrupted")  # it raised CancelledError once the run was aborted
        return {self._after_kind(call, call_id, kind) for kind in kinds}

    def _finished(self, spec: RunSpec, ids: Sequence[Sequence[str]]) -> dict[str, set[str]]:
        """`finished_kinds` of every call of ``spec`` that reaches its tool when it runs. The
        signal can be set only by an ``abort`` anchor or a before hook that aborts (a
        cancellation of the task does not set it)."""
        signalled = (spec.abort is not None and spec.abort.how == "abort") or any(
            call.before == "abort" for step in spec.steps for call in step.calls
        )
        out: dict[str, set[str]] = {}
        for step, call_ids in zip(spec.steps, ids, strict=False):
            n = len(step.calls)
            for i, (call, call_id) in enumerate(zip(step.calls, call_ids, strict=True)):
                truncated = step.kind in TRUNCATING and i == n - 1
                if self.static(call, call_id, truncated) is None:
                    out[call_id] = self.finished_kinds(call, call_id, signalled=signalled)
        return out

    def _after_kind(self, call: Call, call_id: str, result: str) -> str:
        after = self._after(call, call_id)
        if after == "rewrite":
            return "rewritten"
        if after == "user_rewrite":
            return "ok[*]" if not result.startswith("ok[") else result.split("[")[0] + "[*]"
        if after == "raise":
            return "after_failed"
        return result

    def normal(self, call: Call, call_id: str, truncated: bool) -> str:
        """A call's result when nothing stops the batch."""
        static = self.static(call, call_id, truncated)
        if static is not None:
            return static
        return self._after_kind(call, call_id, self.executed(call, call_id))

    def _after_set(self, call: Call, call_id: str, kinds: set[str]) -> set[str]:
        # The after hook sees whatever the call produced, an abort's result included; a call
        # cancelled after the grace period never reaches it.
        return kinds | {self._after_kind(call, call_id, k) for k in kinds}

    # -- runs -----------------------------------------------------------------------------

    def predict(self, scenario: Scenario, ids: Sequence[Sequence[Sequence[str]]]) -> Prediction:
        """Predict every run of ``scenario`` (``ids[run][step]`` are the call ids used)."""
        world = self.world
        if scenario.history == "clean":
            world.last, world.dangling = "answer", []
        elif scenario.history == "mid_batch":
            world.last, world.dangling = "open", ["h2"]
        runs: list[RunPrediction | None] = []
        labels: set[str] = set()
        fuzzy = False
        for n, run in enumerate(scenario.runs):
            if n and scenario.cut is not None:
                runs.append(None)  # predicted after the log exists (`predict_resume`)
                labels.add("resume")
                continue
            if fuzzy or self.world.uncertain:
                runs.append(None)
                continue
            pred = self.predict_run(run, ids[n])
            labels |= pred.labels
            runs.append(pred)
            fuzzy = not pred.exact and run.abort is not None and run.abort.how == "cancel"
            if n and not run.prompt:
                labels.add("continue")
        return Prediction(runs, labels)

    def predict_run(self, spec: RunSpec, ids: Sequence[Sequence[str]]) -> RunPrediction:
        """Predict one run from the current world; updates the world to its end."""
        if spec.abort is not None and spec.abort.how == "cancel":
            prediction = self._predict_cancel(spec, ids)
        else:
            prediction = self._simulate(spec, ids)
        # A call approved in this run finished with its decided result (`_decide`).
        prediction.finished = {**self._finished(spec, ids), **prediction.finished}
        return prediction

    def _predict_cancel(self, spec: RunSpec, ids: Sequence[Sequence[str]]) -> RunPrediction:
        # A cancellation lands at the task's next suspension, which may be later than the anchor
        # (or never, when the rest of the run does not suspend): every outcome between "aborted
        # at the anchor" and "not cancelled at all" is allowed. Where it landed is read from the
        # run itself (`compare_run`): a call that finished before it keeps its own result
        # (`RunPrediction.finished`), one it caught running is interrupted, one it kept from
        # starting is not run.
        start = replace(self.world, dangling=list(self.world.dangling))
        assert spec.abort is not None
        aborted = self._simulate(replace(spec, abort=replace(spec.abort, how="abort")), ids)
        end_aborted = self.world
        if "anchor_fired" not in aborted.labels:
            if "anchor_maybe" in aborted.labels:
                # The run was aborting already when the event may have come: a cancellation may
                # have landed too (the run ends aborted either way).
                aborted.cancelled = {False, True}
                aborted.exact = False
                self.world.uncertain = True
            return aborted  # the anchor never came: nothing was cancelled
        self.world = replace(start, dangling=list(start.dangling))
        free = self._simulate(replace(spec, abort=None), ids)
        self.world = end_aborted
        out = RunPrediction(
            states=aborted.states | free.states,
            cancelled={True},
            turns=set(range(min(aborted.turns), max(free.turns | aborted.turns) + 1)),
            requests=set(range(min(aborted.requests), max(free.requests | aborted.requests) + 1)),
            exact=False,
            labels=aborted.labels
            | {"cancel"}
            | ({"cancel_inside_batch"} if "abort_inside_batch" in aborted.labels else set()),
        )
        for call_id in set(aborted.results) | set(free.results):
            out.results[call_id] = (
                aborted.results.get(call_id, set())
                | free.results.get(call_id, set())
                | aborted.loose.get(call_id, set())
                | {"interrupted", "not_run"}
            )
        out.order = free.order if len(free.order) >= len(aborted.order) else aborted.order
        out.ran_must = aborted.ran_must - aborted.ran_may_after
        out.ran_may = aborted.ran_may | free.ran_may | free.ran_must | aborted.ran_must
        out.users = None
        out.results_optional = set(free.results) - set(aborted.results)
        return out

    def _simulate(self, spec: RunSpec, ids: Sequence[Sequence[str]]) -> RunPrediction:
        w = self.world
        p = RunPrediction(deliveries=[])
        anchor = spec.abort
        counters: Counter[str] = Counter()
        inputs = list(spec.inputs)

        def fire(event: AnchorEvent) -> bool:
            """Count an event; queue inputs anchored to it; True when the abort fires."""
            counters[event] += 1
            for item in inputs:
                if item.event == event and item.k == counters[event]:
                    if item.kind == "steer":
                        w.steer += 1
                        p.labels.add("steer_during_run")
                    else:
                        w.follow += 1
                        p.labels.add("follow_up_during_run")
            if anchor is not None and anchor.event == event and anchor.k == counters[event]:
                p.labels.add("anchor_fired")
                return True
            return False

        def maybe(event: AnchorEvent) -> None:
            """An event that may or may not happen (a start announced for a call that never runs,
            after an abort): input anchored to it may or may not be queued."""
            counters[event] += 1
            if any(i.event == event and i.k == counters[event] for i in inputs):
                w.uncertain = True
            if anchor is not None and anchor.event == event and anchor.k == counters[event]:
                p.labels.add("anchor_maybe")  # the run is aborting already

        for item in inputs:
            if item.event is None:
                if item.kind == "steer":
                    w.steer += 1
                else:
                    w.follow += 1
        # run(max_turns=N) caps this run only; a later run without it has the agent's cap
        cap = self.max_turns if spec.max_turns is None else spec.max_turns
        if not spec.prompt and not (w.steer or w.follow) and w.last in ("answer", "none"):
            p.started = False
            p.states, p.turns, p.requests = set(), set(), {0}
            return p
        if spec.prompt:  # a prompt starts a new run: its limits count from zero
            w.requests = w.tool_calls = w.input_tokens = w.output_tokens = 0
        if self.limits is not None:
            p.labels.add("limits")
        if spec.decisions is not None and self._decide(p, spec.decisions):
            # Calls still wait for a decision: nothing runs or is sent.
            p.states, p.turns, p.requests, p.users = {"awaiting_approval"}, {w.turns}, {0}, {0}
            return p
        users = 0
        for call_id in w.dangling:  # a given history that ended mid-batch is answered first
            p.results[call_id] = {"no_result"}
            p.labels.add("dangling_repair")
        if w.dangling:
            p.order.append(list(w.dangling))
            w.last = "result"
        w.dangling = []
        if spec.prompt and w.paused:
            # The paused response is continued first; the prompt waits at the head of the
            # steering queue and is delivered when the model has finished that turn.
            w.turns = 0
            w.steer += 1
            p.labels.add("prompt_after_pause")
            p.deliveries = None  # the prompt is delivered as steering: not predicted
        elif spec.prompt:
            w.turns = 0
            users += 1
            w.last = "user"
            w.paused = False
            users += self._inject(p, follow_too=False)  # steering left queued: after the prompt
        elif w.paused:
            p.labels.add("continue_pause")  # the paused response goes back first, input waits
        elif w.last == "cut":
            # Continuing a cut answer: a user message asks the model to go on (as the run would
            # have), then queued steering follows it.
            p.labels.add("continue_cut")
            users += 1
            w.last = "user"
            users += self._inject(p, follow_too=False)
        else:
            users += self._inject(p, follow_too=True)
        continuations = 0
        requests = 0
        request_slack = 0
        aborted = False
        state = ""
        step_i = 0
        steps = spec.steps
        at_cap = not spec.prompt and w.turns >= cap
        start_hit = None if spec.decisions is not None else self._request_hit()
        if start_hit is not None:
            # A usage limit keeps the first request from being sent (``start [usage_limit]``).
            self._limit_stop(p, start_hit)
            p.labels.add("limit_at_start")
            at_cap, state = True, "max_turns"
        elif at_cap:
            # A run continued without a prompt keeps counting its turns: at its cap it stops
            # before any request (``start [turn_limit_reached]``).
            p.labels.add("max_turns_at_start")
            state = "max_turns"
        while not at_cap:
            if aborted:
                state = "aborted"
                break
            if fire("turn_start"):
                # Aborted before its request: nothing more is sent (it may already be in flight).
                request_slack = 1
                p.labels.add("abort_before_request")
                state = "aborted"
                if self.transform == "raise":
                    p.states.add("failed")  # building the request and the abort race
                    p.exact = False
                break
            if self.transform == "raise":
                # The request is never sent: the run fails saying the hook failed.
                p.labels.add("raising_transform")
                state = "failed"
                w.last = "open"
                break
            attempt = 0
            failed = False
            step: Step | None = None
            while True:
                attempt += 1
                step = steps[step_i] if step_i < len(steps) else None
                step_i += 1
                requests += 1
                if attempt == 1:
                    w.requests += 1  # a request retried after a transient failure counts once
                if step is None:
                    p.labels.add("script_exhausted")
                    failed = True
                    break
                if step.kind in RETRYABLE:
                    p.labels.add("retryable_error")
                    if attempt <= self.model_retries:
                        continue
                    failed = True
                    break
                if step.kind in ("invalid_request", "reused_id"):
                    p.labels.add(step.kind)
                    failed = True
                    break
                break
            if failed or step is None:
                state = "failed"
                w.last = "open"
                break
            call_ids = list(ids[step_i - 1])
            w.turns += 1
            if self.limits is not None:  # each response reports its usage
                w.input_tokens += INPUT_TOKENS
                w.output_tokens += OUTPUT_TOKENS
            stop = step.kind
            has_calls = bool(step.calls)
            w.last = "open" if has_calls else _after_answer(stop)
            w.paused = stop == PAUSE_TURN and not has_calls
            if fire("response"):
                aborted = True
                p.labels.add("abort_at_response")
            queued = bool(w.steer or w.follow)
            if aborted and not has_calls:
                state = "aborted"
                break
            if stop == REFUSAL:
                p.labels.add("refusal_with_calls" if has_calls else "refusal")
                for call_id in call_ids:
                    p.results[call_id] = {"refused"}
                if has_calls:
                    p.order.append(call_ids)
                    w.last = "result"
                state = "done"
                break
            unknown_with_calls = has_calls and stop not in KNOWN_STOPS  # answered first
            if self.limits is not None and not aborted and not unknown_with_calls:
                # After the refusal and unknown-stop rules, before any other: a batch that a
                # limit keeps from running (each call answered with the limit's text), or a
                # continuation or queued input whose request a limit forbids.
                hit = None
                acting = has_calls and not (stop in TRUNCATING and self.policy == "stop")
                if acting:
                    hit = self._calls_hit(len(call_ids))
                    if hit is not None:
                        for call_id in call_ids:
                            p.results[call_id] = {"limit"}
                            p.texts[call_id] = limit_text(hit)
                elif (
                    (stop == PAUSE_TURN and continuations < self.max_continuations)
                    or (
                        stop in TRUNCATING
                        and self.policy == "continue"
                        and continuations < self.max_continuations
                    )
                    or queued
                ):
                    hit = self._request_hit()
                    if hit is not None and has_calls:  # cut, policy stop: answered as not run
                        n = len(call_ids)
                        for i, call_id in enumerate(call_ids):
                            p.results[call_id] = {"truncated" if i == n - 1 else "stopped_not_run"}
                if hit is not None:
                    if has_calls:
                        p.order.append(call_ids)
                        w.last = "result"
                    self._limit_stop(p, hit)
                    state = "max_turns"
                    break
            if stop == CONTEXT_WINDOW:
                # Cut by the context window (automatic compaction off): never continued like a
                # token-limit cut; its calls are answered as not run (a trailing cut one as cut
                # by the window) and the run ends done with an error saying how to go on.
                p.labels.add("context_window_with_calls" if has_calls else "context_window")
                n = len(call_ids)
                for i, call_id in enumerate(call_ids):
                    p.results[call_id] = {"window_cut" if i == n - 1 else "window_not_run"}
                if has_calls:
                    p.order.append(call_ids)
                    w.last = "result"
                state = "done"
                break
            if has_calls and stop not in KNOWN_STOPS:
                # An unknown stop reason: nothing says its calls are complete, none runs; each is
                # answered "not run" and the run ends done (an abort as it came changes nothing).
                p.labels.add("unknown_stop_with_calls")
                for call_id in call_ids:
                    p.results[call_id] = {"unknown_stop"}
                p.order.append(call_ids)
                w.last = "result"
                state = "done"
                break
            if has_calls and stop in TRUNCATING and self.policy == "stop":
                # max_tokens_policy="stop": a cut response is not acted on. Its calls are answered
                # as not run (the cut one as truncated); then it is a response without calls.
                p.labels.add("max_tokens_stop_with_calls")
                p.labels.add("truncated_call")
                n = len(call_ids)
                for i, call_id in enumerate(call_ids):
                    p.results[call_id] = {"truncated" if i == n - 1 else "stopped_not_run"}
                p.order.append(call_ids)
                w.last = "result"
                has_calls = False
                if aborted:
                    # An abort as it came: the transitions after the response still decide (the
                    # turn cap with queued input, queued input whose delivery the abort stops, a
                    # final answer).
                    if w.turns >= cap and queued:
                        state = "max_turns"
                    else:
                        state = "aborted" if queued else "done"
                    break
            if has_calls:
                if stop != "tool_use":
                    p.labels.add(f"calls_with_{stop}")
                if not aborted:
                    w.tool_calls += len(call_ids)  # every call of a batch that runs counts
                terminate, aborted = self._batch(
                    p, step, call_ids, fire, maybe, aborted_before=aborted
                )
                if w.pending is not None:
                    # Deferred calls wait for a person: the batch's results wait with them.
                    state = "awaiting_approval"
                    break
                w.last = "result"
                if aborted:
                    state = "aborted"
                    break
                if not terminate:
                    finish = self._finishes(step, call_ids)
                    if finish:
                        # A result marked terminate=True ends the run done, before the turn cap
                        # and should_continue are read (a terminating denial would have won).
                        p.labels.add("terminating_result")
                        if finish == "maybe":
                            p.exact = False
                            p.states.add("done")
                        else:
                            state = "done"
                            break
                keep_going = True
                if self.should_continue == "stop":
                    keep_going = False
                    p.labels.add("should_continue_stop")
                if not keep_going:
                    state = "max_turns"
                    break
                if w.turns >= cap:
                    p.labels.add("max_turns_after_batch")
                    state = "max_turns"
                    break
                if terminate:
                    state = "aborted"
                    break
                if self.should_continue == "raise":
                    # A failing hook ends a run that would have gone on in failed.
                    p.labels.add("raising_should_continue")
                    state = "failed"
                    break
                hit = self._request_hit()
                if hit is not None:  # the next request is not sent
                    self._limit_stop(p, hit)
                    state = "max_turns"
                    break
                users += self._inject(p, follow_too=False)
                continue
            can_pause = stop == PAUSE_TURN and continuations < self.max_continuations
            can_more = (
                stop in TRUNCATING
                and self.policy == "continue"
                and continuations < self.max_continuations
            )
            if stop == PAUSE_TURN:
                p.labels.add("pause_turn" if can_pause else "pause_turn_past_cap")
            if stop in TRUNCATING:
                p.labels.add(f"max_tokens_{self.policy}" if can_more else "max_tokens_past_cap")
            if w.turns >= cap and (can_pause or can_more or queued):
                p.labels.add("max_turns_before_continuing")
                state = "max_turns"
                break
            if can_pause:
                continuations += 1
                continue
            if stop == PAUSE_TURN:
                # Past max_continuations the model is still working: max_turns, not an answer.
                state = "max_turns"
                break
            if can_more:
                continuations += 1
                users += 1
                w.last = "user"
                continue
            if queued:
                users += self._inject(p, follow_too=True)
                continue
            if stop not in ("end_turn", "stop_sequence", "tool_use", "pause_turn", *TRUNCATING):
                p.labels.add("unknown_stop_reason")
            state = "done"
            break
        p.states.add(state)
        p.turns = {w.turns}
        p.requests = {requests, requests + request_slack}
        p.users = {users}
        if w.turns >= cap:
            p.labels.add("hit_max_turns")
        if state == "max_turns":
            p.labels.add("state_max_turns")
        return p

    # -- usage limits (the `UsageLimits` docstring: when each is checked, what it counts) ------

    def _token_hit(self) -> tuple[str, int, int, int] | None:
        # A token limit is exceeded (used > value), counted after each response.
        w, limits = self.world, self.limits
        if limits is None:
            return None
        for name, used in (
            ("max_output_tokens", w.output_tokens),
            ("max_total_tokens", w.input_tokens + w.output_tokens),
        ):
            value = getattr(limits, name)
            if value is not None and used > value:
                return name, value, used, 0
        return None

    def _request_hit(self) -> tuple[str, int, int, int] | None:
        # Before a request: max_requests reached (one more wanted), or a token limit exceeded.
        w, limits = self.world, self.limits
        if limits is None:
            return None
        if limits.max_requests is not None and w.requests + 1 > limits.max_requests:
            return "max_requests", limits.max_requests, w.requests, 1
        return self._token_hit()

    def _calls_hit(self, wanted: int) -> tuple[str, int, int, int] | None:
        # Before a batch runs: a token limit exceeded, or the whole batch would take the run
        # past max_tool_calls (checked per batch, not per call).
        w, limits = self.world, self.limits
        if limits is None:
            return None
        hit = self._token_hit()
        if hit is not None:
            return hit
        value = limits.max_tool_calls
        if value is not None and w.tool_calls + wanted > value:
            return "max_tool_calls", value, w.tool_calls, wanted
        return None

    def _limit_stop(self, p: RunPrediction, hit: tuple[str, int, int, int]) -> None:
        name, value, used, _wanted = hit
        p.labels.add("limit_tokens" if name.endswith("_tokens") else f"limit_{name}")
        if name == "max_tool_calls" and used < value:
            p.labels.add("limit_batch_crossing")  # room was left, the batch would cross it

    def _finishes(self, step: Step, call_ids: Sequence[str]) -> str:
        """Whether a batch that ran undisturbed has a result marked ``terminate=True``: "yes",
        "maybe" (a user's after hook rewrote it: its own return decides) or ""."""
        out = ""
        n = len(step.calls)
        for i, (call, call_id) in enumerate(zip(step.calls, call_ids, strict=True)):
            if call.tool != "job" or call.behaviour != "finish":
                continue
            if self.static(call, call_id, step.kind in TRUNCATING and i == n - 1) is not None:
                continue
            after = self._after(call, call_id)
            if after in ("keep", "rewrite"):  # a ToolResultMessage keeps the tool's choice
                return "yes"
            if after == "user_rewrite":
                out = "maybe"
        return out

    def _inject(self, p: RunPrediction, *, follow_too: bool) -> int:
        # Steering lands whole after a batch (or a response without calls); one follow-up lands
        # when the model would otherwise stop.
        w = self.world
        if w.steer:
            n = w.steer if self.steering_mode == "all" else 1
            if w.follow:
                p.labels.add("steer_and_follow_up_queued")  # steering goes first
            w.steer -= n
            w.last = "user"
            w.paused = False
            p.labels.add("steer_injected")
            if p.deliveries is not None:
                p.deliveries += ["steer"] * n
            return n
        if follow_too and w.follow:
            n = w.follow if self.follow_up_mode == "all" else 1
            w.follow -= n
            w.last = "user"
            w.paused = False
            p.labels.add("follow_up_injected")
            if p.deliveries is not None:
                p.deliveries += ["follow_up"] * n
            return n
        return 0

    def _batch(
        self,
        p: RunPrediction,
        step: Step,
        call_ids: list[str],
        fire: Callable[[AnchorEvent], bool],
        maybe: Callable[[AnchorEvent], None],
        *,
        aborted_before: bool,
    ) -> tuple[bool, bool]:
        """Predict one batch into ``p``; returns (terminate requested, aborted)."""
        calls = step.calls
        n = len(calls)
        truncated = [step.kind in TRUNCATING and i == n - 1 for i in range(n)]
        p.order.append(list(call_ids))
        sequential = self.mode == "sequential" or n == 1
        if n >= 2:
            p.labels.add(f"batch_of_{min(n, 4)}")
        for i, call in enumerate(calls):
            if truncated[i]:
                p.labels.add("truncated_call")
            if call.tool == "limited" and call.behaviour == "slow" and call.args == "valid":
                p.labels.add("timeout")
            if call.before in ("raise",) or call.after == "raise":
                p.labels.add("raising_hook")
            if call.before in ("deny", "terminate"):
                p.labels.add(f"hook_{call.before}")
            if call.before == "rewrite" or call.after == "rewrite":
                p.labels.add("hook_rewrite")
            if call.tool == "job" and call.behaviour == "cooperate" and call.args == "valid":
                p.labels.add("cooperative_tool")
        tools_names = [c.tool for c in calls]
        if len(set(tools_names)) < len(tools_names):
            p.labels.add("one_tool_twice")
        if aborted_before:
            # Aborted as the response completed: no call starts; each is answered "not run" (a
            # call that cannot run may get its own error first).
            for _ in calls:
                maybe("tool_start")
            for i, (call, call_id) in enumerate(zip(calls, call_ids, strict=True)):
                static = self.static(call, call_id, truncated[i])
                kinds = {"not_run"} | ({static} if static else set())
                if static is None:
                    kinds = self._after_set(call, call_id, kinds)
                p.results[call_id] = kinds
                p.loose[call_id] = kinds
            p.labels.add("abort_with_calls_at_response")
            p.exact = False
            return False, True
        abort_at: int | None = None
        terminate_at: int | None = None
        for i, (call, call_id) in enumerate(zip(calls, call_ids, strict=True)):
            if sequential and (abort_at is not None or terminate_at is not None):
                break  # a sequential batch starts nothing after an abort or a terminating denial
            if abort_at is not None:
                maybe("tool_start")  # whether a call that will not run is announced is open
            elif fire("tool_start"):
                abort_at = i
                p.labels.add("abort_inside_batch")
            static = self.static(call, call_id, truncated[i])
            if static is None and self._before(call, call_id) == "abort" and abort_at is None:
                abort_at = i
                p.labels.add("abort_in_hook")
                p.labels.add("abort_inside_batch")
            terminating = static == "denied" and self._before(call, call_id) == "terminate"
            if terminating and terminate_at is None:
                terminate_at = i
        run_order: list[str] = []
        keys: dict[str, list[str]] = {}
        deferred: list[str] = []
        for i, (call, call_id) in enumerate(zip(calls, call_ids, strict=True)):
            static = self.static(call, call_id, truncated[i])
            if static is None and self._before(call, call_id) == "defer" and abort_at is None:
                deferred.append(call_id)  # held for a decision: its tool does not run now
                p.results[call_id] = set()
                continue
            runs = static is None
            normal = self.normal(call, call_id, truncated[i])
            if abort_at is None:
                if terminate_at is not None and i > terminate_at:
                    if sequential:
                        p.results[call_id] = {"after_termination"}
                        continue
                    p.results[call_id] = {normal, "after_termination"}
                    p.exact = False
                    if runs:
                        p.ran_may.add(call_id)
                    continue
                p.results[call_id] = {normal}
                if runs:
                    p.ran_must.add(call_id)
                    run_order.append(call_id)
                    if call.tool == "write":
                        keys.setdefault(call.key, []).append(call_id)
                continue
            p.exact = False
            if sequential:
                if i < abort_at:
                    p.results[call_id] = {normal}
                    if runs:
                        p.ran_must.add(call_id)
                        run_order.append(call_id)
                elif i == abort_at:
                    kinds = {"not_run"} | ({static} if static else set())
                    if runs:
                        kinds = self._after_set(call, call_id, kinds | self.graceful(call, call_id))
                        p.ran_may.add(call_id)
                    p.results[call_id] = kinds
                    p.loose[call_id] = kinds
                else:
                    p.results[call_id] = {"not_run"}
                    p.loose[call_id] = {"not_run"}
                continue
            # Parallel: every call before the abort was started; each may have finished, still
            # run (and see the abort), or wait on its resource (then it never starts).
            if static is not None:
                kinds = {static, "not_run"}
            elif i < abort_at:
                kinds = self._after_set(
                    call, call_id, {normal, "not_run"} | self.graceful(call, call_id)
                )
                p.ran_may.add(call_id)
            elif i == abort_at:
                kinds = self._after_set(call, call_id, {"not_run"} | self.graceful(call, call_id))
                p.ran_may.add(call_id)
            else:
                kinds = self._after_set(call, call_id, {"not_run"})
                p.ran_may_after.add(call_id)
            p.results[call_id] = kinds
            p.loose[call_id] = kinds
        if sequential:
            if len(run_order) > 1:
                p.ran_order.append(run_order)
        else:
            for same_key in keys.values():
                if len(same_key) > 1:
                    p.ran_order.append(same_key)
                    p.labels.add("write_queue")
        if terminate_at is not None:
            p.labels.add("terminating_denial")
            for c in deferred:  # a denial ended the run: nothing waits for a decision
                p.results[c] = {"after_termination"}
        if abort_at is not None:
            if any(
                c.tool == "job" and c.behaviour == "cooperate" and "interrupted" in p.results[cid]
                for c, cid in zip(calls, call_ids, strict=True)
            ):
                p.labels.add("cooperative_aborted")  # it may stop through raise_if_aborted()
            return False, True
        if deferred and terminate_at is None:
            # The batch is held: the results of the calls that ran wait with the deferred ones
            # and are added, in declaration order, once every call is decided.
            held = {c: next(iter(p.results.pop(c))) for c in call_ids if c not in deferred}
            for c in deferred:
                p.results.pop(c)
            p.order.pop()
            self.world.pending = (tuple(calls), list(call_ids), held, deferred)
            p.labels.add("approval_deferred")
        return terminate_at is not None, False

    def _decide(self, p: RunPrediction, decisions: Sequence[tuple[str, DecisionKind]]) -> bool:
        """A run with decisions on a held batch: approved calls run (the before hook skipped:
        a person approved them; an edit runs with its arguments), denied ones are answered
        ``Denied: <reason>``. True while a call still waits; else every result of the batch is
        added in declaration order."""
        w = self.world
        assert w.pending is not None, "decisions without a held batch"
        calls, call_ids, held, waiting = w.pending
        for call_id, decision in decisions:
            call = calls[call_ids.index(call_id)]
            waiting.remove(call_id)
            p.labels.add(f"approval_{decision}")
            if decision == "deny":
                held[call_id] = "denied"
                p.texts[call_id] = f"Denied: {DENY_REASON} {call_id}"
                continue
            tag = EDITED if decision == "edit" else _tag(call_id)
            edited = replace(call, behaviour="return", before="allow")
            kind = self.executed(
                edited if decision == "edit" else replace(call, before="allow"), call_id
            )
            kind = kind.replace(f"[{_tag(call_id)}]", f"[{tag}]")
            held[call_id] = self._after_kind(call, call_id, kind)
            p.finished[call_id] = {held[call_id]}
            p.ran_must.add(call_id)
            p.approved[call_id] = decision
        if waiting:
            p.labels.add("approval_partial")
            return True
        for call_id in call_ids:
            p.results[call_id] = {held[call_id]}
        p.order.append(list(call_ids))
        w.pending = None
        w.last = "result"
        return False

    def world_from(self, tokens: Sequence[Token], state: str, turns: int = 0) -> None:
        """Set the world from a history (a resumed agent starts from it, with the ``turns`` the
        last run counted: a run continued without a prompt goes on counting)."""
        last, dangling = _last_of(tokens)
        self.world = _World(turns=turns, last=last, dangling=dangling, paused=_paused(tokens))


def predict_resumed_turns(lines: Sequence[dict[str, Any]]) -> int:
    """The turns a resumed agent's run continued without a prompt goes on from (the README's
    rules): the last ended run's recorded ``counts``; for a run whose end is not in the log,
    the turns it started from (the previous run's when it was continued without a prompt, else
    0) plus its logged responses that completed a turn (not failed, not cut by an abort)."""
    last = 0
    running: int | None = None
    for line in lines:
        kind = line.get("type")
        if kind == "run_start":
            running = last if line.get("continued") else 0
        elif kind == "run_end":
            counts = line.get("counts")
            if isinstance(counts, dict):
                last = int(counts["turns"])
            elif running is not None:
                last = running
            running = None
        elif kind == "message" and running is not None:
            message = line["message"]
            if message.get("role") == "assistant" and message.get("stop_reason") not in (
                "aborted",
                "error",
            ):
                running += 1
    return running if running is not None else last


def predict_resume(lines: Sequence[dict[str, Any]]) -> tuple[list[Token], str]:
    """What `Agent.resume` rebuilds from the complete lines of a session log (the README's rules):
    messages in logged order; each call's result, logged in completion order, put back right after
    its assistant message in declaration order; a call without a logged result answered "no result
    recorded"; the terminal state the log recorded last, else ``aborted`` for a run that never
    ended (even one cut before its first message).

    Returns:
        (the abstract history, the state).
    """
    items: list[Token] = []
    results: dict[str, str] = {}
    state = "idle"
    open_run = False
    for line in lines:
        kind = line.get("type")
        if kind == "message":
            message = line["message"]
            role = message.get("role")
            if role == "tool_result":
                results.setdefault(message["tool_call_id"], _kind_of_dict(message))
            elif role == "assistant":
                ids = tuple(b["id"] for b in message["content"] if b.get("type") == "tool_call")
                items.append(("assistant", str(message.get("stop_reason")), ids))
            else:
                items.append(("user",))
        elif kind == "history":  # the history was replaced (a given history, a compaction)
            items, results = [], {}
            for token in tokens_of(HISTORY_ADAPTER.validate_python(line["messages"])):
                if token[0] == "result":
                    results.setdefault(token[1], token[2])
                else:
                    items.append(token)
        elif kind == "tool_result":
            message = line["message"]
            results.setdefault(message["tool_call_id"], _kind_of_dict(message))
        elif kind == "state":
            state = line["dest"]
        elif kind == "run_start":
            open_run = True
        elif kind == "run_end":
            open_run = False
            state = line.get("state", state)
    out: list[Token] = []
    for token in items:
        out.append(token)
        if token[0] == "assistant" and token[1] not in ("aborted", "error"):
            for call_id in token[2]:
                out.append(("result", call_id, results.get(call_id, "no_result")))
    # A crash after the terminal state was recorded keeps that state.
    if state not in ("done", "aborted", "max_turns", "failed") and (open_run or state != "idle"):
        state = "aborted"
    return out, state


def limit_text(hit: tuple[str, int, int, int]) -> str:
    """The result of a call a usage limit kept from running (`LimitHit.call_text`'s wording):
    ``Not run: the usage limit NAME=VALUE was reached: USED used[, WANTED more wanted].``"""
    name, value, used, wanted = hit
    more = f", {wanted} more wanted" if wanted else ""
    return f"Not run: the usage limit {name}={value} was reached: {used} used{more}."


def _kind_of_dict(message: dict[str, Any]) -> str:
    return classify(ToolResultMessage.model_validate(message))


# -- playing a scenario on an agent ------------------------------------------------------------


class ScenarioModel:
    """A `Model` that plays the steps of the current run: responses through `ScriptedModel`, a
    ``cut`` step as a stream that stops before its end. Counts the requests of each run."""

    def __init__(self) -> None:
        self._steps: list[dict[str, Any] | None] = []
        self._next = 0
        self.requests = 0

    @property
    def name(self) -> str:
        """The model name reported."""
        return "oracle-scenario"

    def load(self, steps: Sequence[dict[str, Any] | None]) -> None:
        """Play ``steps`` from now on (None: a stream cut short); resets the request count."""
        self._steps, self._next, self.requests = list(steps), 0, 0

    def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        """Play the next step."""
        self.requests += 1
        index = self._next
        self._next += 1
        if index < len(self._steps) and self._steps[index] is None:
            return cut_stream()
        steps = [self._steps[index]] if index < len(self._steps) else []
        return ScriptedModel(steps, record_requests=False).stream(request)  # type: ignore[arg-type]


def queue_input(agent: Agent, kind: str, text: str) -> None:
    """Queue ``text`` on ``agent`` as steering (``kind == "steer"``) or as a follow-up."""
    (agent.steer if kind == "steer" else agent.follow_up)(UserMessage(text))


async def cut_stream() -> AsyncIterator[StreamEvent]:
    """A response stream that ends before its stop event (the engine retries it)."""
    yield ResponseStart("oracle-scenario")
    yield TextDelta(0, "partial")


def render_step(
    step: Step, call_ids: Sequence[str], n: int, used: Sequence[str], *, usage: bool = False
) -> Any:
    """The `ScriptedModel` step of ``step`` (None for a cut stream); with ``usage`` a response
    reports ``INPUT_TOKENS`` and ``OUTPUT_TOKENS``."""
    if step.kind == "overloaded":
        return {"error": {"type": "overloaded_error", "message": "scripted overload"}}
    if step.kind == "invalid_request":
        return {"error": {"type": "invalid_request_error", "message": "scripted invalid"}}
    if step.kind == "cut":
        return None
    content: list[dict[str, Any]] = [{"type": "text", "text": f"step {n}"}]
    content += [call_block(c, i) for c, i in zip(step.calls, call_ids, strict=True)]
    stop = step.kind
    if stop == "reused_id":
        reused = used[0] if used else "dup"
        content.append(call_block(Call(), reused))
        if not used:
            content.append(call_block(Call(), reused))
        stop = "tool_use"
    response: dict[str, Any] = {"content": content, "stop_reason": stop}
    if usage:
        response["usage"] = {"input_tokens": INPUT_TOKENS, "output_tokens": OUTPUT_TOKENS}
    if stop == REFUSAL:
        response["stop_details"] = {"type": "refusal", "category": "cyber", "explanation": "no"}
    return response


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


def run_steps(spec: RunSpec, ids: Sequence[Sequence[str]], *, usage: bool = False) -> list[Any]:
    """A run's `ScriptedModel` steps (None for a stream cut short; ``usage``: `render_step`'s)."""
    used: list[str] = []  # ids of this run's earlier steps (still in the history)
    steps = []
    for n, (step, call_ids) in enumerate(zip(spec.steps, ids, strict=True), 1):
        steps.append(render_step(step, call_ids, n, used, usage=usage))
        used.extend(call_ids)
    return steps


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


@dataclass
class ScenarioObservation:
    """Every run, plus the history and state right after a resume."""

    runs: list[RunObservation] = field(default_factory=list)
    resumed: list[Token] | None = None
    resumed_state: str | None = None
    log_lines: list[dict[str, Any]] | None = None
    histories: list[list[Message]] = field(default_factory=list)
    agent: Agent | None = None


class ScenarioHooks:
    """The scenario's ``before_tool_call`` and ``after_tool_call`` hooks: what each does is looked up
    by call id in ``calls``; a call they allow or keep goes on to the user's own hooks
    (``user_before``, ``user_after``); ``abort`` stops ``agent``. ``finished`` lists the calls
    whose ``after_tool_call`` returned or raised (not cancelled): the call has its result."""

    def __init__(self) -> None:
        self.calls: dict[str, Call] = {}
        self.agent: Agent | None = None
        self.user_before: Callable[[ToolCallInfo], Any] | None = None
        self.user_after: Callable[[ToolCallInfo, ToolResultMessage], Any] | None = None
        self.finished: list[str] = []

    async def before(self, info: ToolCallInfo) -> Any:
        call = self.calls.get(info.call.id)
        kind = call.before if call is not None else "allow"
        if kind == "rewrite":
            return Allow({**info.arguments, "text": "out-rw"})
        if kind == "deny":
            return Deny(f"{HOOK_DENIES} {info.call.id}")
        if kind == "terminate":
            return Deny(f"{HOOK_TERMINATES} {info.call.id}", terminate=True)
        if kind == "defer":
            return Defer(f"the oracle defers call {info.call.id}")
        if kind == "raise":
            raise RuntimeError("the oracle's before hook raised")
        if kind == "abort" and self.agent is not None:
            self.agent.abort("aborted by the oracle's before hook")
            return None
        if self.user_before is not None:
            result = self.user_before(info)
            return await result if inspect.isawaitable(result) else result
        return None

    async def after(self, info: ToolCallInfo, result: ToolResultMessage) -> Any:
        try:
            value = await self._after(info, result)
        except BaseException as exc:
            task = asyncio.current_task()
            if not (isinstance(exc, asyncio.CancelledError) and task and task.cancelling()):
                self.finished.append(info.call.id)  # the hook failed: the call has its result
            raise
        self.finished.append(info.call.id)
        return value

    async def _after(self, info: ToolCallInfo, result: ToolResultMessage) -> Any:
        call = self.calls.get(info.call.id)
        kind = call.after if call is not None else "keep"
        if kind == "rewrite":
            return ToolResultMessage(
                tool_call_id=info.call.id,
                tool_name=info.call.name,
                content=[TextBlock(text=f"{REWRITTEN} {info.call.id}")],
            )
        if kind == "raise":
            raise RuntimeError("the oracle's after hook raised")
        if self.user_after is not None:
            value = self.user_after(info, result)
            return await value if inspect.isawaitable(value) else value
        return None


def _history(kind: str) -> list[Message]:
    if kind == "none":
        return []
    first = UserMessage("earlier task")
    if kind == "clean":
        return [
            first,
            AssistantMessage(content=[TextBlock(text="earlier answer")], stop_reason="end_turn"),
        ]
    return [
        first,
        AssistantMessage(
            content=[
                ToolCallBlock(id="h1", name="job", input={"behaviour": "return"}),
                ToolCallBlock(id="h2", name="job", input={"behaviour": "return"}),
            ],
            stop_reason="tool_use",
        ),
        ToolResultMessage(tool_call_id="h1", tool_name="job", content=[TextBlock(text="out-h1")]),
    ]


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
    first_request = _requests(model)
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
        if isinstance(event, TurnStart):
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

    hooks.agent = agent
    hooks.finished = []
    before = len(agent.messages)
    watch = CompactionWatch(agent)
    unsubscribe = agent.subscribe(on_event)
    unwatch = agent.subscribe(watch)
    try:
        result: RunResult | None = None
        prompt = "do the task" if spec.prompt else None
        decisions = None if spec.decisions is None else _decisions(spec, hooks)
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
    obs.ran = journal
    obs.compaction_cuts, obs.compaction_problems = watch.cuts, watch.problems
    if agent.after_tool_call == hooks.after:
        obs.finished = [c for c in hooks.finished if c in journal]
    obs.requests = _requests(model) - first_request
    if result is not None:
        obs.state = result.state.value
        obs.turns = result.turns
        obs.new_messages = list(result.new_messages)
    else:
        obs.new_messages = list(agent.messages[before:])
    if watch.cuts:  # what the run added, those messages its compactions replaced included
        obs.new_messages = watch.added_since(before)
    for message in obs.new_messages:
        if isinstance(message, ToolResultMessage):
            kind = classify(message)
            obs.results.append((message.tool_call_id, kind))
            obs.texts.setdefault(message.tool_call_id, (kind, message.text))
        elif isinstance(message, UserMessage):
            obs.users += 1
            obs.user_texts.append(message.text)
    return obs


def _decisions(spec: RunSpec, hooks: ScenarioHooks) -> dict[str, Approve | Deny]:
    """``agent.run(decisions=...)`` of a run's `RunSpec.decisions`."""
    out: dict[str, Approve | Deny] = {}
    for call_id, kind in spec.decisions or ():
        call = hooks.calls[call_id]
        if kind == "deny":
            out[call_id] = Deny(f"{DENY_REASON} {call_id}")
        elif kind == "edit":
            arguments: dict[str, Any] = {"text": EDITED}
            arguments |= {"key": call.key} if call.tool == "write" else {"behaviour": "return"}
            out[call_id] = Approve(arguments=arguments)
        else:
            out[call_id] = Approve()
    return out


def _requests(model: Any) -> int:
    requests = model.requests
    return requests if isinstance(requests, int) else len(requests)


def _should_continue(kind: str) -> Callable[[TurnInfo], bool] | None:
    if kind == "none":
        return None

    def should_continue(info: TurnInfo) -> bool:
        if kind == "raise":
            raise RuntimeError("the oracle's should_continue hook raised")
        return False

    return should_continue


def _transform(kind: str) -> Callable[[list[Message]], list[Message]] | None:
    if kind == "none":
        return None

    def transform(messages: list[Message]) -> list[Message]:
        if kind == "raise":
            raise RuntimeError("the oracle's transform_context hook raised")
        return [UserMessage("a note from transform_context"), *messages]

    return transform


def agent_options(scenario: Scenario, hooks: ScenarioHooks) -> dict[str, Any]:
    """The `Agent` options of a scenario: the oracle's tools and hooks, its abort grace period
    (`GRACE_SECONDS`) and usage limits, one model retry."""
    limits = scenario.limits
    return {
        "limits": None
        if limits is None
        else UsageLimits(
            max_requests=limits.max_requests,
            max_tool_calls=limits.max_tool_calls,
            max_output_tokens=limits.max_output_tokens,
            max_total_tokens=limits.max_total_tokens,
        ),
        "tools": ORACLE_TOOLS,
        "tool_execution": scenario.mode,
        "max_turns": scenario.max_turns,
        "max_continuations": scenario.max_continuations,
        "max_tokens_policy": scenario.max_tokens_policy,
        "steering_mode": scenario.steering_mode,
        "follow_up_mode": scenario.follow_up_mode,
        "abort_grace_seconds": GRACE_SECONDS[scenario.grace],
        "model_retries": 1,
        "retry_backoff_seconds": 0.0001,
        "before_tool_call": hooks.before,
        "after_tool_call": hooks.after,
        "should_continue": _should_continue(scenario.should_continue),
        "transform_context": _transform(scenario.transform),
    }


def rendered_steps(scenario: Scenario) -> list[list[Any]]:
    """Each run's `ScriptedModel` steps."""
    ids = scenario_ids(scenario)
    usage = scenario.limits is not None
    return [run_steps(run, ids[r], usage=usage) for r, run in enumerate(scenario.runs)]


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
    if scenario.cut is not None:
        if workdir is None:
            tmp = tempfile.TemporaryDirectory(prefix="oracle-")
            workdir = Path(tmp.name)
        path = workdir / "session.jsonl"
        if path.exists():
            path.unlink()
    try:
        agent = Agent(
            model,
            messages=_history(scenario.history),
            session=path,
            **agent_options(scenario, hooks),
        )
        for r, run in enumerate(scenario.runs):
            if r and scenario.cut is not None:
                assert path is not None and agent.session is not None
                agent.session.close()
                obs.log_lines = _cut_log(path, scenario.cut)
                agent = Agent.resume(path, model=model, **agent_options(scenario, hooks))
                obs.resumed = tokens_of(agent.messages)
                obs.resumed_state = str(agent.state)
            obs.runs.append(
                await drive_scenario_run(agent, model, run, steps[r], hooks, sync=sync_runs)
            )
            obs.histories.append(list(agent.messages))
        obs.agent = agent
        if agent.session is not None:
            agent.session.close()
    finally:
        if tmp is not None:
            tmp.cleanup()
    return obs


def _cut_log(path: Path, cut: Cut) -> list[dict[str, Any]]:
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
    return [json.loads(line) for line in kept[1:]]


# -- what each result says --------------------------------------------------------------------

_FIXED_TEXTS: dict[str, str] = {
    "truncated": TRUNCATED,
    "stopped_not_run": STOPPED_NOT_RUN,
    "window_cut": CUT_BY_WINDOW,
    "window_not_run": NOT_RUN_WINDOW,
    "unknown_stop": unknown_stop_reason_text("brand_new_reason"),
    "refused": REFUSED,
    "not_run": NOT_RUN,
    "after_termination": AFTER_TERMINATION,
    "not_run_pending": NOT_RUN_PENDING,
    "interrupted": INTERRUPTED,
    "own_cancel": f"CancelledError: {OWN_CANCELLATION}",
    "no_result": NO_RESULT,
    "stopped": "stopped early: the run was aborted",
    "timeout": (
        f"Timed out: tool 'limited' ran longer than {TIMEOUT_SECONDS:g} s and was cancelled; it "
        "may have partly completed."
    ),
    "before_failed": (
        "The before_tool_call hook failed (RuntimeError: the oracle's before hook raised); the "
        "call was not completed."
    ),
    "after_failed": (
        "The after_tool_call hook failed (RuntimeError: the oracle's after hook raised); the "
        "call was not completed."
    ),
    "unknown_tool": "Unknown tool 'nope'. Available tools: job, limited, write.",
}


def expected_text(kind: str, call: Call, call_id: str, pred: RunPrediction) -> str | None:
    """What a result of class ``kind`` for ``call`` (id ``call_id``) says, exactly: the tool's
    value (``ok``), an error naming the exception, the denial's reason (naming the call it
    answers), "interrupted while running", "not run" with its cause, a limit's text, an after
    hook's replacement (naming its call), an approval's outcome. None where only the class is
    known (invalid arguments: the validator's wording; a user's own hooks)."""
    if call_id in pred.texts:  # a limit's text, a person's denial
        return pred.texts[call_id]
    if kind in _FIXED_TEXTS:
        return _FIXED_TEXTS[kind]
    tag = kind[kind.find("[") + 1 : -1] if kind.endswith("]") else ""
    if tag in ("*", "?"):
        return None
    if kind.startswith("ok["):
        return tag  # the tool's value: the text it was given
    if kind.startswith("error["):
        return (
            f"ValueError: {tag}" if call.tool == "limited" else f"RuntimeError: job raised: {tag}"
        )
    if kind.startswith("tool_error["):
        return f"job failed: {tag}"
    if kind == "denied" and call.before in ("deny", "terminate"):
        reason = HOOK_DENIES if call.before == "deny" else HOOK_TERMINATES
        return f"Denied: {reason} {call_id}"
    if kind == "rewritten":
        return f"{REWRITTEN} {call_id}"
    return None


def text_problems(
    scenario: Scenario, prediction: Prediction, obs: ScenarioObservation
) -> list[str]:
    """Every result whose text is not what its class says for its call (`expected_text`),
    run by run: a reason dropped, a replacement or a denial addressed to another call, a
    "not run" with the wrong cause."""
    calls: dict[str, Call] = {}
    for run, run_ids_ in zip(scenario.runs, scenario_ids(scenario), strict=True):
        for step, ids in zip(run.steps, run_ids_, strict=True):
            calls.update(zip(ids, step.calls, strict=True))
    problems: list[str] = []
    for n, (pred, got) in enumerate(zip(prediction.runs, obs.runs, strict=False), 1):
        if pred is None:
            continue
        for call_id, kind in got.results:
            call = calls.get(call_id)
            if call is None:
                continue
            seen_kind, text = got.texts.get(call_id, ("", ""))
            if seen_kind != kind:
                continue  # not the result this text came with (its class is compared already)
            want = expected_text(kind, call, call_id, pred)
            if kind == "invalid":
                if not text.startswith(f"Invalid arguments for tool {call.tool!r}"):
                    problems.append(f"run {n}: call {call_id}: {text!r} does not name its tool")
            elif want is not None and text != want:
                problems.append(f"run {n}: call {call_id} ({kind}) says {text!r}, not {want!r}")
    return problems


# -- comparing ---------------------------------------------------------------------------------


def compare_run(pred: RunPrediction, obs: RunObservation) -> list[str]:
    """Every difference between a run's prediction and what the engine did."""
    problems: list[str] = []
    if pred.started != obs.started:
        return [f"run started={obs.started}, the oracle says started={pred.started}"]
    if not obs.started:
        return problems
    if obs.state not in pred.states:
        problems.append(f"final state {obs.state!r}, allowed {sorted(pred.states)}")
    if obs.cancelled not in pred.cancelled:
        problems.append(f"cancelled={obs.cancelled}, allowed {sorted(pred.cancelled)}")
    if obs.turns not in pred.turns:
        problems.append(f"turns {obs.turns}, allowed {sorted(pred.turns)}")
    if obs.requests not in pred.requests:
        problems.append(f"requests {obs.requests}, allowed {sorted(pred.requests)}")
    if pred.users is not None and obs.users not in pred.users:
        problems.append(f"{obs.users} user messages added, expected {sorted(pred.users)}")
    if pred.deliveries is not None and pred.users is not None:
        got = [t.removeprefix("queued ") for t in obs.user_texts if t.startswith("queued ")]
        if got != pred.deliveries:
            problems.append(f"queued input delivered as {got}, the rules say {pred.deliveries}")
    seen: dict[str, list[str]] = {}
    for call_id, kind in obs.results:
        seen.setdefault(call_id, []).append(kind)
    optional = pred.results_optional
    for call_id, allowed in pred.results.items():
        kinds = seen.get(call_id, [])
        if not kinds:
            if call_id not in optional:
                problems.append(f"call {call_id}: no result, allowed {sorted(allowed)}")
            continue
        if len(kinds) > 1:
            problems.append(f"call {call_id}: {len(kinds)} results {kinds}")
        if not _matches(kinds[0], allowed):
            problems.append(f"call {call_id}: result {kinds[0]!r}, allowed {sorted(allowed)}")
    for call_id in seen:
        if call_id not in pred.results:
            problems.append(f"call {call_id}: a result the oracle did not expect ({seen[call_id]})")
    if obs.finished is not None:
        # Where an abort or a cancellation landed, read from the run: a call that finished keeps
        # its own result; one whose tool started and never finished was interrupted.
        finished = set(obs.finished)
        for call_id, kinds in seen.items():
            if call_id in finished:
                allowed = pred.finished.get(call_id, set())
                if not _matches(kinds[0], allowed):
                    problems.append(
                        f"call {call_id} finished (its tool and after hook returned) but its "
                        f"result is {kinds[0]!r}, allowed {sorted(allowed)}"
                    )
            elif call_id in obs.ran and kinds[0] != "interrupted":
                problems.append(
                    f"call {call_id}: its tool started and never finished, yet its result is "
                    f"{kinds[0]!r}, not 'interrupted'"
                )
    result_order = [c for c, _ in obs.results]
    for batch in pred.order:
        got = [c for c in result_order if c in batch]
        if got and got != batch[: len(got)] and sorted(got) == sorted(batch):
            problems.append(f"results {got} not in declaration order {batch}")
    ran = obs.ran
    counts = Counter(ran)
    for call_id, count in counts.items():
        if count > 1:
            problems.append(f"tool of call {call_id} ran {count} times")
    allowed_ran = pred.ran_must | pred.ran_may
    for call_id in counts:
        if call_id not in allowed_ran:
            problems.append(f"tool of call {call_id} ran; the oracle says it must not")
    for call_id in sorted(pred.ran_must - set(counts)):
        problems.append(f"tool of call {call_id} never ran; the oracle says it must")
    for sequence in pred.ran_order:
        got = [c for c in ran if c in sequence]
        if got != [c for c in sequence if c in got]:
            problems.append(f"tools ran in order {got}, the rules fix {sequence}")
    return problems


def compare(
    scenario: Scenario, obs: ScenarioObservation, oracle: Oracle | None = None
) -> tuple[list[str], Prediction]:
    """Predict ``scenario`` and list every difference from ``obs`` (run by run)."""
    oracle = oracle or oracle_for(scenario)
    ids = scenario_ids(scenario)
    prediction = oracle.predict(scenario, ids)
    problems: list[str] = []
    for n, (pred, got) in enumerate(zip(prediction.runs, obs.runs, strict=False), 1):
        if pred is None and scenario.cut is not None and n > 1 and obs.log_lines is not None:
            tokens, state = predict_resume(obs.log_lines)
            if obs.resumed != tokens:
                problems.append(
                    f"resume rebuilt {obs.resumed}, the oracle says {tokens} (state {state})"
                )
            if obs.resumed_state != state:
                problems.append(
                    f"resumed in state {obs.resumed_state!r}, the oracle says {state!r}"
                )
            resumed = copy.copy(oracle)  # the same options and declared hooks, a world of its own
            resumed.world_from(tokens, state, predict_resumed_turns(obs.log_lines))
            pred = resumed.predict_run(scenario.runs[n - 1], ids[n - 1])
            prediction.runs[n - 1] = pred
            earlier = {t[1] for t in tokens if t[0] == "result"}
            again = sorted(set(got.ran) & earlier)
            if again:
                problems.append(f"resumed calls ran again: {again}")
        if pred is None:
            continue
        problems += [f"run {n}: {p}" for p in compare_run(pred, got)]
    problems += text_problems(scenario, prediction, obs)
    return problems, prediction


def oracle_for(scenario: Scenario) -> Oracle:
    """An `Oracle` with the scenario's agent options."""
    return Oracle(
        max_turns=scenario.max_turns,
        max_continuations=scenario.max_continuations,
        max_tokens_policy=scenario.max_tokens_policy,
        mode=scenario.mode,
        model_retries=1,
        should_continue=scenario.should_continue,
        transform=scenario.transform,
        steering_mode=scenario.steering_mode,
        follow_up_mode=scenario.follow_up_mode,
        limits=scenario.limits,
    )


def check_scenario(
    scenario: Scenario,
    workdir: Path | None = None,
    *,
    loop: asyncio.AbstractEventLoop | None = None,
    model: Any = None,
    sync_runs: bool = False,
) -> Prediction:
    """Play ``scenario`` (in ``loop``, else a new event loop), check the invariants and
    compare with the oracle. ``model`` and ``sync_runs`` are `play`'s.

    Raises:
        AssertionError: listing every difference and broken invariant.
    """
    if loop is not None:
        obs = loop.run_until_complete(play(scenario, workdir, model=model, sync_runs=sync_runs))
    else:
        # A plain loop, not asyncio.run: its SIGINT handling costs more than a short run.
        own = asyncio.new_event_loop()
        try:
            obs = own.run_until_complete(play(scenario, workdir, model=model, sync_runs=sync_runs))
            own.run_until_complete(own.shutdown_asyncgens())
        finally:
            own.close()
    problems, prediction = compare(scenario, obs)
    for n, (history, run) in enumerate(zip(obs.histories, obs.runs, strict=True), 1):
        if run.state == "awaiting_approval":
            continue  # the held batch's calls wait for their decisions (and results)
        problems += [f"history after run {n}: {p}" for p in find_violations(history)]
    if obs.agent is not None and obs.agent.is_running:
        problems.append("the agent still says it is running")
    if problems:
        raise AssertionError("the engine and the oracle disagree:\n  " + "\n  ".join(problems))
    return prediction


# -- bounded exhaustive mode -------------------------------------------------------------------

EXHAUSTIVE_OUTCOMES: tuple[Call, ...] = (
    Call("job", "return"),
    Call("job", "raise"),
    Call("limited", "slow"),  # times out
    Call("job", "return", before="deny"),
)
"""The call outcomes of the exhaustive alphabet: returns, raises, times out, is denied."""


def _exhaustive_steps(outcomes: Sequence[Call]) -> tuple[list[Step], list[Step]]:
    going_on: list[Step] = [Step("pause_turn")]
    for a in outcomes:
        going_on.append(Step("tool_use", (a,)))
        going_on.append(Step("max_tokens", (a, Call())))  # the second call is truncated
        going_on += [Step("tool_use", (a, b)) for b in outcomes]
    final = [Step("end_turn"), Step("refusal", (Call(),))]
    return going_on, final


def exhaustive_scenarios(
    depth: int = 3,
    *,
    outcomes: Sequence[Call] = EXHAUSTIVE_OUTCOMES,
    modes: Sequence[Literal["parallel", "sequential"]] = ("parallel", "sequential"),
    max_abort: int = 3,
) -> Iterable[Scenario]:
    """Every scenario over a small abstract alphabet, up to ``depth`` responses: response kinds
    (a final answer, a refusal with a call, a pause, one or two calls, two calls the second of which
    is truncated) x call outcomes (``outcomes``) x abort position (none, or the k-th tool start for
    k up to ``max_abort``), in each tool-execution mode. The last response ends the run, the ones
    before go on."""
    going_on, final = _exhaustive_steps(outcomes)
    for n in range(1, depth + 1):
        for prefix in _product(going_on, n - 1):
            for last in final:
                steps = (*prefix, last)
                n_calls = sum(len(s.calls) for s in steps[:-1])
                anchors: list[Anchor | None] = [None]
                anchors += [Anchor("tool_start", k) for k in range(1, min(n_calls, max_abort) + 1)]
                for anchor in anchors:
                    for mode in modes:
                        yield Scenario((RunSpec(steps, abort=anchor),), mode=mode)


def _product(items: Sequence[Step], n: int) -> Iterable[tuple[Step, ...]]:
    if n == 0:
        yield ()
        return
    for head in items:
        for tail in _product(items, n - 1):
            yield (head, *tail)
