"""Sub-agents: ``agent.as_tool(...)`` (`AgentAsTool`) turns an `Agent` into a `Tool` whose calls
run the agent, with its own machine, tools, hooks and ``max_turns``, as one run tree with the
parent run that calls it.

The rules (documented in ``docs/guides/subagents.md``):

- **One call, one child run.** Each call runs the child agent on a fresh history (the default),
  or on its one persistent conversation (``persistent=True``). Calls of one sub-agent tool are
  serialized (an `Agent` runs one run at a time): a parallel batch with two calls of the same
  sub-agent runs them one after the other; two different sub-agents run in parallel.
- **The result.** ``done``: the child's final text (or its typed ``output``, as JSON); any other
  ending is an error result naming the state and why (`RunResult.error`).
- **Events.** The child's events reach the parent agent's subscribers, in order, with
  ``event.parent`` set to a `ParentRef` (the parent's run id and the call id); events of a
  grandchild keep the `ParentRef` they already carry.
- **Abort.** The parent's abort aborts the child at once (the child's own grace rules stop its
  tools); the parent's grace rules apply to the call as to any tool. Every call at both levels
  is answered.
- **Limits.** The child's run counts from the parent's counts (requests, tool calls, tokens) and
  is checked against the parent's `UsageLimits` as well as its own: what it used is added to the
  parent's counts when the call ends, so a limit reached inside the child stops the child, and
  then the parent at its next check; the call's result names the limit and the sub-agent.
  ``max_turns`` is the child's own.
"""

from __future__ import annotations

import asyncio
import dataclasses
import weakref
from typing import TYPE_CHECKING, Any, cast

from pydantic import BaseModel

from ._accounting import reported_context
from ._conversation import as_user
from ._errors import ToolDefinitionError
from ._events import Event, ParentRef
from ._limits import LimitHit, UsageLimits
from ._messages import Usage
from ._run import Run
from ._states import State
from ._tools import Tool, ToolContext, ToolResult

if TYPE_CHECKING:
    from ._agent import Agent
    from ._result import RunResult


class SubAgentPrompt(BaseModel):
    """The arguments of a sub-agent tool without an ``input_type``: the task, as text."""

    prompt: str
    """What the sub-agent is asked to do (its run's prompt)."""


class _SubAgent:
    """What a sub-agent tool's calls share: the child agent and the lock serializing them."""

    def __init__(
        self,
        agent: Agent,
        name: str,
        input_type: type[BaseModel] | None,
        persistent: bool,
        max_turns: int | None,
    ) -> None:
        self.agent = agent
        self.name = name
        self.input_type = input_type
        self.persistent = persistent
        self.max_turns = max_turns
        # One lock per event loop: an asyncio.Lock belongs to the loop it is first used on.
        self._locks: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Lock] = (
            weakref.WeakKeyDictionary()
        )

    def _lock(self) -> asyncio.Lock:
        loop = asyncio.get_running_loop()
        lock = self._locks.get(loop)
        if lock is None:
            lock = self._locks[loop] = asyncio.Lock()
        return lock

    def _prompt(self, arguments: dict[str, Any]) -> str:
        if self.input_type is None:
            return str(arguments["prompt"])
        return self.input_type.model_construct(**arguments).model_dump_json(by_alias=True)

    async def call(self, ctx: ToolContext, **arguments: Any) -> ToolResult | Any:
        prompt = self._prompt(arguments)
        async with self._lock():
            return await self._run(ctx, prompt)

    async def _run(self, ctx: ToolContext, prompt: str) -> ToolResult | Any:
        child = self.agent
        parent = ctx.run if isinstance(ctx.run, Run) else None
        if not self.persistent:
            child.messages = []  # a fresh history per call
        # Of the parent's run class: under a durable parent, its steps are the workflow's,
        # named under the call's id.
        run_class = type(parent) if parent is not None else Run
        claimed = child.claim(None, as_user(prompt), max_turns=self.max_turns, run_class=run_class)
        run = claimed.run
        seed = None
        if parent is not None:
            seed = _join_tree(run, parent)
            prefix = f"{parent.settings.step_prefix}{ctx.call_id}/"
            run.settings = dataclasses.replace(run.settings, step_prefix=prefix)
        unsubscribe = None
        if parent is not None:
            unsubscribe = child.subscribe(_forwarder(parent, ctx, run.id))

        def abort_child() -> None:
            child.abort(ctx.signal.reason or "the parent run was aborted")

        remove = ctx.signal.add_callback(abort_child)
        if ctx.signal.aborted:
            abort_child()
        try:
            result = await claimed
        finally:
            remove()
            if unsubscribe is not None:
                unsubscribe()
            if parent is not None and seed is not None:
                _charge(parent, run, seed)
        if result.state is State.AWAITING_APPROVAL:
            # Nobody can decide a sub-agent's calls inside the parent's call: answered, aborted.
            waiting = ", ".join(call.id for call in result.pending)
            child.abort(f"the sub-agent cannot wait for approval (calls {waiting})")
            why = f"it asked for approval of calls {waiting}, which nobody can give inside a call"
            return self._failure(result, why, parent, run, state=State.ABORTED.value)
        if result.state is State.DONE:
            if result.output is not None and not isinstance(result.output, str):
                return result.output
            return result.text if result.text is not None else "(no output)"
        return self._failure(result, result.error or "no reason was recorded", parent, run)

    def _failure(
        self, result: RunResult, why: str, parent: Run | None, run: Run, state: str | None = None
    ) -> ToolResult:
        """The call's error result: the sub-agent's final ``state`` (default: the result's) and
        why, with the parent's limit when one of the parent's stopped it."""
        if state is None:
            state = result.state.value if isinstance(result.state, State) else str(result.state)
        text = f"Sub-agent {self.name!r} ended in state {state!r}: {why}"
        if parent is not None and parent.settings.limits is not None:
            data = parent.data
            hit = _parents_hit(run, parent.settings.limits) or parent.settings.limits.request_hit(
                data.requests, data.usage
            )
            if hit is not None:
                text += f" (the parent run's limit: {hit.describe()}; it stops the parent too)"
        return ToolResult(
            text,
            is_error=True,
            details={"run_id": result.run_id, "state": state, "turns": result.turns},
        )


def _parents_hit(run: Run, parents: UsageLimits) -> LimitHit | None:
    """The usage limit that stopped the child ``run`` (checked in the tree's counts against the
    tighter of its own limits and the parent's), when it is the parent's: any of them, requests,
    tool calls or tokens."""
    hit = run.data.limit_hit
    if hit is None or getattr(parents, hit.name) != hit.value:
        return None
    return hit


def _forwarder(parent: Run, ctx: ToolContext, run_id: str) -> Any:
    """The child's subscriber that passes its events on to the parent's subscribers: those of
    the child's run ``run_id`` with ``parent`` set; a grandchild's keep theirs (set by the
    child's own forwarder; told apart by run id, which every emitted event carries)."""
    ref = ParentRef(parent.id, ctx.call_id, ctx.tool_name)
    bus = parent.bus

    def forward(event: Event) -> None:
        if event.run_id == run_id:
            object.__setattr__(event, "parent", ref)  # frozen for readers, as run_id is
        bus.publish(event)

    return forward


@dataclasses.dataclass(frozen=True, slots=True)
class _Seed:
    requests: int
    tool_calls: int
    usage: Usage


def _join_tree(run: Run, parent: Run) -> _Seed:
    """Start ``run``'s counts from the parent's, and check it against the parent's limits as
    well as its own (the tighter of the two, each in the tree's totals)."""
    pdata, data = parent.data, run.data
    seed = _Seed(pdata.requests, pdata.tool_calls, pdata.usage)
    data.requests, data.tool_calls, data.usage = seed.requests, seed.tool_calls, seed.usage
    own, theirs = run.settings.limits, parent.settings.limits
    if own is None and theirs is None:
        return seed
    context = reported_context(seed.usage)
    base = {
        "max_requests": seed.requests,
        "max_tool_calls": seed.tool_calls,
        "max_input_tokens": context,
        "max_output_tokens": seed.usage.output_tokens,
        "max_total_tokens": context + seed.usage.output_tokens,
    }
    merged: dict[str, int | None] = {}
    for name, used in base.items():
        values = []
        if own is not None and getattr(own, name) is not None:
            values.append(getattr(own, name) + used)  # the child's own budget, from here
        if theirs is not None and getattr(theirs, name) is not None:
            values.append(getattr(theirs, name))
        merged[name] = min(values) if values else None
    run.settings = dataclasses.replace(run.settings, limits=UsageLimits(**merged))
    return seed


def _charge(parent: Run, run: Run, seed: _Seed) -> None:
    """Add what the child run used to the parent's counts (its limits read them)."""
    pdata, data = parent.data, run.data
    pdata.requests += data.requests - seed.requests
    pdata.tool_calls += data.tool_calls - seed.tool_calls
    usage = data.usage
    if usage is not seed.usage:
        pdata.usage = pdata.usage + _minus(usage, seed.usage)


def _minus(usage: Usage, seed: Usage) -> Usage:
    return Usage(
        input_tokens=usage.input_tokens - seed.input_tokens,
        output_tokens=usage.output_tokens - seed.output_tokens,
        cache_write_tokens=usage.cache_write_tokens - seed.cache_write_tokens,
        cache_read_tokens=usage.cache_read_tokens - seed.cache_read_tokens,
    )


class AgentAsTool:
    """`Agent.as_tool`: an agent as a tool of another agent (a mixin of `Agent`)."""

    def as_tool(
        self,
        name: str,
        description: str,
        *,
        input_type: type[BaseModel] | None = None,
        persistent: bool = False,
        max_turns: int | None = None,
        timeout_seconds: float | None = None,
    ) -> Tool:
        """This agent as a `Tool` of another agent (a sub-agent): each call runs this agent,
        with its own machine, tools, hooks and ``max_turns``, as part of the calling run's tree.

        The call's result is the run's final text (or its typed ``output`` as JSON) when it ends
        ``done``; any other ending is an error result naming the state and why. The run's events
        reach the parent agent's subscribers with ``event.parent`` set (`ParentRef`); the
        parent's abort aborts it; what it uses counts toward the parent's `UsageLimits`. Calls
        are serialized (one run of this agent at a time). See ``docs/guides/subagents.md``.

        Args:
            name: the tool's name (1-64 letters, digits, ``_`` or ``-``).
            description: what the sub-agent does, for the calling model.
            input_type: a pydantic model class: the tool's arguments are its fields and the
                prompt is their JSON; None (default): one ``prompt`` string argument.
            persistent: keep one conversation across calls (default False: each call starts
                from an empty history).
            max_turns: this sub-agent's turn cap per call (default: the agent's ``max_turns``).
            timeout_seconds: cancel a call that runs longer (its run ends ``aborted``).

        Raises:
            ToolDefinitionError: ``input_type`` is not a pydantic model class, or ``name`` is
                invalid.
        """
        if input_type is not None and not (
            isinstance(input_type, type) and issubclass(input_type, BaseModel)
        ):
            raise ToolDefinitionError(
                f"sub-agent tool {name!r}: input_type must be a pydantic model class, got "
                f"{input_type!r}"
            )
        runner = _SubAgent(cast("Agent", self), name, input_type, persistent, max_turns)
        return Tool(
            name=name,
            description=description,
            function=runner.call,
            args_model=input_type or SubAgentPrompt,
            timeout_seconds=timeout_seconds,
            context_param="ctx",
            durable_steps=True,
        )
