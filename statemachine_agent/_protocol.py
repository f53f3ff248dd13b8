"""The tool-use protocol checker: DESIGN invariants 1-4 over a history, every violation at once.

The rules come from the Anthropic tool-use protocol (each ``tool_use`` answered by a ``tool_result``
in the next user message, results first) and from what the Messages API rejects (empty text blocks,
empty messages, a request not ending in a user message).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import TypeVar

from ._errors import InvalidHistoryError
from ._messages import (
    AssistantMessage,
    Message,
    StopReason,
    TextBlock,
    ToolResultMessage,
    UserMessage,
)

_INCOMPLETE = (StopReason.ABORTED, StopReason.ERROR)

_B = TypeVar("_B")


def is_blank_text(block: object) -> bool:
    """A text block holding nothing but whitespace (or nothing).

    The Messages API rejects such a block in a request ("text content blocks must contain
    non-whitespace text"). A stored history keeps them as the model streamed them (so a response's
    text is what the model said); they are removed only when a request is built
    (`without_blank_text`, applied by the context projection and the request encoder). This is the
    one definition of the rule.
    """
    return isinstance(block, TextBlock) and not block.text.strip()


def without_blank_text(content: Sequence[_B]) -> list[_B]:
    """``content`` without its blank text blocks (see `is_blank_text`); the same blocks otherwise."""
    return [block for block in content if not is_blank_text(block)]


def find_violations(
    messages: Sequence[Message],
    *,
    request: bool = False,
    prior_ids: Collection[str] = frozenset(),
    offset: int = 0,
) -> list[str]:
    """List every violation of DESIGN invariants 1-4 in ``messages``, each naming its index.

    Args:
        messages: the history (or, with ``prior_ids``, the tail after a checked prefix that ended
            with every call answered).
        request: also apply the rules for what is sent to a provider: no blank text blocks (a
            stored history keeps them as streamed, see `is_blank_text`), no empty messages, the
            last message from the user side unless it is a ``pause_turn`` continuation.
        prior_ids: tool-call ids of an already checked prefix (for the duplicate-id rule).
        offset: index of ``messages[0]`` in the whole history (for the messages).
    """
    problems: list[str] = []
    seen: set[str] = set()
    pending: list[str] = []  # ids of the open batch still owed a result, in declaration order
    batch_ids: set[str] = set()  # ids of the assistant message directly before the batch
    for i, message in enumerate(messages, start=offset):
        if isinstance(message, ToolResultMessage):
            if message.tool_call_id not in batch_ids:
                problems.append(
                    f"message {i}: tool result for {message.tool_call_id!r} answers no call of "
                    "the assistant message before its batch"
                )
            elif not pending or pending[0] != message.tool_call_id:
                expected = pending[0] if pending else "nothing"
                problems.append(
                    f"message {i}: tool result for {message.tool_call_id!r} out of order or "
                    f"repeated (expected {expected!r})"
                )
                if message.tool_call_id in pending:
                    pending.remove(message.tool_call_id)
            else:
                pending.pop(0)
            if request:
                _check_text(message.content, i, problems)
            continue
        if pending:
            problems.append(
                f"message {i}: {message.role} message before the results of "
                f"{', '.join(repr(p) for p in pending)} (each call must be answered directly "
                "after its assistant message)"
            )
            pending = []
        batch_ids = set()
        if isinstance(message, AssistantMessage):
            calls = message.tool_calls
            if calls and message.stop_reason in _INCOMPLETE:
                problems.append(
                    f"message {i}: {message.stop_reason} assistant message holds tool calls (a "
                    "partial response must not be replayed as complete)"
                )
            for call in calls:
                if call.id in seen or call.id in prior_ids:
                    problems.append(f"message {i}: tool-call id {call.id!r} appears twice")
                seen.add(call.id)
                pending.append(call.id)
            batch_ids = {call.id for call in calls}
        if request:
            _check_text(message.content, i, problems)
        if request and not message.content:
            problems.append(f"message {i}: empty {message.role} message")
    if pending:
        problems.append(
            f"message {offset + len(messages) - 1}: calls {', '.join(repr(p) for p in pending)} "
            "have no result"
        )
    if request and messages:
        last = messages[-1]
        if isinstance(last, AssistantMessage) and last.stop_reason != StopReason.PAUSE_TURN:
            problems.append(
                f"message {offset + len(messages) - 1}: a request must end with a user message "
                "or tool results"
            )
    return problems


def _check_text(content: Sequence[object], index: int, problems: list[str]) -> None:
    for j, block in enumerate(content):
        if is_blank_text(block):
            problems.append(f"message {index}: block {j} is an empty or whitespace-only text")


def assert_valid_history(messages: Sequence[Message], *, request: bool = False) -> None:
    """Check DESIGN invariants 1-4 on a history.

    1. each assistant message with calls ``c1..cn`` is followed directly by the results of
       ``c1..cn`` in that order; 2. no result answers a call outside the assistant message directly
    before its batch; 3. no tool-call id appears twice; 4. no aborted or errored assistant message
    with tool calls, and with ``request=True`` (what is sent) no blank text block, no empty message
    and the last message from the user side (except a ``pause_turn`` continuation). A stored
    history may hold blank text blocks: they are kept as the model streamed them.

    Raises:
        InvalidHistoryError: listing every violation with its message index.
    """
    problems = find_violations(messages, request=request)
    if problems:
        raise InvalidHistoryError(problems)


def is_user_side(message: Message) -> bool:
    """A user message or a tool result: what a request may end with."""
    return isinstance(message, UserMessage | ToolResultMessage)
