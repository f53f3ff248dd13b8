"""What each request must carry: the oracle's projection of the history at the moment it was
sent (`expected_request`), and `request_problems`, which compares every request of a run with it.

The projection's rules, as the loop's documentation states them (the context projection, rule 4
of the protocol): blank text and then-empty messages are dropped; an aborted or errored response
keeps only its text and is dropped when it is the last message or another response follows it;
each call gets the first result answering it, in declaration order (a synthetic "no result
recorded" error where none does), and results answering no call of the response before them are
dropped; consecutive responses (a ``pause_turn`` and its continuation) are joined into one, the
paused response's content first. A ``transform_context`` hook's output is projected the same way.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

# Public names only (the engine's internals may change under it): the oracle sees the loop as a
# user does.
from ... import (
    AssistantMessage,
    Message,
    TextBlock,
    ToolCallBlock,
    ToolResultMessage,
    UserMessage,
)
from .texts import NO_RESULT_TEXT

Shown = tuple[Any, ...]
"""A message as the comparison shows it: ``("user", text)``, ``("assistant", blocks)`` with
``("text", text)`` and ``("call", id, name)`` blocks, ``("result", call id, text, is_error)``."""

_INCOMPLETE = ("aborted", "error")


def _blocks(message: AssistantMessage, *, text_only: bool) -> list[Shown]:
    out: list[Shown] = []
    for block in message.content:
        if isinstance(block, TextBlock):
            if block.text.strip():
                out.append(("text", block.text))
        elif isinstance(block, ToolCallBlock) and not text_only:
            out.append(("call", block.id, block.name))
        elif not text_only:
            out.append((type(block).__name__,))
    return out


def shown(message: Message) -> Shown:
    """``message`` as the comparison shows it (`Shown`)."""
    if isinstance(message, ToolResultMessage):
        return ("result", message.tool_call_id, message.text, message.is_error)
    if isinstance(message, AssistantMessage):
        return ("assistant", tuple(_blocks(message, text_only=False)))
    return ("user", message.text)


def expected_request(history: Sequence[Message], note: str | None = None) -> list[Shown]:
    """The messages a request sent with ``history`` must carry (the module's rules); ``note``: a
    ``transform_context`` hook put this user message first."""
    messages: list[Message] = [*([UserMessage(note)] if note is not None else []), *history]
    out: list[Shown] = []
    complete: list[bool] = []  # per message of out: a complete response (joinable)
    n, i = len(messages), 0
    while i < n:
        message = messages[i]
        i += 1
        if isinstance(message, ToolResultMessage):
            continue  # answers no call of the response before its batch
        if isinstance(message, UserMessage):
            if message.text.strip():
                out.append(("user", message.text))
                complete.append(False)
            continue
        assert isinstance(message, AssistantMessage)
        incomplete = str(message.stop_reason) in _INCOMPLETE
        blocks = _blocks(message, text_only=incomplete)
        if not blocks:
            continue
        if incomplete and (i == n or isinstance(messages[i], AssistantMessage)):
            continue  # cut off, then replaced by what follows
        if out and out[-1][0] == "assistant":
            previous, was_complete = out.pop(), complete.pop()
            if was_complete:  # a continuation: joined after the paused response's content
                blocks = [*previous[1], *blocks]
        out.append(("assistant", tuple(blocks)))
        complete.append(not incomplete)
        calls = [b for b in blocks if b[0] == "call"]
        if not calls:
            continue
        wanted = {b[1] for b in calls}
        found: dict[str, Shown] = {}
        while i < n and isinstance(messages[i], ToolResultMessage):
            result = messages[i]
            assert isinstance(result, ToolResultMessage)
            if result.tool_call_id in wanted and result.tool_call_id not in found:
                found[result.tool_call_id] = shown(result)
            i += 1
        for call in calls:
            out.append(found.get(call[1]) or ("result", call[1], NO_RESULT_TEXT, True))
            complete.append(False)
    return out


def request_problems(
    sent: Sequence[tuple[Sequence[Message], Sequence[Message]]], note: str | None
) -> list[str]:
    """Every request of ``sent`` (the history when it was sent, the request's messages) whose
    messages are not `expected_request` of that history, naming the first difference."""
    problems: list[str] = []
    for k, (history, request) in enumerate(sent, 1):
        want = expected_request(history, note)
        got = [shown(m) for m in request]
        if got == want:
            continue
        at = next((j for j, (a, b) in enumerate(zip(got, want, strict=False)) if a != b), None)
        if at is None:
            at = min(len(got), len(want))
        problems.append(
            f"request {k} sent {len(got)} messages, the projection of the history has "
            f"{len(want)}; first difference at message {at}: sent "
            f"{got[at] if at < len(got) else None}, expected {want[at] if at < len(want) else None}"
        )
    return problems
