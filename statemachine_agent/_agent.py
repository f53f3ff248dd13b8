"""`Agent`: configuration, history, queued input and events. Each ``run()`` is a `Run`
(`statemachine_agent._run`), driven by the machine's definition (`statemachine_agent._machine`)."""

from __future__ import annotations

import asyncio
import inspect
import logging
import os
import threading
import weakref
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal, Self

from pydantic import BaseModel

from ._accounting import ContextMeter, ContextUsage
from ._compacting import Compaction, context_window
from ._context import ContextProjector, project
from ._diagram import Detail, Diagram
from ._errors import AgentBusyError, ToolDefinitionError, UsageError
from ._events import SLOW_SUBSCRIBER_SECONDS, Event, RunEnd, RunStart
from ._execution import PendingBatch, ToolExecution
from ._handles import DEFAULT_MAX_QUEUE, ClaimedRun, EventStream, RunHandle, keep_until_done
from ._hooks import (
    AfterToolCall,
    BeforeToolCall,
    Decision,
    PendingCall,
    ShouldContinue,
    TransformContext,
    check_decisions,
)
from ._limits import RunCounts, UsageLimits
from ._machine import LoopMachine, MaxTokensPolicy
from ._messages import (
    AssistantMessage,
    Message,
    StopReason,
    ToolCallBlock,
    ToolResultMessage,
    Usage,
    UserMessage,
)
from ._output import output_tool
from ._responses import call_ids
from ._result import RunResult
from ._run import Run, continuation_of
from ._sources import ToolSource, merge_tools
from ._states import State, Trigger
from ._tools import Tool, ToolFunction, tool_from_function
from .models._base import Model, ModelRequest, ToolDefinition

if TYPE_CHECKING:
    from .session import SessionLog

logger = logging.getLogger("statemachine_agent")

DeliveryMode = Literal["all", "one_at_a_time"]
"""How queued input is delivered: every queued message at once, or one per delivery point."""


class _Subscriber:
    """A subscribed callback; `Run.emit` calls it (and these methods on a failure or when slow)."""

    __slots__ = ("callback", "warned")

    def __init__(self, callback: Callable[[Event], Any]) -> None:
        self.callback = callback
        self.warned = False

    def failed(self, event: Event) -> None:
        """The callback raised on ``event`` (called in its ``except``): logged, never raised."""
        logger.exception("event subscriber %r failed on %s", self.callback, event.type)

    def took(self, event: Event, seconds: float) -> None:
        """The callback took ``seconds`` on ``event``, more than `SLOW_SUBSCRIBER_SECONDS`:
        warn, once per subscriber."""
        if self.warned:
            return
        self.warned = True
        logger.warning(
            "event subscriber %r took %.0f ms on a %s event (more than %.0f ms); it "
            "holds up every agent on its event loop: consume slow work through "
            "agent.events() instead (logged once per subscriber)",
            self.callback,
            seconds * 1000,
            event.type,
            SLOW_SUBSCRIBER_SECONDS * 1000,
        )


class Agent:
    """An agent: a model, tools and a history, driven by the loop's state machine.

    Args:
        model: the provider (`AnthropicModel`, `ScriptedModel`, `FunctionModel`, or any `Model`).
        tools: `Tool` objects, typed functions (wrapped with `tool`) or tool sources
            (`ToolSource`, e.g. `statemachine_agent.mcp.MCPServer`): a source's tools are
            listed on ``async with agent`` and before each model request; `aclose` closes it.
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
        before_tool_call, after_tool_call, should_continue, transform_context: hooks (see
            `statemachine_agent._hooks`).
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
        session: str | os.PathLike[str] | SessionLog | None = None,
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
        for option, mode in (("steering_mode", steering_mode), ("follow_up_mode", follow_up_mode)):
            if mode not in ("all", "one_at_a_time"):
                raise UsageError(f"{option} must be 'all' or 'one_at_a_time', got {mode!r}")
        self.steering_mode: DeliveryMode = steering_mode
        self.follow_up_mode: DeliveryMode = follow_up_mode
        self.model = model
        self.owns_model = owns_model
        self.tools: dict[str, Tool] = {}
        self.tool_sources: list[ToolSource] = []
        for item in tools:
            if isinstance(item, ToolSource) and not isinstance(item, Tool):
                self.tool_sources.append(item)
                continue
            if not isinstance(item, Tool) and not callable(item):
                raise ToolDefinitionError(
                    f"tools must be Tool objects or typed functions, got {item!r}"
                )
            t = item if isinstance(item, Tool) else tool_from_function(item)
            if t.name in self.tools:
                raise ToolDefinitionError(f"two tools are named {t.name!r}")
            self.tools[t.name] = t
        self.output_type: type[BaseModel] | None = None
        if output_type is not None and output_type is not str:
            final = output_tool(output_type)  # type: ignore[arg-type]
            if final.name in self.tools:
                raise ToolDefinitionError(
                    f"a tool is named {final.name!r}: that name is the final result tool's "
                    "when output_type is given"
                )
            self.tools[final.name] = final
            self.output_type = final.args_model
        self.output_retries = output_retries
        self.system = system
        self.max_turns = max_turns
        self.tool_execution: ToolExecution = tool_execution
        self.abort_grace_seconds = abort_grace_seconds
        self.model_retries = model_retries
        self.retry_backoff_seconds = retry_backoff_seconds
        self.before_tool_call = before_tool_call
        self.after_tool_call = after_tool_call
        self.should_continue = should_continue
        self.transform_context = transform_context
        self.deps = deps
        self.model_settings = dict(model_settings or {})
        self.max_continuations = max_continuations
        self.max_tokens_policy: MaxTokensPolicy = max_tokens_policy
        self.limits = limits
        self.final_turn = final_turn
        self.machine = LoopMachine()
        if compaction is not None:
            compaction.limit(context_window(model))  # a fractional threshold needs the window
        self.compaction = compaction
        self._context = ContextMeter()
        self._messages: list[Message] = list(messages)
        self._projector = ContextProjector()
        self._appended = 0
        self._steering: deque[UserMessage] = deque()
        self._follow_ups: deque[UserMessage] = deque()
        # Copy-on-write: an event goes to the subscribers registered when it was emitted.
        self._subscribers: tuple[_Subscriber, ...] = ()
        # Claiming a run, aborting it and binding its loop happen under this lock (any thread).
        self._claim_lock = threading.RLock()
        self._run: Run | None = None  # the current run (None between runs: no reference cycle)
        self._counts = RunCounts()  # the last run's counts (a continued run goes on from them)
        self._pending: PendingBatch | None = None  # a batch waiting for decisions
        self._running = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread = 0
        self._call_ids = call_ids(self._messages)
        self._own_tools = dict(self.tools)  # without the tool sources' (see `_collect_tools`)
        self._tool_definitions = [
            ToolDefinition(t.name, t.description, t.input_schema) for t in self.tools.values()
        ]
        check_tools = getattr(model, "check_tools", None)
        if check_tools is not None:  # the provider's rules on tool names, before any request
            check_tools(self._tool_definitions)
        self.session: SessionLog | None = None
        if session is not None:
            from .session import attach_session  # the session package builds on the core

            self.session = attach_session(self, session)

    @classmethod
    def resume(
        cls,
        path: str | os.PathLike[str],
        *,
        model: Model,
        tools: Iterable[Tool | ToolFunction] = (),
        strict: bool = True,
        fsync: bool = False,
        **kwargs: Any,
    ) -> Self:
        """Continue the session logged at ``path``: its history (dangling calls answered with an
        error result, written to the log) and state, logging on to the same file.

        Args:
            path: the JSONL session log (a missing or empty file starts a new one).
            model, tools, kwargs: as for `Agent` (the log holds no model client or key).
            strict: see `read_session`; False skips unreadable lines with a warning.
            fsync: see `SessionLog`.

        Raises:
            SessionCorruptError: ``strict`` and a complete line of the log is unreadable (only a
                torn last line, a crash mid-write, is dropped).
            AgentError: the file is not a session log.
            UsageError: another agent holds the log open.
        """
        from .session import SessionLog  # the session package builds on the core

        log = SessionLog.open(path, fsync=fsync, strict=strict)
        try:
            return cls(model, tools=tools, session=log, **kwargs)
        except BaseException:
            log.close()  # release the log's lock for the caller's next attempt
            raise

    def close(self) -> None:
        """Close the session log, if any (its lock and file are released; with ``fsync`` its
        last lines are synced first). The agent can still run, unlogged. The model is closed by
        `aclose` when the agent owns it; otherwise it is its owner's to close.

        An agent dropped without closing releases its log when it is collected (the agent holds
        no reference cycle to it); a callback of yours that refers to the agent makes a cycle,
        released only when the garbage collector runs, so close agents you are done with.

        Raises:
            AgentBusyError: a run is in progress (abort it and await it first).
        """
        with self._claim_lock:
            if self._running:
                raise AgentBusyError("cannot close the agent while a run is in progress")
            if self.session is not None:
                self.session.close()

    async def aclose(self) -> None:
        """`close`, then, when the agent owns its model (``owns_model=True``), close the model
        (``await model.aclose()``: the HTTP client it made).

        Raises:
            AgentBusyError: a run is in progress.
        """
        self.close()
        for source in self.tool_sources:  # an MCP server's process or connection
            await source.aclose()
        aclose = getattr(self.model, "aclose", None) if self.owns_model else None
        if aclose is not None:
            await aclose()

    async def _collect_tools(self) -> None:
        """List the tool sources' current tools into `tools` and the request's definitions
        (before each model request and on ``async with``; nothing to do without sources).

        Raises:
            ToolDefinitionError: two tools share a name (naming both owners).
            AgentError: a source cannot list its tools (naming it).
        """
        if not self.tool_sources:
            return
        tools = await merge_tools(self._own_tools, self.tool_sources)
        if list(tools.values()) == list(self.tools.values()):
            return
        definitions = [
            ToolDefinition(t.name, t.description, t.input_schema) for t in tools.values()
        ]
        check_tools = getattr(self.model, "check_tools", None)
        if check_tools is not None:
            check_tools(definitions)
        self.tools = tools
        self._tool_definitions = definitions

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    async def __aenter__(self) -> Self:
        """Connect the tool sources and list their tools (closing them again on a failure).

        Raises:
            ToolDefinitionError, AgentError: as `_collect_tools`.
        """
        try:
            await self._collect_tools()
        except BaseException:
            for source in self.tool_sources:
                await source.aclose()
            raise
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    # -- public state -------------------------------------------------------------------------

    @property
    def state(self) -> State | str:
        """The machine's current state (a `State`, or the name of a state a user added)."""
        return self.machine.state

    def diagram(self, *, detail: Detail = "overview") -> Diagram:
        """This agent's state diagram (its machine with the states, transitions and callbacks
        added), the current state marked: Jupyter shows it (SVG with Graphviz, Mermaid
        without), ``str()`` gives the Mermaid text.

        Args:
            detail: ``overview`` (one edge per pair of states, labelled with the branches'
                labels) or ``full`` (every guarded branch with its guards).

        Raises:
            UsageError: ``detail`` is unknown.
        """
        return Diagram(self, detail=detail)

    def restore(
        self,
        messages: Sequence[Message],
        state: State,
        *,
        pending: tuple[Sequence[PendingCall], Sequence[ToolResultMessage]] | None = None,
        counts: RunCounts | None = None,
    ) -> None:
        """Put back a saved history and state (``idle``, terminal or ``awaiting_approval``), as a
        session log does.

        Args:
            messages: the history (for ``awaiting_approval``, ending with the held batch's
                assistant message).
            state: the state to be in.
            pending: for ``awaiting_approval``: the calls waiting for a decision and the results
                the batch already has.
            counts: what the last run counted toward its limits (`RunResult.counts`): a run
                continued without a prompt goes on from them, as in the process that ran it.
                None: zero.

        Raises:
            AgentBusyError: a run is in progress.
            MachineDefinitionError: ``state`` is mid-run (a run cannot be resumed mid-flight).
            UsageError: ``awaiting_approval`` without pending calls, or they do not belong to the
                last message.
        """
        batch = None
        if state is State.AWAITING_APPROVAL:
            last = messages[-1] if messages else None
            calls, results = pending or ((), ())
            ids = {c.id for c in getattr(last, "tool_calls", [])}
            if not isinstance(last, AssistantMessage) or not calls:
                raise UsageError("awaiting_approval needs the pending calls of the last message")
            if not {c.id for c in calls} <= ids or not {r.tool_call_id for r in results} <= ids:
                raise UsageError("the pending calls are not calls of the last message")
            batch = PendingBatch(last, {r.tool_call_id: r for r in results}, list(calls))
        self._pending = None  # the history below replaces the old batch's too
        self.messages = messages
        self.machine.restore(state)
        self._pending = batch
        self._counts = counts if counts is not None else RunCounts()

    @property
    def pending(self) -> list[PendingCall]:
        """The deferred calls waiting for a decision (in ``awaiting_approval``), in declaration
        order."""
        return [] if self._pending is None else list(self._pending.calls)

    @property
    def messages(self) -> list[Message]:
        """The history (do not mutate it; assign a new list between runs instead)."""
        return self._messages

    @messages.setter
    def messages(self, messages: Sequence[Message]) -> None:
        """Replace the history between runs.

        In ``awaiting_approval`` the new history must still end with the response whose calls
        wait for a decision (the same tool calls; their held results are appended after it once
        every call is decided), as a compaction that keeps that turn does.

        Raises:
            AgentBusyError: a run is in progress.
            UsageError: calls await approval and the new history does not end with their
                response (it would drop them, and approving them would leave results without
                their calls).
        """
        if self._running:
            raise AgentBusyError("cannot replace the history while a run is in progress")
        pending = self._pending
        if pending is not None:
            last = messages[-1] if messages else None
            batch = [c.id for c in pending.response.tool_calls]
            if not isinstance(last, AssistantMessage) or [c.id for c in last.tool_calls] != batch:
                waiting = ", ".join(call.id for call in pending.calls)
                raise UsageError(
                    f"calls {waiting} are awaiting approval: a new history must end with the "
                    f"response that holds them (tool calls {', '.join(batch)}); keep it, or "
                    "decide them first with agent.run(decisions={call_id: Approve() or "
                    "Deny(reason)}), or agent.abort()"
                )
            pending.response = last  # the batch goes on from the message the history holds
        self._messages = list(messages)
        self._call_ids = call_ids(self._messages)
        # The projection and the context account followed the old list: start over (and let
        # the old messages go).
        self._context.reset()
        self._projector = ContextProjector()

    @property
    def context_usage(self) -> ContextUsage:
        """How much of the model's context window the history uses: the tokens the provider
        counted for the last request plus an estimate of what was added since (see
        `ContextUsage`; the whole history is estimated before the first response)."""
        return self._context.usage(self._messages, context_window(self.model))

    async def count_context(self) -> ContextUsage:
        """Count the context the next request would use with the model's token-counting
        endpoint (``model.count_tokens(request)``, e.g. `AnthropicModel.count_tokens`) instead
        of estimating it; the count becomes the meter's reported figure. A model without one
        gives `context_usage` (the estimate).

        Raises:
            ModelError: the count failed.
        """
        count = getattr(self.model, "count_tokens", None)
        if count is None:
            return self.context_usage
        messages = self._messages
        request = ModelRequest(
            project(messages),
            self.system,
            self._tool_definitions,
            self.model_settings,
        )
        tokens = int(await count(request))
        self._context.counted(messages, Usage(input_tokens=tokens))  # covers every message
        return self.context_usage

    @property
    def is_running(self) -> bool:
        """A run is in progress."""
        return self._running

    # -- events -------------------------------------------------------------------------------

    def subscribe(self, callback: Callable[[Event], Any]) -> Callable[[], None]:
        """Call ``callback(event)`` for every event, synchronously and in order, on the thread
        running the agent (the event loop's). Returns an unsubscribe function.

        Every subscriber registered when an event is emitted receives it; subscribing or
        unsubscribing (even from inside a callback) takes effect from the next event. A callback
        that raises is logged and does not stop the run. A callback holds up the run and every
        agent on its loop while it runs: one that takes longer than `SLOW_SUBSCRIBER_SECONDS`
        is logged once at warning level. Consume slowly (or asynchronously) through `events`.

        Raises:
            TypeError: ``callback`` is async (it would never be awaited; use `events`).
        """
        if _is_async(callback):
            raise TypeError(
                f"subscribe() takes a plain function, got the async {callback!r}, which would "
                "never be awaited; iterate 'async for event in agent.events()' instead"
            )
        subscriber = _Subscriber(callback)
        with self._claim_lock:
            self._subscribers = (*self._subscribers, subscriber)
        agent_ref = weakref.ref(self)  # an unsubscribe function kept by a callback makes no cycle

        def unsubscribe() -> None:
            agent = agent_ref()
            if agent is not None:
                with agent._claim_lock:
                    agent._subscribers = tuple(s for s in agent._subscribers if s is not subscriber)

        return unsubscribe

    def events(self, *, max_queue: int = DEFAULT_MAX_QUEUE) -> EventStream:
        """An async iterator over events, subscribed when called (before the first iteration):
        ``async for event in agent.events(): ...``. Events are handed to the consumer's loop
        thread-safely, whichever thread runs the agent.

        Args:
            max_queue: how many events may wait for the consumer; beyond it the oldest waiting
                event is dropped for each new one (counted in the stream's ``dropped``; ``seq``
                shows the gap).

        Raises:
            UsageError: ``max_queue`` is below 1.
        """
        return EventStream(self.subscribe, max_queue)

    def _listening(self) -> bool:
        """Anyone receives events (events are not built otherwise)."""
        return bool(self._subscribers)

    # -- queued input and abort ---------------------------------------------------------------

    def steer(self, message: str | UserMessage) -> None:
        """Queue input delivered after the current tool batch's results, before the next model
        request (or right after the current response when it has no tool calls). Input still
        queued when a run ends (an abort) is delivered by the next run, right after its prompt."""
        self._steering.append(_as_user(message))

    def follow_up(self, message: str | UserMessage) -> None:
        """Queue input delivered when the model would otherwise stop (one per stop)."""
        self._follow_ups.append(_as_user(message))

    def has_queued_input(self) -> bool:
        """Steering or follow-up messages are waiting to be delivered."""
        return bool(self._steering or self._follow_ups)

    def clear_queues(self) -> tuple[list[UserMessage], list[UserMessage]]:
        """Remove every queued message; returns them: ``(steering, follow_ups)``, each in the
        order it was queued."""
        steering, follow_ups = list(self._steering), list(self._follow_ups)
        self._steering.clear()
        self._follow_ups.clear()
        return steering, follow_ups

    def abort(self, reason: str = "aborted by the caller") -> bool:
        """Stop the current run: it ends in ``aborted`` with every issued call answered.

        Safe to call from any thread and at any moment, also between starting a run and its
        first step (the run is claimed when started). Returns False when no run is in progress.
        """
        with self._claim_lock:
            if not self._running and self._pending is not None:
                self._abort_pending(reason)
                return True
        return self._abort(self._run, reason)

    def _abort(self, run: Run | None, reason: str) -> bool:
        with self._claim_lock:
            if run is None or run is not self._run or not self._running:
                return False
            loop = self._loop
            if loop is None or threading.get_ident() == self._loop_thread:
                # Not started yet (no callbacks armed; the run sees the flag at its first step)
                # or on the run's own thread.
                run.signal.set(reason)
                return True
            try:
                loop.call_soon_threadsafe(run.signal.set, reason)
            except RuntimeError:  # the loop has closed: the run is over
                return False
            return True

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
            prompt, max_turns: as for `run`.

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
        return RunHandle(self, coro.run, task)

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
        user = None if prompt is None else _as_user(prompt)
        if max_turns is not None and (
            isinstance(max_turns, bool) or not isinstance(max_turns, int) or max_turns < 1
        ):
            raise UsageError(
                f"run(max_turns=...) must be a positive integer (the run's total turns), got "
                f"{max_turns!r}"
            )
        with self._claim_lock:  # check and claim as one step, whichever threads call
            if self._running:
                raise AgentBusyError("this agent is already running; await that run or abort it")
            first = self._check_decisions(user, decisions)
            if first is Trigger.START and user is None and not (self._steering or self._follow_ups):
                self._check_can_continue()
            run = self._claim(first, fresh=user is not None)
            run.max_turns = max_turns  # this call's cap only: agent.max_turns is unchanged
        return ClaimedRun(self, run, user)

    def _claim(self, first: str, *, fresh: bool, run_class: type[Run] = Run) -> Run:
        """Claim the agent for a new run starting with trigger ``first`` (the claim lock held,
        the checks done): a fresh one for a prompt, else one that keeps counting."""
        run = run_class(self, counts=None if fresh else self._counts)
        run.first_trigger = first
        self._run, self._loop, self._loop_thread = run, None, 0
        self._running = True
        return run

    async def _drive(self, run: Run, user: UserMessage | None) -> RunResult:
        with self._claim_lock:  # from now on an abort from another thread goes through the loop
            self._loop = asyncio.get_running_loop()
            self._loop_thread = threading.get_ident()
        try:
            return await run.drive(user, run.first_trigger)
        finally:
            self._release(run)

    def _release(self, run: Run) -> None:
        """End ``run``'s claim on the agent (it ended, or it never started)."""
        with self._claim_lock:
            if self._run is run:
                self._counts = run.counts
                self._run, self._loop, self._loop_thread = None, None, 0
                self._running = False

    def _check_decisions(
        self, user: UserMessage | None, decisions: Mapping[str, Decision] | None
    ) -> Trigger:
        """Validate ``decisions`` (changing nothing when they are wrong); store them and return
        the first trigger (``decided``), or ``start`` when there are none."""
        pending = self._pending
        if pending is None:
            if decisions:
                raise UsageError("no call is awaiting approval; there is nothing to decide")
            return Trigger.START
        waiting = [call.id for call in pending.calls]
        if user is not None or not decisions:
            raise UsageError(
                f"calls {', '.join(waiting)} are awaiting approval: decide them first with "
                "agent.run(decisions={call_id: Approve() or Deny(reason)}), or agent.abort()"
            )
        check_decisions(waiting, decisions)
        pending.decisions = dict(decisions)
        return Trigger.DECIDED

    def _abort_pending(self, reason: str) -> None:
        """An abort while calls wait for decisions: a short run answers them and ends
        ``aborted`` (there is no run to stop)."""
        run = Run(self, counts=self._counts)
        run.signal.set(reason)
        run.emit(RunStart(None))
        run.fire(Trigger.ABORT)
        run.close_turn()
        run.emit(RunEnd(run.result()))

    def _check_can_continue(self) -> None:
        refusal = continue_refusal(self._messages)
        if refusal is not None:
            raise UsageError(refusal)

    def _last(self) -> Message | None:
        return self._messages[-1] if self._messages else None

    def _append(self, message: Message) -> None:
        self._messages.append(message)
        self._appended += 1  # the request projection trusts what the engine appended
        if isinstance(message, AssistantMessage):
            ids = self._call_ids
            for block in message.content:  # its tool calls (a loop: one message a turn)
                if isinstance(block, ToolCallBlock):
                    ids.add(block.id)


def continue_refusal(messages: Sequence[Message]) -> str | None:
    """Why a run without a prompt (and with no queued input or decisions) has nothing to
    continue from ``messages``, or None when it can continue: the rule `Agent.run` applies
    (also checked by the CLI before it opens a session log, so a refusal changes no file).

    Args:
        messages: the history, as a resumed agent would start from it.

    Returns:
        The `UsageError` message, or None.
    """
    last = messages[-1] if messages else None
    if last is None:
        return "nothing to continue: the history is empty; pass a prompt"
    if (
        isinstance(last, AssistantMessage)
        and last.stop_reason not in (StopReason.ABORTED, StopReason.ERROR, StopReason.PAUSE_TURN)
        and not last.tool_calls
        and continuation_of(messages) is None  # a cut answer is continued
    ):
        return "nothing to continue: the history ends with the model's answer; pass a prompt"
    return None


def _is_async(callback: Callable[..., Any]) -> bool:
    call = getattr(callback, "__call__", None)  # noqa: B004 (an async __call__ counts too)
    return inspect.iscoroutinefunction(callback) or inspect.iscoroutinefunction(call)


def _as_user(message: str | UserMessage) -> UserMessage:
    if isinstance(message, UserMessage):
        return message
    if not isinstance(message, str) or not message.strip():
        raise UsageError("a prompt must be a non-empty string or a UserMessage")
    return UserMessage(message)
