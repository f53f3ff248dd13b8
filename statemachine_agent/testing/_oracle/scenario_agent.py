"""The agent side of a scenario: its model (`ScenarioModel`), hooks (`ScenarioHooks`), rendered
steps, starting history and `Agent` options."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

# Public names only (the engine's internals may change under it): the oracle sees the loop as a
# user does.
from ... import (
    Agent,
    Allow,
    Approve,
    AssistantMessage,
    Compaction,
    Defer,
    Deny,
    Message,
    ScriptExhaustedError,
    TextBlock,
    ToolCallBlock,
    ToolCallInfo,
    ToolResultMessage,
    TurnInfo,
    UsageLimits,
    UserMessage,
)
from ...models import ModelRequest, ResponseStart, ScriptedModel, StreamEvent, TextDelta
from .scenario import Call, RunSpec, Scenario, Step, scenario_ids
from .subagent import delegate_tool
from .texts import (
    DENY_REASON,
    EDITED,
    GRACE_SECONDS,
    HOOK_DENIES,
    HOOK_TERMINATES,
    INPUT_TOKENS,
    OUTPUT_TOKENS,
    REFUSAL,
    REWRITTEN,
)
from .tools import ORACLE_TOOLS, call_block, foreign_id


class ScenarioModel:
    """A `Model` that plays the steps of the current run: responses through `ScriptedModel`, a
    ``cut`` step as a stream that stops before its end. Counts the requests of each run; with
    ``agent`` set, keeps in ``sent`` each request's messages beside the agent's history when it
    was sent (`requests.request_problems` compares them)."""

    def __init__(self) -> None:
        self._steps: list[dict[str, Any] | None] = []
        self._next = 0
        self.requests = 0
        self.agent: Agent | None = None
        self.sent: list[tuple[list[Message], list[Message]]] = []

    @property
    def name(self) -> str:
        """The model name reported."""
        return "oracle-scenario"

    def load(self, steps: Sequence[dict[str, Any] | None]) -> None:
        """Play ``steps`` from now on (None: a stream cut short); resets the request count."""
        self._steps, self._next, self.requests = list(steps), 0, 0
        self.sent = []

    def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        """Play the next step."""
        self.requests += 1
        if self.agent is not None:
            self.sent.append((list(self.agent.messages), list(request.messages)))
        index = self._next
        self._next += 1
        return play_step("the scenario's model", self._steps, index, request)


def play_step(
    who: str, steps: Sequence[Any], index: int, request: ModelRequest
) -> AsyncIterator[StreamEvent]:
    """The stream of step ``index`` of a run's ``steps`` answering ``request``: a None step is
    cut short (`cut_stream`), one past the last fails (`exhausted_stream`, naming ``who``), any
    other is played by a `ScriptedModel` as `still_reused` leaves it."""
    if index >= len(steps):
        return exhausted_stream(who, index + 1, len(steps))
    step = steps[index]
    if step is None:
        return cut_stream()
    played = still_reused(step, steps[:index], request.messages)
    return ScriptedModel([played], record_requests=False).stream(request)


def still_reused(step: Any, earlier: Sequence[Any], sent: Sequence[Message]) -> Any:
    """``step`` (a `ScriptedModel` step) as it answers a request of ``sent`` messages, after the
    ``earlier`` steps of its run. Invariant 3 forbids an id twice in one history sent to a
    provider, so an id that a compaction has since replaced is free again: reusing it is no
    error. A response whose last call reuses an earlier step's id (a ``reused_id`` step)
    therefore reuses one of the run's own ids that the request still holds (the oldest), or,
    with none left, repeats itself (two blocks with one id): it clashes whatever was compacted.
    (Only the run's own ids: a ``transform_context`` hook may show the model a call the history
    does not hold, and the engine checks the history.) Any other step, a message step
    included, is returned as it is (every other call id of a scenario is new)."""
    content = (step.get("content") or []) if isinstance(step, dict) else []
    last = content[-1] if content else None
    if not isinstance(last, dict) or last.get("type") != "tool_use":
        return step
    earlier_ids = {
        block.get("id")
        for s in earlier
        if isinstance(s, dict)
        for block in s.get("content") or ()
        if isinstance(block, dict)
    }
    held = [c.id for m in sent if isinstance(m, AssistantMessage) for c in m.tool_calls]
    if last["id"] not in earlier_ids or last["id"] in held:
        return step
    mine = [i for i in held if i in earlier_ids]
    again = [{**last, "id": mine[0]}] if mine else [last, last]
    return {**step, "content": [*content[:-1], *again]}


def exhausted_stream(who: str, number: int, holds: int) -> AsyncIterator[StreamEvent]:
    """The stream of a request after a script's last step: raises `ScriptExhaustedError` naming
    the request's ``number`` (from 1) and how many steps the script ``holds``."""

    async def stream() -> AsyncIterator[StreamEvent]:
        raise ScriptExhaustedError(
            f"{who} has no step {number}: the script holds {holds} step(s). Add a step (for "
            "example a final end_turn answer)."
        )
        yield  # an async generator  # pragma: no cover

    return stream()


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
    if stop == "reused_id":  # (the players check the request still holds it: `still_reused`)
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


def run_steps(spec: RunSpec, ids: Sequence[Sequence[str]], *, usage: bool = False) -> list[Any]:
    """A run's `ScriptedModel` steps (None for a stream cut short; ``usage``: `render_step`'s)."""
    used: list[str] = []  # ids of this run's earlier steps (still in the history)
    steps = []
    for n, (step, call_ids) in enumerate(zip(spec.steps, ids, strict=True), 1):
        steps.append(render_step(step, call_ids, n, used, usage=usage))
        used.extend(call_ids)
    return steps


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
        if kind in ("rewrite", "readdress"):
            # readdress: built with another call's id; the engine answers the call it ran for.
            return ToolResultMessage(
                tool_call_id=info.call.id if kind == "rewrite" else foreign_id(info.call.id),
                tool_name=info.call.name,
                content=[TextBlock(text=f"{REWRITTEN} {info.call.id}")],
            )
        if kind == "raise":
            raise RuntimeError("the oracle's after hook raised")
        if self.user_after is not None:
            value = self.user_after(info, result)
            return await value if inspect.isawaitable(value) else value
        return None


def starting_history(kind: str) -> list[Message]:
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


def run_decisions(spec: RunSpec, hooks: ScenarioHooks) -> dict[str, Approve | Deny]:
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


def should_continue_hook(kind: str) -> Callable[[TurnInfo], bool] | None:
    if kind == "none":
        return None

    def should_continue(info: TurnInfo) -> bool:
        if kind == "raise":
            raise RuntimeError("the oracle's should_continue hook raised")
        return False

    return should_continue


def transform_hook(kind: str) -> Callable[[list[Message]], list[Message]] | None:
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
        "tools": ORACLE_TOOLS
        if scenario.child is None
        else (*ORACLE_TOOLS, delegate_tool(scenario.child, usage=reports_usage(scenario))),
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
        "should_continue": should_continue_hook(scenario.should_continue),
        "transform_context": transform_hook(scenario.transform),
        "compaction": scenario_compaction() if scenario.compaction else None,
    }


def scenario_compaction() -> Compaction:
    """`Scenario.compaction`'s: a tiny threshold (estimated tokens) so that short runs compact,
    often more than once, keeping the newest two turns (so a cut often falls before the run's
    own prompt), with a scripted summary naming how many messages it replaced."""

    def summarize(old: Sequence[Message]) -> str:
        return f"oracle summary of {len(old)} message(s)"

    return Compaction(threshold=40, keep_recent_turns=2, summarize=summarize)


def reports_usage(scenario: Scenario) -> bool:
    """Whether each response reports its usage (``INPUT_TOKENS``, ``OUTPUT_TOKENS``): with
    usage limits or compaction."""
    return scenario.limits is not None or scenario.compaction


def rendered_steps(scenario: Scenario) -> list[list[Any]]:
    """Each run's `ScriptedModel` steps."""
    ids = scenario_ids(scenario)
    usage = reports_usage(scenario)
    return [run_steps(run, ids[r], usage=usage) for r, run in enumerate(scenario.runs)]
