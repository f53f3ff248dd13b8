"""Running one tool batch: checks, permission hooks, parallel or sequential execution, abort.

Every call of the batch gets exactly one result, in declaration order, whatever happens: the five
failure paths (unknown tool, invalid arguments, exception, denial, abort) and truncated calls all
drain into a `ToolResultMessage` with ``is_error=True`` (texts in `_protocol`). End events fire in
completion order.
"""

from __future__ import annotations

import asyncio
import copy
import difflib
import inspect
import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import ValidationError

from ._cancel import AbortSignal, abort_scope, cancelling, is_run_cancellation
from ._errors import ToolError
from ._events import Event, ToolExecutionEnd, ToolExecutionStart, ToolExecutionUpdate
from ._hooks import (
    INTERRUPTS,
    AfterToolCall,
    Allow,
    Approve,
    BeforeToolCall,
    Defer,
    Deny,
    Interrupted,
    PendingCall,
    ToolCallInfo,
    record_interrupt,
)
from ._messages import (
    AssistantMessage,
    ImageBlock,
    TextBlock,
    ToolCallBlock,
    ToolResultMessage,
    text_result,
)
from ._protocol import (
    AFTER_TERMINATION,
    EMPTY_OUTPUT,
    INTERRUPTED,
    NO_OUTPUT,
    NOT_RUN,
    TRUNCATED,
    NonFiniteNumberError,
    loads_strict,
    without_blank_text,
)
from ._tools import (
    Tool,
    ToolContext,
    ToolResult,
    format_validation_error,
    repr_json,
    result_json,
)

ToolExecution = Literal["parallel", "sequential"]

logger = logging.getLogger("statemachine_agent")

RAW_ARGUMENTS_CAP = 200

_DEFERRED = {"awaiting_approval": True}  # marks the placeholder a deferred call's end event shows

_JSON_KINDS = {
    "NoneType": "null",
    "list": "array",
    "str": "string",
    "int": "number",
    "float": "number",
    "bool": "boolean",
}


async def resolve(value: Any) -> Any:
    """Await ``value`` if it is awaitable (hooks may be sync or async)."""
    if inspect.isawaitable(value):
        return await value
    return value


def awaits_decision(result: ToolResultMessage) -> bool:
    """``result`` is the placeholder a deferred call's ``tool_execution_end`` carries (its real
    result comes with the decision), not a final result."""
    return bool(result.details == _DEFERRED)


def _cap(text: str, limit: int = RAW_ARGUMENTS_CAP) -> str:
    return text if len(text) <= limit else text[:limit] + f"... [{len(text) - limit} more chars]"


def check_call(call: ToolCallBlock, tools: dict[str, Tool]) -> str | dict[str, Any]:
    """The checks that need no I/O: the error text of a call that must not run, or its arguments.

    Covers truncated calls, unknown tools (naming the available ones and the closest), arguments
    that are not valid JSON or not a JSON object (quoting the parse problem and the raw text),
    and numbers JSON cannot hold (``NaN``, ``Infinity``, ``1e400``: naming the field and the
    value, see `loads_strict`).
    """
    if call.truncated:
        return TRUNCATED
    tool = tools.get(call.name)
    if tool is None:
        names = sorted(tools)
        text = f"Unknown tool {call.name!r}."
        text += f" Available tools: {', '.join(names)}." if names else " No tools are available."
        close = difflib.get_close_matches(call.name, names, n=1)
        if close:
            text += f" Did you mean {close[0]!r}?"
        return text
    value = call.input
    if call.raw_arguments is not None:
        try:
            value = loads_strict(call.raw_arguments)
        except NonFiniteNumberError as exc:
            return (
                f"Invalid arguments for tool {call.name!r}: {exc}; the call was not run. Send "
                f"a finite number for {exc.path} (or the value as a string)."
            )
        except ValueError as exc:
            return (
                f"Invalid arguments for tool {call.name!r}: not valid JSON ({exc}). "
                f"Raw arguments: {_cap(call.raw_arguments)}. Send the arguments as one JSON object."
            )
    if not isinstance(value, dict):
        kind = _JSON_KINDS.get(type(value).__name__, type(value).__name__)
        shown = call.raw_arguments if call.raw_arguments is not None else repr_json(value)
        return (
            f"Invalid arguments for tool {call.name!r}: expected a JSON object, got {kind}: "
            f"{_cap(shown)}. Send the arguments as one JSON object."
        )
    return value


def _clean(blocks: list[TextBlock | ImageBlock]) -> list[TextBlock | ImageBlock]:
    # Blank text is invalid for a provider (protocol rule 4); an output with nothing left says so.
    return without_blank_text(blocks, EMPTY_OUTPUT)


def to_result(call: ToolCallBlock, value: Any) -> ToolResultMessage:
    """Turn what a tool returned into its result message."""
    is_error = False
    details = None
    if isinstance(value, ToolResultMessage):
        # Re-addressed to this call (the protocol pairs by id) and cleaned like any output.
        return value.model_copy(
            update={
                "tool_call_id": call.id,
                "tool_name": call.name,
                "content": _clean(list(value.content)),
            }
        )
    if isinstance(value, ToolResult):
        is_error, details, value = value.is_error, value.details, value.content
    if value is None:
        blocks: list[TextBlock | ImageBlock] = [TextBlock(text=NO_OUTPUT)]
    elif isinstance(value, str):
        blocks = _clean([TextBlock(text=value)])
    elif isinstance(value, TextBlock | ImageBlock):
        blocks = _clean([value])
    elif isinstance(value, list) and all(isinstance(b, TextBlock | ImageBlock) for b in value):
        blocks = _clean(value)
    else:  # data: compact JSON (pydantic); what cannot be serialized is an error result
        text, failed = result_json(value)
        blocks, is_error = [TextBlock(text=text)], is_error or failed
    return ToolResultMessage(
        tool_call_id=call.id,
        tool_name=call.name,
        content=blocks,
        is_error=is_error,
        details=details,
    )


@dataclass(slots=True)
class _Slot:
    call: ToolCallBlock
    started: bool = False  # the tool function was invoked
    announced: bool = False  # a start event was emitted
    result: ToolResultMessage | None = None
    terminate: str | None = None  # the reason of a terminating denial
    ends_run: bool = False  # the result was marked ``terminate=True``
    deferred: PendingCall | None = None  # waits for a person's decision


class BatchRun:
    """One tool batch. ``results()`` is complete after `run` returns or raises.

    Args:
        calls: the tool calls of the assistant message, in declaration order.
        tools: the registered tools by name.
        mode: ``"parallel"`` (calls on one resource still queue) or ``"sequential"``.
        signal: the run's abort signal.
        abort_grace_seconds: how long running tools may take to stop after an abort before they
            are cancelled.
        emit: receives the tool-execution events.
        listening: whether anyone receives events (skips building them when not).
        on_result: called with each call's result the moment it is final (completion order).
        approved: the calls were approved by a person (tools that require approval run).
        run: the run executing the batch, given to the tools as `ToolContext.run`.
    """

    def __init__(
        self,
        calls: Sequence[ToolCallBlock],
        tools: dict[str, Tool],
        *,
        mode: ToolExecution,
        signal: AbortSignal,
        abort_grace_seconds: float,
        emit: Callable[[Event], None],
        before: BeforeToolCall | None = None,
        after: AfterToolCall | None = None,
        deps: Any = None,
        listening: Callable[[], bool] = lambda: True,
        on_result: Callable[[ToolResultMessage], None] = lambda _result: None,
        approved: bool = False,
        run: Any = None,
    ) -> None:
        self._run = run
        self._slots = [_Slot(call) for call in calls]
        self._tools = tools
        self._mode = mode
        self._signal = signal
        self._grace = abort_grace_seconds
        self._emit = emit
        self._listening = listening
        self._on_result = on_result
        self._approved = approved
        self._before = before
        self._after = after
        self._deps = deps
        self._terminated = False
        self._fatal: BaseException | None = None
        self._resource_tails: dict[str, asyncio.Future[None]] = {}
        self._task_slots: dict[asyncio.Future[None], _Slot] = {}

    @property
    def terminate_reason(self) -> str | None:
        """The reason of the first terminating denial, if any."""
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
        if self._terminated or self._signal._aborted:
            return []
        return [slot.deferred for slot in self._slots if slot.deferred is not None]

    def results(self, held: Sequence[PendingCall] = ()) -> list[ToolResultMessage]:
        """One result per call in declaration order; calls never reached get "not run". The
        ``held`` calls (the caller's `deferred`) get none: they wait for a decision."""
        out = []
        waiting = {call.id for call in held} if held else ()
        for slot in self._slots:
            if slot.call.id in waiting:
                continue
            if slot.result is None:
                if self._terminated and not self._signal.aborted:
                    text = AFTER_TERMINATION
                else:
                    text = INTERRUPTED if slot.started else NOT_RUN
                self._finish(slot, text_result(slot.call, text, is_error=True))
            assert slot.result is not None
            out.append(slot.result)
        return out

    def _finish(self, slot: _Slot, result: ToolResultMessage) -> None:
        if slot.result is not None:
            return
        if slot.deferred is not None and result.details == _DEFERRED:
            if slot.announced:  # the execution ends for now; the result comes with the decision
                self._emit(ToolExecutionEnd(slot.call, result))
                slot.announced = False
            return
        slot.result = result
        if slot.announced:
            self._emit(ToolExecutionEnd(slot.call, result))
        self._on_result(result)

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
        if not self._slots:
            return
        if self._one_at_a_time():
            for slot in self._slots:
                if self._signal._aborted or self._terminated:
                    break
                await self._process_inline(slot)
        else:
            await self._watch([self._start(slot) for slot in self._slots])
        if self._fatal is not None:
            raise self._fatal

    def _one_at_a_time(self) -> bool:
        """Sequential mode, a batch of one, or a call of a ``sequential=True`` tool in it."""
        if self._mode == "sequential" or len(self._slots) == 1:
            return True
        tools = self._tools
        return any(
            (t := tools.get(slot.call.name)) is not None and t.sequential for slot in self._slots
        )

    async def _process_inline(self, slot: _Slot) -> None:
        """Process one call of a batch run one at a time. A sync tool in its worker thread with
        no hooks runs in this task (no task of its own: a per-turn cost; an abort gives it the
        grace period, then stops waiting for the thread). Anything that runs on the loop (an
        async tool, a hook) gets a task of its own, watched as a parallel batch's calls are, so
        a call that ignores its cancellation cannot keep the run open (`_watch`)."""
        tool = self._tools.get(slot.call.name)
        if (
            tool is not None
            and not tool.is_async
            and tool.run_in_thread
            and self._before is None
            and self._after is None
        ):
            with abort_scope(self._signal, self._grace):
                await self._process(slot)
            return
        await self._watch([self._start(slot)])

    def _start(self, slot: _Slot) -> asyncio.Future[None]:
        """``slot``'s call in a task of its own; whatever it ends with is retrieved (a task the
        batch stopped waiting for may end long after the run, unobserved)."""
        task = asyncio.ensure_future(self._guarded(slot))
        task.add_done_callback(_retrieve)
        self._task_slots[task] = slot
        return task

    async def _guarded(self, slot: _Slot) -> None:
        """`_process` in a call's task: a `BaseException` that escapes it (a subscriber's
        ``KeyboardInterrupt``, say) is kept for `run` to raise, as in the batch's own task."""
        try:
            await self._process(slot)
        except asyncio.CancelledError:
            raise
        except BaseException as exc:
            if self._fatal is None:
                self._fatal = exc

    async def _watch(self, tasks: Sequence[asyncio.Future[None]]) -> None:
        """Wait for the calls' tasks. After an abort, running calls get the grace period to end,
        then are cancelled; a call still running `STOP_WAIT_SECONDS` after its cancellation
        (it ignores it) is answered as interrupted and left to end in the background, its late
        result ignored: the run is never held open by it. The cancellation of the task running
        the batch cancels the calls, waits for them the same way, and propagates."""
        try:
            await self._all_done_or_abort(tasks)
            pending = {task for task in tasks if not task.done()}
            if pending:
                # Aborted: running tools saw the signal; give them the grace period to stop.
                _done, pending = await asyncio.wait(pending, timeout=self._grace)
                await self._stop(pending)
        except asyncio.CancelledError:
            await self._stop({task for task in tasks if not task.done()})
            raise

    async def _stop(self, tasks: set[asyncio.Future[None]]) -> None:
        """Cancel ``tasks``, wait at most `STOP_WAIT_SECONDS` for them to end, and answer each
        one still running as interrupted (it goes on unwatched; what it returns is ignored)."""
        if not tasks:
            return
        for task in tasks:
            task.cancel()
        _done, stubborn = await asyncio.wait(tasks, timeout=STOP_WAIT_SECONDS)
        for task in stubborn:
            _ABANDONED.add(task)  # a strong reference until it ends (the loop keeps weak ones)
            task.add_done_callback(_ABANDONED.discard)
            slot = self._task_slots[task]
            text = INTERRUPTED if slot.started else NOT_RUN
            self._finish(slot, text_result(slot.call, text, is_error=True))
            logger.warning(
                "tool %r (call %s) did not stop when cancelled after the abort's grace period; "
                "the run no longer waits for it (it goes on in the background, its result ignored)",
                slot.call.name,
                slot.call.id,
            )

    async def _all_done_or_abort(self, tasks: Sequence[asyncio.Future[None]]) -> None:
        """Wait until every task is done or the run is aborted, whichever comes first (one
        future woken by the tasks' done callbacks and the abort signal: no waiting task)."""
        woken: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        left = len(tasks)

        def wake(_done: object = None) -> None:
            if not woken.done():
                woken.set_result(None)

        def one_done(_task: asyncio.Future[None]) -> None:
            nonlocal left
            left -= 1
            if not left:
                wake()

        for task in tasks:
            task.add_done_callback(one_done)
        remove = self._signal.add_callback(wake)
        if self._signal.aborted:
            wake()
        try:
            await woken
        finally:
            remove()
            for task in tasks:
                task.remove_done_callback(one_done)

    async def _process(self, slot: _Slot) -> None:
        call = slot.call
        # Start and end events go together: a subscriber added mid-call sees neither.
        slot.announced = self._listening()
        if slot.announced:
            self._emit(ToolExecutionStart(call))
        try:
            checked = check_call(call, self._tools)
            if isinstance(checked, str):
                self._finish(slot, text_result(call, checked, is_error=True))
                return
            tool = self._tools[call.name]
            result = await self._invoke(slot, tool, checked)
            self._finish(slot, result)
        except asyncio.CancelledError:
            text = INTERRUPTED if slot.started else NOT_RUN
            self._finish(slot, text_result(call, text, is_error=True))
            raise

    async def _invoke(
        self, slot: _Slot, tool: Tool, arguments: dict[str, Any]
    ) -> ToolResultMessage:
        call = slot.call
        try:
            kwargs = tool.validate(arguments)
            resource = tool.resource_of(kwargs) if self._mode == "parallel" else None
        except ValidationError as exc:
            return text_result(
                call, format_validation_error(call.name, exc, arguments), is_error=True
            )
        except Exception as exc:  # a broken validator or resource function: the call cannot run
            return text_result(
                call, f"Could not prepare the call: {type(exc).__name__}: {exc}", is_error=True
            )
        # The write queue: a call claims its place on its resource before anything it awaits
        # (a permission hook may take any time), so calls on one resource run in declaration
        # order. The place is released on every way out.
        previous, turn = self._claim(resource)
        try:
            return await self._checked_run(slot, tool, kwargs, previous)
        finally:
            if turn is not None and not turn.done():
                _release_after(previous, turn)

    def _claim(
        self, resource: str | None
    ) -> tuple[asyncio.Future[None] | None, asyncio.Future[None] | None]:
        if resource is None:
            return None, None
        previous = self._resource_tails.get(resource)
        turn: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._resource_tails[resource] = turn
        return previous, turn

    def _defer(self, slot: _Slot, reason: str) -> ToolResultMessage:
        call = slot.call
        arguments = call.input if isinstance(call.input, dict) else {}
        slot.deferred = PendingCall(call.id, call.name, dict(arguments), reason)
        result = text_result(call, f"Awaiting approval: {reason}")
        return result.model_copy(update={"details": _DEFERRED})

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
            seen = _copied(kwargs)
            info = ToolCallInfo(call, tool, seen, self._deps, self._signal)
            try:
                decision = await resolve(self._before(info))
            except (Exception, asyncio.CancelledError) as exc:
                if is_run_cancellation(exc):
                    raise  # the run is being cancelled; a hook's own one is its failure
                return _hook_failed("before_tool_call", call, exc)
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
            if not isinstance(changed, dict) and _differs(seen, kwargs):
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
        result = await self._execute(slot, tool, kwargs)
        if self._after is not None:
            info = ToolCallInfo(call, tool, _copied(kwargs), self._deps, self._signal)
            try:
                replaced = await resolve(self._after(info, result))
            except (Exception, asyncio.CancelledError) as exc:
                if is_run_cancellation(exc):
                    raise  # the run is being cancelled; a hook's own one is its failure
                slot.ends_run = False
                return _hook_failed("after_tool_call", call, exc)
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

    def _context(self, slot: _Slot) -> ToolContext:
        """The `ToolContext` of ``slot``'s call: its progress updates become events on the
        loop's thread, between the call's start and end events."""
        call = slot.call
        loop = asyncio.get_running_loop()
        loop_thread = threading.get_ident()

        def deliver(update: Any) -> None:
            # Updates belong between the call's start and end events: a late one (a background
            # task or thread the tool left running) is dropped.
            if slot.result is not None:
                logger.debug(
                    "dropped a progress update of tool %r (call %s): the call has ended",
                    call.name,
                    call.id,
                )
                return
            self._emit(ToolExecutionUpdate(call.id, update))

        def progress(update: Any) -> None:
            if threading.get_ident() == loop_thread:
                deliver(update)
                return
            try:  # a sync tool in a worker thread: events are delivered on the loop's thread
                loop.call_soon_threadsafe(deliver, update)
            except RuntimeError:  # the loop is closed: the run is long over
                logger.debug("dropped a progress update of call %s: its loop is closed", call.id)

        return ToolContext(call.id, call.name, self._signal, progress, self._deps, self._run)

    async def _execute(self, slot: _Slot, tool: Tool, kwargs: dict[str, Any]) -> ToolResultMessage:
        call = slot.call
        if self._signal._aborted:
            return text_result(call, NOT_RUN, is_error=True)
        # Only a tool that takes a `ToolContext` (or may yield progress) gets one.
        ctx = self._context(slot) if tool.needs_context else None
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
            _log_tool_exception(call, exc)
            return text_result(call, f"CancelledError: {OWN_CANCELLATION}", is_error=True)
        except Exception as exc:
            _log_tool_exception(call, exc)
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


_ABANDONED: set[asyncio.Future[None]] = set()
"""The tasks of calls a batch stopped waiting for, until they end."""


def _retrieve(task: asyncio.Future[None]) -> None:
    """Retrieve what a call's task ended with, so asyncio never reports "Task exception was
    never retrieved" for a task the batch stopped waiting for."""
    if not task.cancelled():
        task.exception()


OWN_CANCELLATION = (
    "the tool raised asyncio.CancelledError itself (the run was not aborted or cancelled); "
    "the call may have partly completed."
)


def _log_tool_exception(call: ToolCallBlock, exc: BaseException) -> None:
    """One warning record on the package's logger, with the traceback, the tool and the call."""
    logger.warning(
        "tool %r raised %s (call %s)",
        call.name,
        type(exc).__name__,
        call.id,
        exc_info=exc,
        extra={"tool_name": call.name, "call_id": call.id},
    )


def _copied(arguments: dict[str, Any]) -> dict[str, Any]:
    """A deep copy of ``arguments`` (a shallow one when a value cannot be copied)."""
    try:
        return copy.deepcopy(arguments)
    except Exception:
        return dict(arguments)


def _differs(seen: dict[str, Any], original: dict[str, Any]) -> bool:
    """A hook changed its copy of the arguments (an equality that fails counts as changed)."""
    try:
        return bool(seen != original)
    except Exception:
        return True


def _hook_failed(hook: str, call: ToolCallBlock, exc: BaseException) -> ToolResultMessage:
    logger.warning(
        "the %s hook raised %s (tool %r, call %s)",
        hook,
        type(exc).__name__,
        call.name,
        call.id,
        exc_info=exc,
        extra={"tool_name": call.name, "call_id": call.id},
    )
    return text_result(
        call,
        f"The {hook} hook failed ({type(exc).__name__}: {exc}); the call was not completed.",
        is_error=True,
    )


@dataclass(slots=True)
class PendingBatch:
    """A tool batch waiting for decisions: what an agent in ``awaiting_approval`` holds.

    Attributes:
        response: the assistant message whose calls these are (the last message of the history).
        results: the results the batch already has, by call id (appended, in declaration order,
            once every call is decided and run).
        calls: the calls still waiting, in declaration order.
        decisions: the decisions given for the next run, by call id.
    """

    response: AssistantMessage
    results: dict[str, ToolResultMessage]
    calls: list[PendingCall]
    decisions: dict[str, Approve | Deny] = field(default_factory=dict)


def _release_after(previous: asyncio.Future[None] | None, turn: asyncio.Future[None]) -> None:
    """Give up a call's place on its resource once the call before it has given up its own: a
    call that never waited for its turn (denied, a hook failed, deferred) must not let a later
    call on the same resource overtake an earlier one still running."""
    if previous is None or previous.done():
        turn.set_result(None)
    else:
        previous.add_done_callback(lambda _: None if turn.done() else turn.set_result(None))
