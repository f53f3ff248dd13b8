"""Automatic compaction and context-window stops: the ``compacting`` state, its guards and actions.

`Compaction` configures it (``Agent(compaction=Compaction(...))``). The machine enters
``compacting`` (see `_machine`):

- ``compact``: ``request_model`` found, before building a request, that the history's context
  (`ContextUsage.tokens`) reached the threshold (`compaction_due`), or the provider answered the
  request with "prompt is too long" (one compaction and one retry per request, `overflowed`);
- ``model_replied [context_window_exceeded, compaction_on]``: a response was cut by the context
  window (`answer_window_cut`).

Its effect (`compact_context`) replaces the older history with one summary message, cut at a turn
boundary (`Compaction.kept_start`: the newest turns by tokens or by count), logs it to the session (a ``history``
line, which resume restores) and fires ``compacted`` (back to ``awaiting_model``). A summarizer that
raises or returns nothing ends the run ``failed`` with its error and the history as it was.

The summarizer runs inside the run's abort scope (`_cancel.abort_scope`): an
abort cancels an async summarizer where it waits, the run ends ``aborted`` with the history as it
was and nothing is logged. A summarizer that takes a second positional parameter receives the
run's `AbortSignal` (as ``transform_context`` does).

The default summarizer (`Compaction(summarize=None)`) never sends a request larger than the
model's context window can take: with a known window, one request holds at most half of it
(`summary_piece_chars`; the other half is room for the answer and the estimate's error). A
longer transcript is summarized in pieces, then the pieces' summaries are summarized together
(again in pieces if they do not fit); a request the provider still refuses as "prompt is too
long" is split in two and sent again. Each of its requests counts toward ``max_requests``
(`RunCounts.requests`) and its tokens toward the token limits, as a turn's request does; a
limit that keeps its next request from being sent stops the compaction (the history as it was)
and the run ends ``max_turns`` saying which limit (``compacted [usage_limit_before_request]``,
also when the summary used the last request the limit allowed).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from typing import TYPE_CHECKING

from ._accounting import ContextUsage, estimate_tokens
from ._cancel import abort_scope, is_run_cancellation, takes_signal
from ._compaction_config import (
    CONTINUE_AFTER_WINDOW,
    DEFAULT_KEEP_RECENT,
    KEEP_RECENT_SHARE,
    MIN_PIECE_CHARS,
    PIECE_INSTRUCTIONS,
    Compaction,
    Summarizer,
    context_window,
    summary_piece_chars,
)
from ._errors import ModelError
from ._events import CompactionEnd, CompactionStart
from ._execution import resolve
from ._guards import compaction_on, context_window_exceeded, turns_left
from ._messages import (
    AssistantMessage,
    Message,
    StopReason,
    ToolResultMessage,
    UserMessage,
)
from ._responses import RequestAborted, RequestFailed
from ._states import Trigger
from .models._base import ModelRequest

if TYPE_CHECKING:
    from ._run_protocol import RunLike

CUT_BY_WINDOW = (
    "Not run: the call was cut off by the model's context window (stop reason "
    "model_context_window_exceeded); its arguments are incomplete."
)
"""The result of a trailing tool call cut by the context window."""

NOT_RUN_WINDOW = (
    "Not run: the response was cut off by the model's context window (stop reason "
    "model_context_window_exceeded) before the model finished it."
)
"""The result of a complete call in a response cut by the context window."""

CONTINUE_AFTER_COMPACTION = (
    "Your response was cut off by the context window; the older conversation has been "
    "summarized to make room. Continue where you stopped."
)
"""The user message after a response cut by the context window (no tool call), then compacted."""

SUMMARY_INSTRUCTIONS = (
    "Summarize the conversation below so that the work can go on from the summary alone: the "
    "user's goal and requests, decisions made, what the tools returned that still matters "
    "(file names, values, errors), what is done and what remains. Be concise and factual; "
    "write the summary only."
)
"""The prompt of the default summarizer (a request to the agent's own model)."""

MERGE_INSTRUCTIONS = (
    "Below are summaries of consecutive parts of one conversation, oldest first. Combine them "
    "into one summary so that the work can go on from it alone: the user's goal and requests, "
    "decisions made, what the tools returned that still matters, what is done and what "
    "remains. Be concise and factual; write the summary only."
)
"""The prompt that combines the pieces' summaries into one."""

SUMMARY_STOP_REASONS = frozenset(
    {StopReason.END_TURN, StopReason.STOP_SEQUENCE, StopReason.MAX_TOKENS}
)
"""The stop reasons of a summarizer response whose text is taken as the summary; any other (a
tool call, a refusal, a pause) fails the compaction with an error that names it."""


def measured(run: RunLike, before: int, after: int | None = None) -> str:
    """The sizes the engine measured for a compaction, for error texts: ``about 31,200 tokens
    before compaction and 5,100 after, against a context window of 15,000 tokens`` (tokens are
    `ContextUsage.tokens`: the provider's last count plus an estimate of what came since)."""
    window = context_window(run.settings.model)
    text = f"about {before:,} tokens before compaction"
    if after is not None:
        text += f" and {after:,} after"
    text += (
        f", against a context window of {window:,} tokens"
        if window
        else " (the model's context window is unknown: give it context_window=...)"
    )
    return text


# -- the check before a request ----------------------------------------------------------------


def compaction_due(run: RunLike) -> bool:
    """Compaction is on, the history has not just been compacted, and its context reached the
    threshold: ``request_model`` fires ``compact`` instead of sending."""
    config, data = run.settings.compaction, run.data
    if config is None or data.compacted:
        return False
    usage = run.context_usage
    if usage.tokens < config.limit(usage.window):
        return False
    data.compaction_reason = "threshold"
    return True


def overflowed(run: RunLike, failure: RequestFailed) -> str:
    """The provider said the prompt is too long. With compaction on and no retry used for this
    request: ``compact`` (then the request is sent again). Otherwise the run fails with an error
    that says how to go on."""
    data = run.data
    if data.compaction and not data.overflow_retried:
        data.overflow_retried = True
        run.overflow = failure.message
        data.compaction_reason = "prompt_too_long"
        return Trigger.COMPACT
    if data.compaction:
        sizes = run.compaction_sizes
        engine = "" if sizes is None else f" (the engine measured {measured(run, *sizes)})"
        if not cuttable(run.messages):  # the newest turn alone is left: it is what is too large
            how = f"even after automatic compaction{engine}, and {nothing_to_cut(run.messages)}"
        else:
            how = (
                f"even after automatic compaction{engine}; lower Compaction(threshold=...) and "
                "keep less recent history (keep_recent=... tokens or keep_recent_turns=...)."
            )
    else:
        how = (
            "automatic compaction is off: turn it on with Agent(compaction=Compaction()) "
            "(statemachine_agent.Compaction), or compact between runs with "
            "statemachine_agent.session.compact(agent, summarize)."
        )
    return run.fail(f"{failure.message}. The history does not fit the model's context window {how}")


def cuttable(messages: Sequence[Message]) -> list[int]:
    """The turn boundaries a compaction could cut ``messages`` at (`find_cut_points` after 0,
    and after a summary that starts the history): empty when the newest turn (with the last
    summary) is all there is."""
    from ._cuts import SUMMARY_PREFIX, find_cut_points

    first = 1 if messages and _is_summary(messages[0], SUMMARY_PREFIX) else 0
    return [i for i in find_cut_points(messages) if i > first]


def _largest_part(messages: Sequence[Message]) -> tuple[str, bool]:
    """The largest message of the newest turn of ``messages``, described with its size
    (``the result of tool dump (call d1): 120,004 characters, about 30,013 tokens``), and
    whether it is a tool result."""
    from ._cuts import find_cut_points

    start = max(find_cut_points(messages), default=0)
    turn = list(messages[start:]) or list(messages)
    if not turn:
        return "the history is empty", False
    largest = max(turn, key=lambda m: estimate_tokens([m]))
    chars = sum(len(block.model_dump_json()) for block in largest.content)
    size = f"{chars:,} characters, about {estimate_tokens([largest]):,} tokens"
    if isinstance(largest, ToolResultMessage):
        name = largest.tool_name or "?"
        return f"the result of tool {name} (call {largest.tool_call_id}): {size}", True
    if isinstance(largest, UserMessage):
        return f"a user message: {size}", False
    return f"the model's response: {size}", False


def nothing_to_cut(messages: Sequence[Message], sizes: str | None = None) -> str:
    """The advice when compaction has nothing left to cut in ``messages`` (the newest turn
    alone does not fit the window): what to shorten, with the size of its largest part (and
    ``sizes``, the engine's measurement from `measured`, when given). Keeping less recent
    history cannot help then."""
    part, from_tool = _largest_part(messages)
    measured_note = "" if sizes is None else f"the engine measured {sizes}; "
    if from_tool:
        what = (
            "shorten what the tools return (have the tool return a page, a filter or a "
            "digest of its output instead of all of it)"
        )
    else:
        what = "shorten the prompt or split the task"
    return (
        "compaction found nothing left to cut: the newest turn alone is larger than the "
        f"window ({measured_note}its largest part is {part}). To go on, {what}, or use a "
        "model with a larger context window."
    )


# -- actions -----------------------------------------------------------------------------------


def _answer_cut_calls(run: RunLike) -> int:
    answered = run.answer_calls(lambda call: CUT_BY_WINDOW if call.truncated else NOT_RUN_WINDOW)
    run.complete_turn()
    return len(answered)


def note_context_window(run: RunLike) -> None:
    """A response cut by the context window, compaction off: its text is kept, its calls are
    answered as not run (a trailing cut one as cut by the context window), and the run ends with
    an error that says how to go on."""
    _answer_cut_calls(run)
    usage = run.context_usage
    window = f" of {usage.window:,}" if usage.window else ""
    run.error = (
        "The response was cut off by the model's context window (stop reason "
        f"model_context_window_exceeded; about {usage.tokens:,}{window} tokens in use), so it was "
        "not continued. To go on, make room: turn on automatic compaction with "
        "Agent(compaction=Compaction()), or call statemachine_agent.session.compact(agent, "
        "summarize) between runs, then run() again without a prompt."
    )


def answer_window_cut(run: RunLike) -> None:
    """A response cut by the context window, compaction on: its calls are answered as not run
    (a cut one as cut by the context window), or, with none, the model is asked to continue
    after the compaction that follows."""
    if not _answer_cut_calls(run):
        run.append(UserMessage(CONTINUE_AFTER_COMPACTION))
    run.data.compaction_reason = "context_window"


# -- the effect --------------------------------------------------------------------------------


async def compact_context(run: RunLike) -> str:
    """``compacting``: replace the older history with a summary message (see the module).

    Returns ``compacted`` (also when nothing could be cut: the request goes ahead as it is),
    ``fail`` when the summarizer raised or returned nothing (the history as it was), or
    ``abort`` when the run was aborted meanwhile.
    """
    from ._cuts import (
        SUMMARY_PREFIX,
        compact_history,
        held_response_index,
        keep_held_batch,
    )

    settings, data, conversation = run.settings, run.data, run.conversation
    config = settings.compaction
    assert config is not None  # guarded by compaction_on
    reason, data.compaction_reason = data.compaction_reason or "threshold", None
    data.compacted = True
    if run.signal.aborted:
        return Trigger.ABORT
    messages = list(run.messages)
    before = run.context_usage.tokens
    waiting = [] if conversation.held is None else conversation.held.calls
    held = held_response_index(messages, [call.id for call in waiting])
    start = keep_held_batch(  # never a held batch
        messages, config.kept_start(messages, context_window(settings.model)), held
    )
    if start == 1 and _is_summary(messages[0], SUMMARY_PREFIX):
        start = 0  # only the last summary lies before the kept window: nothing to gain
    if start == 0:
        run.compaction_sizes = (before, before)
        run.emit(CompactionEnd(reason, before, before, 0))
        if reason == "threshold":  # under the window still: the request goes as it is
            return Trigger.COMPACTED
        # The history does not fit and nothing is cut: the same request would be refused
        # again, so it is not sent; the error says what to shorten.
        sizes = measured(run, before, before)
        if reason == "context_window":
            problem = "The response was cut off by the model's context window"
        else:
            problem = f"{run.overflow or 'prompt is too long'}. The request does not fit"
            problem += " the model's context window"
        if cuttable(messages):  # the turns the configuration keeps fill the window
            advice = (
                f"compaction found nothing left to cut (the engine measured {sizes}; the "
                "turns it keeps fill the window): keep less recent history (Compaction("
                "keep_recent=... tokens or keep_recent_turns=...)), or shorten what the tools "
                "return."
            )
        else:
            advice = nothing_to_cut(messages, sizes)
        error = f"{problem} and {advice}"
        if reason == "prompt_too_long":
            return run.fail(error)  # a failed request, recorded as the refusal was
        run.error = error
        return Trigger.FAIL
    run.emit(CompactionStart(reason, before, start))
    old = messages[:start]
    summary: object = None
    # The summarizer runs in the run's abort scope: an abort cancels it where it waits.
    with abort_scope(run.signal) as scope:
        try:
            summary = await _summarize(run, config.summarize, old)
        except (Exception, asyncio.CancelledError) as exc:
            if is_run_cancellation(exc):
                raise  # the abort's cancellation (the scope takes it back) or the task's own
            if isinstance(exc, _Aborted):
                return Trigger.ABORT
            if isinstance(exc, _LimitReached):  # the history as it was; ``compacted`` then
                run.emit(CompactionEnd(reason, before, before, 0))  # stops at the limit
                return Trigger.COMPACTED
            if isinstance(exc, SummaryError):
                sizes = measured(run, before)
                run.error = f"Compaction failed: {exc} (the engine measured {sizes})"
            else:
                run.error = f"Compaction failed: the summarizer raised {type(exc).__name__}: {exc}"
            return Trigger.FAIL
    if scope.aborted or run.signal.aborted:
        return Trigger.ABORT
    if summary is None or not str(summary).strip():
        run.error = (
            "Compaction failed: the summarizer returned no summary; the history was kept as it was"
        )
        return Trigger.FAIL
    compacted = compact_history(messages, str(summary), start=start, held=held is not None)
    conversation.replace(compacted)  # the run's own replacement (the agent's setter refuses it)
    run.start = max(1, run.start - start + 1)
    session = settings.session
    if session is not None:
        session.record_history(compacted, reason="compaction", summary=str(summary))
    after = run.context_usage.tokens
    run.compaction_sizes = (before, after)
    run.emit(CompactionEnd(reason, before, after, start))
    return Trigger.COMPACTED


async def _summarize(run: RunLike, summarize: Summarizer | None, old: Sequence[Message]) -> object:
    """The summary of ``old``: the default summarizer's, or ``summarize``'s (given the run's
    signal when it takes a second positional parameter)."""
    if summarize is None:
        return await _model_summary(run, old)
    if takes_signal(summarize):
        return await resolve(summarize(old, run.signal))
    return await resolve(summarize(old))


def _is_summary(message: Message, prefix: str) -> bool:
    return isinstance(message, UserMessage) and message.text.startswith(prefix)


class _Aborted(Exception):
    """The default summarizer's request was aborted."""


class _LimitReached(Exception):
    """A usage limit (``max_requests``, a token limit) keeps the default summarizer's next
    request from being sent."""


class SummaryError(ModelError):
    """The default summarizer's model gave no usable summary (the message says why: the stop
    reason it answered with, or the smallest piece it still refused as too long)."""


async def _model_summary(run: RunLike, old: Sequence[Message]) -> str:
    """The default summarizer: requests to the agent's own model through ``Run.send``, each
    within `summary_piece_chars` of the model's window (see the module).

    Raises:
        SummaryError: the model answered with a stop reason that is not a summary's, or refused
            even a `MIN_PIECE_CHARS` piece as too long.
        ModelError: a request failed otherwise.
    """
    limit = summary_piece_chars(context_window(run.settings.model))
    return await _summary_of(run, _paragraphs(old), limit, SUMMARY_INSTRUCTIONS)


async def _summary_of(
    run: RunLike, paragraphs: list[str], limit: int | None, instructions: str
) -> str:
    """One summary of ``paragraphs`` in requests of at most ``limit`` characters of transcript
    (None: no limit known): one request when they fit, else a summary per piece, then one of
    the pieces' summaries. A request refused as too long is split in two."""
    pieces = _pack(paragraphs, limit)
    if len(pieces) == 1:
        text = pieces[0]
        answer = await _ask(run, instructions, text)
        if answer is not None:
            return answer
        smaller = len(text) // 2  # refused as too long: the window is smaller than it seemed
        if smaller < MIN_PIECE_CHARS:
            raise SummaryError(
                f"the summarizer's model refused even {len(text):,} characters of transcript "
                "as too long (prompt is too long)",
                kind="summarizer",
            )
        return await _summary_of(run, paragraphs, smaller, instructions)
    summaries = []
    for n, piece in enumerate(pieces, 1):
        piece_instructions = PIECE_INSTRUCTIONS.format(n=n, count=len(pieces))
        summaries.append(await _summary_of(run, [piece], limit, piece_instructions))
    parts = [f"Part {n}: {summary}" for n, summary in enumerate(summaries, 1)]
    if limit is not None and sum(map(len, parts)) >= sum(map(len, paragraphs)):
        # the summaries are no shorter than what they summarize: cut each so all fit at once
        share = max(1, limit // len(parts) - 2)
        parts = [part[:share] for part in parts]
    return await _summary_of(run, parts, limit, MERGE_INSTRUCTIONS)


async def _ask(run: RunLike, instructions: str, text: str) -> str | None:
    """One summary request; None when the provider refused it as too long.

    Raises:
        _Aborted: the run was aborted during the request.
        SummaryError: the answer stopped for a reason that is not a summary's.
        ModelError: the request failed otherwise.
    """
    prompt = f"{instructions}\n\n<conversation>\n{text}\n</conversation>"
    request = ModelRequest([UserMessage(prompt)], None, [], run.settings.model_settings)
    data = run.data
    if not data.winding_down:  # counted as every request is (the final turn's is not)
        limits = data.limits
        if limits is not None and limits.request_hit(data.requests, data.usage) is not None:
            raise _LimitReached()
        data.requests += 1
    outcome = await run.send(request)
    if isinstance(outcome, RequestAborted):
        raise _Aborted()
    if isinstance(outcome, RequestFailed):
        if outcome.prompt_too_long:
            return None
        raise ModelError(outcome.message, kind="summarizer")
    run.add_usage(outcome.usage)
    data.usage = data.usage + outcome.usage  # toward the token limits, as a turn's response
    stop = outcome.stop_reason
    if outcome.tool_calls or stop not in SUMMARY_STOP_REASONS:
        what = " (a tool call, not a summary)" if outcome.tool_calls else ""
        raise SummaryError(
            f"the summarizer's model answered with stop reason {stop}{what}; the history was "
            "kept as it was",
            kind="summarizer",
        )
    return outcome.text


def _paragraphs(messages: Sequence[Message]) -> list[str]:
    return transcript(messages).split("\n\n") if messages else []


def _pack(paragraphs: list[str], limit: int | None) -> list[str]:
    """``paragraphs`` joined into pieces of at most ``limit`` characters, in order (a paragraph
    longer than ``limit`` is sliced); one piece when ``limit`` is None."""
    if limit is None:
        return ["\n\n".join(paragraphs)]
    pieces: list[str] = []
    current: list[str] = []
    size = 0
    for paragraph in paragraphs:
        for start in range(0, max(1, len(paragraph)), limit):
            part = paragraph[start : start + limit]
            if current and size + 2 + len(part) > limit:
                pieces.append("\n\n".join(current))
                current, size = [], 0
            size += (2 if current else 0) + len(part)
            current.append(part)
    if current or not pieces:
        pieces.append("\n\n".join(current))
    return pieces


def transcript(messages: Sequence[Message]) -> str:
    """``messages`` as plain text for a summarizer: one paragraph per message, tool calls with
    their JSON arguments, results with their text."""
    lines: list[str] = []
    for message in messages:
        if isinstance(message, UserMessage):
            lines.append(f"User: {message.text}")
        elif isinstance(message, AssistantMessage):
            if message.text:
                lines.append(f"Assistant: {message.text}")
            for call in message.tool_calls:
                lines.append(f"Assistant called {call.name}({json.dumps(call.input)})")
        elif isinstance(message, ToolResultMessage):
            lines.append(f"Tool result: {message.text}")
    return "\n\n".join(lines)


__all__ = [  # re-exported: they live in `_compaction_config` and `_guards`
    "CONTINUE_AFTER_WINDOW",
    "DEFAULT_KEEP_RECENT",
    "KEEP_RECENT_SHARE",
    "Compaction",
    "ContextUsage",
    "Summarizer",
    "compaction_on",
    "context_window",
    "context_window_exceeded",
    "turns_left",
]
