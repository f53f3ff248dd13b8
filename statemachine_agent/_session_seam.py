"""The seam the session package plugs into: what the core needs of a session log
(`SessionLogLike`) and the two operations ``Agent(session=...)`` and ``Agent.resume`` ask of the
package (`SessionSupport`), which it registers when it is imported (`provide_sessions`).

The core never imports ``statemachine_agent.session``: the session package builds on the core,
and importing ``statemachine_agent`` imports it, so the support is there before any agent is made.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from ._errors import UsageError
from ._events import Event
from ._limits import RunCounts
from ._messages import Message


class SessionLogLike(Protocol):
    """What the core and the tools around it use of a session log (a `SessionLog`)."""

    path: Path

    @property
    def counts(self) -> RunCounts:
        """What the last logged run counted toward its limits."""

    def close(self) -> None:
        """Release the log's lock and file."""

    def record(self, event: Event) -> None:
        """Log ``event``."""

    def record_history(
        self, messages: Sequence[Message], *, reason: str, summary: str | None = None
    ) -> None:
        """Record that the history was replaced by ``messages``."""


@dataclass(frozen=True, slots=True)
class SessionSupport:
    """What the session package provides the core.

    Attributes:
        attach: ``attach(agent, session)``: attach ``session`` (a log, or a path for a new log)
            to a just-built agent and return the log.
        open: ``open(path, fsync=..., strict=...)``: open a log to continue it (read, repaired).
    """

    attach: Callable[[Any, str | os.PathLike[str] | Any], SessionLogLike]
    open: Callable[..., SessionLogLike]


_PROVIDED: list[SessionSupport] = []


def provide_sessions(support: SessionSupport) -> None:
    """Register the session package's support (it calls this when imported; the last wins)."""
    _PROVIDED[:] = [support]


def session_support() -> SessionSupport:
    """The registered support.

    Raises:
        UsageError: no session package registered (only when ``statemachine_agent`` was not
            imported as a package: import ``statemachine_agent.session``).
    """
    if not _PROVIDED:
        raise UsageError(
            "session logs need statemachine_agent.session: import statemachine_agent.session "
            "before Agent(session=...) or Agent.resume(...)"
        )
    return _PROVIDED[0]
