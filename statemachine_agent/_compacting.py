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
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ._accounting import CHARS_PER_TOKEN, ContextUsage, estimate_tokens
from ._cancel import abort_scope, is_run_cancellation
from ._errors import ModelError, UsageError
from ._events import CompactionEnd, CompactionStart
from ._execution import resolve
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
    from ._machine import LoopData
    from ._run import Run

Summarizer = Callable[..., "str | Awaitable[str | None] | None"]
"""``summarize(old_messages)`` or ``summarize(old_messages, signal)``, sync or async: the summary
text of the messages being cut (``signal``: the run's `AbortSignal`, passed when the function
takes a second positional parameter)."""

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

CONTINUE_AFTER_WINDOW = (
    "Your response was cut off by the context window. Continue where you stopped."
)
"""The user message of ``run()`` without a prompt after a response cut by the context window (no
tool call) that the run did not continue (automatic compaction off)."""

SUMMARY_INSTRUCTIONS = (
    "Summarize the conversation below so that the work can go on from the summary alone: the "
    "user's goal and requests, decisions made, what the tools returned that still matters "
    "(file names, values, errors), what is done and what remains. Be concise and factual; "
    "write the summary only."
)
"""The prompt of the default summarizer (a request to the agent's own model)."""

PIECE_INSTRUCTIONS = (
    "Below is part {n} of {count} of a conversation too long to summarize at once. Summarize "
    "this part so that the work can go on from the summaries of all parts: the user's goal and "
    "requests, decisions made, what the tools returned that still matters (file names, values, "
    "errors), what is done and what remains. Be concise and factual; write the summary only."
)
"""The prompt of each piece when the default summarizer splits a transcript that does not fit
one request (``{n}`` and ``{count}`` are filled in)."""

MERGE_INSTRUCTIONS = (
    "Below are summaries of consecutive parts of one conversation, oldest first. Combine them "
    "into one summary so that the work can go on from it alone: the user's goal and requests, "
    "decisions made, what the tools returned that still matters, what is done and what "
    "remains. Be concise and factual; write the summary only."
)
"""The prompt that combines the pieces' summaries into one."""

MIN_PIECE_CHARS = 500
"""The smallest piece (in characters of transcript) the default summarizer sends: a model that
refuses even that as too long ends the compaction ``failed``."""

SUMMARY_STOP_REASONS = frozenset(
    {StopReason.END_TURN, StopReason.STOP_SEQUENCE, StopReason.MAX_TOKENS}
)
"""The stop reasons of a summarizer response whose text is taken as the summary; any other (a
tool call, a refusal, a pause) fails the compaction with an error that names it."""

DEFAULT_KEEP_RECENT = 20_000
"""`Compaction`'s default ``keep_recent``: estimated tokens of recent history kept verbatim
(capped at `KEEP_RECENT_SHARE` of the threshold, see `Compaction.kept_tokens`)."""

KEEP_RECENT_SHARE = 0.5
"""The largest share of the compaction threshold (in tokens) that the recent history kept by
tokens may fill: a compaction leaves at least the rest of the threshold for new turns, so a
``keep_recent`` as large as a small window does not make every turn compact again."""


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


@dataclass(frozen=True, slots=True)
class Compaction:
    """Automatic compaction: ``Agent(compaction=Compaction(...))``.

    How much recent history is kept verbatim after the summary is given in tokens
    (``keep_recent``) or in turns (``keep_recent_turns``), not both. Either way the kept window
    starts at a turn boundary (`statemachine_agent.session.find_cut_points`: a user message, or a
    response right after the previous batch's results), never between a tool call and its
    result; a turn is the messages from one boundary to the next (a response with its batch's
    results; the first turn after a prompt or a summary includes it).

    Args:
        threshold: compact before a request whose context (`ContextUsage.tokens`) reaches this:
            a fraction of the model's context window (``0 < threshold <= 1``, needs
            ``model.context_window``) or a number of tokens (an int above 1).
        keep_recent: estimated tokens (`estimate_tokens`) of recent history kept verbatim: the
            newest whole turns that fit (the newest turn is kept even when larger). Default
            `DEFAULT_KEEP_RECENT` when ``keep_recent_turns`` is not given. Capped at half the
            threshold in tokens (`KEEP_RECENT_SHARE`, `kept_tokens`): with a 15,000-token
            window and ``threshold=0.8``, at most 6,000 tokens are kept, so at least 6,000
            tokens of new turns come before the next compaction.
        keep_recent_turns: the number of newest whole turns kept verbatim, whatever their size
            (at least 1: the turn the next request continues; not capped: turns that fill the
            threshold compact again at the next request). A history of that many turns or
            fewer has nothing to cut.
        summarize: ``summarize(old_messages)`` or ``summarize(old_messages, signal)`` (sync or
            async) returning the summary text; ``signal`` is the run's `AbortSignal`, and an
            abort cancels an async summarizer where it waits. None asks the agent's own model
            (`SUMMARY_INSTRUCTIONS`, through ``Run.send``; in pieces of at most half its
            context window, see the module).

    Raises:
        UsageError: a threshold that is neither a fraction in (0, 1] nor a positive token
            count, a ``keep_recent`` that is not 0 or more tokens, a ``keep_recent_turns`` that
            is not 1 or more, or both ``keep_recent`` and ``keep_recent_turns``.
    """

    threshold: float | int = 0.8
    keep_recent: int | None = None
    summarize: Summarizer | None = None
    keep_recent_turns: int | None = None

    def __post_init__(self) -> None:
        t = self.threshold
        if (
            isinstance(t, bool)
            or not isinstance(t, int | float)
            or t <= 0
            or (isinstance(t, float) and t > 1)  # neither a fraction nor a count of tokens
        ):
            raise UsageError(
                f"Compaction threshold must be a fraction of the context window (0 < t <= 1) "
                f"or a number of tokens (an int above 1), got {t!r}"
            )
        tokens, turns = self.keep_recent, self.keep_recent_turns
        if tokens is not None and turns is not None:
            raise UsageError(
                f"Compaction keeps recent history by tokens or by turns, not both: give "
                f"keep_recent={tokens!r} (tokens) or keep_recent_turns={turns!r} (turns)"
            )
        if tokens is not None and (not _is_int(tokens) or tokens < 0):
            raise UsageError(f"Compaction keep_recent must be 0 or more tokens, got {tokens!r}")
        if turns is not None and (not _is_int(turns) or turns < 1):
            raise UsageError(
                f"Compaction keep_recent_turns must be 1 or more turns (the newest turn is "
                f"always kept), got {turns!r}"
            )

    @property
    def keep_recent_tokens(self) -> int | None:
        """The tokens kept (`DEFAULT_KEEP_RECENT` unless given), None when kept by turns."""
        if self.keep_recent_turns is not None:
            return None
        return DEFAULT_KEEP_RECENT if self.keep_recent is None else self.keep_recent

    def kept_tokens(self, window: int | None) -> int | None:
        """The estimated tokens of recent history kept verbatim for a model with a context
        window of ``window`` tokens: `keep_recent_tokens` capped at `KEEP_RECENT_SHARE` of the
        threshold in tokens (`limit`). Not capped when the threshold is a fraction and the
        window is unknown; None when history is kept by turns."""
        tokens = self.keep_recent_tokens
        if tokens is None:
            return None
        if isinstance(self.threshold, float) and self.threshold <= 1 and not window:
            return tokens  # no threshold in tokens to cap it by
        return min(tokens, int(self.limit(window) * KEEP_RECENT_SHARE))

    def kept_start(self, messages: Sequence[Message], window: int | None = None) -> int:
        """Where the window kept after the summary starts in ``messages``: a turn boundary
        after 0 (`statemachine_agent.session.kept_tokens_start` of `kept_tokens` by tokens,
        the start of the newest ``keep_recent_turns`` turns by turns), or 0 when there is
        nothing to cut. ``window``: the model's context window in tokens (None: unknown)."""
        from ._cuts import find_cut_points, kept_tokens_start

        tokens = self.kept_tokens(window)
        if tokens is not None:
            return kept_tokens_start(messages, tokens)
        assert self.keep_recent_turns is not None
        points = [i for i in find_cut_points(messages) if i > 0]
        return points[-self.keep_recent_turns] if self.keep_recent_turns <= len(points) else 0

    def limit(self, window: int | None) -> int:
        """The threshold in tokens for a model with ``window`` tokens.

        Raises:
            UsageError: a fractional threshold and an unknown window.
        """
        if isinstance(self.threshold, int) or self.threshold > 1:
            return int(self.threshold)
        if not window:
            raise UsageError(
                "Compaction(threshold=fraction) needs the model's context window: give the model "
                "context_window=..., or give the threshold in tokens (an int)"
            )
        return int(self.threshold * window)


def context_window(model: object) -> int | None:
    """``model``'s context window in tokens (its ``context_window``), None if it does not say."""
    window = getattr(model, "context_window", None)
    return window if isinstance(window, int) and window > 0 else None


def summary_piece_chars(window: int | None) -> int | None:
    """The most transcript characters one default-summarizer request holds for a model with a
    context window of ``window`` tokens: half the window at `CHARS_PER_TOKEN` characters a
    token, less the instructions (at least `MIN_PIECE_CHARS`); None when the window is unknown
    (then only a "prompt is too long" answer splits the transcript)."""
    if window is None:
        return None
    room = window * CHARS_PER_TOKEN // 2 - len(PIECE_INSTRUCTIONS) - 64
    return max(MIN_PIECE_CHARS, room)


def measured(run: Run, before: int, after: int | None = None) -> str:
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


# -- guards ------------------------------------------------------------------------------------


def context_window_exceeded(data: LoopData) -> bool:
    """The response was cut by the context window (stop reason
    ``model_context_window_exceeded``): it is not continued like ``max_tokens`` (a continuation
    cannot fit)."""
    return (
        data.response is not None
        and data.response.stop_reason == StopReason.MODEL_CONTEXT_WINDOW_EXCEEDED
    )


def compaction_on(data: LoopData) -> bool:
    """Automatic compaction is configured (``Agent(compaction=...)``)."""
    return data.compaction


def turns_left(data: LoopData) -> bool:
    """The turn this response completes leaves the run under its turn cap: going on after a
    context-window stop is bounded like every other way a run goes on."""
    return data.turns + 1 < data.max_turns


# -- the check before a request ----------------------------------------------------------------


def compaction_due(run: Run) -> bool:
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


def overflowed(run: Run, failure: RequestFailed) -> str:
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


def _answer_cut_calls(run: Run) -> int:
    answered = run.answer_calls(lambda call: CUT_BY_WINDOW if call.truncated else NOT_RUN_WINDOW)
    run.complete_turn()
    return len(answered)


def note_context_window(run: Run) -> None:
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


def answer_window_cut(run: Run) -> None:
    """A response cut by the context window, compaction on: its calls are answered as not run
    (a cut one as cut by the context window), or, with none, the model is asked to continue
    after the compaction that follows."""
    if not _answer_cut_calls(run):
        run.append(UserMessage(CONTINUE_AFTER_COMPACTION))
    run.data.compaction_reason = "context_window"


# -- the effect --------------------------------------------------------------------------------


async def compact_context(run: Run) -> str:
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


async def _summarize(run: Run, summarize: Summarizer | None, old: Sequence[Message]) -> object:
    """The summary of ``old``: the default summarizer's, or ``summarize``'s (given the run's
    signal when it takes a second positional parameter)."""
    if summarize is None:
        return await _model_summary(run, old)
    from ._run import _takes_signal

    if _takes_signal(summarize):
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


async def _model_summary(run: Run, old: Sequence[Message]) -> str:
    """The default summarizer: requests to the agent's own model through ``Run.send``, each
    within `summary_piece_chars` of the model's window (see the module).

    Raises:
        SummaryError: the model answered with a stop reason that is not a summary's, or refused
            even a `MIN_PIECE_CHARS` piece as too long.
        ModelError: a request failed otherwise.
    """
    limit = summary_piece_chars(context_window(run.settings.model))
    return await _summary_of(run, _paragraphs(old), limit, SUMMARY_INSTRUCTIONS)


async def _summary_of(run: Run, paragraphs: list[str], limit: int | None, instructions: str) -> str:
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


async def _ask(run: Run, instructions: str, text: str) -> str | None:
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


__all__ = ["Compaction", "ContextUsage"]
