"""`Run`: one run of an agent, its per-run state and the driver loop.

The driver is generic: fire a trigger, let the transition's action run, then the entered state's
effect, which returns the next trigger; a terminal state's effect settles the run and ends it. What
each state and transition does is named in the definition (`_machine`), never decided here. A bug
escaping an effect, or a cancelled task, still ends the run in a terminal state (``failed`` /
``aborted``) with every call answered before the exception propagates.
"""

from __future__ import annotations

import asyncio
import itertools
import uuid
from collections import deque
from collections.abc import Callable, Coroutine, Sequence
from typing import TYPE_CHECKING, Any

from . import _events as ev
from ._accounting import ContextUsage
from ._bindings import BUILTIN_STEPS
from ._bus import EventBus
from ._cancel import AbortSignal, is_run_cancellation, takes_signal
from ._compacting import context_window, overflowed
from ._context import dropped_by_projection, project
from ._continuing import continuation_of, continue_refusal
from ._conversation import Conversation
from ._effects import answer_pending, request_model
from ._errors import InvalidHistoryError, MachineDefinitionError
from ._execution import BatchRun, resolve
from ._hooks import INTERRUPTS, record_interrupt
from ._limits import FINAL_TURN_PROMPT, LimitHit, RunCounts
from ._machine import CallbackFailed, Fired, LoopData, LoopMachine, TransitionSpec, bind_steps
from ._messages import (
    NO_USAGE,
    AssistantMessage,
    Message,
    StopReason,
    ToolCallBlock,
    ToolResultMessage,
    Usage,
    UserMessage,
    text_result,
)
from ._output import final_output
from ._protocol import (
    INCOMPLETE_STOP_REASONS,
    NO_RESULT,
    answer_dangling,
    branch_text,
    find_violations,
)
from ._responses import RequestAborted, RequestFailed, request_response
from ._result import RunResult
from ._settings import RunSettings
from ._states import State, Trigger
from ._tools import Tool
from .models._base import ModelRequest, ToolDefinition, without_tool_choice

__all__ = ["Run", "continuation_of", "continue_refusal"]

bind_steps(BUILTIN_STEPS)  # the table names its effects and actions; here they get their functions


class Run:
    """One run of an `Agent`: created by ``agent.run()``, it holds everything that lives as long
    as the run (the abort signal, the guards' data, usage, the error, the open turn), the
    settings it read from the agent's configuration when it was claimed, and the conversation
    and event bus it shares with the agent. A state a user adds gets this object in its effect.

    Args:
        settings: the configuration this run reads.
        conversation: the history and queued input (the agent's).
        bus: where the run's events go (the agent's).
        machine: the loop's state machine (the agent's).
        counts: what the run counted so far when it goes on from an earlier one; None: a new run.

    Attributes:
        id: the run's id (a UUID in hex), the ``run_id`` of its events and its `RunResult`.
        settings: the configuration (`RunSettings`).
        conversation: the history, queued input and the batch held for decisions.
        bus: the event bus.
        machine: the state machine.
        signal: the run's abort signal.
        data: what the guards read.
        usage: tokens used by this run's responses.
        error: why the run did not end ``done`` (or what to know about how it did).
        fired: the last transition.
    """

    def __init__(
        self,
        settings: RunSettings,
        conversation: Conversation,
        bus: EventBus,
        machine: LoopMachine,
        *,
        counts: RunCounts | None = None,
    ) -> None:
        self.id = uuid.uuid4().hex
        self.seqs = itertools.count(1)  # its events' seq: next(run.seqs) for each
        self.settings = settings
        self.conversation = conversation
        self.bus = bus
        self.machine = machine
        self.signal = AbortSignal()
        self.data = LoopData(
            max_turns=settings.max_turns,
            max_continuations=settings.max_continuations,
            max_tokens_policy=settings.max_tokens_policy,
            limits=settings.limits,
            final_turn=bool(settings.final_turn),
            output_expected=settings.output_type is not None,
            output_retries=settings.output_retries,
            compaction=settings.compaction is not None,
        )
        if counts is not None:  # a continued run keeps counting toward its limits
            data = self.data
            data.turns, data.requests = counts.turns, counts.requests
            data.tool_calls, data.usage = counts.tool_calls, counts.usage
        self._usage = NO_USAGE  # frozen: the shared zero until a response reports usage
        self._usage_parts: list[Usage] = []  # added since `usage` was last read
        self.error: str | None = None
        self.fired: Fired | None = None
        self.start = len(conversation.messages)
        self.turn: int | None = None
        self.turn_message: AssistantMessage | None = None
        self.turn_results: tuple[ToolResultMessage, ...] = ()
        self.terminate_reason: str | None = None
        self.first_trigger: str = Trigger.START  # ``decided`` when the run decides pending calls
        self.final_text: str | None = None
        self.compaction_sizes: tuple[int, int] | None = None  # the last one's (before, after)
        self.overflow: str | None = None  # the "prompt is too long" message led to compacting
        context_hook = settings.transform_context
        self._context_takes_signal = context_hook is not None and takes_signal(context_hook)

    @property
    def counts(self) -> RunCounts:
        """What the run has counted toward its limits so far (a continued run goes on from it)."""
        data = self.data
        return RunCounts(data.turns, data.requests, data.tool_calls, data.usage)

    @property
    def messages(self) -> list[Message]:
        """The agent's history (this run appends to it)."""
        return self.conversation.messages

    @property
    def context_usage(self) -> ContextUsage:
        """How much of the model's context window the history uses (`Agent.context_usage`)."""
        return self.conversation.usage(context_window(self.settings.model))

    @property
    def usage(self) -> Usage:
        """Tokens of this run's responses (and of a summarizer's requests), summed when read."""
        parts = self._usage_parts
        if parts:
            self._usage = sum(parts, self._usage)
            parts.clear()
        return self._usage

    @usage.setter
    def usage(self, usage: Usage) -> None:
        self._usage, self._usage_parts = usage, []

    def add_usage(self, usage: Usage) -> None:
        """Count ``usage`` in `usage` (one list append: the sum is made when it is read)."""
        self._usage_parts.append(usage)

    def emit(self, event: ev.Event) -> None:
        """Stamp ``event`` with the run's id and next seq (a draft: `_events.drafted`) and
        publish it (`EventBus.publish`); `Run`'s own events are built stamped."""
        draft: Any = event
        if (frozen := ev.DRAFTS.get(type(draft))) is not None:  # plain stores, then its class
            draft.run_id, draft.seq, draft.__class__ = self.id, next(self.seqs), frozen
        else:  # built as ``cls(...)``: frozen, stamped through its slots
            ev.SET_RUN_ID(event, self.id)
            ev.SET_SEQ(event, next(self.seqs))
        self.bus.publish(event)

    def append(self, message: Message) -> None:
        """Add ``message`` to the history, then announce it (a ``message_end`` event: tool results
        in declaration order, each after it is in the history). A message that is not a tool
        result first answers the calls a response before it left open (`answer_open_calls`)."""
        conversation, role = self.conversation, message.role  # (read once: see `_messages`)
        messages = conversation.messages
        if role != "tool_result" and messages and messages[-1].role == "assistant":
            self.answer_open_calls()  # (only a response can leave calls open)
        conversation.append(message, role)
        if self.bus.subscribers:
            self.bus.publish(ev.NEW_MESSAGE_END(self, message))

    def answer_open_calls(self) -> None:
        """Answer the calls of the last response that have no result, naming the branch that
        led elsewhere (`branch_text`), before anything else enters the history or a request is
        built: a user's transition on ``model_replied`` into ``awaiting_model`` or a state of its
        own leaves them open, and the stored history (and the session log) must hold every
        call's result (protocol rule 1), not only the projected request. A batch held for
        decisions is not open: its results wait with it."""
        conversation = self.conversation
        messages = conversation.messages
        if not messages or conversation.held is not None or messages[-1].role != "assistant":
            return  # only a response can leave calls open (`answer_dangling` answers them)
        fired = self.fired
        text = NO_RESULT if fired is None else branch_text(str(fired.dest), fired.label)
        for result in answer_dangling(messages, text):
            self.append(result)

    def answer_calls(self, text: Callable[[ToolCallBlock], str]) -> tuple[ToolResultMessage, ...]:
        """Answer every call of the current response with an error result saying ``text(call)``,
        in declaration order, as the turn's results: calls the run will not execute."""
        response = self.data.response
        assert response is not None
        answered = tuple(text_result(c, text(c), is_error=True) for c in response.tool_calls)
        for result in answered:
            self.append(result)
        self.turn_results = answered
        return answered

    def begin_turn(self) -> int:
        """End the open turn and start the next one; returns its number."""
        self.close_turn()
        self.turn = self.data.turns + 1
        self.turn_message, self.turn_results = None, ()
        if self.bus.subscribers:
            self.bus.publish(ev.NEW_TURN_START(self, self.turn))
        return self.turn

    def complete_turn(self) -> None:
        """Count the open turn as completed (``data.turns``) once its response is in."""
        if self.turn is not None and self.turn_message is not None:
            self.data.turns = self.turn

    def close_turn(self) -> None:
        """End the open turn, if any (a ``turn_end`` event with its response and results)."""
        if self.turn is not None:
            if self.turn_message is not None:  # completed (`complete_turn`, inline)
                self.data.turns = self.turn
            turn, self.turn = self.turn, None
            if self.bus.subscribers:
                conversation = self.conversation
                window = context_window(self.settings.model)
                context = conversation.meter.deferred(conversation.messages, window)
                event = ev.NEW_TURN_END(self, turn, self.turn_message, self.turn_results, context)
                self.bus.publish(event)

    # -- queued input -------------------------------------------------------------------------

    def has_queued_input(self) -> bool:
        """Steering or follow-up input is waiting."""
        return self.conversation.has_queued_input()

    def deliver_steering(self) -> bool:
        """Append queued steering (all of it, or one message with ``steering_mode=
        "one_at_a_time"``); False when none was delivered."""
        conversation = self.conversation
        return self._deliver(conversation.steering, one=conversation.steering_mode != "all")

    def deliver_follow_up(self) -> bool:
        """Append queued follow-ups (one message, or all with ``follow_up_mode="all"``); False
        when none was delivered."""
        conversation = self.conversation
        return self._deliver(conversation.follow_ups, one=conversation.follow_up_mode != "all")

    def _deliver(self, queue: deque[UserMessage], *, one: bool) -> bool:
        # Input not delivered when the run is aborted stays queued for the next run: the abort
        # is checked before each message (a subscriber may abort on a message's event).
        delivered = False
        while queue and not self.signal.aborted:
            self.append(queue.popleft())
            delivered = True
            if one:
                break
        return delivered

    def awaits_continuation(self) -> bool:
        """The last complete response paused (``pause_turn``, no tool calls): the next request
        must send it back as it is, so no user message may follow it yet."""
        for message in reversed(self.messages):
            if not isinstance(message, AssistantMessage):
                return False
            if message.stop_reason not in INCOMPLETE_STOP_REASONS:
                return message.stop_reason == StopReason.PAUSE_TURN and not message.tool_calls
        return False

    # -- the loop -----------------------------------------------------------------------------

    def fire(self, trigger: str) -> Fired:
        """Fire ``trigger``: the machine picks the transition, then its action runs.

        Raises:
            MachineDefinitionError: no transition of ``trigger`` can leave the current state.
        """
        data, settings = self.data, self.settings
        data.max_turns, data.limits = settings.max_turns, settings.limits
        try:
            fired = self.machine.fire(trigger, data)
            self.fired = fired
            if self.bus.subscribers:
                event = ev.NEW_STATE_CHANGED(self, fired.source, fired.dest, trigger, fired.label)
                self.bus.publish(event)
            if fired.action is not None:
                fired.action(self)
        except INTERRUPTS as exc:
            if data.raised_in is not None:  # a user's guard, action or callback
                record_interrupt(self.signal, exc, data.raised_in)
            raise
        return fired

    async def drive(self, prompt: UserMessage | None, first: str = Trigger.START) -> RunResult:
        """Run from ``first`` (``start``, or ``decided`` after decisions) until a state that
        stops the run, and return the result.

        A user's guard, transition action or enter/exit callback that raises ends the run
        ``failed`` (the rule of a raising hook): its error names the callable and the exception.

        Raises:
            MachineDefinitionError: a state cannot be reached or left (checked at the start).
            asyncio.CancelledError: the task was cancelled (the run is recorded as aborted first).
            KeyboardInterrupt: raised in a tool, a hook, a guard or a callback (the run is
                recorded as aborted first). `SystemExit` follows the same rule (`INTERRUPTS`).
            BaseException: whatever escaped an effect (the run is recorded as failed first).
        """
        self.machine.check_complete()
        self.bus.publish(ev.NEW_RUN_START(self, prompt))
        try:
            if self.conversation.held is None:
                for repair in answer_dangling(self.messages):  # a given history ended mid-batch
                    self.append(repair)
                if self.awaits_continuation():
                    # A paused response is continued first; the prompt waits at the head of the
                    # steering queue and is delivered once the model has finished that turn.
                    if prompt is not None:
                        self.conversation.steering.appendleft(prompt)
                elif prompt is not None:
                    self.append(prompt)
                    self.deliver_steering()  # left queued by an aborted run: after the prompt
                elif (asked := continuation_of(self.messages)) is not None:
                    # The last response was cut (token limit or context window) and not
                    # continued: continuing asks the model to go on, as the run itself would.
                    self.append(asked)
                    self.deliver_steering()
                else:
                    self.deliver_steering() or self.deliver_follow_up()
            trigger: str | None = first
            while trigger is not None:
                fired = self.fire(trigger)
                effect = fired.effect
                assert effect is not None  # validated: only idle has none
                trigger = await effect(self)
                if trigger is None and not fired.stops:
                    raise MachineDefinitionError(
                        f"the effect of state {str(fired.dest)!r} returned no trigger"
                    )
        except asyncio.CancelledError:
            await self._end_after_exception("the task running the agent was cancelled", "abort")
            raise
        except CallbackFailed as exc:  # an expected ending: a result, as for a raising hook
            return await self._end_after_exception(str(exc), "fail", forced=True)
        except INTERRUPTS as exc:  # KeyboardInterrupt or SystemExit: the process is stopping
            forced = self.data.raised_in is not None
            await self._end_after_exception(type(exc).__name__, "abort", forced=forced)
            raise
        except BaseException as exc:
            await self._end_after_exception(f"{type(exc).__name__}: {exc}", "fail")
            raise
        result = self.result()
        self.bus.publish(ev.NEW_RUN_END(self, result))
        return result

    def abort_waiting(self, reason: str) -> RunResult:
        """An abort while calls wait for decisions, with no run to stop: this short run answers
        them and ends ``aborted`` (``run_start`` to ``run_end``); returns its result."""
        self.signal.set(reason)
        self.bus.publish(ev.NEW_RUN_START(self, None))
        self.fire(Trigger.ABORT)
        self.close_turn()
        result = self.result()
        self.bus.publish(ev.NEW_RUN_END(self, result))
        return result

    async def _end_after_exception(
        self, reason: str, trigger: str, *, forced: bool = False
    ) -> RunResult:
        """End the run in a terminal state (``aborted`` or ``failed``) with every call answered,
        before the exception propagates; returns the result.

        ``forced``: a user's guard or callback raised, so the run ends in that state even from
        where ``trigger`` cannot lead (``idle``, a terminal state, ``awaiting_approval``)."""
        if forced or not self.machine.stops_run(self.machine.state):
            self.error = self.signal.reason or reason
            try:
                fired: Fired | None = self.fire(trigger)
            except (MachineDefinitionError, CallbackFailed):
                fired = self._forced_end(trigger) if forced else None  # else: still idle
            effect = None if fired is None else self.machine.effect_of(fired.dest)
            if effect is not None:
                await effect(self)
        self.close_turn()
        result = self.result()
        self.bus.publish(ev.NEW_RUN_END(self, result))
        return result

    def _forced_end(self, trigger: str) -> Fired:
        """Put the machine in ``failed`` (``aborted`` for ``abort``) from a state the table
        gives no such way out of: a user's guard or callback raised there."""
        source = self.machine.state
        dest = State.ABORTED if trigger == Trigger.ABORT else State.FAILED
        self.machine.restore(dest)
        spec = TransitionSpec(trigger, (str(source),), dest, label=trigger)
        self.fired = fired = Fired(trigger, source, dest, trigger, spec, str(dest))
        if self.bus.subscribers:
            self.bus.publish(ev.NEW_STATE_CHANGED(self, fired.source, dest, trigger, trigger))
        if self.conversation.held is not None:  # calls held for decisions: answered, in order
            answer_pending(self)
        return fired

    def result(self) -> RunResult:
        """The run's outcome so far."""
        messages = self.messages
        new = messages[self.start :]
        last = next((m for m in reversed(new) if isinstance(m, AssistantMessage)), None)
        refusal = None
        if last is not None and last.stop_reason == StopReason.REFUSAL:
            refusal = dict(last.stop_details or {})
        state = self.machine.state
        pending = self.conversation.held
        output_type = self.settings.output_type
        return RunResult(
            state=state if isinstance(state, State) else State.FAILED,
            pending=() if pending is None else tuple(pending.calls),
            messages=list(messages),
            new_messages=list(new),
            turns=self.data.turns,
            usage=self.usage,
            stop_reason=None if last is None else last.stop_reason,
            error=self.error,
            refusal=refusal,
            final_text=self.final_text,
            run_id=self.id,
            output=None if state != State.DONE else final_output(new, output_type, self.final_text),
            counts=self.counts,
            limit_exceeded=self.limit_exceeded(),
        )

    def limit_exceeded(self) -> LimitHit | None:
        """The token limit the run's usage is past, if any (`UsageLimits.token_hit`)."""
        limits = self.settings.limits
        return None if limits is None else limits.token_hit(self.data.usage)

    # -- model requests -----------------------------------------------------------------------

    @property
    def tools(self) -> dict[str, Tool]:
        """The tools this run executes by name: the settings' own, and with tool sources the
        agent's current `ToolTable` (as last listed before a model request)."""
        table = self.settings.tool_table
        return self.settings.tools if table is None else table.tools

    @property
    def tool_definitions(self) -> list[ToolDefinition]:
        """The tools as the model sees them (see `tools`), in declaration order."""
        table = self.settings.tool_table
        return self.settings.tool_definitions if table is None else table.definitions

    async def request_model(self) -> str:
        """Do what ``awaiting_model`` does (for a user's state): send the history and take the
        response. Returns the trigger to fire: ``model_replied``, ``abort`` or ``fail``."""
        return await request_model(self)

    async def refresh_tools(self) -> str | None:
        """List the tool sources' tools (MCP servers) before each request and before decided
        calls run; None, or ``fail`` (naming the source) when they cannot be listed."""
        if (table := self.settings.tool_table) is not None:
            try:
                await table.refresh()
            except Exception as exc:
                return self.fail(f"The tools could not be listed: {type(exc).__name__}: {exc}")
        return None

    async def request(self, *, answered: bool = False) -> AssistantMessage | str:
        """Build and send one request (with the engine's retries), first answering the open calls
        unless ``answered`` (the caller just did, as ``request_model`` does). Returns the response,
        or the trigger to fire instead (``abort``, ``fail``) with the history and error recorded."""
        if not answered:
            self.answer_open_calls()
        if self.settings.tool_table is not None and (failed := await self.refresh_tools()):
            return failed
        try:
            request = await self.build_request()
        except InvalidHistoryError as exc:
            return self.fail(
                "The request was not sent: the transform_context hook returned a history the "
                f"API refuses; return a valid history (at least the last user message). {exc}"
            )
        except (Exception, asyncio.CancelledError) as exc:
            if is_run_cancellation(exc):
                raise  # the run's task is being cancelled; a hook's own one is its failure
            return self.fail(f"The transform_context hook failed: {type(exc).__name__}: {exc}")
        except INTERRUPTS as exc:
            record_interrupt(self.signal, exc, "the transform_context hook")
            raise  # the run ends aborted (`drive`), then it propagates
        if self.signal.aborted:  # aborted while the request was built: do not send it
            return Trigger.ABORT
        if not self.data.winding_down:  # the final turn does not count against the limits
            self.data.requests += 1
        outcome = await self.send(request)
        if isinstance(outcome, AssistantMessage):  # first: see `_messages` on isinstance
            return outcome
        if isinstance(outcome, RequestAborted):
            self.append(outcome.partial)
            return Trigger.ABORT
        if isinstance(outcome, RequestFailed):
            if outcome.prompt_too_long:
                return overflowed(self, outcome)  # compaction and one retry, or fail
            return self.fail(outcome.message)
        return outcome

    def send(
        self, request: ModelRequest
    ) -> Coroutine[Any, Any, AssistantMessage | RequestAborted | RequestFailed]:
        """Send ``request`` to the model with the engine's retries (awaited, as an override's
        ``async def``): the one place a run does model I/O (a durable run records it as a step)."""
        settings = self.settings
        if not request.tools and "tool_choice" in request.settings:  # (its test, inline)
            request = without_tool_choice(request, settings.model)
        return request_response(
            settings.model,
            request,
            signal=self.signal,
            used_ids=self.conversation.call_ids,
            emit=self.emit,
            listening=self.bus.listening,
            retries=settings.model_retries,
            backoff_seconds=settings.retry_backoff_seconds,
            on_cancel=self.append,
        )

    batch_class: type[BatchRun] = BatchRun
    """The class of the tool batches (a durable run makes each call a step)."""

    def batch(self, calls: Sequence[ToolCallBlock], *, approved: bool = False) -> BatchRun:
        """The `BatchRun` that runs ``calls`` (a response's tool calls, or the calls a person
        approved: they skip ``before_tool_call``): the one place a run does tool I/O."""
        settings = self.settings
        return self.batch_class(  # (positional: keywords to a class build and unpack a dict)
            calls,
            settings.tools if (table := settings.tool_table) is None else table.tools,
            settings.tool_execution,  # mode
            self.signal,
            settings.abort_grace_seconds,
            self.emit,
            None if approved else settings.before_tool_call,  # before
            settings.after_tool_call,  # after
            settings.deps,
            self.bus.listening,
            approved,
            self,  # run
        )

    async def build_request(self) -> ModelRequest:
        """The next request (a hook a run class may extend, as the durable run does). Raises
        `InvalidHistoryError` for a history ``transform_context`` made invalid."""
        config = self.settings
        if config.transform_context is not None:
            if self._context_takes_signal:
                returned = config.transform_context(list(self.messages), self.signal)
            else:
                returned = config.transform_context(list(self.messages))
            messages = await resolve(returned)
            projected = project(messages)
            problems = find_violations(projected, request=True)
            if problems:
                raise InvalidHistoryError([*dropped_by_projection(messages, projected), *problems])
        else:
            conversation = self.conversation
            projected = conversation.projector.project(conversation.messages, conversation.appended)
        table = config.tool_table  # (`tool_definitions`, read without the property's call)
        tools = config.tool_definitions if table is None else table.definitions
        if self.data.winding_down:  # the final turn: tools disabled, an instruction to answer
            instruction = (
                config.final_turn if isinstance(config.final_turn, str) else FINAL_TURN_PROMPT
            )
            system = instruction if not config.system else f"{config.system}\n\n{instruction}"
            settings = {**config.model_settings, "tool_choice": {"type": "none"}}
            return ModelRequest(projected, system, tools, settings)
        return ModelRequest(projected, config.system, tools, config.model_settings)

    def fail(self, error: str) -> str:
        """Record a failed request (an error message in the history); returns ``fail``."""
        self.append(AssistantMessage(content=[], stop_reason=StopReason.ERROR, error=error))
        self.error = error
        return Trigger.FAIL


if TYPE_CHECKING:
    from ._run_protocol import RunLike

    def _run_is_runlike(run: Run) -> RunLike:
        return run  # mypy checks that `Run` has everything the effects use of a run
