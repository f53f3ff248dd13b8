"""Compaction at turn boundaries: replace old history with a summary without breaking a tool call
from its results.

A cut point is an index ``i`` where ``messages[i:]`` may be kept after a summary (a user message):
``messages[i]`` is a user message, or a response that follows a tool batch's results (the turn
boundary inside one long task). A tool result never starts a kept window, so every kept result
still follows its call; a response continuing another response (``pause_turn``, ``max_tokens``) is
never separated from it. One prompt followed by 40 tool turns therefore has 40 cut points, not one.

The same functions serve `compact` (by hand, between runs) and the ``compacting`` state of the
loop (automatic compaction, `statemachine_agent.Compaction`).

A batch waiting for decisions (``awaiting_approval``) is never cut: the kept window starts at
or before the turn of the response whose calls are pending (`keep_held_batch`), so approving
them later runs each once and their results (the held ones included) follow their calls.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence

from ._accounting import estimate_tokens
from ._errors import UsageError
from ._messages import AssistantMessage, Message, ToolResultMessage, UserMessage, text_result
from ._protocol import assert_valid_history

SUMMARY_PREFIX = "Summary of the earlier conversation (older messages were compacted):\n\n"

Summarize = Callable[[Sequence[Message]], "str | Awaitable[str | None] | None"]
"""The compaction hook: ``summarize(old_messages)`` returns the summary text, or None to keep the
history as it is. Sync or async."""


def find_cut_points(messages: Sequence[Message]) -> list[int]:
    """Indices where the history may be cut (``messages[i:]`` kept after a summary), ascending.

    An index qualifies when it holds a user message, or a response right after a tool result
    (the next turn of a task: the batch before it is complete, as results follow their response
    and are never interleaved with other messages). ``0`` is included when the history starts
    with a user message. Tool results never start a kept window.
    """
    return [
        i
        for i, m in enumerate(messages)
        if isinstance(m, UserMessage)
        or (
            isinstance(m, AssistantMessage)
            and i > 0
            and isinstance(messages[i - 1], ToolResultMessage)
        )
    ]


def kept_window_start(messages: Sequence[Message], keep_last: int) -> int:
    """Where the kept window of at most ``keep_last`` messages starts.

    The window ``messages[len - keep_last:]`` moves forward to the first cut point inside it, so
    it never starts with a tool result or inside a turn (see `find_cut_points`); when no cut point
    lies inside it, nothing is kept (the returned index is ``len(messages)``).

    Raises:
        UsageError: ``keep_last`` is negative.
    """
    if keep_last < 0:
        raise UsageError("keep_last must be 0 or more")
    earliest = max(0, len(messages) - keep_last)
    return next((i for i in find_cut_points(messages) if i >= earliest), len(messages))


def kept_tokens_start(messages: Sequence[Message], keep_tokens: int) -> int:
    """Where a kept window of at most ``keep_tokens`` estimated tokens starts (automatic
    compaction's ``keep_recent``): the earliest cut point after 0 whose window fits; when even
    the last turn is larger, the last cut point after 0 (the newest turn is kept whole); 0 when
    there is no cut point after 0 (nothing can be compacted). Tokens are `estimate_tokens`.

    Raises:
        UsageError: ``keep_tokens`` is negative.
    """
    if keep_tokens < 0:
        raise UsageError("keep_recent must be 0 or more tokens")
    points = [i for i in find_cut_points(messages) if i > 0]
    if not points:
        return 0
    suffix = 0
    fits = points[-1]
    position = len(messages)
    for point in reversed(points):
        suffix += estimate_tokens(messages[point:position])
        position = point
        if suffix > keep_tokens:
            break
        fits = point
    return fits


def held_response_index(messages: Sequence[Message], call_ids: Sequence[str]) -> int | None:
    """The index of the response holding the calls ``call_ids`` (the batch waiting for
    decisions in ``awaiting_approval``), or None when ``call_ids`` is empty. A history that
    does not hold them gives its last index (the held batch's response ends the history)."""
    if not call_ids:
        return None
    wanted = set(call_ids)
    for index in range(len(messages) - 1, -1, -1):
        message = messages[index]
        if isinstance(message, AssistantMessage) and wanted & {c.id for c in message.tool_calls}:
            return index
    return len(messages) - 1


def keep_held_batch(messages: Sequence[Message], start: int, held: int | None) -> int:
    """``start`` moved back so the kept window holds the response at ``held`` (whose calls
    await a decision) with its whole turn: the latest cut point at or before ``held`` when
    ``start`` lies past it; 0 (nothing can be cut) when there is none after 0. ``held`` None
    (nothing pending): ``start`` as it is."""
    if held is None or start <= held:
        return start
    return max((i for i in find_cut_points(messages) if i <= held), default=0)


def compact_history(
    messages: Sequence[Message],
    summary: str,
    *,
    keep_last: int | None = None,
    start: int | None = None,
    held: bool = False,
) -> list[Message]:
    """``[summary as a user message] + kept window``: the window starts at ``start`` (a cut
    point) or at `kept_window_start` of ``keep_last`` messages. ``held``: the history ends with
    a batch waiting for decisions (its calls have no result yet; they get them once decided).

    Raises:
        InvalidHistoryError: the result breaks the protocol (then so did the kept window of
            ``messages``).
        UsageError: neither ``keep_last`` nor ``start`` was given.
    """
    if start is None:
        if keep_last is None:
            raise UsageError("compact_history needs keep_last= or start=")
        start = kept_window_start(messages, keep_last)
    compacted: list[Message] = [UserMessage(SUMMARY_PREFIX + summary), *messages[start:]]
    last = compacted[-1]
    if held and isinstance(last, AssistantMessage):  # checked as if the held calls were answered
        answered = [text_result(call, "held") for call in last.tool_calls]
        assert_valid_history([*compacted, *answered])
    else:
        assert_valid_history(compacted)
    return compacted
