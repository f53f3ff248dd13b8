"""`RunTally`: the counts of the runs in a session log, rebuilt line by line as it is read."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._limits import RunCounts
from .._machine import State
from .._messages import AssistantMessage, StopReason

if TYPE_CHECKING:
    from ._read import Record

UNCOUNTED_TURNS = frozenset({StopReason.ERROR, StopReason.ABORTED})
"""Stop reasons of logged responses that complete no turn (a failed request, a stream an abort
cut): they still count as requests."""


class RunTally:
    """The counts of the runs in a log, line by line (`SessionData.counts`)."""

    def __init__(self) -> None:
        self.last = RunCounts()  # the counts of the last run that ended
        self.running: RunCounts | None = None  # the open run's, rebuilt from its lines
        self.response: AssistantMessage | None = None

    def see(self, record: Record) -> None:
        running = self.running
        if record.type == "run_start":
            self.running = self.last if record.body.get("continued") else RunCounts()
        elif record.type == "run_end":
            counts = record.body.get("counts")
            if isinstance(counts, dict):
                self.last = RunCounts.from_json(counts)
            elif running is not None:
                self.last = running
            self.running = None
        elif running is None:
            return
        elif isinstance(record.message, AssistantMessage):
            response = self.response = record.message
            turns = running.turns + (response.stop_reason not in UNCOUNTED_TURNS)
            self.running = RunCounts(
                turns, running.requests + 1, running.tool_calls, running.usage + response.usage
            )
        elif (
            record.type == "state"
            and record.body.get("dest") == State.EXECUTING_TOOLS.value
            and record.body.get("trigger") == "model_replied"
            and self.response is not None
        ):
            calls = running.tool_calls + len(self.response.tool_calls)
            self.running = RunCounts(running.turns, running.requests, calls, running.usage)

    def counts(self) -> RunCounts:
        """The open run's counts (the process died in it), else the last ended run's."""
        return self.running if self.running is not None else self.last
