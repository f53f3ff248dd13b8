"""The tool-use protocol: its rules, the texts that answer a call that could not run, and the checker.

The rules come from the Anthropic tool-use protocol (each ``tool_use`` answered by a ``tool_result``
in the next user message, results first) and from what the Messages API rejects (empty text blocks,
empty messages, a request not ending in a user message). Every history the engine leaves keeps them:

1. Each assistant message with tool calls ``c1..cn`` is followed directly by exactly one result for
   each, in declaration order (``c1..cn``), before any other message.
2. No result answers a call outside the assistant message directly before its batch.
3. No tool-call id appears twice in a history.
4. An aborted or errored (partial) assistant message holds no tool call; and in a request, no
   empty or whitespace-only text block (a stored history keeps them as streamed), no empty message,
   and the last message is from the user side (a user message or tool results), except a
   ``pause_turn`` continuation.
5. A ``pause_turn`` assistant message without tool calls is continued, never answered: the next
   message that is not a partial (aborted or errored) response is not a user message (the API
   refuses server tool uses left without their results).

A call that cannot run still gets its result: the placeholder texts below say why (it was cut off,
refused, not reached, interrupted, or the run ended first), and `answer_dangling` answers the calls
left open when a run ends or a history is loaded.
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
    text_result,
)

INCOMPLETE_STOP_REASONS = (StopReason.ABORTED, StopReason.ERROR)
"""Stop reasons of a partial assistant message (cut off by an abort or a failure)."""
_B = TypeVar("_B")

# -- the results of calls that did not run (or did not finish) -------------------------------

NOT_RUN = "Not run: the run was aborted before this call started."
INTERRUPTED = (
    "Interrupted while running: the run was aborted. The call may have partly completed; "
    "check its effects before retrying."
)
TRUNCATED = (
    "Not run: the arguments of this call were truncated because the response hit its token "
    "limit (max_tokens). Call the tool again with complete arguments, or split the work into "
    "smaller calls."
)
REFUSED = "Not executed: the model's response was a refusal."
STOPPED_NOT_RUN = (
    "Not run: the response was cut off by the output token limit (max_tokens) and "
    'max_tokens_policy is "stop", so the run ended without running its tool calls.'
)
NOT_RUN_PENDING = "Not run: the run was aborted while this call was awaiting approval."
AFTER_TERMINATION = "Not run: an earlier call of this batch ended the run."
NO_RESULT = (
    "no result recorded: the run ended before this call finished; it may or may not have run; "
    "check before retrying"
)
"""The result of a call that has none in a loaded history (a crash mid-batch)."""
NO_OUTPUT = "(no output)"
EMPTY_OUTPUT = "(empty output)"


def unknown_stop_reason_text(stop_reason: str) -> str:
    """The result of a call in a response whose stop reason this library does not know."""
    return (
        f"Not run: the response's stop reason {stop_reason!r} is not known, so its tool calls "
        "were not executed."
    )


def ended_text(state: str, transition: str) -> str:
    """The result of a call left open when a transition ended the run (a user's transition into
    a terminal state, for example)."""
    return f"Not run: the run ended in state {state} by transition {transition!r}."


def branch_text(state: str, transition: str) -> str:
    """The result of a call left open when a transition led the run elsewhere than its tool
    batch (a user's branch on ``model_replied`` into ``awaiting_model`` or a state of its own),
    given before the next message or request so the stored history keeps rule 1."""
    return (
        f"Not run: the run took the branch {transition!r} into state {state} instead of running "
        "this call."
    )


# -- blank text: stored as it came, never sent -------------------------------------------------


def is_blank(block: object) -> bool:
    """A text block holding nothing but whitespace (or nothing).

    The Messages API rejects such a block in a request ("text content blocks must contain
    non-whitespace text"). A stored history keeps them as the model streamed them (so a response's
    text is what the model said); they are removed only when a request is built
    (`without_blank_text`, applied by the context projection and the request encoder). This is the
    one definition of the rule.
    """
    return getattr(block, "type", None) == "text" and not block.text.strip()  # type: ignore[attr-defined]


def without_blank_text(blocks: Sequence[_B], placeholder: str | None = None) -> list[_B]:
    """``blocks`` without whitespace-only text blocks; when nothing is left and ``placeholder``
    is given, one text block holding it (a tool result must not be empty)."""
    kept: list[_B] = []
    for block in blocks:  # a loop: a comprehension is a function call (see `_messages`)
        if not is_blank(block):
            kept.append(block)
    if not kept and placeholder is not None:
        kept = [TextBlock(text=placeholder)]  # type: ignore[list-item]
    return kept


# -- answering open calls ----------------------------------------------------------------------


def answer_dangling(messages: Sequence[Message], text: str = NO_RESULT) -> list[ToolResultMessage]:
    """Error results for the calls of the last assistant message that have no result after it (a
    history that ended mid-batch, or a run ended before its batch ran), in declaration order;
    empty when nothing is owed. Each result's text is ``text``."""
    answered: set[str] = set()
    for message in reversed(messages):
        if isinstance(message, ToolResultMessage):
            answered.add(message.tool_call_id)
        elif isinstance(message, AssistantMessage):
            if message.stop_reason in INCOMPLETE_STOP_REASONS:
                return []
            return [
                text_result(call, text, is_error=True)
                for call in message.tool_calls
                if call.id not in answered
            ]
        else:
            return []
    return []


def find_violations(
    messages: Sequence[Message],
    *,
    request: bool = False,
    prior_ids: Collection[str] = frozenset(),
    offset: int = 0,
) -> list[str]:
    """List every violation of rules 1-5 (module docstring) in ``messages``, each naming its index.

    Args:
        messages: the history (or, with ``prior_ids``, the tail after a checked prefix that ended
            with every call answered).
        request: also apply the rules for what is sent to a provider: no blank text blocks (a
            stored history keeps them as streamed, see `is_blank`), no empty messages, the
            last message from the user side unless it is a ``pause_turn`` continuation.
        prior_ids: tool-call ids of an already checked prefix (for the duplicate-id rule).
        offset: index of ``messages[0]`` in the whole history (for the messages).
    """
    problems: list[str] = []
    seen: set[str] = set()
    pending: list[str] = []  # ids of the open batch still owed a result, in declaration order
    batch_ids: set[str] = set()  # ids of the assistant message directly before the batch
    paused: int | None = None  # index of a pause_turn message not continued yet
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
        if isinstance(message, UserMessage) and paused is not None:
            problems.append(
                f"message {i}: user message after the pause_turn response at message {paused} "
                "(a paused response is continued by sending it back as it is, not answered)"
            )
        if not isinstance(message, AssistantMessage):
            paused = None
        elif message.stop_reason == StopReason.PAUSE_TURN and not message.tool_calls:
            paused = i
        elif message.stop_reason not in INCOMPLETE_STOP_REASONS:
            paused = None
        if isinstance(message, AssistantMessage):
            calls = message.tool_calls
            if calls and message.stop_reason in INCOMPLETE_STOP_REASONS:
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
    if request and not messages and not prior_ids:
        problems.append(
            "the request holds no message (the Messages API requires at least one, ending with "
            "a user message or tool results)"
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
        if is_blank(block):
            problems.append(f"message {index}: block {j} is an empty or whitespace-only text")


def assert_valid_history(messages: Sequence[Message], *, request: bool = False) -> None:
    """Check the protocol's rules 1-5 on a history.

    1. each assistant message with calls ``c1..cn`` is followed directly by the results of
       ``c1..cn`` in that order; 2. no result answers a call outside the assistant message directly
    before its batch; 3. no tool-call id appears twice; 4. no aborted or errored assistant message
    with tool calls, and with ``request=True`` (what is sent) no blank text block, no empty message
    and the last message from the user side (except a ``pause_turn`` continuation). A stored
    history may hold blank text blocks: they are kept as the model streamed them; 5. a
    ``pause_turn`` response is not followed by a user message (it is continued).

    Raises:
        InvalidHistoryError: listing every violation with its message index.
    """
    problems = find_violations(messages, request=request)
    if problems:
        raise InvalidHistoryError(problems)


def is_user_side(message: Message) -> bool:
    """A user message or a tool result: what a request may end with."""
    return message.role != "assistant"  # (not isinstance: see `_messages`)


def with_open_batch(
    messages: Sequence[Message],
    held: Sequence[ToolResultMessage],
    waiting: Collection[str],
) -> list[Message]:
    """``messages`` as the protocol sees them while the last message's batch waits for decisions
    (``awaiting_approval``): its held results and a placeholder for each waiting call, in
    declaration order, so the rules can be checked on what the batch will become."""
    out = list(messages)
    last = out[-1] if out else None
    if not isinstance(last, AssistantMessage):
        return out
    by_id = {r.tool_call_id: r for r in held}
    for call in last.tool_calls:
        if call.id in by_id:
            out.append(by_id[call.id])
        elif call.id in waiting:
            out.append(text_result(call, "(awaiting approval)"))
    return out
