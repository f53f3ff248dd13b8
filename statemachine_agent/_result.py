"""`RunResult`: how a run ended. Expected endings are states here, not exceptions."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ._hooks import PendingCall
from ._limits import LimitHit, RunCounts
from ._messages import (
    CONTINUE_PROMPT,
    TRUNCATING_STOP_REASONS,
    AssistantMessage,
    Message,
    ToolResultMessage,
    Usage,
    UserMessage,
)
from ._states import State


@dataclass(frozen=True)
class RunResult:
    """The outcome of one run.

    Attributes:
        state: where the run stopped: ``done``, ``aborted``, ``max_turns``, ``failed``, or
            ``awaiting_approval`` (calls wait for a decision: see ``pending``).
        messages: the whole history after the run.
        new_messages: the messages this run added (the prompt included).
        turns: completed turns of this run (a run continued without a prompt keeps counting;
            see ``counts``).
        usage: tokens of the responses this ``run()`` call got, prompt-cache reads and writes
            included (a run continued over several calls: each call's own; the run's total is
            ``counts.usage``).
        stop_reason: the stop reason of the last response.
        error: why the run did not end ``done`` (or what to know about how it did), else None.
        refusal: the provider's refusal details (category, explanation) when the model refused.
        pending: in ``awaiting_approval``, the deferred calls waiting for a decision (id, tool
            name, arguments, reason), in declaration order; empty otherwise.
        final_text: the text of the tool result that ended the run (``terminate=True``), if one
            did; `text` returns it.
        run_id: the run's id (the ``run_id`` of its events; see `RunHandle`).
        output: once ``done``: the validated instance of the agent's ``output_type``, or the
            text answer (`text`) when it has none; None when the run did not finish.
        counts: what the run counted toward its limits (turns, requests, tool calls, tokens),
            from its first prompt on: a run continued without a prompt goes on from them, in
            this process or after `Agent.resume` (the session log records them).
        limit_exceeded: the token limit (`UsageLimits`) the run's usage went past, with its
            value and the tokens used (``excess`` says by how much), else None. A final answer
            that takes the run past a token limit ends ``done`` and is kept (it was paid for);
            ``error`` then says "the max_total_tokens limit (1000) was exceeded by 200 tokens".
    """

    state: State
    messages: list[Message] = field(repr=False)
    new_messages: list[Message] = field(repr=False)
    turns: int
    usage: Usage
    stop_reason: str | None = None
    error: str | None = None
    refusal: dict[str, Any] | None = None
    pending: tuple[PendingCall, ...] = ()
    final_text: str | None = field(default=None, repr=False)
    run_id: str = ""
    output: Any = field(default=None, repr=False)
    counts: RunCounts = field(default=RunCounts(), repr=False)
    limit_exceeded: LimitHit | None = None

    @property
    def text(self) -> str:
        """The final answer, exactly as streamed: the text of the run's last response joined with
        the responses it continues (a ``pause_turn`` continuation, and a response cut by
        ``max_tokens`` that the engine asked to continue), whitespace-only blocks included; or the
        text of the tool result marked ``terminate=True`` that ended the run."""
        if self.final_text is not None:
            return self.final_text
        return answer_text(self.new_messages)

    @property
    def ok(self) -> bool:
        """The run ended ``done``."""
        return self.state is State.DONE


def _is_continuation(messages: Sequence[Message], i: int) -> bool:
    """``messages[i]`` is the engine's prompt after a truncated response without tool calls."""
    message, before = messages[i], messages[i - 1] if i > 0 else None
    return (
        isinstance(message, UserMessage)
        and message.text == CONTINUE_PROMPT
        and isinstance(before, AssistantMessage)
        and before.stop_reason in TRUNCATING_STOP_REASONS
    )


def answer_text(messages: Sequence[Message]) -> str:
    """The text answer at the end of ``messages`` (a run's new messages), as `RunResult.text`
    gives it when no result ended the run."""
    i = len(messages) - 1
    while i >= 0 and isinstance(messages[i], ToolResultMessage):
        i -= 1
    parts: list[str] = []
    while i >= 0:
        message = messages[i]
        if isinstance(message, AssistantMessage):
            parts.append(message.text)
            i -= 1
        elif _is_continuation(messages, i):
            i -= 1  # the engine's "continue" prompt: the answer goes on across it
        else:
            break
    return "".join(reversed(parts))
