"""`Compaction`, the configuration of automatic compaction (``Agent(compaction=...)``), and the
sizes it is measured by: data a run reads, below the ``compacting`` state's effect
(`_compacting`) that uses it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from ._accounting import CHARS_PER_TOKEN
from ._cuts import find_cut_points, kept_tokens_start
from ._errors import UsageError
from ._messages import Message

Summarizer = Callable[..., "str | Awaitable[str | None] | None"]
"""``summarize(old_messages)`` or ``summarize(old_messages, signal)``, sync or async: the summary
text of the messages being cut (``signal``: the run's `AbortSignal`, passed when the function
takes a second positional parameter)."""

CONTINUE_AFTER_WINDOW = (
    "Your response was cut off by the context window. Continue where you stopped."
)
"""The user message of ``run()`` without a prompt after a response cut by the context window (no
tool call) that the run did not continue (automatic compaction off)."""

PIECE_INSTRUCTIONS = (
    "Below is part {n} of {count} of a conversation too long to summarize at once. Summarize "
    "this part so that the work can go on from the summaries of all parts: the user's goal and "
    "requests, decisions made, what the tools returned that still matters (file names, values, "
    "errors), what is done and what remains. Be concise and factual; write the summary only."
)
"""The prompt of each piece when the default summarizer splits a transcript that does not fit
one request (``{n}`` and ``{count}`` are filled in)."""

MIN_PIECE_CHARS = 500
"""The smallest piece (in characters of transcript) the default summarizer sends: a model that
refuses even that as too long ends the compaction ``failed``."""

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
