"""The session package's exception (a subclass of the core's `AgentError`)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from .._errors import AgentError

if TYPE_CHECKING:
    from ._read import SessionData


class SessionCorruptError(AgentError):
    """A complete line of a session log cannot be read (only a torn last line may be).

    Attributes:
        path: the log.
        problems: ``(line number, what is wrong)`` for each unreadable line (1-based).
        data: everything the other lines hold, rebuilt (`SessionData`): nothing else is lost.
    """

    def __init__(self, path: Path, problems: list[tuple[int, str]], data: SessionData) -> None:
        self.path = path
        self.problems = problems
        self.data = data
        lines = "; ".join(f"line {n}: {why}" for n, why in problems)
        super().__init__(
            f"session log {path} has {len(problems)} unreadable line(s): {lines}. "
            "The other lines were read (see .data); pass strict=False to resume without them."
        )
