"""Compaction at turn boundaries: replace old history with a summary without breaking a tool call
from its results.

A cut point is an index ``i`` where ``messages[i:]`` may be kept on its own: ``messages[i]`` is a
user message (never a tool result, never an assistant message), so every kept result still follows
its call, and no kept window opens with the model speaking.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING

from .._errors import UsageError
from .._execution import resolve
from .._messages import Message, UserMessage
from .._protocol import assert_valid_history

if TYPE_CHECKING:
    from .._agent import Agent

SUMMARY_PREFIX = "Summary of the earlier conversation (older messages were compacted):\n\n"

Summarize = Callable[[Sequence[Message]], "str | Awaitable[str | None] | None"]
"""The compaction hook: ``summarize(old_messages)`` returns the summary text, or None to keep the
history as it is. Sync or async."""


def find_cut_points(messages: Sequence[Message]) -> list[int]:
    """Indices where the history may be cut (``messages[i:]`` kept), ascending.

    Every index holding a user message qualifies; ``0`` is always included when the history
    starts with one. Tool results and assistant messages never start a kept window.
    """
    return [i for i, m in enumerate(messages) if isinstance(m, UserMessage)]


def kept_window_start(messages: Sequence[Message], keep_last: int) -> int:
    """Where the kept window of at most ``keep_last`` messages starts.

    The window ``messages[len - keep_last:]`` moves forward to the first cut point inside it, so
    it never starts with a tool result or an assistant message; when no user message lies inside
    it, nothing is kept (the returned index is ``len(messages)``).

    Raises:
        UsageError: ``keep_last`` is negative.
    """
    if keep_last < 0:
        raise UsageError("keep_last must be 0 or more")
    earliest = max(0, len(messages) - keep_last)
    return next((i for i in find_cut_points(messages) if i >= earliest), len(messages))


def compact_history(messages: Sequence[Message], summary: str, *, keep_last: int) -> list[Message]:
    """``[summary as a user message] + kept window`` (see `kept_window_start`).

    Raises:
        InvalidHistoryError: the result breaks the protocol (then so did the kept window of
            ``messages``).
    """
    start = kept_window_start(messages, keep_last)
    compacted: list[Message] = [UserMessage(SUMMARY_PREFIX + summary), *messages[start:]]
    assert_valid_history(compacted)
    return compacted


async def compact(agent: Agent, summarize: Summarize, *, keep_last: int = 20) -> bool:
    """Compact ``agent``'s history between runs (a turn boundary) and log it to its session.

    ``summarize`` receives the messages that would be dropped; the history becomes the summary
    followed by the kept window (`compact_history`). Nothing happens when nothing would be
    dropped or the hook returns None.

    Returns:
        True when the history was replaced.

    Raises:
        AgentBusyError: a run is in progress (compaction happens between turns, not inside one).
        InvalidHistoryError: the compacted history would break the protocol.
    """
    messages = list(agent.messages)
    start = kept_window_start(messages, keep_last)
    if start == 0:
        return False
    summary = await resolve(summarize(messages[:start]))
    if summary is None or not str(summary).strip():
        return False
    compacted = compact_history(messages, str(summary), keep_last=keep_last)
    agent.messages = compacted
    session = getattr(agent, "session", None)
    if session is not None:
        session.record_history(compacted, reason="compaction", summary=str(summary))
    return True
