"""What the loop's states and transitions do: the effects and actions the definition names.

An effect is an async function of the `Run` that returns the next trigger (`request_model`,
`run_tools`; `settle` for terminal states, which returns None). An action is a synchronous
function of the `Run` called when its transition fires (answering a refusal's calls, counting a
continuation, delivering queued input, saying why the run stopped). `statemachine_agent._machine`
binds them to states and transitions; the driver only calls what the definition names.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._execution import resolve
from ._hooks import TurnInfo
from ._messages import TRUNCATING_STOP_REASONS, StopReason, UserMessage, text_result
from ._protocol import REFUSED, answer_dangling, ended_text
from ._responses import refusal_text
from ._states import Trigger

if TYPE_CHECKING:
    from ._run import Run

CONTINUE_PROMPT = (
    "Your response was cut off by the output token limit. Continue exactly where you stopped."
)


# -- effects -----------------------------------------------------------------------------------


async def request_model(run: Run) -> str:
    """``awaiting_model``: send the projected history and stream the response.

    Returns ``model_replied`` with the response in ``run.data.response``; ``abort`` when the run
    was aborted before or during the request (a response that completed as the abort landed is
    kept; with tool calls, its batch answers each "not run"); ``fail`` when the provider failed
    for good or the request could not be built.
    """
    if run.signal.aborted:  # aborted between two steps: send nothing more
        return Trigger.ABORT
    run.begin_turn()
    response = await run.request()
    if isinstance(response, str):
        return response
    data = run.data
    run.usage = run.usage + response.usage
    run.turn_message = response
    run.append(response)
    if run.signal.aborted and not response.tool_calls:
        run.complete_turn()
        return Trigger.ABORT
    data.response = response
    data.queued_input = run.has_queued_input()
    return Trigger.MODEL_REPLIED


async def run_tools(run: Run) -> str:
    """``executing_tools``: run the response's tool batch; every call gets one result, appended
    in declaration order. Then ask ``should_continue``.

    Returns ``tools_finished`` (the guards read ``turns``, ``keep_going``, ``terminate`` and
    ``hook_error``), or ``abort`` when the run was aborted meanwhile.
    """
    data, agent = run.data, run.agent
    response = data.response
    assert response is not None
    batch = run.batch(response.tool_calls)
    try:
        await batch.run()
    finally:
        # Every call gets its result, even when the task is being cancelled.
        results = batch.results()
        for result in results:
            run.append(result, announce=False)  # announced when its call finished
        data.results = run.turn_results = tuple(results)
        run.complete_turn()
    if run.signal.aborted:
        return Trigger.ABORT
    data.hook_error = None
    if agent.should_continue is not None:
        info = TurnInfo(data.turns, response, tuple(results), run.usage, run.messages)
        try:
            data.keep_going = bool(await resolve(agent.should_continue(info)))
        except Exception as exc:
            data.hook_error = f"The should_continue hook failed: {type(exc).__name__}: {exc}"
    run.terminate_reason = batch.terminate_reason
    data.terminate = batch.terminate_reason is not None
    data.max_turns = agent.max_turns
    return Trigger.TOOLS_FINISHED


async def settle(run: Run) -> None:
    """A terminal state: answer every call of the last response that has no result, naming the
    state and the transition that ended the run, then end the run's open turn."""
    fired = run.fired
    assert fired is not None
    for result in answer_dangling(run.messages, ended_text(fired.dest, fired.label)):
        run.append(result)
    run.close_turn()


# -- actions -----------------------------------------------------------------------------------


def answer_refused(run: Run) -> None:
    """A refusal: its calls are never run (each answered as refused); the error says why."""
    response = run.data.response
    assert response is not None
    refused = tuple(text_result(c, REFUSED, is_error=True) for c in response.tool_calls)
    for result in refused:
        run.append(result)
    run.turn_results = refused
    run.error = refusal_text(response)


def continue_paused(run: Run) -> None:
    """``pause_turn``: the paused content goes back as it is (one continuation used)."""
    run.data.continuations += 1


def continue_truncated(run: Run) -> None:
    """A truncated answer under policy ``continue``: ask the model to go on."""
    run.data.continuations += 1
    run.append(UserMessage(CONTINUE_PROMPT))


def deliver_queued(run: Run) -> None:
    """The model would stop but input is queued: deliver steering, else one follow-up."""
    run.deliver_steering() or run.deliver_follow_up()


def deliver_steering(run: Run) -> None:
    """After a tool batch: queued steering goes in before the next request."""
    run.deliver_steering()


def note_final_answer(run: Run) -> None:
    """The run ends ``done``; a truncated or inconsistent last response is reported."""
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


def note_turn_limit(run: Run) -> None:
    """The turn cap or ``should_continue`` stopped the run: say so and how to continue."""
    run.complete_turn()
    data = run.data
    if not data.keep_going:
        why = "the should_continue hook returned False"
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


def note_terminated(run: Run) -> None:
    """A terminating denial ended the run."""
    run.error = _with_hook_error(
        run, f"A tool call was denied and ended the run: {run.terminate_reason}"
    )


def note_hook_failed(run: Run) -> None:
    """``should_continue`` raised: the run fails with its error."""
    run.error = run.data.hook_error


def note_abort(run: Run) -> None:
    """An abort: the error is its reason."""
    run.error = run.signal.reason or run.error or "aborted"


def _with_hook_error(run: Run, text: str) -> str:
    hook_error = run.data.hook_error
    return text if hook_error is None else f"{text}. {hook_error}"
