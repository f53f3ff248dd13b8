"""`Agent`: the driver loop. It fires the machine's triggers and does all I/O between them.

One pass of the loop per state: in ``awaiting_model`` it sends the projected history and streams the
response, in ``executing_tools`` it runs the batch; terminal states end the run. Abort, cancellation,
limits and queued input are handled here so that every history it leaves satisfies DESIGN section 2.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import threading
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from typing import Any, Self

from ._context import ContextProjector, missing_results, project
from ._errors import (
    AgentBusyError,
    InvalidHistoryError,
    ModelError,
    ModelRetryableError,
    ToolDefinitionError,
    UsageError,
)
from ._events import (
    Event,
    MessageEnd,
    ModelRetry,
    RunEnd,
    RunStart,
    StateChanged,
    TurnEnd,
    TurnStart,
)
from ._execution import TRUNCATED, BatchRun, ToolExecution, raise_if_cancelling, resolve
from ._hooks import AfterToolCall, BeforeToolCall, ShouldContinue, TransformContext, TurnInfo
from ._machine import TERMINAL_STATES, Fired, LoopData, LoopMachine, MaxTokensPolicy, State
from ._messages import (
    CONTINUE_PROMPT,
    TRUNCATING_STOP_REASONS,
    AssistantMessage,
    Message,
    StopReason,
    ToolCallBlock,
    ToolResultMessage,
    Usage,
    UserMessage,
    text_result,
)
from ._protocol import find_violations
from ._responses import Partial, call_ids, consume, refusal_text
from ._result import RunResult
from ._tools import AbortSignal, Tool, ToolFunction, tool_from_function
from .models._base import (
    Model,
    ModelRequest,
    ToolDefinition,
)
from .session import SessionLog, attach_session

logger = logging.getLogger("statemachine_agent")

REFUSED = "Not executed: the model's response was a refusal."
STOPPED_NOT_RUN = (
    "Not run: the response was cut off by the output token limit (max_tokens) and "
    'max_tokens_policy is "stop", so the run ended without running its tool calls.'
)


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
        max_continuations: cap on ``pause_turn`` and ``max_tokens`` continuations in a run.
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

    Raises:
        ToolDefinitionError: two tools share a name.
        UsageError: the model refuses a tool name (e.g. `AnthropicModel.check_tools`: the name of
            one of its server tools).
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
    ) -> None:
        if tool_execution not in ("parallel", "sequential"):
            raise UsageError("tool_execution must be 'parallel' or 'sequential'")
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
        self.machine = LoopMachine()
        self._data = LoopData(
            max_continuations=max_continuations, max_tokens_policy=max_tokens_policy
        )
        self._messages: list[Message] = list(messages)
        self._projector = ContextProjector()
        self._steering: deque[UserMessage] = deque()
        self._follow_ups: deque[UserMessage] = deque()
        self._subscribers: list[Callable[[Event], Any]] = []
        self._signal = AbortSignal()
        self._running = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread = 0
        self._open_turn: int | None = None
        self._call_ids = call_ids(self._messages)
        self._run_start = 0
        self._usage = Usage()
        self._error: str | None = None
        self._tool_definitions = [
            ToolDefinition(t.name, t.description, t.input_schema) for t in self.tools.values()
        ]
        check_tools = getattr(model, "check_tools", None)
        if check_tools is not None:  # the provider's rules on tool names, before any request
            check_tools(self._tool_definitions)
        self.session: SessionLog | None = None
        if session is not None:
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
        log = SessionLog.open(path, fsync=fsync, strict=strict)
        try:
            return cls(model, tools=tools, session=log, **kwargs)
        except BaseException:
            log.close()  # release the log's lock for the caller's next attempt
            raise

    # -- public state -------------------------------------------------------------------------

    @property
    def state(self) -> State:
        """The machine's current state."""
        return self.machine.state

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
        request (or right after the current response when it has no tool calls)."""
        self._steering.append(_as_user(message))

    def follow_up(self, message: str | UserMessage) -> None:
        """Queue input delivered when the model would otherwise stop (one per stop)."""
        self._follow_ups.append(_as_user(message))

    def abort(self, reason: str = "aborted by the caller") -> bool:
        """Stop the current run: it ends in ``aborted`` with every issued call answered.

        Safe to call from any thread and at any moment. Returns False when no run is in progress.
        """
        if not self._running:
            return False
        loop = self._loop
        if loop is not None and threading.get_ident() != self._loop_thread:
            loop.call_soon_threadsafe(self._signal.set, reason)
        else:
            self._signal.set(reason)
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
        self, prompt: str | UserMessage | None = None, *, max_turns: int | None = None
    ) -> RunResult:
        """Run until a terminal state and return how it ended.

        Args:
            prompt: the user input; None continues from the current history (after ``aborted``
                or ``max_turns``, or with queued input) and keeps counting turns.
            max_turns: change the turn cap (it stays changed).

        Returns:
            The `RunResult`; its ``state`` is the agent's state.

        Raises:
            AgentBusyError: a run is already in progress.
            UsageError: nothing to continue from (no prompt, no queued input, and the history ends
                with the model's complete answer).
            asyncio.CancelledError: the task was cancelled; the history is recorded as aborted
                first.
        """
        if self._running:
            raise AgentBusyError("this agent is already running; await that run or abort it")
        user = None if prompt is None else _as_user(prompt)
        if max_turns is not None:
            self.max_turns = max_turns
        if user is None and not (self._steering or self._follow_ups):
            self._check_can_continue()
        # The loop and signal are in place before the run counts as running, so an abort() from
        # another thread never reaches the previous run's.
        self._loop = asyncio.get_running_loop()
        self._loop_thread = threading.get_ident()
        self._open_turn = None
        self._signal = AbortSignal()
        self._running = True
        self._run_start = len(self._messages)
        self._usage = Usage()
        self._error = None
        data = self._data
        data.continuations = 0
        data.keep_going, data.terminate, data.response = True, False, None
        data.max_turns = self.max_turns
        if prompt is not None:
            data.turns = 0
        try:
            self._emit(RunStart(user))
            for repair in missing_results(self._messages):  # a given history ended mid-batch
                self._append(repair)
            if user is not None:
                self._append(user)
            else:
                self._inject(self._steering) or self._inject(self._follow_ups, one=True)
            self._fire("start")
            await self._drive()
        except asyncio.CancelledError:
            self._end_after_exception("the task running the agent was cancelled", "abort")
            raise
        except BaseException as exc:
            # A bug (in a tool, a hook or the model) escaped: the run still ends in a terminal
            # state with every call answered, then the exception propagates.
            self._end_after_exception(f"{type(exc).__name__}: {exc}", "fail")
            raise
        finally:
            self._running = False
        result = self._result()
        self._emit(RunEnd(result))
        return result

    def _end_after_exception(self, reason: str, trigger: str) -> None:
        if self.state not in TERMINAL_STATES:
            self._error = self._signal.reason or reason
            if trigger == "fail" and self.state is not State.AWAITING_MODEL:
                trigger = "abort"  # fail only leaves awaiting_model
            self._fire(trigger)
        self._end_turn(None)
        self._emit(RunEnd(self._result()))

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

    def _result(self) -> RunResult:
        new = self._messages[self._run_start :]
        last = next((m for m in reversed(new) if isinstance(m, AssistantMessage)), None)
        refusal = None
        if last is not None and last.stop_reason == StopReason.REFUSAL:
            refusal = dict(last.stop_details or {})
        return RunResult(
            state=self.state,
            messages=list(self._messages),
            new_messages=list(new),
            turns=self._data.turns,
            usage=self._usage,
            stop_reason=None if last is None else last.stop_reason,
            error=self._error,
            refusal=refusal,
        )

    def _append(self, message: Message) -> None:
        self._messages.append(message)
        if isinstance(message, AssistantMessage):
            self._call_ids.update(call.id for call in message.tool_calls)
        if self._subscribers:  # no event objects on the hot path when nobody listens
            self._emit(MessageEnd(message))

    def _inject(self, queue: deque[UserMessage], *, one: bool = False) -> bool:
        if not queue:
            return False
        while queue:
            self._append(queue.popleft())
            if one:
                break
        return True

    def _fire(self, trigger: str) -> Fired:
        fired = self.machine.fire(trigger, self._data)
        if self._subscribers:  # no event objects on the hot path when nobody listens
            self._emit(StateChanged(fired.source.value, fired.dest.value, trigger, fired.label))
        return fired

    def _end_turn(
        self, message: AssistantMessage | None, results: Sequence[ToolResultMessage] = ()
    ) -> None:
        if self._open_turn is not None:
            turn, self._open_turn = self._open_turn, None
            if self._subscribers:
                self._emit(TurnEnd(turn, message, tuple(results)))

    # -- the loop -----------------------------------------------------------------------------

    async def _drive(self) -> None:
        data = self._data
        while True:
            state = self.state
            if state is State.AWAITING_MODEL:
                if self._signal.aborted:  # aborted between two steps: send nothing more
                    self._abort_now()
                    return
                turn = data.turns + 1
                self._open_turn = turn
                if self._subscribers:
                    self._emit(TurnStart(turn))
                response = await self._request()
                if response is None:  # aborted or failed; the state says which
                    self._end_turn(None)
                    return
                data.turns = turn
                self._usage = self._usage + response.usage
                self._append(response)
                if self._signal.aborted and not response.tool_calls:
                    # Aborted as the response completed: keep it, but end the run here (with
                    # calls, the batch answers each "not run" and the run ends aborted too).
                    self._abort_now()
                    self._end_turn(response)
                    return
                data.response = response
                data.queued_input = bool(self._steering or self._follow_ups)
                label = self._fire("model_replied").label
                if label == "tool_calls":
                    continue  # the turn ends after its batch
                refused: list[ToolResultMessage] = []
                if (
                    label in ("final_answer", "queued_input", "turn_limit")
                    and response.tool_calls
                    and response.stop_reason in TRUNCATING_STOP_REASONS
                ):
                    # max_tokens_policy "stop": the calls of a cut response are answered (before
                    # any queued input) and never run.
                    refused = [
                        text_result(c, _stopped(c), is_error=True) for c in response.tool_calls
                    ]
                    for result in refused:
                        self._append(result)
                if label == "refusal":
                    refused = [text_result(c, REFUSED, is_error=True) for c in response.tool_calls]
                    for result in refused:
                        self._append(result)
                    self._error = refusal_text(response)
                elif label in ("pause_turn", "max_tokens"):
                    data.continuations += 1
                    if label == "max_tokens":
                        self._append(UserMessage(CONTINUE_PROMPT))
                elif label == "queued_input":
                    self._inject(self._steering) or self._inject(self._follow_ups, one=True)
                elif label == "turn_limit":
                    self._error = self._limit_text(response)
                elif response.stop_reason in TRUNCATING_STOP_REASONS:
                    self._error = (
                        f"The response was truncated (stop reason {response.stop_reason}) and "
                        "was not continued (max_tokens_policy or max_continuations)."
                    )
                elif response.stop_reason == StopReason.TOOL_USE:
                    self._error = "The model stopped for tool use but sent no tool call."
                self._end_turn(response, refused)
            elif state is State.EXECUTING_TOOLS:
                await self._run_tools()
            else:
                return

    async def _run_tools(self) -> None:
        data = self._data
        response = data.response
        assert response is not None
        batch = BatchRun(
            response.tool_calls,
            self.tools,
            mode=self.tool_execution,
            signal=self._signal,
            abort_grace_seconds=self.abort_grace_seconds,
            emit=self._emit,
            listening=self._listening,
            before=self.before_tool_call,
            after=self.after_tool_call,
            deps=self.deps,
        )
        try:
            await batch.run()
        finally:
            # Every call gets its result, even when the task is being cancelled.
            results = batch.results()
            for result in results:
                self._append(result)
        if self._signal.aborted:
            self._error = self._signal.reason
            self._fire("abort")
            self._end_turn(response, results)
            return
        hook_error = None
        if self.should_continue is not None:
            info = TurnInfo(data.turns, response, tuple(results), self._usage, self._messages)
            try:
                data.keep_going = bool(await resolve(self.should_continue(info)))
            except Exception as exc:
                hook_error = f"The should_continue hook failed: {type(exc).__name__}: {exc}"
        data.terminate = batch.terminate_reason is not None
        data.max_turns = self.max_turns
        dest = self._fire("tools_finished").dest
        self._end_turn(response, results)
        if dest is State.MAX_TURNS:
            self._error = self._limit_text(response)
        elif dest is State.ABORTED:
            self._error = f"A tool call was denied and ended the run: {batch.terminate_reason}"
        if hook_error is not None:
            self._error = hook_error if self._error is None else f"{self._error}. {hook_error}"
            if dest is State.AWAITING_MODEL:
                self._fire("fail")
        elif dest is State.AWAITING_MODEL:
            self._inject(self._steering)

    def _limit_text(self, response: AssistantMessage) -> str:
        if not self._data.keep_going:
            why = "the should_continue hook returned False"
        else:
            why = f"the max_turns limit ({self.max_turns}) was reached"
        if response.tool_calls:
            names = ", ".join(call.name for call in response.tool_calls)
            last = f"a tool batch ({names}) whose results are recorded"
        else:
            last = (
                "a response after which the run would have gone on (queued input or a continuation)"
            )
        return (
            f"Stopped after {self._data.turns} turn(s): {why}. The last action was {last}. To "
            "continue, call run() again without a prompt and a higher limit, e.g. await "
            f"agent.run(max_turns={self._data.turns + 10})."
        )

    # -- model requests -----------------------------------------------------------------------

    async def _build_request(self) -> ModelRequest:
        if self.transform_context is not None:
            messages = await resolve(self.transform_context(list(self._messages)))
            projected = project(messages)
            problems = find_violations(projected, request=True)
            if problems:
                raise InvalidHistoryError(problems)
        else:
            projected = self._projector.project(self._messages)
        return ModelRequest(projected, self.system, self._tool_definitions, self.model_settings)

    async def _request(self) -> AssistantMessage | None:
        """One response, with retries. None when the run was aborted or failed meanwhile."""
        try:
            request = await self._build_request()
        except InvalidHistoryError as exc:
            self._fail(f"The request was not sent: {exc}")
            return None
        except Exception as exc:
            self._fail(f"The transform_context hook failed: {type(exc).__name__}: {exc}")
            return None
        if self._signal.aborted:  # aborted while the request was built: do not send it
            self._abort_now()
            return None
        attempt = 0
        requests_made = 0  # the provider's own retries included
        while True:
            attempt += 1
            partial = Partial()
            try:
                # The stream is read in this task; an abort cancels it at once (an expired scope).
                async with asyncio.timeout(None) as scope:
                    disarm = self._signal.arm(scope)
                    try:
                        stream = self.model.stream(request)
                        message = await consume(
                            stream, partial, self._call_ids, self._emit, self._listening
                        )
                    finally:
                        disarm()
                raise_if_cancelling()  # a model that swallowed the task's cancellation
                return message
            except asyncio.CancelledError:
                self._append(partial.message("the task running the agent was cancelled"))
                raise
            except TimeoutError as exc:
                if not scope.expired():
                    error: BaseException = exc  # the model's own TimeoutError: a failure
                else:
                    self._record_abort(partial)
                    return None
            except Exception as exc:
                error = exc
            requests_made += error.attempts if isinstance(error, ModelError) else 1
            if isinstance(error, ModelRetryableError) and attempt <= self.model_retries:
                delay = self.retry_backoff_seconds * 2 ** (attempt - 1)
                self._emit(ModelRetry(attempt, delay, str(error)))
                if await self._sleep_or_abort(delay):
                    self._record_abort(Partial())
                    return None
                continue
            if isinstance(error, ModelError):
                status = f", HTTP {error.status_code}" if error.status_code else ""
                self._fail(
                    f"Model request failed ({error.kind}{status}) after {requests_made} "
                    "attempt(s): "
                    f"{error.message}"
                )
                return None
            logger.error("model %r raised", self.model, exc_info=error)
            self._fail(f"Model request failed: {type(error).__name__}: {error}")
            return None

    async def _sleep_or_abort(self, seconds: float) -> bool:
        abort = self._signal.future()
        try:
            await asyncio.wait_for(asyncio.shield(abort), seconds)
        except TimeoutError:
            return False
        finally:
            abort.cancel()
        return True

    def _abort_now(self) -> None:
        self._error = self._signal.reason
        self._fire("abort")

    def _record_abort(self, partial: Partial) -> None:
        reason = self._signal.reason or "aborted"
        self._append(partial.message(reason))
        self._error = reason
        self._fire("abort")

    def _fail(self, error: str) -> None:
        self._append(AssistantMessage(content=[], stop_reason=StopReason.ERROR, error=error))
        self._error = error
        self._fire("fail")


def _stopped(call: ToolCallBlock) -> str:
    return TRUNCATED if call.truncated else STOPPED_NOT_RUN


def _as_user(message: str | UserMessage) -> UserMessage:
    if isinstance(message, UserMessage):
        return message
    if not isinstance(message, str) or not message.strip():
        raise UsageError("a prompt must be a non-empty string or a UserMessage")
    return UserMessage(message)
