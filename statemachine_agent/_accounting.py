"""Context accounting: how much of the model's context window the history uses.

After each response the agent knows what the provider counted for that request (the response's
input + cache read + cache write tokens); what the history gained since (the response itself, tool
results, queued input) is estimated from its size. With no count yet (a fresh or compacted
history, or a model that reports no usage), the whole history is estimated.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

from ._messages import (
    ImageBlock,
    Message,
    ProviderBlock,
    TextBlock,
    ThinkingBlock,
    ToolCallBlock,
    Usage,
)

CHARS_PER_TOKEN = 4
"""The estimate's ratio: about 4 characters per token (English text, code and JSON under
Claude's tokenizer; an estimate, never a count)."""

MESSAGE_OVERHEAD_CHARS = 16
"""Characters counted for each message and each tool call besides their text (role, ids, framing)."""

IMAGE_TOKENS = 1_600
"""Tokens counted for an image (about what a 1,092 x 1,092 px image costs)."""


def estimate_tokens(messages: Sequence[Message]) -> int:
    """Estimated tokens of ``messages``, each rounded up: the characters of its text (text and
    thinking blocks, a tool call's name and arguments (as streamed, else ``str()`` of the parsed
    ones: about their JSON's length), a result's text, a provider block's JSON) plus `MESSAGE_OVERHEAD_CHARS` per message and per tool call, divided by
    `CHARS_PER_TOKEN`; an image counts `IMAGE_TOKENS`."""
    return sum(_estimate(m) for m in messages)


def _estimate(message: Message) -> int:
    chars = MESSAGE_OVERHEAD_CHARS
    images = 0
    for block in message.content:
        if isinstance(block, TextBlock):
            chars += len(block.text)
        elif isinstance(block, ToolCallBlock):
            arguments = block.raw_arguments
            # str() of the parsed arguments: about their JSON's length, and cheaper than encoding
            size = len(arguments) if arguments is not None else len(str(block.input))
            chars += MESSAGE_OVERHEAD_CHARS + len(block.name) + size
        elif isinstance(block, ThinkingBlock):
            chars += len(block.thinking)
        elif isinstance(block, ImageBlock):
            images += 1
        elif isinstance(block, ProviderBlock):
            chars += len(json.dumps(block.data, default=str))
    return -(-chars // CHARS_PER_TOKEN) + images * IMAGE_TOKENS


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
    ``generation`` changes whenever the prefix sums start over (a new or replaced history).
    """

    __slots__ = ("_last", "_prefix", "_source", "generation", "mark", "reported")

    def __init__(self) -> None:
        self.reported = 0
        self.mark = 0
        self.generation = 0
        self._source: object = None  # the history list the counts and prefix sums belong to
        self._prefix: list[int] = [0]  # _prefix[i]: estimated tokens of messages[:i]
        self._last: Message | None = None  # the message the last prefix sum ends with

    def counted(self, messages: Sequence[Message], usage: Usage) -> None:
        """A response to a request over ``messages`` (before the response was appended) came
        back with ``usage``. Nothing is estimated here: `usage` does it when asked."""
        if messages is not self._source:
            self._source, self._prefix, self._last = messages, [0], None
            self.generation += 1
        self.reported = reported_context(usage)
        self.mark = len(messages)

    def reset(self) -> None:
        """The history was replaced (compacted, or set): estimate all of it until the next count."""
        self.reported, self.mark, self._source = 0, 0, None
        self._prefix, self._last = [0], None
        self.generation += 1

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
            self.generation += 1
        prefix = self._prefix
        for message in messages[done:]:
            prefix.append(prefix[-1] + _estimate(message))
        if messages:
            self._last = messages[-1]

    def usage(self, messages: Sequence[Message], window: int | None) -> ContextUsage:
        """The `ContextUsage` of ``messages`` (the history the meter has been following)."""
        reported = self.reported
        estimated = self._estimated(messages, len(messages), self.mark if reported else 0)
        return ContextUsage(reported + estimated, reported, estimated, window)

    def _estimated(self, messages: Sequence[Message], size: int, start: int) -> int:
        """Estimated tokens of ``messages[start:size]`` from the prefix sums (brought up to date
        with ``messages``)."""
        self._follow(messages)
        return self._prefix[size] - self._prefix[start]

    def deferred(self, messages: Sequence[Message], window: int | None) -> ContextUsage:
        """The `ContextUsage` of ``messages`` as it is now, estimated only when it is read (a
        ``turn_end`` event's: most subscribers never look, and the estimate is the cost)."""
        usage = _DeferredContextUsage.__new__(_DeferredContextUsage)  # (its figure is not made)
        at = (self, messages, len(messages), self.mark, self.generation, self.reported, window)
        _SET_AT(usage, at)
        return usage


class _DeferredContextUsage(ContextUsage):
    """A `ContextUsage` of the history at one moment whose estimate is made when first read.

    It compares, hashes, prints, copies and pickles as the `ContextUsage` it stands for.
    """

    __slots__ = ("_at", "_figure")
    # What the figure is made of (`ContextMeter.deferred`), None once it is made; ``_figure`` is
    # set only then.
    _at: tuple[ContextMeter, Sequence[Message], int, int, int, int, int | None] | None
    _figure: tuple[int, int, int, int | None]

    def __init__(
        self, tokens: int, reported: int, estimated: int, window: int | None = None
    ) -> None:
        # A figure already made (``dataclasses.replace`` builds one this way).
        object.__setattr__(self, "_at", None)
        object.__setattr__(self, "_figure", (tokens, reported, estimated, window))

    def _fields(self) -> tuple[int, int, int, int | None]:
        at = self._at
        if at is not None:
            meter, messages, size, mark, generation, reported, window = at
            start = mark if reported else 0
            if meter.generation == generation and (
                meter._source is messages or meter._source is None
            ):
                # The prefix sums still describe this history.
                estimated = meter._estimated(messages, size, start)
            else:  # the history was replaced since: estimate the part this figure covers
                estimated = estimate_tokens(messages[start:size])
            figure = (reported + estimated, reported, estimated, window)
            object.__setattr__(self, "_figure", figure)
            object.__setattr__(self, "_at", None)  # the figure is final: let the rest go
            return figure
        return self._figure

    @property
    def tokens(self) -> int:
        """See `ContextUsage.tokens`."""
        return self._fields()[0]

    @property
    def reported(self) -> int:
        """See `ContextUsage.reported`."""
        return self._fields()[1]

    @property
    def estimated(self) -> int:
        """See `ContextUsage.estimated`."""
        return self._fields()[2]

    @property
    def window(self) -> int | None:
        """See `ContextUsage.window`."""
        return self._fields()[3]

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ContextUsage):
            return NotImplemented
        return self._fields() == (other.tokens, other.reported, other.estimated, other.window)

    def __hash__(self) -> int:
        return hash(self._fields())

    def __repr__(self) -> str:
        return repr(ContextUsage(*self._fields()))

    def __reduce__(self) -> tuple[type[ContextUsage], tuple[int, int, int, int | None]]:
        return ContextUsage, self._fields()


_SET_AT = _DeferredContextUsage.__dict__["_at"].__set__  # (`ContextMeter.deferred`: it is frozen)
