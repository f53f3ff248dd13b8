"""`Agent`: configuration, history, queued input and events. Each ``run()`` is a `Run`
(`statemachine_agent._run`), driven by the machine's definition (`statemachine_agent._machine`)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import threading
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal, Self

from ._context import ContextProjector
from ._errors import AgentBusyError, ToolDefinitionError, UsageError
from ._events import Event, RunEnd, RunStart
from ._execution import PendingBatch, ToolExecution
from ._hooks import (
    AfterToolCall,
    Approve,
    BeforeToolCall,
    Decision,
    Deny,
    PendingCall,
    ShouldContinue,
    TransformContext,
)
from ._machine import LoopMachine, MaxTokensPolicy
from ._messages import AssistantMessage, Message, StopReason, ToolResultMessage, UserMessage
from ._responses import call_ids
from ._result import RunResult
from ._run import Run
from ._states import State, Trigger
from ._tools import Tool, ToolFunction, tool_from_function
from .models._base import Model, ToolDefinition

if TYPE_CHECKING:
    from .session import SessionLog

logger = logging.getLogger("statemachine_agent")

DeliveryMode = Literal["all", "one_at_a_time"]
"""How queued input is delivered: every queued message at once, or one per delivery point."""


class Agent:
    """An agent: a model, tools and a history, driven by the loop's state machine.

    Args:
        model: the provider (`AnthropicModel`, `ScriptedModel`, `FunctionModel`, or any `Model`).
        tools: `Tool` objects or typed functions (wrapped with `tool`).
        system: the system prompt.
        max_turns: the turn cap of a run (a turn is one model response plus its tool batch);
            reaching it ends the run in ``max_turns``. A run continued without a prompt keeps
            counting.
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
        steering_mode: ``"all"`` (default) delivers every queued steering message at once;
            ``"one_at_a_time"`` delivers one per delivery point (one per model request).
        follow_up_mode: ``"one_at_a_time"`` (default: one follow-up each time the model would
            stop) or ``"all"``.

    Raises:
        ToolDefinitionError: two tools share a name.
        UsageError: an unknown ``tool_execution``, ``steering_mode`` or ``follow_up_mode``; the
            model refuses a tool name (e.g. `AnthropicModel.check_tools`: the name of one of its
            server tools).
    """

    def __init__(
        self,
        model: Model,
        *,
        tools: Iterable[Tool | ToolFunction] = (),
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
        steering_mode: DeliveryMode = "all",
        follow_up_mode: DeliveryMode = "one_at_a_time",
    ) -> None:
        if tool_execution not in ("parallel", "sequential"):
            raise UsageError("tool_execution must be 'parallel' or 'sequential'")
        for option, mode in (("steering_mode", steering_mode), ("follow_up_mode", follow_up_mode)):
            if mode not in ("all", "one_at_a_time"):
                raise UsageError(f"{option} must be 'all' or 'one_at_a_time', got {mode!r}")
        self.steering_mode: DeliveryMode = steering_mode
        self.follow_up_mode: DeliveryMode = follow_up_mode
        self.model = model
        self.tools: dict[str, Tool] = {}
        for item in tools:
            if not isinstance(item, Tool) and not callable(item):
                raise ToolDefinitionError(
                    f"tools must be Tool objects or typed functions, got {item!r}"
                )
            t = item if isinstance(item, Tool) else tool_from_function(item)
            if t.name in self.tools:
                raise ToolDefinitionError(f"two tools are named {t.name!r}")
            self.tools[t.name] = t
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
        self.machine = LoopMachine()
        self._messages: list[Message] = list(messages)
        self._projector = ContextProjector()
        self._steering: deque[UserMessage] = deque()
        self._follow_ups: deque[UserMessage] = deque()
        self._subscribers: list[Callable[[Event], Any]] = []
        self._run: Run | None = None  # the current or last run
        self._pending: PendingBatch | None = None  # a batch waiting for decisions
        self._running = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread = 0
        self._call_ids = call_ids(self._messages)
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
        """Close the session log, if any (its lock and file are released). The agent can still
        run, unlogged; a model's HTTP client is its owner's to close (``await model.aclose()``).

        Raises:
            AgentBusyError: a run is in progress.
        """
        if self._running:
            raise AgentBusyError("cannot close the agent while a run is in progress")
        if self.session is not None:
            self.session.close()

    # -- public state -------------------------------------------------------------------------

    @property
    def state(self) -> State | str:
        """The machine's current state (a `State`, or the name of a state a user added)."""
        return self.machine.state

    def restore(
        self,
        messages: Sequence[Message],
        state: State,
        *,
        pending: tuple[Sequence[PendingCall], Sequence[ToolResultMessage]] | None = None,
    ) -> None:
        """Put back a saved history and state (``idle``, terminal or ``awaiting_approval``), as a
        session log does.

        Args:
            messages: the history (for ``awaiting_approval``, ending with the held batch's
                assistant message).
            state: the state to be in.
            pending: for ``awaiting_approval``: the calls waiting for a decision and the results
                the batch already has.

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
        self.messages = messages
        self.machine.restore(state)
        self._pending = batch

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
        if self._running:
            raise AgentBusyError("cannot replace the history while a run is in progress")
        self._messages = list(messages)
        self._call_ids = call_ids(self._messages)

    @property
    def is_running(self) -> bool:
        """A run is in progress."""
        return self._running

    # -- events -------------------------------------------------------------------------------

    def subscribe(self, callback: Callable[[Event], Any]) -> Callable[[], None]:
        """Call ``callback(event)`` for every event (synchronously, in order); returns an
        unsubscribe function. A callback that raises is logged and does not stop the run."""
        self._subscribers.append(callback)

        def unsubscribe() -> None:
            with contextlib.suppress(ValueError):
                self._subscribers.remove(callback)

        return unsubscribe

    async def events(self) -> AsyncIterator[Event]:
        """Iterate over events as they happen (until the iterator is closed)."""
        queue: asyncio.Queue[Event] = asyncio.Queue()
        unsubscribe = self.subscribe(queue.put_nowait)
        try:
            while True:
                yield await queue.get()
        finally:
            unsubscribe()

    def _listening(self) -> bool:
        return bool(self._subscribers)

    def _emit(self, event: Event) -> None:
        for callback in self._subscribers:
            try:
                callback(event)
            except Exception:
                logger.exception("event subscriber %r failed on %s", callback, event.type)

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

        Safe to call from any thread and at any moment. Returns False when no run is in progress.
        """
        run = self._run
        if not self._running and self._pending is not None:
            self._abort_pending(reason)
            return True
        if not self._running or run is None:
            return False
        loop = self._loop
        if loop is not None and threading.get_ident() != self._loop_thread:
            loop.call_soon_threadsafe(run.signal.set, reason)
        else:
            run.signal.set(reason)
        return True

    # -- running ------------------------------------------------------------------------------

    def run_sync(self, prompt: str | UserMessage | None = None, **kwargs: Any) -> RunResult:
        """`run` in a new event loop (``asyncio.run``).

        Raises:
            UsageError: called from inside a running event loop (``await agent.run`` there).
        """
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return asyncio.run(self.run(prompt, **kwargs))
        raise UsageError("run_sync() cannot run inside an event loop; use 'await agent.run()'")

    async def run(
        self,
        prompt: str | UserMessage | None = None,
        *,
        max_turns: int | None = None,
        decisions: Mapping[str, Decision] | None = None,
    ) -> RunResult:
        """Run until a terminal state (or ``awaiting_approval``) and return how it ended.

        Args:
            prompt: the user input; None continues from the current history (after ``aborted``
                or ``max_turns``, or with queued input) and keeps counting turns.
            max_turns: change the turn cap (it stays changed).
            decisions: in ``awaiting_approval``, ``{call_id: Approve() | Approve(arguments={...})
                | Deny(reason)}`` for some or all pending calls: decided calls run (or are
                answered), the rest stay pending; once none is left the run goes on.

        Returns:
            The `RunResult`; its ``state`` is the agent's state.

        Raises:
            AgentBusyError: a run is already in progress.
            UsageError: nothing to continue from (no prompt, no queued input, and the history ends
                with the model's complete answer); a prompt (or none, or no decisions) while calls
                are pending; decisions for unknown or already decided calls, or when nothing is
                pending. Nothing is changed then.
            asyncio.CancelledError: the task was cancelled; the history is recorded as aborted
                first.
        """
        if self._running:
            raise AgentBusyError("this agent is already running; await that run or abort it")
        user = None if prompt is None else _as_user(prompt)
        first = self._check_decisions(user, decisions)
        if max_turns is not None:
            self.max_turns = max_turns
        if first is Trigger.START and user is None and not (self._steering or self._follow_ups):
            self._check_can_continue()
        previous = self._run
        turns = 0 if user is not None or previous is None else previous.data.turns
        # The loop and run are in place before the run counts as running, so an abort() from
        # another thread never reaches the previous run's signal.
        run = self._run = Run(self, turns=turns)
        self._loop = asyncio.get_running_loop()
        self._loop_thread = threading.get_ident()
        self._running = True
        try:
            return await run.drive(user, first)
        finally:
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
        unknown = [cid for cid in decisions if cid not in waiting]
        if unknown:
            raise UsageError(
                f"no pending call has id {', '.join(map(repr, unknown))} (pending: "
                f"{', '.join(waiting)}); a call is decided once"
            )
        wrong = [cid for cid, d in decisions.items() if not isinstance(d, Approve | Deny)]
        if wrong:
            raise UsageError(f"decisions must be Approve() or Deny(reason); got one for {wrong}")
        pending.decisions = dict(decisions)
        return Trigger.DECIDED

    def _abort_pending(self, reason: str) -> None:
        """An abort while calls wait for decisions: a short run answers them and ends
        ``aborted`` (there is no run to stop)."""
        run = self._run = Run(self, turns=0 if self._run is None else self._run.data.turns)
        run.signal.set(reason)
        run.emit(RunStart(None))
        run.fire(Trigger.ABORT)
        run.close_turn()
        run.emit(RunEnd(run.result()))

    def _check_can_continue(self) -> None:
        last = self._last()
        if last is None:
            raise UsageError("nothing to continue: the history is empty; pass a prompt")
        if (
            isinstance(last, AssistantMessage)
            and last.stop_reason
            not in (StopReason.ABORTED, StopReason.ERROR, StopReason.PAUSE_TURN)
            and not last.tool_calls
        ):
            raise UsageError(
                "nothing to continue: the history ends with the model's answer; pass a prompt"
            )

    def _last(self) -> Message | None:
        return self._messages[-1] if self._messages else None

    def _append(self, message: Message) -> None:
        self._messages.append(message)
        if isinstance(message, AssistantMessage):
            self._call_ids.update(call.id for call in message.tool_calls)


def _as_user(message: str | UserMessage) -> UserMessage:
    if isinstance(message, UserMessage):
        return message
    if not isinstance(message, str) or not message.strip():
        raise UsageError("a prompt must be a non-empty string or a UserMessage")
    return UserMessage(message)
