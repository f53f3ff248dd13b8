"""`Conversation`: what an agent's runs share and change, apart from the agent's configuration.

It holds the history, the tool-call ids it has seen, the request projection that follows it,
the context meter, the steering and follow-up queues with their delivery modes, and the batch
held for decisions. `replace` is the one way to swap the history: the agent's ``messages``
setter, `Agent.restore` and compaction (between runs and inside one) all go through it.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping, Sequence
from typing import Literal

from ._accounting import ContextMeter, ContextUsage
from ._context import ContextProjector
from ._errors import UsageError
from ._execution import PendingBatch
from ._hooks import Decision, PendingCall, check_decisions
from ._messages import (
    AssistantMessage,
    Message,
    ToolResultMessage,
    UserMessage,
    keep,
    user_text,
)
from ._responses import call_ids
from ._states import Trigger

DeliveryMode = Literal["all", "one_at_a_time"]
"""How queued input is delivered: every queued message at once, or one per delivery point."""


class Conversation:
    """An agent's history and the state that follows it.

    Args:
        messages: the history to start from.
        steering_mode: ``"all"`` or ``"one_at_a_time"`` (see `Agent`).
        follow_up_mode: ``"all"`` or ``"one_at_a_time"`` (see `Agent`).

    Attributes:
        messages: the history (the engine appends to it; replace it with `replace`). A plain
            attribute: the engine reads it several times a turn.
        steering: queued steering messages, oldest first.
        follow_ups: queued follow-up messages, oldest first.
        steering_mode: how steering is delivered.
        follow_up_mode: how follow-ups are delivered.
        held: the tool batch waiting for decisions (``awaiting_approval``), or None.
        call_ids: every tool-call id of the history (a model's repeated id is renamed).
        projector: the request projection, kept in step with the history.
        meter: the context account of the history (`context_usage`).
        appended: messages appended by the engine (the projection trusts them).

    Raises:
        UsageError: an unknown delivery mode.
    """

    __slots__ = (
        "appended",
        "call_ids",
        "follow_up_mode",
        "follow_ups",
        "held",
        "messages",
        "meter",
        "projector",
        "steering",
        "steering_mode",
    )

    def __init__(
        self,
        messages: Sequence[Message] = (),
        *,
        steering_mode: DeliveryMode = "all",
        follow_up_mode: DeliveryMode = "one_at_a_time",
    ) -> None:
        for option, mode in (("steering_mode", steering_mode), ("follow_up_mode", follow_up_mode)):
            if mode not in ("all", "one_at_a_time"):
                raise UsageError(f"{option} must be 'all' or 'one_at_a_time', got {mode!r}")
        self.steering_mode: DeliveryMode = steering_mode
        self.follow_up_mode: DeliveryMode = follow_up_mode
        self._take(messages)
        self.meter = ContextMeter()
        self.appended = 0
        self.steering: deque[UserMessage] = deque()
        self.follow_ups: deque[UserMessage] = deque()
        self.held: PendingBatch | None = None

    # -- the history ------------------------------------------------------------------------------

    def append(self, message: Message, role: str) -> None:
        """Add ``message`` at the end (the engine's appends: the projection trusts them);
        ``role`` is its ``role``, which the caller has read (a read of a message's field costs
        several times a plain attribute's, see `_messages`)."""
        keep(message)  # stored compactly (issue 39)
        self.messages.append(message)
        self.appended += 1
        if role == "assistant":
            ids = self.call_ids
            for block in message.content:  # its tool calls (a loop: one message a turn)
                if block.type == "tool_call":
                    ids.add(block.id)

    def replace(self, messages: Sequence[Message]) -> None:
        """Replace the history: the one way it is swapped (the ``messages`` setter, `restore`
        and compaction use it). The call ids, the projection and the context meter start over
        from the new list.

        With a batch held for decisions the new history must still end with the response whose
        calls wait (the same tool calls); the batch goes on from that message.

        Raises:
            UsageError: calls await approval and ``messages`` does not end with their response.
        """
        held = self.held
        if held is not None:
            last = messages[-1] if messages else None
            batch = [c.id for c in held.response.tool_calls]
            if not isinstance(last, AssistantMessage) or [c.id for c in last.tool_calls] != batch:
                waiting = ", ".join(call.id for call in held.calls)
                raise UsageError(
                    f"calls {waiting} are awaiting approval: a new history must end with the "
                    f"response that holds them (tool calls {', '.join(batch)}); keep it, or "
                    "decide them first with agent.run(decisions={call_id: Approve() or "
                    "Deny(reason)}), or agent.abort()"
                )
            held.response = last  # the batch goes on from the message the history holds
        # The projection and the context account followed the old list: start over (and let
        # the old messages go).
        self._take(messages)
        self.meter.reset()

    def _take(self, messages: Sequence[Message]) -> None:
        """Hold a copy of ``messages`` as the history, each stored compactly (`keep`), with its
        call ids and a projection that starts from it."""
        self.messages: list[Message] = list(messages)
        for message in self.messages:
            keep(message)
        self.call_ids = call_ids(self.messages)
        self.projector = ContextProjector()

    def usage(self, window: int | None) -> ContextUsage:
        """How much of a context window of ``window`` tokens the history uses (`ContextUsage`)."""
        return self.meter.usage(self.messages, window)

    def decide(self, user: UserMessage | None, decisions: Mapping[str, Decision] | None) -> Trigger:
        """Validate ``decisions`` for the held batch (changing nothing when they are wrong) and
        store them; returns the first trigger of the run: ``decided``, or ``start`` when no
        batch is held.

        Raises:
            UsageError: decisions with nothing held; a prompt, or no decisions, while calls are
                held; decisions for unknown or already decided calls (`check_decisions`).
        """
        held = self.held
        if held is None:
            if decisions:
                raise UsageError("no call is awaiting approval; there is nothing to decide")
            return Trigger.START
        waiting = [call.id for call in held.calls]
        if user is not None or not decisions:
            raise UsageError(
                f"calls {', '.join(waiting)} are awaiting approval: decide them first with "
                "agent.run(decisions={call_id: Approve() or Deny(reason)}), or agent.abort()"
            )
        check_decisions(waiting, decisions)
        held.decisions = dict(decisions)
        return Trigger.DECIDED

    # -- queued input ---------------------------------------------------------------------------

    def has_queued_input(self) -> bool:
        """Steering or follow-up messages are waiting to be delivered."""
        return bool(self.steering or self.follow_ups)

    def clear_queues(self) -> tuple[list[UserMessage], list[UserMessage]]:
        """Remove every queued message; returns ``(steering, follow_ups)``, each in queue order."""
        steering, follow_ups = list(self.steering), list(self.follow_ups)
        self.steering.clear()
        self.follow_ups.clear()
        return steering, follow_ups


def as_user(message: str | UserMessage) -> UserMessage:
    """``message`` as a `UserMessage` (a str is wrapped).

    Raises:
        UsageError: ``message`` is neither a non-empty str nor a `UserMessage`.
    """
    if isinstance(message, UserMessage):
        return message
    if not isinstance(message, str) or not message.strip():
        raise UsageError("a prompt must be a non-empty string or a UserMessage")
    return user_text(message)


def held_batch(
    messages: Sequence[Message],
    pending: tuple[Sequence[PendingCall], Sequence[ToolResultMessage]] | None,
) -> PendingBatch:
    """The batch a history restored in ``awaiting_approval`` holds: ``pending`` (its waiting
    calls and the results it already has) on the last message's tool calls.

    Raises:
        UsageError: no pending calls, or they do not belong to the last message.
    """
    last = messages[-1] if messages else None
    calls, results = pending or ((), ())
    ids = {c.id for c in getattr(last, "tool_calls", [])}
    if not isinstance(last, AssistantMessage) or not calls:
        raise UsageError("awaiting_approval needs the pending calls of the last message")
    if not {c.id for c in calls} <= ids or not {r.tool_call_id for r in results} <= ids:
        raise UsageError("the pending calls are not calls of the last message")
    return PendingBatch(last, {r.tool_call_id: r for r in results}, list(calls))
