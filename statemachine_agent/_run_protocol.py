"""`RunLike`: what the built-in effects and actions use of a run (`_run.Run` is one), so that
they, compaction and the machine type against it rather than import the run layer above them."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

from ._accounting import ContextUsage
from ._bus import EventBus
from ._cancel import AbortSignal
from ._conversation import Conversation
from ._definition import Fired
from ._events import Event
from ._execution import BatchRun
from ._guards import LoopData
from ._limits import LimitHit
from ._messages import AssistantMessage, Message, ToolCallBlock, ToolResultMessage, Usage
from ._responses import RequestAborted, RequestFailed
from ._settings import RunSettings
from .models._base import ModelRequest


class RunLike(Protocol):
    """One run as its effects see it (the attributes and methods are `Run`'s: see there)."""

    settings: RunSettings
    conversation: Conversation
    bus: EventBus
    signal: AbortSignal
    data: LoopData
    error: str | None
    fired: Fired | None
    start: int
    turn_message: AssistantMessage | None
    turn_results: tuple[ToolResultMessage, ...]
    terminate_reason: str | None
    final_text: str | None
    compaction_sizes: tuple[int, int] | None
    overflow: str | None

    @property
    def messages(self) -> list[Message]:
        """The history."""

    @property
    def context_usage(self) -> ContextUsage:
        """How much of the context window the history uses."""

    @property
    def usage(self) -> Usage:
        """Tokens of this run's responses."""

    def add_usage(self, usage: Usage) -> None:
        """Count ``usage`` in `usage`."""

    def emit(self, event: Event) -> None:
        """Stamp and publish ``event``."""

    def append(self, message: Message) -> None:
        """Add ``message`` to the history and announce it."""

    def answer_open_calls(self) -> None:
        """Answer the calls of the last response that have no result."""

    def answer_calls(self, text: Callable[[ToolCallBlock], str]) -> tuple[ToolResultMessage, ...]:
        """Answer every call of the current response with an error result."""

    def begin_turn(self) -> int:
        """End the open turn and start the next one."""

    def complete_turn(self) -> None:
        """Count the open turn as completed."""

    def close_turn(self) -> None:
        """End the open turn, if any."""

    def has_queued_input(self) -> bool:
        """Steering or follow-up input is waiting."""

    def deliver_steering(self) -> bool:
        """Append queued steering; False when none was delivered."""

    def deliver_follow_up(self) -> bool:
        """Append queued follow-ups; False when none was delivered."""

    def limit_exceeded(self) -> LimitHit | None:
        """The token limit the run's usage is past, if any."""

    async def request(self, *, answered: bool = False) -> AssistantMessage | str:
        """Build and send one request; the response or the trigger to fire instead."""

    async def refresh_tools(self) -> str | None:
        """List the tool sources' current tools; None, or ``fail`` when they cannot be listed."""

    async def send(
        self, request: ModelRequest
    ) -> AssistantMessage | RequestAborted | RequestFailed:
        """Send ``request`` to the model with the engine's retries."""

    def batch(self, calls: Sequence[ToolCallBlock], *, approved: bool = False) -> BatchRun:
        """The `BatchRun` that runs ``calls``."""

    def fail(self, error: str) -> str:
        """Record a failed request; returns ``fail``."""
