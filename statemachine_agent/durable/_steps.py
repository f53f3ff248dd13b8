"""The DBOS steps of a durable run: each model request (`DurableRun.send`) and each tool call
(`DurableBatch`, with its ``tool_start`` marker for a tool that is not idempotent). Each step
body first lets a pending abort reach the run (`AbortWatch.go_live`) and records, with its
output, whether the run was aborted by its end (see `_abort`)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any, Protocol, TypeVar, cast, runtime_checkable

from dbos import DBOS, StepOptions
from dbos import error as dbos_error

from .._execution import BatchRun
from .._messages import AssistantMessage, ToolCallBlock, ToolResultMessage, UserMessage
from .._messages import text_result as _text_result
from .._protocol import NO_RESULT
from .._responses import RequestAborted, RequestFailed
from .._result import RunResult
from .._run import Run
from .._states import Trigger
from .._tools import Tool
from ..models._base import ModelRequest
from . import _abort
from ._codec import decode_outcome, dump_message, encode_outcome, load_message
from ._state import process

STEP_RETRY_INTERVAL_SECONDS = 1.0
"""The first wait before DBOS runs a failed call of a tool with ``step_retries`` again (it
doubles each time)."""


class ToolStepFailed(Exception):
    """Internal to durable runs: a call of a tool with ``step_retries`` returned an error
    result, so the workflow engine (DBOS) runs it again. Never reaches the user.

    Args:
        result: the error result as JSON text.
    """

    def __init__(self, result: str) -> None:
        super().__init__(result)
        self.result = result


_POSITION_KEY = "model_position"
T = TypeVar("T")


@runtime_checkable
class PositionedModel(Protocol):
    """A model whose next response depends on how many requests it was asked, such as
    `ScriptedModel` (a script plays step ``n`` for request ``n``).

    A durable run records ``calls`` after each ``model_request`` step; when DBOS replays a
    recorded step (a restarted or recovering worker), the model is not asked, so the run calls
    ``seek(calls)`` with the recorded value and the next request plays the step that follows
    the recorded history. The count is recorded rather than read from the history because one
    request step may play several steps (an error, then its retries) and a compaction request
    adds no assistant message. A factory should build such a model per run, as the CLI's
    ``script:FILE`` worker does: a model shared by runs on one worker moves for all of them.

    Attributes:
        calls: the requests played so far (over every run that used this model).
    """

    calls: int

    def seek(self, calls: int) -> None:
        """Continue as if ``calls`` requests had been asked."""


async def _step(
    options: StepOptions,
    body: Callable[[], Coroutine[Any, Any, T]],
    watch: _abort.AbortWatch | None,
) -> T:
    """Run ``body`` as the DBOS step ``options``: on replay, its recorded output, with the abort
    it recorded applied to the run (see `_abort`). The body itself first lets a pending abort
    reach the run (`AbortWatch.go_live`) and records, with its output, whether the run was
    aborted by its end (`_abort.wrap`): no wrapper around it. ``watch``: the run's abort watch
    (None outside a watched workflow)."""
    return cast(T, _abort.unwrap(await DBOS.run_step_async(options, body), watch))


class DurableBatch(BatchRun):
    """A `BatchRun` whose tool executions are DBOS steps, started in declaration order (through
    the batch's per-call hooks `BatchRun.run_call` and `BatchRun.execute`)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._started: list[asyncio.Future[None]] = []

    async def run(self) -> None:
        """Run the batch (see `BatchRun.run`)."""
        loop = asyncio.get_running_loop()
        self._started = [loop.create_future() for _ in self.calls]
        await super().run()

    def _release(self, index: int) -> None:
        # Call ``index`` has started its steps (or will start none): the next call may start its
        # own once every earlier call has done so too.
        own = self._started[index]
        if own.done():
            return
        if index == 0 or self._started[index - 1].done():
            own.set_result(None)
        else:
            self._started[index - 1].add_done_callback(
                lambda _f: None if own.done() else own.set_result(None)
            )

    async def run_call(self, index: int, call: ToolCallBlock) -> None:
        """Process the call (`BatchRun.run_call`); the next call may then start its steps."""
        try:
            await super().run_call(index, call)
        finally:
            self._release(index)

    async def execute(self, index: int, tool: Tool, kwargs: dict[str, Any]) -> ToolResultMessage:
        """Run the tool as a ``tool:<call id>`` step once every earlier call has started its
        own (preceded by a ``tool_start`` marker step for a tool that is not idempotent): on
        replay, the recorded result (`BatchRun.execute`)."""
        call = self.calls[index]
        owner = self.owner
        prefix = owner.settings.step_prefix if isinstance(owner, Run) else ""
        watch = owner.abort_watch if isinstance(owner, DurableRun) else _abort.current()
        try:
            if index > 0:
                await asyncio.shield(self._started[index - 1])
            if tool.durable_steps:  # its own steps are the workflow's: none around it
                self.call_started(index)
                return await super().execute(index, tool, kwargs)
            marker = process.incarnation
            if not tool.idempotent:

                async def tool_start() -> Any:
                    if watch is not None:
                        await watch.go_live()
                    return _abort.wrap(process.incarnation, watch)

                marker = await _step({"name": f"{prefix}tool_start:{call.id}"}, tool_start, watch)
        except BaseException:
            self._release(index)
            raise
        finally:
            if tool.durable_steps:  # ended: the next call may start its steps
                self._release(index)
        execute = super().execute
        live: ToolResultMessage | None = None

        async def tool_call() -> Any:
            nonlocal live
            if watch is not None:
                await watch.go_live()
            if marker != process.incarnation:
                # Started by a worker that died before the result was recorded.
                result = _text_result(call, NO_RESULT, is_error=True)
            else:
                result = await execute(index, tool, kwargs)
                if tool.step_retries and result.is_error:
                    raise ToolStepFailed(dump_message(result))
            text = dump_message(result)
            live = result
            return _abort.wrap(text, watch)

        options: StepOptions = {"name": f"{prefix}tool:{call.id}"}
        if tool.step_retries:
            options["retries_allowed"] = True
            options["max_attempts"] = tool.step_retries + 1
            options["interval_seconds"] = STEP_RETRY_INTERVAL_SECONDS
        self.call_started(index)
        # The step's position is taken synchronously when it starts: release the next call now.
        self._release(index)
        try:
            text = await _step(options, tool_call, watch)
        except dbos_error.DBOSMaxStepRetriesExceeded as exc:
            failures = [e for e in exc.errors if isinstance(e, ToolStepFailed)]
            if not failures:
                raise
            text = failures[-1].result
        else:
            if live is not None:  # ran here: the result it recorded, without reading it back
                return live
        result = load_message(text)
        assert isinstance(result, ToolResultMessage)
        return result


class DurableRun(Run):
    """A `Run` whose model requests and tool calls are DBOS steps (see the module docstring).

    Only meaningful inside the workflow (`run`, `submit`); outside one, DBOS runs the steps as
    plain functions. A top-level run's signal is the one a durable abort sets (`_abort`).

    Attributes:
        abort_watch: the abort watch of the workflow the run was made in (None outside a
            watched workflow); its steps let a pending abort reach the run (`_abort`).
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.abort_watch = _abort.current()
        model = self.settings.model
        # Checked once a run (a runtime protocol check walks the protocol's members each time).
        self._positioned = model if isinstance(model, PositionedModel) else None

    async def drive(self, prompt: UserMessage | None, first: str = Trigger.START) -> RunResult:
        """Drive the run (`Run.drive`); a top-level run's signal is the one a durable abort
        sets (a sub-agent's, whose step prefix is set by now, follows its parent's)."""
        if not self.settings.step_prefix:
            watch = self.abort_watch
            if watch is not None:
                watch.attach(self.signal)
        return await super().drive(prompt, first)

    async def send(
        self, request: ModelRequest
    ) -> AssistantMessage | RequestAborted | RequestFailed:
        """Send the request as a ``model_request`` step: on replay, the recorded outcome."""
        send = super().send
        positioned = self._positioned
        watch = self.abort_watch
        live: AssistantMessage | RequestAborted | RequestFailed | None = None

        async def model_request() -> Any:
            nonlocal live
            if watch is not None:
                await watch.go_live()
            try:
                outcome = await send(request)
            except Exception as exc:  # a bug in a model: the run fails with it, recorded
                outcome = RequestFailed(f"The model request failed: {type(exc).__name__}: {exc}")
            data = encode_outcome(outcome)
            if positioned is not None:
                data[_POSITION_KEY] = str(positioned.calls)
            live = outcome
            return _abort.wrap(data, watch)

        options: StepOptions = {"name": f"{self.settings.step_prefix}model_request"}
        data: dict[str, str] = await _step(options, model_request, watch)
        if live is not None:  # asked here: the outcome it recorded, without reading it back
            return live
        if positioned is not None and _POSITION_KEY in data:
            # Replayed from the database: the model was not asked, so its position is where
            # the recorded step left it (an error and its retries may have played several).
            positioned.seek(int(data[_POSITION_KEY]))
        return decode_outcome(data)

    batch_class = DurableBatch
