"""Running one tool batch: checks, permission hooks, parallel or sequential execution, abort.

Every call of the batch gets exactly one result, in declaration order, whatever happens: the five
failure paths (unknown tool, invalid arguments, exception, denial, abort) and truncated calls all
drain into a `ToolResultMessage` with ``is_error=True`` (texts in `_protocol`). End events fire in
completion order.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from ._call_context import call_context
from ._call_results import (
    DEFERRED,
    OWN_CANCELLATION,
    PendingBatch,
    ToolExecution,
    arguments_differ,
    awaits_decision,
    check_call,
    copied_arguments,
    hook_failed_result,
    log_tool_exception,
    release_after,
    resolve,
    retrieve,
    to_result,
)
from ._call_tasks import CALL_TASK_NAME, next_pass, starter
from ._cancel import (
    AbortSignal,
    abort_scope,
    all_done_or_abort,
    cancelling,
    is_run_cancellation,
)
from ._errors import ToolError
from ._events import NEW_TOOL_EXECUTION_END, NEW_TOOL_EXECUTION_START, Event
from ._hooks import (
    INTERRUPTS,
    AfterToolCall,
    Allow,
    BeforeToolCall,
    Defer,
    Deny,
    Interrupted,
    PendingCall,
    ToolCallInfo,
    record_interrupt,
)
from ._messages import ToolCallBlock, ToolResultMessage, text_result
from ._protocol import AFTER_TERMINATION, INTERRUPTED, NOT_RUN
from ._tools import Tool, ToolResult, format_validation_error

logger = logging.getLogger("statemachine_agent")

# (with names re-exported from `_call_results` for the modules that use them)
__all__ = ["OWN_CANCELLATION", "BatchRun", "PendingBatch", "ToolExecution", "awaits_decision"]
__all__ += ["check_call", "resolve", "to_result"]


@dataclass(slots=True)
class _Slot:
    call: ToolCallBlock
    index: int  # its place in the batch (declaration order)
    started: bool = False  # the tool function was invoked
    announced: bool = False  # a start event was emitted
    result: ToolResultMessage | None = None
    terminate: str | None = None  # the reason of a terminating denial
    ends_run: bool = False  # the result was marked ``terminate=True``
    deferred: PendingCall | None = None  # waits for a person's decision


class BatchRun:
    """One tool batch. ``results()`` is complete after `run` returns or raises.

    Attributes:
        tools: the registered tools by name (as given).

    Two per-call hooks may be overridden (a durable run makes each tool execution a step):
    `run_call` processes one call from start to end (its events, checks, hooks and execution),
    and `execute` runs the tool function proper; an override awaits ``super()``'s.

    Args:
        calls: the tool calls of the assistant message, in declaration order.
        tools: the registered tools by name.
        mode: ``"parallel"`` (calls on one resource still queue) or ``"sequential"``.
        signal: the run's abort signal.
        abort_grace_seconds: how long running tools may take to stop after an abort before they
            are cancelled.
        emit: receives the tool-execution events.
        listening: whether anyone receives events (skips building them when not).
        approved: the calls were approved by a person (tools that require approval run).
        run: the run executing the batch, given to the tools as `ToolContext.run`.
    """

    # What most batches never change, as class defaults (a batch is built every turn).
    _terminated = False  # a denial ended the run (a slot's ``terminate``)
    _deferring = False  # a slot's call was deferred (`deferred` looks then)
    _fatal: BaseException | None = None
    _resource_tails: dict[str, asyncio.Future[None]] | None = None  # (made by the first claim)

    def __init__(
        self,
        calls: Sequence[ToolCallBlock],
        tools: dict[str, Tool],
        mode: ToolExecution,
        signal: AbortSignal,
        abort_grace_seconds: float,
        emit: Callable[[Event], None],
        before: BeforeToolCall | None = None,
        after: AfterToolCall | None = None,
        deps: Any = None,
        listening: Callable[[], bool] = lambda: True,
        approved: bool = False,
        run: Any = None,
    ) -> None:
        self.owner = run
        slots: list[_Slot] = []  # (a loop: a comprehension is a function call per batch)
        for index, call in enumerate(calls):
            slots.append(_Slot(call, index))
        self._slots = slots
        self.tools = tools
        self._mode = mode
        self._signal = signal
        self._grace = abort_grace_seconds
        self._emit = emit
        self._listening = listening
        self._approved = approved
        self._before = before
        self._after = after
        self._deps = deps

    @property
    def calls(self) -> list[ToolCallBlock]:
        """The batch's calls, in declaration order (a call's index is its place here)."""
        return [slot.call for slot in self._slots]

    def call_started(self, index: int) -> None:
        """Note that the tool of call ``index`` was invoked: if the call is then interrupted,
        its result says so (rather than "not run"). `execute` notes it; an override that
        delays ``super().execute`` (or replays a recorded result) notes it itself."""
        self._slots[index].started = True

    @property
    def terminate_reason(self) -> str | None:
        """The reason of the first terminating denial, if any."""
        if not self._terminated:  # set with the slot's ``terminate``
            return None
        for slot in self._slots:
            if slot.terminate:
                return slot.terminate
        return None

    @property
    def final_result(self) -> ToolResultMessage | None:
        """The first result (declaration order) marked ``terminate=True``, if any: the run ends
        ``done`` with its text as the final answer."""
        for slot in self._slots:
            if slot.ends_run and slot.result is not None:
                return slot.result
        return None

    def deferred(self) -> list[PendingCall]:
        """The calls deferred for a decision, in declaration order (none once the batch was
        aborted or a denial ended the run: those are answered instead)."""
        if not self._deferring or self._terminated or self._signal.aborted:
            return []
        return [slot.deferred for slot in self._slots if slot.deferred is not None]

    def results(self, held: Sequence[PendingCall] = ()) -> list[ToolResultMessage]:
        """One result per call in declaration order; calls never reached get "not run". The
        ``held`` calls (the caller's `deferred`) get none: they wait for a decision."""
        slots = self._slots
        if held:
            waiting = {call.id for call in held}
            slots = [slot for slot in slots if slot.call.id not in waiting]
        out = []
        for slot in slots:
            result = slot.result
            if result is None:
                if self._terminated and not self._signal.aborted:
                    text = AFTER_TERMINATION
                else:
                    text = INTERRUPTED if slot.started else NOT_RUN
                self._finish(slot, text_result(slot.call, text, is_error=True))
                result = slot.result
                assert result is not None
            out.append(result)
        return out

    def _finish(self, slot: _Slot, result: ToolResultMessage) -> None:
        if slot.result is not None:
            return
        if slot.deferred is not None and result.details == DEFERRED:
            if slot.announced:  # the execution ends for now; the result comes with the decision
                self._emit(NEW_TOOL_EXECUTION_END(slot.call, result))
                slot.announced = False
            return
        slot.result = result
        if slot.announced:
            self._emit(NEW_TOOL_EXECUTION_END(slot.call, result))

    async def run(self) -> None:
        """Run the batch until every call has a result, or until abort (plus the grace period).

        Raises:
            asyncio.CancelledError: the task running the batch was cancelled; running calls are
                cancelled and recorded as interrupted before it propagates.
            KeyboardInterrupt: a tool or its ``before_tool_call`` / ``after_tool_call`` hook
                raised it (or `SystemExit`): recorded in that call's result, the run's signal set
                so the other calls stop (with the grace period), every call has its result, then
                it propagates.
        """
        slots = self._slots
        # Every call at once, or one at a time, each in this task or in one of its own (a batch
        # of one builds no task list, no group: what `_watch` needs only when a call suspends).
        if len(slots) > 1 and not self._one_at_a_time():
            await self._all_at_once(slots)
        else:
            loop = asyncio.get_running_loop()
            start = starter(loop)
            for slot in slots:
                if self._signal.aborted or self._terminated:
                    break
                if self._in_this_task(slot):
                    with abort_scope(self._signal, self._grace):
                        await self.run_call(slot.index, slot.call)
                    continue
                # (`_guarded`: see `_all_at_once`)
                task = start(self._guarded(slot), loop=loop, name=CALL_TASK_NAME)
                try:
                    if not task.done():  # (started at once, it may have ended: see `starter`)
                        await next_pass()  # its first step: one ending there needs no wake-up
                    if not task.done():
                        await self._watch([task], (slot,))
                except asyncio.CancelledError:  # (as in `_all_at_once`)
                    await self._stop(_running([task], (slot,)))
                    raise
        if self._fatal is not None:
            raise self._fatal

    async def _all_at_once(self, slots: list[_Slot]) -> None:
        """Run every call of a parallel batch at once, each in a task of its own (see `run`)."""
        loop = asyncio.get_running_loop()
        start = starter(loop)
        tasks: list[asyncio.Future[None]] = []  # (a loop, not a comprehension: no function call)
        for slot in slots:  # (`_guarded`: a task ends with no exception but its cancellation)
            tasks.append(start(self._guarded(slot), loop=loop, name=CALL_TASK_NAME))
        try:
            if not all(map(_is_done, tasks)):  # (started at once, each may have ended)
                await next_pass()  # the calls' first steps: one ending there needs no wake-up
            if not all(map(_is_done, tasks)):  # (no generator, no set)
                await self._watch(tasks, slots)
        except asyncio.CancelledError:
            # The task running the batch was cancelled: so are the calls (`_watch`).
            await self._stop(_running(tasks, slots))
            raise

    def _one_at_a_time(self) -> bool:
        """Sequential mode, or a call of a ``sequential=True`` tool in the batch."""
        if self._mode == "sequential":
            return True
        tools = self.tools
        for slot in self._slots:
            tool = tools.get(slot.call.name)
            if tool is not None and tool.sequential:
                return True
        return False

    def _in_this_task(self, slot: _Slot) -> bool:
        """A call of a batch run one at a time runs in the batch's task when it is a sync tool in
        its worker thread with no hooks (a task is a per-turn cost; an abort gives it the grace
        period, then stops waiting for the thread). What runs on the loop (an async tool, a
        hook) gets a task, watched as a parallel batch's are: a call ignoring its cancellation
        cannot keep the run open (`_watch`)."""
        tool = self.tools.get(slot.call.name)
        return (
            tool is not None
            and not tool.is_async
            and tool.run_in_thread
            and self._before is None
            and self._after is None
        )

    async def _guarded(self, slot: _Slot) -> None:
        """`run_call` in a call's task: a `BaseException` that escapes it (a subscriber's
        ``KeyboardInterrupt``, say) is kept for `run` to raise, as in the batch's own task."""
        try:
            await self.run_call(slot.index, slot.call)
        except asyncio.CancelledError:
            raise
        except BaseException as exc:
            if self._fatal is None:
                self._fatal = exc

    async def _watch(self, tasks: list[asyncio.Future[None]], slots: Sequence[_Slot]) -> None:
        """Wait for the calls' tasks (``slots``' calls) still running after their first step.
        After an abort, running calls get the grace period to end, then are cancelled; a call
        still running `STOP_WAIT_SECONDS` after its cancellation (it ignores it) is answered as
        interrupted and left to end in the background, its late result ignored: the run is
        never held open by it. The cancellation of the task running the batch cancels the calls
        and waits for them the same way (`run`), then propagates."""
        await all_done_or_abort(tasks, self._signal)
        if not all(map(_is_done, tasks)):
            # Aborted: running tools saw the signal; give them the grace period to stop.
            await asyncio.wait(_running(tasks, slots), timeout=self._grace)
            await self._stop(_running(tasks, slots))

    async def _stop(self, running: dict[asyncio.Future[None], _Slot]) -> None:
        """Cancel the ``running`` calls' tasks, wait at most `STOP_WAIT_SECONDS` for them to end,
        and answer each one still running as interrupted (it goes on unwatched; what it returns
        is ignored)."""
        if not running:
            return
        for task in running:
            task.cancel()
        _done, stubborn = await asyncio.wait(running, timeout=STOP_WAIT_SECONDS)
        for task in stubborn:
            _ABANDONED.add(task)  # a strong reference until it ends (the loop keeps weak ones)
            task.add_done_callback(retrieve)
            task.add_done_callback(_ABANDONED.discard)
            slot = running[task]
            text = INTERRUPTED if slot.started else NOT_RUN
            self._finish(slot, text_result(slot.call, text, is_error=True))
            logger.warning(
                "tool %r (call %s) did not stop when cancelled after the abort's grace period; "
                "the run no longer waits for it (it goes on in the background, its result ignored)",
                slot.call.name,
                slot.call.id,
            )

    async def run_call(self, index: int, call: ToolCallBlock) -> None:
        """Process call ``index`` of the batch (``call``) until it has its result: its start
        event, the check of its name and arguments, the ``before_tool_call`` hook, the wait for
        its resource, `execute`, the ``after_tool_call`` hook and its end event. Calls of a
        parallel batch each run in a task of their own; an override awaits ``super().run_call``
        (a durable batch lets the next call start its steps once this one has).

        Raises:
            asyncio.CancelledError: the call's task was cancelled (its result is recorded as
                interrupted or not run first).
        """
        slot = self._slots[index]
        # Start and end events go together: a subscriber added mid-call sees neither.
        slot.announced = announced = self._listening()
        if announced:
            self._emit(NEW_TOOL_EXECUTION_START(call))
        try:
            checked = check_call(call, self.tools)
            if isinstance(checked, str):
                self._finish(slot, text_result(call, checked, is_error=True))
                return
            tool, arguments = checked
            try:
                kwargs = tool.validate(arguments)
                resource = (
                    tool.resource_of(kwargs)
                    if tool.resource is not None and self._mode == "parallel"
                    else None
                )
            except Exception as exc:  # invalid, or a broken validator or resource function
                text = (
                    format_validation_error(call.name, exc, arguments)
                    if isinstance(exc, ValidationError)
                    else f"Could not prepare the call: {type(exc).__name__}: {exc}"
                )
                self._finish(slot, text_result(call, text, is_error=True))
                return
            if (
                resource is None
                and self._before is None
                and self._after is None
                and (self._approved or not tool.requires_approval)
            ):  # nothing around the execution: `execute` awaited here, without `_checked_run`
                result = await self.execute(index, tool, kwargs)
            else:
                # The write queue: a call claims its place on its resource before anything it
                # awaits (a permission hook may take any time), so calls on one resource run in
                # declaration order. The place is released on every way out.
                previous, turn = self._claim(resource)
                try:
                    result = await self._checked_run(slot, tool, kwargs, previous)
                finally:
                    if turn is not None and not turn.done():
                        release_after(previous, turn)
            self._finish(slot, result)
        except asyncio.CancelledError:
            text = INTERRUPTED if slot.started else NOT_RUN
            self._finish(slot, text_result(call, text, is_error=True))
            raise

    def _claim(
        self, resource: str | None
    ) -> tuple[asyncio.Future[None] | None, asyncio.Future[None] | None]:
        if resource is None:
            return None, None
        tails = self._resource_tails
        if tails is None:
            tails = self._resource_tails = {}
        previous = tails.get(resource)
        turn: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        tails[resource] = turn
        return previous, turn

    def _defer(self, slot: _Slot, reason: str) -> ToolResultMessage:
        call = slot.call
        arguments = call.input if isinstance(call.input, dict) else {}
        slot.deferred = PendingCall(call.id, call.name, dict(arguments), reason)
        self._deferring = True
        result = text_result(call, f"Awaiting approval: {reason}")
        return result.model_copy(update={"details": DEFERRED})

    async def _checked_run(
        self,
        slot: _Slot,
        tool: Tool,
        kwargs: dict[str, Any],
        previous: asyncio.Future[None] | None,
    ) -> ToolResultMessage:
        call = slot.call
        if self._before is None and tool.requires_approval and not self._approved:
            return self._defer(slot, f"{tool.name} requires approval")
        if self._before is not None:
            # The hook gets its own copy: what it changes in place is validated again below,
            # so the tool is only ever called with validated arguments.
            seen = copied_arguments(kwargs)
            info = ToolCallInfo(call, tool, seen, self._deps, self._signal)
            try:
                decision = await resolve(self._before(info))
            except (Exception, asyncio.CancelledError) as exc:
                if is_run_cancellation(exc):
                    raise  # the run is being cancelled; a hook's own one is its failure
                return hook_failed_result("before_tool_call", call, exc)
            except INTERRUPTS as exc:
                return self._interrupted(call, exc, "the before_tool_call hook", ran=False)
            if isinstance(decision, Deny):
                if decision.terminate:
                    slot.terminate = decision.reason
                    self._terminated = True
                said = decision.reason
                if not isinstance(decision, Interrupted):
                    said = f"Denied: {said}"
                return text_result(call, said, is_error=True)
            if isinstance(decision, Defer):
                return self._defer(slot, decision.reason)
            if decision is not None and not isinstance(decision, Allow | dict):
                return text_result(
                    call,
                    f"The before_tool_call hook returned {decision!r}, which is not a decision "
                    "(None, Allow(), Allow(arguments=...), a dict of arguments, Deny(reason) or "
                    "Defer(reason)); the call was not run.",
                    is_error=True,
                )
            if tool.requires_approval and not self._approved and not isinstance(decision, Allow):
                return self._defer(slot, f"{tool.name} requires approval")
            changed = decision.arguments if isinstance(decision, Allow) else decision
            if not isinstance(changed, dict) and arguments_differ(seen, kwargs):
                changed = seen  # edited in place
            if isinstance(changed, dict):
                try:
                    kwargs = tool.validate(changed)
                except ValidationError as exc:
                    return text_result(
                        call, format_validation_error(call.name, exc, changed), is_error=True
                    )
        if previous is not None:
            await asyncio.shield(previous)
        result = await self.execute(slot.index, tool, kwargs)
        if self._after is not None:
            info = ToolCallInfo(call, tool, copied_arguments(kwargs), self._deps, self._signal)
            try:
                replaced = await resolve(self._after(info, result))
            except (Exception, asyncio.CancelledError) as exc:
                if is_run_cancellation(exc):
                    raise  # the run is being cancelled; a hook's own one is its failure
                slot.ends_run = False
                return hook_failed_result("after_tool_call", call, exc)
            except INTERRUPTS as exc:
                slot.ends_run = False
                return self._interrupted(call, exc, "the after_tool_call hook", ran=True)
            if isinstance(replaced, ToolResult):
                slot.ends_run = replaced.terminate
                result = to_result(call, replaced)
            elif isinstance(replaced, ToolResultMessage):
                # A hook may rewrite a result, never re-address it: the protocol pairs by id.
                result = to_result(call, replaced)
        return result

    def _interrupted(
        self, call: ToolCallBlock, exc: BaseException, where: str, *, ran: bool
    ) -> ToolResultMessage:
        """A `KeyboardInterrupt` or `SystemExit` raised in the tool or one of its hooks: recorded
        as this call's result and the run aborted (`record_interrupt`: the other calls get the
        grace period), then re-raised by `run` once every call has its result."""
        self._fatal = self._fatal or exc
        place = f"tool {call.name!r}" if where == "the tool" else f"{where} of tool {call.name!r}"
        record_interrupt(self._signal, exc, f"{place} (call {call.id})")
        done = (
            "The call may have partly completed; check its effects before retrying."
            if ran
            else "The call was not run."
        )
        return text_result(
            call,
            f"Interrupted: {where} raised {type(exc).__name__} and the run was aborted. {done}",
            is_error=True,
        )

    async def execute(self, index: int, tool: Tool, kwargs: dict[str, Any]) -> ToolResultMessage:
        """Run the tool function of call ``index`` with its validated ``kwargs`` (after the
        permission hook and the resource queue) and return its result: a failure, a timeout
        (``tool.timeout_seconds``) or an abort before it started becomes an error result.

        Raises:
            asyncio.CancelledError: the run's task was cancelled (or an abort's grace period ran
                out); a tool's own cancellation is its failure.
            KeyboardInterrupt: raised by the tool (or `SystemExit`): recorded as the result and
                the run aborted, then re-raised once every call has its result (see `run`).
        """
        slot = self._slots[index]
        call = slot.call
        if self._signal.aborted:
            return text_result(call, NOT_RUN, is_error=True)
        # Only a tool that takes a `ToolContext` (or may yield progress) gets one.
        ctx = None
        if tool.needs_context:
            ctx = call_context(
                call, self._signal, self._deps, self._emit, lambda: slot.result, self.owner
            )
        slot.started = True
        deadline = None
        try:
            if tool.timeout_seconds is None:  # no timeout scope: saves a cancel scope per call
                value = await tool.call(kwargs, ctx)
            else:
                async with asyncio.timeout(tool.timeout_seconds) as deadline:
                    value = await tool.call(kwargs, ctx)
        except TimeoutError:
            if deadline is not None and deadline.expired():
                return text_result(
                    call,
                    f"Timed out: tool {call.name!r} ran longer than "
                    f"{tool.timeout_seconds:g} s and was cancelled; it may have partly "
                    "completed.",
                    is_error=True,
                )
            return text_result(call, "TimeoutError: the tool timed out", is_error=True)
        except ToolError as exc:  # an expected failure: the model reads it, nothing is logged
            return text_result(call, str(exc) or type(exc).__name__, is_error=True)
        except asyncio.CancelledError as exc:
            if cancelling():
                raise  # the run (an abort's grace ran out) or its task was cancelled
            if self._signal.aborted:  # a tool that stopped on the abort by raising
                return text_result(call, INTERRUPTED, is_error=True)
            # Nothing cancelled this task: the tool's own CancelledError (a library inside it
            # cancelled its own work) is a failure of that call like any other exception.
            log_tool_exception(call, exc)
            return text_result(call, f"CancelledError: {OWN_CANCELLATION}", is_error=True)
        except Exception as exc:
            log_tool_exception(call, exc)
            return text_result(call, f"{type(exc).__name__}: {exc}", is_error=True)
        except INTERRUPTS as exc:
            return self._interrupted(call, exc, "the tool", ran=True)
        if isinstance(value, ToolResult) and value.terminate:
            slot.ends_run = True
        return to_result(call, value)


STOP_WAIT_SECONDS = 0.1
"""How long a batch waits for a call it cancelled (after an abort's grace period, or when the
task running the batch is cancelled) to end: its cancellation delivered and its cleanup run. A
call still running then ignores its cancellation: it is answered as interrupted and the batch
stops waiting for it."""


_is_done = asyncio.Future.done  # (`_watch` maps it over its tasks)


def _running(
    tasks: Sequence[asyncio.Future[None]], slots: Sequence[_Slot]
) -> dict[asyncio.Future[None], _Slot]:
    """The calls' tasks not done yet, with their slots (only after an abort or a cancellation:
    no mapping is built for a batch that ends by itself)."""
    return {task: slot for task, slot in zip(tasks, slots, strict=True) if not task.done()}


_ABANDONED: set[asyncio.Future[None]] = set()
"""The tasks of calls a batch stopped waiting for, until they end."""
