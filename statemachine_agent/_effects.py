"""What the loop's states and transitions do: the effects and actions the definition names.

An effect is an async function of the `Run` that returns the next trigger (`request_model`,
`run_tools`; `settle` for terminal states, which returns None). An action is a synchronous
function of the `Run` called when its transition fires (answering a refusal's calls, counting a
continuation, delivering queued input, saying why the run stopped). `_machine`
binds them to states and transitions; the driver only calls what the definition names.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from ._cancel import cancelling, is_run_cancellation
from ._compacting import compaction_due
from ._events import ApprovalRequested, CallDecided
from ._execution import PendingBatch, resolve
from ._guards import batch_limit_hit
from ._hooks import INTERRUPTS, Approve, Deny, PendingCall, TurnInfo, record_interrupt
from ._limits import calls_to_run
from ._messages import (
    CONTINUE_PROMPT,
    TRUNCATING_STOP_REASONS,
    AssistantMessage,
    StopReason,
    ToolCallBlock,
    ToolResultMessage,
    UserMessage,
    is_known_stop_reason,
    text_result,
)
from ._output import OUTPUT_MISSING_PROMPT, OUTPUT_TOOL_NAME, last_output_error
from ._protocol import (
    AFTER_TERMINATION,
    NOT_RUN_PENDING,
    REFUSED,
    STOPPED_NOT_RUN,
    TRUNCATED,
    answer_dangling,
    ended_text,
    unknown_stop_reason_text,
)
from ._responses import refusal_text
from ._states import State, Trigger

if TYPE_CHECKING:
    from ._run_protocol import RunLike

logger = logging.getLogger("statemachine_agent")

# A trigger returned every turn, read from a module global: an enum member read from its class
# goes through the slow attribute hook of ``EnumType`` on Python 3.11 (benchmarks/README.md).
_MODEL_REPLIED = Trigger.MODEL_REPLIED


# -- effects -----------------------------------------------------------------------------------


async def request_model(run: RunLike) -> str:
    """``awaiting_model``: send the projected history and stream the response.

    Returns ``model_replied`` with the response in ``run.data.response``; ``abort`` when the run
    was aborted before or during the request (a response that completed as the abort landed is
    kept; with tool calls, its batch answers each "not run"); ``fail`` when the provider failed
    for good or the request could not be built.
    """
    if run.signal.aborted:  # aborted between two steps: send nothing more
        return Trigger.ABORT
    conversation = run.conversation
    messages = conversation.messages
    if messages and messages[-1].role == "assistant":  # (only a response leaves calls open)
        run.answer_open_calls()  # a user's branch came here from a response with calls
    if run.data.compaction and compaction_due(run):
        return Trigger.COMPACT  # to compacting: the history would reach the threshold
    run.begin_turn()
    response = await run.request(answered=True)  # (nothing entered the history since)
    if not isinstance(response, AssistantMessage):  # (see `_messages` on isinstance)
        return response
    data = run.data
    data.compacted = data.overflow_retried = False
    usage = response.usage
    conversation.meter.counted(conversation.messages, usage)
    run.add_usage(usage)
    data.usage = data.usage + usage  # the guards read it at once
    run.turn_message = response
    run.append(response)
    if run.signal.aborted and not response.tool_calls:
        run.complete_turn()
        return Trigger.ABORT
    if not is_known_stop_reason(response.stop_reason):
        logger.warning(
            "the model stopped with an unknown stop reason %r; %s",
            response.stop_reason,
            "its tool calls are not run"
            if response.tool_calls
            else "the run treats it as an answer",
        )
    data.response = response
    data.queued_input = bool(conversation.steering or conversation.follow_ups)  # (inline)
    return _MODEL_REPLIED


async def run_tools(run: RunLike) -> str:
    """``executing_tools``: run the response's tool batch; every call gets one result, appended
    in declaration order. Then ask ``should_continue``. Calls a hook defers (or of a tool that
    requires approval) are held: the batch's results wait with them (``pending``). Coming from
    ``awaiting_approval``, the decided calls run (approved) or are answered (denied).

    Returns ``tools_finished`` (the guards read ``pending``, ``turns``, ``keep_going``,
    ``terminate`` and ``hook_error``), or ``abort`` when the run was aborted meanwhile.
    """
    data, held = run.data, run.conversation.held
    if held is not None:
        return await _run_decided(run, held)
    response = data.response
    assert response is not None
    calls = response.tool_calls
    data.tool_calls += calls_to_run(calls)  # a truncated call never runs: not counted
    batch = run.batch(calls)
    try:
        await batch.run()
    finally:
        # Every call gets its result, even when the task is being cancelled.
        deferred = batch.deferred()
        if deferred and cancelling():  # a cancelled task answers every call
            deferred = []
        results = batch.results(deferred)
        if deferred:
            _hold(run, response, {r.tool_call_id: r for r in results}, deferred)
        else:
            _append_results(run, results)
    if run.signal.aborted:
        return Trigger.ABORT
    if deferred:
        return Trigger.TOOLS_FINISHED  # to awaiting_approval: nothing more until decisions
    if run.settings.should_continue is not None:
        await _ask_should_continue(run, response, results)
    else:
        run.data.hook_error = None
    return _after_batch(run, results, batch.terminate_reason, batch.final_result)


async def _run_decided(run: RunLike, pending: PendingBatch) -> str:
    """The decided calls of a held batch: approved ones run (without the before hook: a person
    approved them), denied ones are answered; undecided ones stay pending."""
    failed = await run.refresh_tools()  # a resumed agent's tool sources: listed first
    if failed is not None:
        return failed
    data = run.data
    response = data.response = pending.response
    decisions, pending.decisions = pending.decisions, {}
    held = dict(pending.results)
    approved: list[ToolCallBlock] = []
    terminate: str | None = None
    blocks = {c.id: c for c in response.tool_calls}
    for call in pending.calls:
        decision = decisions.get(call.id)
        block = blocks[call.id]
        if isinstance(decision, Approve):
            arguments = call.arguments if decision.arguments is None else decision.arguments
            approved.append(block.model_copy(update={"input": arguments, "raw_arguments": None}))
            run.emit(CallDecided(call.id, "approve", arguments=decision.arguments))
        elif isinstance(decision, Deny):
            held[call.id] = text_result(block, f"Denied: {decision.reason}", is_error=True)
            run.emit(CallDecided(call.id, "deny", reason=decision.reason))
            if decision.terminate:
                terminate = terminate or decision.reason
    batch = run.batch(approved, approved=True)
    try:
        await batch.run()
    finally:
        held.update((r.tool_call_id, r) for r in batch.results())
        waiting = [c for c in pending.calls if c.id not in held]
        if waiting and terminate is None and not run.signal.aborted and not cancelling():
            _hold(run, response, held, waiting)
        else:
            _close_batch(
                run, response, held, AFTER_TERMINATION if terminate is not None else NOT_RUN_PENDING
            )
    if run.signal.aborted:
        return Trigger.ABORT
    if run.conversation.held is not None:
        return Trigger.TOOLS_FINISHED
    results = [held[c.id] for c in response.tool_calls]
    if run.settings.should_continue is not None:
        await _ask_should_continue(run, response, results)
    else:
        data.hook_error = None
    return _after_batch(run, results, terminate, batch.final_result)


def _hold(
    run: RunLike,
    response: AssistantMessage,
    results: dict[str, ToolResultMessage],
    waiting: list[PendingCall],
) -> None:
    """Keep the batch open: its results wait for the decisions (nothing is sent meanwhile)."""
    run.conversation.held = PendingBatch(response, results, waiting)
    run.data.pending = True
    run.turn_results = tuple(results.values())
    run.complete_turn()


def _append_results(run: RunLike, results: list[ToolResultMessage]) -> None:
    for result in results:
        run.append(result)  # announced now: after it is in the history, in declaration order
    run.data.pending = False
    run.data.results = run.turn_results = tuple(results)
    run.complete_turn()


async def _ask_should_continue(
    run: RunLike, response: AssistantMessage, results: list[ToolResultMessage]
) -> None:
    """The ``should_continue`` hook after a batch: its answer in ``data.keep_going``, or its
    failure in ``data.hook_error`` (None when it answered)."""
    data, should_continue = run.data, run.settings.should_continue
    assert should_continue is not None
    data.hook_error = None
    info = TurnInfo(data.turns, response, tuple(results), run.usage, run.messages, run.signal)
    try:
        data.keep_going = bool(await resolve(should_continue(info)))
    except (Exception, asyncio.CancelledError) as exc:
        if is_run_cancellation(exc):
            raise  # the run's task is being cancelled; a hook's own one is its failure
        data.hook_error = f"The should_continue hook failed: {type(exc).__name__}: {exc}"
    except INTERRUPTS as exc:
        record_interrupt(run.signal, exc, "the should_continue hook")
        raise  # the run ends aborted (`Run.drive`), then it propagates


def _after_batch(
    run: RunLike,
    results: list[ToolResultMessage],
    terminate_reason: str | None,
    final_result: ToolResultMessage | None = None,
) -> str:
    """What the guards read after a batch (after `_ask_should_continue`, if there is a hook):
    invalid final results, the terminating denial and the final result; returns
    ``tools_finished``. Synchronous: no coroutine a turn when no hook is awaited."""
    data = run.data
    if data.output_expected:  # invalid final results, sent back as error results
        data.output_failures += sum(r.is_error and r.tool_name == OUTPUT_TOOL_NAME for r in results)
    run.terminate_reason = terminate_reason
    data.terminate = terminate_reason is not None
    data.final_result = final_result
    return Trigger.TOOLS_FINISHED


async def await_decisions(run: RunLike) -> None:
    """``awaiting_approval``: the run stops here (``run()`` returns) until decisions come."""
    pending = run.conversation.held
    assert pending is not None
    run.emit(ApprovalRequested(tuple(pending.calls)))
    run.close_turn()


async def settle(run: RunLike) -> None:
    """A terminal state: answer every call of the last response that has no result, naming the
    state and the transition that ended the run, then end the run's open turn. A run ending
    ``done`` past a token limit (its final answer took it there: token limits are checked after
    each response, and an answer is never cut off) says so in its error."""
    fired = run.fired
    assert fired is not None
    if fired.dest == State.DONE and (hit := run.limit_exceeded()) is not None:
        text = hit.exceeded_text()
        run.error = text if run.error is None else f"{run.error} {text}"
    for result in answer_dangling(run.messages, ended_text(fired.dest, fired.label)):
        run.append(result)
    run.close_turn()


# -- actions -----------------------------------------------------------------------------------


def answer_pending(run: RunLike) -> None:
    """An abort while calls wait for decisions: each is answered "not run", the held results
    go in with them, in declaration order."""
    pending = run.conversation.held
    run.error = run.signal.reason or run.error or "aborted while awaiting approval"
    if pending is None:
        return
    _close_batch(run, pending.response, dict(pending.results), NOT_RUN_PENDING)


def _close_batch(
    run: RunLike, response: AssistantMessage, held: dict[str, ToolResultMessage], text: str
) -> None:
    """End a held batch: every call of ``response`` without a result in ``held`` is answered
    with an error saying ``text``, and the batch's results go in, in declaration order."""
    run.conversation.held = None
    for call in response.tool_calls:
        if call.id not in held:
            held[call.id] = text_result(call, text, is_error=True)
    _append_results(run, [held[c.id] for c in response.tool_calls])


def answer_refused(run: RunLike) -> None:
    """A refusal: its calls are never run (each answered as refused); the error says why."""
    run.answer_calls(lambda _call: REFUSED)
    assert run.data.response is not None
    run.error = refusal_text(run.data.response)


def answer_unknown_stop_reason(run: RunLike) -> None:
    """Tool calls under a stop reason this library does not know: never run (each answered as
    not run, naming the stop reason); the run ends ``done`` with the stop reason kept."""
    response = run.data.response
    assert response is not None
    text = unknown_stop_reason_text(str(response.stop_reason))
    answered = run.answer_calls(lambda _call: text)
    run.error = (
        f"The model stopped with the unknown stop reason {response.stop_reason!r}; its "
        f"{len(answered)} tool call(s) were not run."
    )


def continue_paused(run: RunLike) -> None:
    """``pause_turn``: the paused content goes back as it is (one continuation used)."""
    run.data.continuations += 1


def continue_truncated(run: RunLike) -> None:
    """A truncated answer under policy ``continue``: ask the model to go on."""
    run.data.continuations += 1
    run.append(UserMessage(CONTINUE_PROMPT))


def note_continuation_limit(run: RunLike) -> None:
    """``pause_turn`` with the continuation cap reached: say so and how to go on."""
    run.complete_turn()
    data = run.data
    run.error = (
        f"Stopped at a pause_turn: the model was still working after {data.continuations} "
        f"continuation(s), the max_continuations={data.max_continuations} limit. To continue, "
        "call run() again without a prompt (the paused response is sent back as a "
        "continuation), or raise the limit: agent.max_continuations = "
        f"{data.max_continuations + 3}."
    )


def note_terminating_result(run: RunLike) -> None:
    """A result marked ``terminate=True`` ended the run: its text is the final answer."""
    final = run.data.final_result
    assert final is not None
    run.final_text = final.text


def deliver_queued(run: RunLike) -> None:
    """The model would stop but input is queued: deliver steering, else follow-ups (each by its
    delivery mode), after answering the calls of a response cut by ``max_tokens`` under policy
    ``stop``."""
    _answer_stopped_calls(run)
    run.deliver_steering() or run.deliver_follow_up()


def deliver_steering(run: RunLike) -> None:
    """After a tool batch: queued steering goes in before the next request (nothing to do, and
    no call, when none is queued)."""
    if run.conversation.steering:
        run.deliver_steering()


def note_final_answer(run: RunLike) -> None:
    """The run ends ``done``; a truncated or inconsistent last response is reported."""
    _answer_stopped_calls(run)
    response = run.data.response
    if response is None:
        return
    if response.stop_reason in TRUNCATING_STOP_REASONS:
        run.error = (
            f"The response was truncated (stop reason {response.stop_reason}) and "
            "was not continued (max_tokens_policy or max_continuations)."
        )
    elif response.stop_reason == StopReason.TOOL_USE:
        run.error = "The model stopped for tool use but sent no tool call."


def note_turn_limit(run: RunLike) -> None:
    """The turn cap or ``should_continue`` stopped the run: say so and how to continue."""
    _answer_stopped_calls(run)
    run.complete_turn()
    data = run.data
    if not data.keep_going:
        why = "the should_continue hook returned False"
    elif data.turns > data.max_turns:  # the cap was lowered during the run
        why = f"the max_turns limit was lowered to {data.max_turns}, below the run's turns"
    else:
        why = f"the max_turns limit ({data.max_turns}) was reached"
    response = data.response
    if response is not None and response.tool_calls:
        names = ", ".join(call.name for call in response.tool_calls)
        last = f"a tool batch ({names}) whose results are recorded"
    else:
        last = "a response after which the run would have gone on (queued input or a continuation)"
    run.error = _with_hook_error(
        run,
        f"Stopped after {data.turns} turn(s): {why}. The last action was {last}. To continue, "
        "call run() again without a prompt and a higher limit, e.g. await "
        f"agent.run(max_turns={data.turns + 10}).",
    )


def note_turn_limit_at_start(run: RunLike) -> None:
    """A run continued without a prompt already made ``max_turns`` turns (it keeps counting):
    it stops before any request, saying so and how to go on."""
    data = run.data
    made = (
        f"has made {data.turns} turn(s) and its max_turns limit is {data.max_turns}"
        if data.turns == data.max_turns
        else f"has already made {data.turns} turn(s) (under a higher limit given to an earlier "
        f"call), more than this call's max_turns limit of {data.max_turns}"
    )
    run.error = (
        f"Stopped before any new turn: this run {made} (a run continued without a prompt keeps "
        "counting its turns). To continue, call run() again without a prompt and a higher "
        f"limit, e.g. await agent.run(max_turns={data.turns + 10}), or start a new run with a "
        "prompt."
    )


def note_usage_limit(run: RunLike) -> None:
    """A usage limit stopped the run: the calls of a response it keeps from running are answered
    with the limit's text; the error names the limit, its value and the amount used, and how to
    go on."""
    data = run.data
    limits = data.limits
    assert limits is not None and run.fired is not None
    _answer_stopped_calls(run)
    response = data.response
    hit = None
    if (
        run.fired.trigger == Trigger.MODEL_REPLIED
        and response is not None
        and response.tool_calls
        and run.messages
        and run.messages[-1] is response  # its calls are still unanswered
    ):
        hit = batch_limit_hit(data)
        if hit is not None:
            text = hit.call_text()
            run.answer_calls(lambda _call: text)
    hit = hit or limits.request_hit(data.requests, data.usage)
    assert hit is not None  # the guard saw it
    data.limit_hit = hit
    run.complete_turn()
    run.error = (
        f"Stopped after {data.turns} turn(s): {hit.describe()} ({data.requests} request(s), "
        f"{data.tool_calls} tool call(s), {data.usage.total_tokens} token(s) so far). To "
        "continue, raise the limit (agent.limits = UsageLimits(...)) and call run() again "
        "without a prompt."
    )


def final_turn_at_turn_limit(run: RunLike) -> None:
    """The turn cap is reached and ``final_turn`` is on: say why the run stops, then make one
    last request with tools disabled."""
    note_turn_limit(run)
    run.data.winding_down = True


def final_turn_at_usage_limit(run: RunLike) -> None:
    """A usage limit is reached and ``final_turn`` is on: answer the calls it keeps from running,
    say why the run stops, then make one last request with tools disabled."""
    note_usage_limit(run)
    run.data.winding_down = True


def note_final_turn(run: RunLike) -> None:
    """The final turn answered: the run ends at its limit (the error set when the limit was
    reached stays); its calls, if the model made any, are answered by the terminal state."""
    run.complete_turn()


def ask_for_output(run: RunLike) -> None:
    """A text answer while a typed result is expected: ask for the final result tool."""
    run.data.output_failures += 1
    run.complete_turn()
    run.append(UserMessage(OUTPUT_MISSING_PROMPT))


def note_output_invalid(run: RunLike) -> None:
    """Too many invalid final results (or text answers): the run fails, saying so."""
    data = run.data
    if data.response is not None and not data.response.tool_calls:
        data.output_failures += 1  # this text answer
    run.complete_turn()
    run.error = (
        f"The model gave no valid final result after {data.output_failures} invalid attempt(s) "
        f"(output_retries={data.output_retries}); {last_output_error(run.messages)}. Raise "
        "output_retries, or check that the output type's schema is one the model can fill."
    )


def note_terminated(run: RunLike) -> None:
    """A terminating denial ended the run."""
    run.error = _with_hook_error(
        run, f"A tool call was denied and ended the run: {run.terminate_reason}"
    )


def note_hook_failed(run: RunLike) -> None:
    """``should_continue`` raised: the run fails with its error."""
    run.error = run.data.hook_error


def note_abort(run: RunLike) -> None:
    """An abort: the error is its reason."""
    run.error = run.signal.reason or run.error or "aborted"


def _answer_stopped_calls(run: RunLike) -> None:
    """A response cut by a limit under ``max_tokens_policy="stop"`` is not acted on: its calls
    are answered as not run (a cut call as truncated), before any queued input."""
    response = run.data.response
    if (
        response is None
        or not response.tool_calls
        or response.stop_reason not in TRUNCATING_STOP_REASONS
        or run.data.max_tokens_policy != "stop"  # under "continue" the calls are acted on
        or not run.messages
        or run.messages[-1] is not response  # its batch ran (or was answered) already
    ):
        return
    run.answer_calls(lambda call: TRUNCATED if call.truncated else STOPPED_NOT_RUN)


def _with_hook_error(run: RunLike, text: str) -> str:
    hook_error = run.data.hook_error
    return text if hook_error is None else f"{text}. {hook_error}"
