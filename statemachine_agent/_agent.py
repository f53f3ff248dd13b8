"""`Agent`: the configuration of the loop. It holds a `Conversation` (history, queued input), an
`EventBus` (subscribers) and the claim on its current run; each ``run()`` is a `Run` (`_run`)
built from a frozen `RunSettings` read from this configuration, driven by the machine (`_machine`).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Self

from pydantic import BaseModel

from ._agent_base import AgentBase
from ._compacting import Compaction, context_window
from ._conversation import DeliveryMode, as_user
from ._errors import AgentBusyError, UsageError
from ._execution import ToolExecution
from ._handles import (
    ClaimedRun,
    RunHandle,
    keep_until_done,
)
from ._hooks import (
    AfterToolCall,
    BeforeToolCall,
    Decision,
    ShouldContinue,
    TransformContext,
)
from ._limits import RunCounts, UsageLimits
from ._machine import LoopMachine, MaxTokensPolicy
from ._messages import Message, UserMessage
from ._result import RunResult
from ._run import Run, continue_refusal
from ._session_seam import SessionLogLike, session_support
from ._settings import RunSettings
from ._sources import ToolSource, ToolTable, agent_tools
from ._states import Trigger
from ._subagent import AgentAsTool
from ._tools import Tool, ToolFunction
from .models._base import Model, ToolDefinition

__all__ = ["Agent", "DeliveryMode", "continue_refusal"]


class Agent(AgentBase, AgentAsTool):
    """An agent: a model, tools and a history, driven by the loop's state machine.

    Args:
        model: the provider (`AnthropicModel`, `ScriptedModel`, `FunctionModel`, or any `Model`).
        tools: `Tool` objects, typed functions (wrapped with `tool`) or tool sources
            (`ToolSource`, e.g. `statemachine_agent.mcp.MCPServer`): a source's tools are
            listed on ``async with agent`` and before each model request (``tool_table``);
            `aclose` closes the sources.
        system: the system prompt.
        max_turns: the turn cap of a run (a turn is one model response plus its tool batch);
            reaching it ends the run in ``max_turns``. A run continued without a prompt
            (``run()``, decisions, a resumed session log, a durable run) is the same run and
            keeps counting: continued at the cap it reached, it stops at once in ``max_turns``
            with no new turn and no request; pass a higher ``max_turns`` to go on. A prompt
            starts a new run with its own count. ``run(max_turns=N)`` overrides it for that
            call only; assign ``agent.max_turns`` to change it for later calls.
        tool_execution: ``"parallel"`` (default; calls on one resource still queue) or
            ``"sequential"``.
        max_continuations: cap on ``pause_turn`` and ``max_tokens`` continuations in a run. A
            ``pause_turn`` at the cap ends the run in ``max_turns`` (``run()`` continues it).
        max_tokens_policy: ``"continue"`` asks the model to go on after a truncated answer;
            ``"stop"`` ends ``done`` with the truncation reported in ``RunResult.error``.
        abort_grace_seconds: how long running tools may take to stop after an abort before they
            are cancelled.
        model_retries: retries of a retryable model failure (overload, a dropped stream).
        retry_backoff_seconds: the first retry delay; it doubles each retry.
        before_tool_call: the permission hook, called before each tool call: allow, rewrite,
            deny or defer it (`BeforeToolCall` in `statemachine_agent._hooks`).
        after_tool_call: called with each call's result; may replace it (`AfterToolCall`).
        should_continue: asked after each turn; False ends the run in ``max_turns``
            (`ShouldContinue`).
        transform_context: rewrites the history each request sends; the stored history is
            unchanged (`TransformContext`).
        deps: any object; tools and hooks receive it.
        messages: a history to start from.
        model_settings: provider options sent with each request.
        session: a `SessionLog`, or a path for a new append-only JSONL log of this agent's
            messages, tool results, states and runs (see `Agent.resume`).
        owns_model: `aclose` (and ``async with``) also closes the model (``await
            model.aclose()``, its HTTP client). False by default: one model is often shared by
            many agents.
        steering_mode: ``"all"`` (default) delivers every queued steering message at once;
            ``"one_at_a_time"`` delivers one per delivery point (one per model request).
        follow_up_mode: ``"one_at_a_time"`` (default: one follow-up each time the model would
            stop) or ``"all"``.
        limits: `UsageLimits` for each run (requests, tokens, tool calls); reaching one ends the
            run in ``max_turns`` (see `UsageLimits`). Assign ``agent.limits`` to change them.
        final_turn: off by default. True (or an instruction of your own, a str): when a run would
            end at ``max_turns`` or a usage limit, it first makes one request with tools disabled
            (``tool_choice`` none) and an instruction to answer with what it has, so
            ``result.text`` holds an answer; the state is still ``max_turns``, and that request
            is made even though the limit is reached (it is not counted in the run's requests).
            The history then ends with an answer: the next ``run()`` takes a prompt.
        output_type: a pydantic model class: the model answers through a ``final_result`` tool
            whose schema is the model's JSON schema, and `RunResult.output` is the validated
            instance. None (default) or ``str``: a text answer.
        output_retries: how many invalid final results (each answered with an error result
            listing every field error) or text answers are sent back before the run fails.
        compaction: automatic compaction (`Compaction`): before a request whose context reaches
            its threshold, after a response cut by the context window, and once on a "prompt is
            too long" error, the ``compacting`` state replaces the older history with a summary.
            None (default): off; such a response ends the run with an error saying how to go on.

    Raises:
        ToolDefinitionError: two tools share a name.
        UsageError: an unknown ``tool_execution``, ``steering_mode`` or ``follow_up_mode``; a
            fractional compaction threshold for a model with no ``context_window``; the
            model refuses a tool name (e.g. `AnthropicModel.check_tools`: the name of one of its
            server tools).
    """

    def __init__(
        self,
        model: Model,
        *,
        tools: Iterable[Tool | ToolFunction | ToolSource] = (),
        system: str | None = None,
        max_turns: int = 50,
        tool_execution: ToolExecution = "parallel",
        max_continuations: int = 3,
        max_tokens_policy: MaxTokensPolicy = "continue",
        abort_grace_seconds: float = 2.0,
        model_retries: int = 2,
        retry_backoff_seconds: float = 0.5,
        before_tool_call: BeforeToolCall | None = None,
        after_tool_call: AfterToolCall | None = None,
        should_continue: ShouldContinue | None = None,
        transform_context: TransformContext | None = None,
        deps: Any = None,
        messages: Sequence[Message] = (),
        model_settings: dict[str, Any] | None = None,
        session: str | os.PathLike[str] | SessionLogLike | None = None,
        owns_model: bool = False,
        steering_mode: DeliveryMode = "all",
        follow_up_mode: DeliveryMode = "one_at_a_time",
        limits: UsageLimits | None = None,
        final_turn: bool | str = False,
        output_type: type[BaseModel] | type[str] | None = None,
        output_retries: int = 1,
        compaction: Compaction | None = None,
    ) -> None:
        if tool_execution not in ("parallel", "sequential"):
            raise UsageError("tool_execution must be 'parallel' or 'sequential'")
        super().__init__(messages, steering_mode, follow_up_mode)
        self.model = model
        self.owns_model = owns_model
        self.tools, sources, self.output_type = agent_tools(tools, output_type)
        self.output_retries, self.system, self.max_turns = output_retries, system, max_turns
        self.tool_execution: ToolExecution = tool_execution
        self.abort_grace_seconds = abort_grace_seconds
        self.model_retries, self.retry_backoff_seconds = model_retries, retry_backoff_seconds
        self.before_tool_call, self.after_tool_call = before_tool_call, after_tool_call
        self.should_continue, self.transform_context = should_continue, transform_context
        self.deps = deps
        self.model_settings = dict(model_settings or {})
        self.max_continuations = max_continuations
        self.max_tokens_policy: MaxTokensPolicy = max_tokens_policy
        self.limits, self.final_turn = limits, final_turn
        self.machine = LoopMachine()
        if compaction is not None:
            compaction.limit(context_window(model))  # a fractional threshold needs the window
        self.compaction = compaction
        self.tool_definitions = [
            ToolDefinition(t.name, t.description, t.input_schema) for t in self.tools.values()
        ]
        """The tools as the model sees them, in declaration order."""
        check_tools = getattr(model, "check_tools", None)
        if check_tools is not None:  # the provider's rules on tool names, before any request
            check_tools(self.tool_definitions)
        self.tool_table = ToolTable(self.tools, sources, check_tools) if sources else None
        """With tool sources: their tools and the agent's, as last listed (`ToolTable`)."""
        self.session: SessionLogLike | None = None
        if session is not None:  # the session package registered how (`_session_seam`)
            self.session = session_support().attach(self, session)

    @classmethod
    def resume(
        cls,
        path: str | os.PathLike[str],
        *,
        model: Model,
        tools: Iterable[Tool | ToolFunction | ToolSource] = (),
        strict: bool = True,
        fsync: bool = False,
        **kwargs: Any,
    ) -> Self:
        """Continue the session logged at ``path``: its history (dangling calls answered with an
        error result, written to the log) and state, logging on to the same file.

        Args:
            path: the JSONL session log (a missing or empty file starts a new one).
            model: as for `Agent` (the log holds no model client or key).
            tools: as for `Agent`.
            **kwargs: the other options of `Agent`.
            strict: see `read_session`; False skips unreadable lines with a warning.
            fsync: see `SessionLog`.

        Raises:
            SessionCorruptError: ``strict`` and a complete line of the log is unreadable (only a
                torn last line, a crash mid-write, is dropped).
            AgentError: the file is not a session log.
            UsageError: another agent holds the log open.
        """
        log = session_support().open(path, fsync=fsync, strict=strict)
        try:
            return cls(model, tools=tools, session=log, **kwargs)
        except BaseException:
            log.close()  # release the log's lock for the caller's next attempt
            raise

    def abort(self, reason: str = "aborted by the caller") -> bool:
        """Stop the current run: it ends in ``aborted`` with every issued call answered.

        Safe to call from any thread and at any moment, also between starting a run and its
        first step (the run is claimed when started). Returns False when no run is in progress.
        """
        claims = self._claims
        with claims.lock:
            if not claims.running and self.conversation.held is not None:
                # No run to stop: a short one answers the waiting calls and ends ``aborted``.
                self._new_run(Run, claims.counts).abort_waiting(reason)
                return True
        return claims.abort(claims.run, reason)

    # -- running ------------------------------------------------------------------------------

    def run_sync(self, prompt: str | UserMessage | None = None, **kwargs: Any) -> RunResult:
        """`run` in a new event loop (``asyncio.run``). Threads may share an agent: when two call
        it at once, exactly one runs and the other gets `AgentBusyError`.

        Raises:
            UsageError: called from inside a running event loop (``await agent.run`` there).
            AgentBusyError: a run is already in progress.
        """
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            pass  # no loop here: run in a new one (outside this handler, so errors chain cleanly)
        else:
            raise UsageError("run_sync() cannot run inside an event loop; use 'await agent.run()'")
        return asyncio.run(self.run(prompt, **kwargs))

    def start(
        self, prompt: str | UserMessage | None = None, *, max_turns: int | None = None
    ) -> RunHandle:
        """Start a run in the background on the running loop (for servers): the agent is
        claimed at once, and the returned `RunHandle` is awaited for the `RunResult`, aborts
        the run, and holds the result once it has ended.

        Args:
            prompt: as for `run`.
            max_turns: as for `run`.

        Raises:
            UsageError: no event loop is running (use `run_sync`), or nothing to continue.
            AgentBusyError: a run is already in progress.
        """
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            raise UsageError(
                "start() needs a running event loop; outside one use run_sync()"
            ) from None
        coro = self.run(prompt, max_turns=max_turns)
        task: asyncio.Task[RunResult] = loop.create_task(coro)
        keep_until_done(task)
        return RunHandle(self._claims, coro.run, task)

    def run(
        self,
        prompt: str | UserMessage | None = None,
        *,
        max_turns: int | None = None,
        decisions: Mapping[str, Decision] | None = None,
    ) -> ClaimedRun:
        """Run until a terminal state (or ``awaiting_approval``) and return how it ended:
        ``await agent.run(prompt)``.

        The run is claimed when ``run()`` is called, not when it is awaited: ``agent.is_running``
        is true at once, a second ``run()`` raises `AgentBusyError` at once, and an
        ``agent.abort()`` before the run's first step ends it ``aborted``. So
        ``asyncio.create_task(agent.run(...))`` works like `start`. Closing or cancelling the
        returned coroutine before its first step (or dropping it unawaited) releases the claim.

        Args:
            prompt: the user input; None continues from the current history (after ``aborted``
                or ``max_turns``, or with queued input) and keeps counting turns.
            max_turns: the turn cap of this call only: the run's total turns, those it made
                before this call included (a run continued at ``max_turns=N`` after N turns
                stops at once); a later call without it uses ``agent.max_turns`` again.
            decisions: in ``awaiting_approval``, ``{call_id: Approve() | Approve(arguments={...})
                | Deny(reason)}`` for some or all pending calls: decided calls run (or are
                answered), the rest stay pending; once none is left the run goes on.

        Returns:
            The `RunResult`; its ``state`` is the agent's state.

        Raises:
            AgentBusyError: a run is already in progress (raised by the call).
            UsageError: ``max_turns`` is not a positive integer; nothing to continue from (no
                prompt, no queued input, and the history ends
                with the model's complete answer); a prompt (or none, or no decisions) while calls
                are pending; decisions for unknown or already decided calls, or when nothing is
                pending. Nothing is changed then.
            asyncio.CancelledError: the task was cancelled; the history is recorded as aborted
                first.
        """
        user = None if prompt is None else as_user(prompt)
        if max_turns is not None and (
            isinstance(max_turns, bool) or not isinstance(max_turns, int) or max_turns < 1
        ):
            raise UsageError(
                f"run(max_turns=...) must be a positive integer (the run's total turns), got "
                f"{max_turns!r}"
            )
        return self.claim(None, user, decisions=decisions, max_turns=max_turns)

    def claim(
        self,
        first: str | None,
        prompt: UserMessage | None = None,
        *,
        decisions: Mapping[str, Decision] | None = None,
        max_turns: int | None = None,
        run_class: type[Run] = Run,
        abort_reason: str | None = None,
    ) -> ClaimedRun:
        """Claim the agent for a run of ``run_class`` and return its coroutine (`run` does, and
        an engine running the loop its own way, such as the durable one, with its `Run`).

        Args:
            first: the first trigger; None: ``start``, or ``decided`` with ``decisions``, after
                the checks `run` describes. ``decided`` checks ``decisions``; ``abort`` with
                ``abort_reason`` ends a run waiting for decisions.
            prompt: the user input (a ``start`` with one begins a new run's count).
            decisions: as for `run`.
            max_turns: as for `run`.
            run_class: the `Run` subclass to drive.
            abort_reason: the run is aborted with this reason before its first step.

        Raises:
            AgentBusyError, UsageError: as for `run`.
        """
        claims = self._claims
        with claims.lock:  # check and claim as one step, whichever threads call
            if claims.running:
                raise AgentBusyError("this agent is already running; await that run or abort it")
            if first is None:
                first = self._first_trigger(prompt, decisions)
            elif first == Trigger.DECIDED:
                self._first_trigger(None, decisions)
            counts = None if prompt is not None else claims.counts  # a prompt: a new run
            run = self._new_run(run_class, counts, max_turns)
            run.first_trigger = first
            if abort_reason is not None:
                run.signal.set(abort_reason)
            claims.claim(run)
        return ClaimedRun(claims, run, prompt)

    def _new_run(
        self, run_class: type[Run], counts: RunCounts | None, max_turns: int | None = None
    ) -> Run:
        """A `run_class` reading this configuration now (``max_turns``: this run's cap)."""
        settings = RunSettings.read(self, max_turns=max_turns or self.max_turns)
        return run_class(settings, self.conversation, self.bus, self.machine, counts=counts)

    def _first_trigger(
        self, user: UserMessage | None, decisions: Mapping[str, Decision] | None
    ) -> str:
        """Validate ``decisions`` (changing nothing when they are wrong) and store them; the
        first trigger: ``decided``, or ``start`` when nothing is held and there is something to
        continue from."""
        first = self.conversation.decide(user, decisions)
        if first is Trigger.START and user is None and not self.conversation.has_queued_input():
            refusal = continue_refusal(self.messages)
            if refusal is not None:
                raise UsageError(refusal)
        return first
