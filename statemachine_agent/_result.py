"""`RunResult`: how a run ended. Expected endings are states here, not exceptions."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ._messages import AssistantMessage, Message, ToolResultMessage, Usage
from ._states import State


@dataclass(frozen=True)
class RunResult:
    """The outcome of one run.

    Attributes:
        state: the terminal state: ``done``, ``aborted``, ``max_turns`` or ``failed``.
        messages: the whole history after the run.
        new_messages: the messages this run added (the prompt included).
        turns: model responses in this run (a continued run keeps counting).
        usage: tokens of every response of this run, prompt-cache reads and writes included.
        stop_reason: the stop reason of the last response.
        error: why the run did not end ``done`` (or what to know about how it did), else None.
        refusal: the provider's refusal details (category, explanation) when the model refused.
        run_id: the run's id (the ``run_id`` of its events; see `RunHandle`).
    """

    state: State
    messages: list[Message] = field(repr=False)
    new_messages: list[Message] = field(repr=False)
    turns: int
    usage: Usage
    stop_reason: str | None = None
    error: str | None = None
    refusal: dict[str, Any] | None = None
    run_id: str = ""

    @property
    def text(self) -> str:
        """The final answer: the text of the run's last response (joined with the parts of a
        ``pause_turn`` continuation before it)."""
        messages = self.new_messages
        i = len(messages) - 1
        while i >= 0 and isinstance(messages[i], ToolResultMessage):
            i -= 1
        parts: list[str] = []
        while i >= 0 and isinstance(messages[i], AssistantMessage):
            parts.append(messages[i].text)
            i -= 1
        return "".join(reversed(parts))

    @property
    def ok(self) -> bool:
        """The run ended ``done``."""
        return self.state is State.DONE
