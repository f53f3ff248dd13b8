"""Context accounting: how much of the model's context window the history uses.

After each response the agent knows what the provider counted for that request (the response's
input + cache read + cache write tokens); what the history gained since (the response itself, tool
results, queued input) is estimated from its size. With no count yet (a fresh or compacted
history, or a model that reports no usage), the whole history is estimated.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from pydantic_core import PydanticSerializationError

from ._messages import Message, Usage

CHARS_PER_TOKEN = 4
"""The estimate's ratio: about 4 characters of a message's JSON per token (English text and code
under Claude's tokenizer; an estimate, never a count)."""


def estimate_tokens(messages: Sequence[Message]) -> int:
    """Estimated tokens of ``messages``: the characters of each message's JSON divided by
    `CHARS_PER_TOKEN`, rounded up per message."""
    return sum(_estimate(m) for m in messages)


def _estimate(message: Message) -> int:
    try:
        size = len(message.model_dump_json())
    except PydanticSerializationError:  # a lone surrogate (kept as received): count its repr
        size = len(repr(message.model_dump()))
    return -(-size // CHARS_PER_TOKEN)


def reported_context(usage: Usage) -> int:
    """The context a response's request used: input + cache read + cache write tokens."""
    return usage.input_tokens + usage.cache_read_tokens + usage.cache_write_tokens


@dataclass(frozen=True, slots=True)
class ContextUsage:
    """How much context the history uses (``agent.context_usage``, ``TurnEnd.context``).

    Attributes:
        tokens: ``reported + estimated``: what the next request would hold (system prompt and
            tool definitions are in ``reported`` once a response came back).
        reported: tokens the provider counted for the last request (input + cache read + cache
            write); 0 when nothing was counted since the history was set or compacted.
        estimated: tokens estimated for the messages added since (`estimate_tokens`), or for
            the whole history when ``reported`` is 0.
        window: the model's context window in tokens (``model.context_window``), None if unknown.
    """

    tokens: int
    reported: int
    estimated: int
    window: int | None = None

    @property
    def fraction(self) -> float | None:
        """``tokens / window`` (None when the window is unknown)."""
        return None if not self.window else self.tokens / self.window


class ContextMeter:
    """The agent's running account: the last reported count, where the estimate starts, and
    the running estimate of each prefix of the history (each message is estimated once).

    ``mark`` is the index of the first message after the last counted request (the response to
    it included); ``reported`` is 0 when nothing counts (then the whole history is estimated).
    """

    __slots__ = ("_last", "_prefix", "_source", "mark", "reported")

    def __init__(self) -> None:
        self.reported = 0
        self.mark = 0
        self._source: object = None  # the history list the counts and prefix sums belong to
        self._prefix: list[int] = [0]  # _prefix[i]: estimated tokens of messages[:i]
        self._last: Message | None = None  # the message the last prefix sum ends with

    def counted(self, messages: Sequence[Message], usage: Usage) -> None:
        """A response to a request over ``messages`` (before the response was appended) came
        back with ``usage``."""
        self._follow(messages)
        self.reported = reported_context(usage)
        self.mark = len(messages)

    def reset(self) -> None:
        """The history was replaced (compacted, or set): estimate all of it until the next count."""
        self.reported, self.mark, self._source = 0, 0, None
        self._prefix, self._last = [0], None

    def _follow(self, messages: Sequence[Message]) -> None:
        """Bring the prefix sums up to date with ``messages`` (appended to since the last call,
        or a new list: then start over)."""
        done = len(self._prefix) - 1
        if (
            messages is not self._source
            or done > len(messages)
            or (done and messages[done - 1] is not self._last)
        ):
            self.reported, self.mark, self._source = 0, 0, messages
            self._prefix, self._last, done = [0], None, 0
        prefix = self._prefix
        for message in messages[done:]:
            prefix.append(prefix[-1] + _estimate(message))
        if messages:
            self._last = messages[-1]

    def usage(self, messages: Sequence[Message], window: int | None) -> ContextUsage:
        """The `ContextUsage` of ``messages`` (the history the meter has been following)."""
        self._follow(messages)
        total = self._prefix[-1]
        if self.reported:
            estimated = total - self._prefix[self.mark]
            return ContextUsage(self.reported + estimated, self.reported, estimated, window)
        return ContextUsage(total, 0, total, window)
