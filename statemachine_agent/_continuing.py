"""What a run given no prompt continues from: a response cut by the output token limit or the
context window is continued with a user message (`continuation_of`); a history that ends with
the model's answer has nothing to continue (`continue_refusal`)."""

from __future__ import annotations

from collections.abc import Sequence

from ._compaction_config import CONTINUE_AFTER_WINDOW
from ._messages import CONTINUE_PROMPT, AssistantMessage, Message, StopReason, UserMessage


def continuation_of(messages: Sequence[Message]) -> UserMessage | None:
    """The user message that continues a history ending with a response cut by the output
    token limit or the context window (no tool call), or None when it does not end so."""
    last = messages[-1] if messages else None
    if not isinstance(last, AssistantMessage) or last.tool_calls:
        return None
    if last.stop_reason == StopReason.MAX_TOKENS:
        return UserMessage(CONTINUE_PROMPT)
    if last.stop_reason == StopReason.MODEL_CONTEXT_WINDOW_EXCEEDED:
        return UserMessage(CONTINUE_AFTER_WINDOW)
    return None


def continue_refusal(messages: Sequence[Message]) -> str | None:
    """Why a run without a prompt (and with no queued input or decisions) has nothing to
    continue from ``messages``, or None when it can continue: the rule `Agent.run` applies
    (also checked by the CLI before it opens a session log, so a refusal changes no file).

    Args:
        messages: the history, as a resumed agent would start from it.

    Returns:
        The `UsageError` message, or None.
    """
    last = messages[-1] if messages else None
    if last is None:
        return "nothing to continue: the history is empty; pass a prompt"
    if (
        isinstance(last, AssistantMessage)
        and last.stop_reason not in (StopReason.ABORTED, StopReason.ERROR, StopReason.PAUSE_TURN)
        and not last.tool_calls
        and continuation_of(messages) is None  # a cut answer is continued
    ):
        return "nothing to continue: the history ends with the model's answer; pass a prompt"
    return None
