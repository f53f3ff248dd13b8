"""`compact`: compaction of an agent's history between runs, logged to its session. The cut
points and the compacted history are the core's (`_cuts`), re-exported here
under their public names."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._cuts import (
    SUMMARY_PREFIX,
    Summarize,
    compact_history,
    find_cut_points,
    held_response_index,
    keep_held_batch,
    kept_tokens_start,
    kept_window_start,
)
from .._execution import resolve

if TYPE_CHECKING:
    from .._agent import Agent

__all__ = [
    "SUMMARY_PREFIX",
    "Summarize",
    "compact",
    "compact_history",
    "find_cut_points",
    "held_response_index",
    "keep_held_batch",
    "kept_tokens_start",
    "kept_window_start",
]


async def compact(agent: Agent, summarize: Summarize, *, keep_last: int = 20) -> bool:
    """Compact ``agent``'s history between runs (a turn boundary) and log it to its session.

    ``summarize`` receives the messages that would be dropped; the history becomes the summary
    followed by the kept window (`compact_history`). Nothing happens when nothing would be
    dropped or the hook returns None. In ``awaiting_approval`` the response whose calls wait
    for a decision is kept with its whole turn, whatever ``keep_last`` says
    (`keep_held_batch`): the kept window may then be longer than ``keep_last``.

    Returns:
        True when the history was replaced.

    Raises:
        AgentBusyError: a run is in progress (compaction happens between turns, not inside one).
        InvalidHistoryError: the compacted history would break the protocol.
    """
    messages = list(agent.messages)
    held = held_response_index(messages, [call.id for call in agent.pending])
    start = keep_held_batch(messages, kept_window_start(messages, keep_last), held)
    if start == 0:
        return False
    summary = await resolve(summarize(messages[:start]))
    if summary is None or not str(summary).strip():
        return False
    compacted = compact_history(
        messages, str(summary), start=start, **({} if held is None else {"held": True})
    )
    agent.messages = compacted  # the context meter restarts: the new list is estimated whole
    session = getattr(agent, "session", None)
    if session is not None:
        session.record_history(compacted, reason="compaction", summary=str(summary))
    return True
