"""Checking compactions as they happen: `CompactionWatch`, an event subscriber that `drive_run`,
`drive_scenario_run` and the stateful kit put on the agent under test.

A compaction (the ``compacting`` state, `statemachine_agent.Compaction`) replaces
``messages[:cut]`` with one summary message. What must hold after each one: the compacted
history keeps the protocol's rules 1-4; the kept window ``new[1:]`` is the old history's tail
``old[cut:]``, unchanged; ``cut`` is a turn boundary (a user message, or a response right after
a tool result), never between a call and its result.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from .._events import CompactionEnd, CompactionStart, Event
from .._messages import Message
from .._protocol import find_violations

if TYPE_CHECKING:
    from .._agent import Agent


def shift_past(index: int, cuts: Sequence[int]) -> int:
    """Where history index ``index`` is after compactions that cut ``cuts`` messages, in order:
    each replaces ``messages[:cut]`` with one summary, so an index at or past the cut moves to
    ``index - cut + 1`` and one inside it to 1, just after the summary (how `RunResult`'s
    ``new_messages`` start moves too)."""
    for cut in cuts:
        index = 1 + max(0, index - cut)
    return index


@dataclass(slots=True)
class CompactionWatch:
    """An event subscriber that checks every compaction of ``agent`` as it happens
    (``agent.subscribe(watch)``; see the module for what must hold).

    Attributes:
        agent: the agent watched.
        cuts: how many messages each compaction replaced, in order.
        problems: what broke, each naming its compaction (``"compaction 2: ..."``).
        replaced: the messages each compaction replaced with its summary, in order.
    """

    agent: Agent
    cuts: list[int] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    replaced: list[list[Message]] = field(default_factory=list)
    _before: list[Message] = field(default_factory=list)

    def __call__(self, event: Event) -> None:
        """Keep the history at a ``compaction_start``; check it at the ``compaction_end``."""
        if isinstance(event, CompactionStart):
            self._before = list(self.agent.messages)
        elif isinstance(event, CompactionEnd) and event.messages_cut:
            cut = event.messages_cut
            self.cuts.append(cut)
            self.replaced.append(self._before[:cut])
            self.problems += check_compaction(
                self._before, self.agent.messages, cut, len(self.cuts)
            )

    def added_since(self, before: int) -> list[Message]:
        """What the history gained since it held ``before`` messages, those its compactions
        replaced included, in order (the summaries left out): a run's new messages even when
        compaction cut some of them."""
        added: list[Message] = []
        start = before
        for cut, old in zip(self.cuts, self.replaced, strict=True):
            added += old[start:cut]
            start = shift_past(start, [cut])
        return added + list(self.agent.messages[start:])


def check_compaction(
    old: Sequence[Message], new: Sequence[Message], cut: int, number: int
) -> list[str]:
    """What compaction ``number`` broke: the history's rules 1-4, the kept window (``new[1:]``
    must be ``old[cut:]``), and the cut (a user message, or a response right after a result)."""
    where = f"compaction {number}"
    problems = [f"{where}: {p}" for p in find_violations(new)]
    if list(new[1:]) != list(old[cut:]):
        problems.append(f"{where}: the kept window is not the old history's tail from {cut}")
    boundary = 0 < cut < len(old) and (
        old[cut].role == "user"
        or (old[cut].role == "assistant" and old[cut - 1].role == "tool_result")
    )
    if not boundary:
        problems.append(f"{where}: cut at {cut} is not a turn boundary")
    return problems
