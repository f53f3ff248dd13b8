"""Messages of a history: pydantic models discriminated by ``role`` and blocks by ``type``.

A history is a ``list[Message]``. It is append-only in the engine: a message is never mutated after it
has been appended, which lets the context projection and the provider adapters cache per message.
``HISTORY_ADAPTER`` round-trips a whole history to JSON and back unchanged.

The engine's per-turn code tells messages apart by ``role`` and blocks by ``type`` rather than
with ``isinstance`` (an ``isinstance`` on a message class that fails runs pydantic's metaclass
``__instancecheck__``: about 1.5k instructions, several times the field read); an ``isinstance``
that succeeds on the exact class is cheap and is kept where a type checker needs it.
"""

from __future__ import annotations

import json
from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    TypeAdapter,
    field_serializer,
    model_validator,
)

from ._jsonable import jsonable


class StopReason(StrEnum):
    """Why a model response ended.

    The first seven are the Anthropic Messages API values; ``aborted`` and ``error`` are recorded by the
    engine on an assistant message that did not complete. Values a provider adds later are kept as
    plain strings (see ``stop_reason`` on `AssistantMessage`), never a crash.
    """

    END_TURN = "end_turn"
    TOOL_USE = "tool_use"
    MAX_TOKENS = "max_tokens"
    STOP_SEQUENCE = "stop_sequence"
    PAUSE_TURN = "pause_turn"
    REFUSAL = "refusal"
    MODEL_CONTEXT_WINDOW_EXCEEDED = "model_context_window_exceeded"
    ABORTED = "aborted"
    ERROR = "error"


_KNOWN_STOP_REASONS = {reason.value: reason for reason in StopReason}


def is_known_stop_reason(value: str | None) -> bool:
    """``value`` is a `StopReason` (None, a missing stop reason, counts as known)."""
    return value is None or value in _KNOWN_STOP_REASONS


TRUNCATING_STOP_REASONS = frozenset(
    {StopReason.MAX_TOKENS, StopReason.MODEL_CONTEXT_WINDOW_EXCEEDED}
)
"""Stop reasons of a response cut short by a limit (continued or reported as truncated)."""

CONTINUE_PROMPT = (
    "Your response was cut off by the output token limit. Continue exactly where you stopped."
)
"""The user message the engine sends after a truncated response (``max_tokens_policy="continue"``);
`RunResult.text` joins the text around it into one answer."""


def _coerce_stop_reason(value: str | None) -> str | None:
    # Known values become the enum member (which is also a str); unknown ones are kept verbatim.
    if value is None:
        return None
    return _KNOWN_STOP_REASONS.get(value, value)


StopReasonValue = Annotated[str | None, AfterValidator(_coerce_stop_reason)]


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Usage(_Model):
    """Token usage of one response, or summed over a run (``a + b``).

    Attributes:
        input_tokens: uncached input tokens.
        output_tokens: generated tokens.
        cache_write_tokens: input tokens written to the prompt cache.
        cache_read_tokens: input tokens read from the prompt cache.
    """

    input_tokens: int = 0
    output_tokens: int = 0
    cache_write_tokens: int = 0
    cache_read_tokens: int = 0

    def __add__(self, other: Usage) -> Usage:
        if other is NO_USAGE:  # a response that reports none (frozen: the sum is ``self``)
            return self
        if self is NO_USAGE:
            return other
        return Usage(
            input_tokens=self.input_tokens + other.input_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
            cache_write_tokens=self.cache_write_tokens + other.cache_write_tokens,
            cache_read_tokens=self.cache_read_tokens + other.cache_read_tokens,
        )

    @property
    def total_tokens(self) -> int:
        """All input (cached or not) plus output tokens."""
        return (
            self.input_tokens
            + self.output_tokens
            + self.cache_write_tokens
            + self.cache_read_tokens
        )


NO_USAGE = Usage()
"""Zero tokens: the usage of a response that reports none (shared: `Usage` is frozen)."""


class TextBlock(_Model):
    """Text, as the model streamed it (whitespace-only blocks included).

    Attributes:
        text: the text.
        citations: the provider's citations of this text (e.g. Anthropic ``web_search_result_location``
            objects with ``url``, ``title``, ``cited_text``, ``encrypted_index``), kept verbatim in
            the order received and sent back unchanged; None when the block has none.
    """

    type: Literal["text"] = "text"
    text: str
    citations: list[dict[str, Any]] | None = None


class ThinkingBlock(_Model):
    """Model reasoning; ``signature`` must be sent back unchanged (Anthropic extended thinking)."""

    type: Literal["thinking"] = "thinking"
    thinking: str
    signature: str | None = None


class ImageBlock(_Model):
    """An image, inline (base64 ``data`` with its ``media_type``, e.g. ``image/png``) or by ``url``.

    Raises:
        pydantic.ValidationError: neither or both of ``data`` and ``url``, or ``data`` without a
            ``media_type`` (a provider cannot read it).
    """

    type: Literal["image"] = "image"
    media_type: str | None = None
    data: str | None = None
    url: str | None = None

    @model_validator(mode="after")
    def _one_source(self) -> ImageBlock:
        if (self.data is None) == (self.url is None):
            raise ValueError("an image needs exactly one of data (base64) or url")
        if self.data is not None and not self.media_type:
            raise ValueError("an inline image needs its media_type, e.g. 'image/png'")
        return self


class ToolCallBlock(_Model):
    """A tool call the model asked for.

    Attributes:
        id: the provider's call id; each tool result names it.
        name: the tool's name.
        input: the parsed arguments. Normally a JSON object; kept as sent when it is another JSON
            value (the engine then answers with an error result instead of running the tool).
        raw_arguments: the argument text as received, set only when it did not parse as a JSON
            object (or held a number JSON cannot hold: an ``input`` given with ``NaN`` or an
            infinite float is stored here as text, so a stored history is always JSON).
        truncated: the response ended (``max_tokens``) before this call was complete; it is never
            executed.
    """

    type: Literal["tool_call"] = "tool_call"
    id: str
    name: str
    input: Any = None
    raw_arguments: str | None = None
    truncated: bool = False

    @model_validator(mode="before")
    @classmethod
    def _json_input(cls, data: Any) -> Any:
        # An input holding NaN or an infinite float is not JSON: a history holding it could not
        # be sent again nor logged. It is kept as argument text (the call is answered with an
        # error naming the field; it never runs), as arguments that did not parse are.
        if isinstance(data, dict) and data.get("raw_arguments") is None:
            value = data.get("input")
            if isinstance(value, dict | list | float):
                from ._protocol import non_finite_at

                if non_finite_at(value) is not None:
                    data = {**data, "input": None, "raw_arguments": json.dumps(value)}
        return data


class ProviderBlock(_Model):
    """A provider block the engine does not interpret (server tool use, web search results, redacted
    thinking, ...). ``data`` is kept and sent back to its provider verbatim."""

    type: Literal["provider"] = "provider"
    provider: str = "anthropic"
    data: dict[str, Any]


ContentBlock = Annotated[
    TextBlock | ThinkingBlock | ImageBlock | ToolCallBlock | ProviderBlock,
    Field(discriminator="type"),
]
UserContent = Annotated[TextBlock | ImageBlock, Field(discriminator="type")]


class UserMessage(_Model):
    """Input from a person (a prompt, steering or a follow-up) or from the engine (a continuation).

    ``UserMessage("hi")`` is short for ``UserMessage(content=[TextBlock(text="hi")])``.
    """

    role: Literal["user"] = "user"
    content: list[UserContent]

    def __init__(self, content: str | list[Any] | None = None, /, **data: Any) -> None:
        if content is not None:
            data["content"] = content
        if isinstance(data.get("content"), str):
            data["content"] = [TextBlock(text=data["content"])]
        super().__init__(**data)

    @property
    def text(self) -> str:
        """The text blocks joined."""
        return "".join(block.text for block in self.content if isinstance(block, TextBlock))


class AssistantMessage(_Model):
    """One model response.

    Attributes:
        content: text, thinking, tool-call and provider blocks in the order the model sent them.
        stop_reason: a `StopReason` value, or an unknown provider value kept as a string.
        stop_sequence: the matched stop sequence when ``stop_reason`` is ``stop_sequence``.
        stop_details: provider details of the stop (for a refusal: its category and explanation).
        usage: tokens of this response.
        model: the model name the provider reported.
        error: why the response did not complete (with stop reason ``error`` or ``aborted``).
    """

    role: Literal["assistant"] = "assistant"
    content: list[ContentBlock] = Field(default_factory=list)
    stop_reason: StopReasonValue = None
    stop_sequence: str | None = None
    stop_details: dict[str, Any] | None = None
    usage: Usage = NO_USAGE  # frozen: one shared zero (a factory was a model built per message)
    model: str | None = None
    error: str | None = None

    @property
    def tool_calls(self) -> list[ToolCallBlock]:
        """The tool-call blocks, in declaration order."""
        return [block for block in self.content if isinstance(block, ToolCallBlock)]

    @property
    def text(self) -> str:
        """The text blocks joined."""
        return "".join(block.text for block in self.content if isinstance(block, TextBlock))


class ToolResultMessage(_Model):
    """The result of one tool call.

    Attributes:
        tool_call_id: the ``id`` of the `ToolCallBlock` it answers.
        tool_name: the name of the tool called.
        content: what the model reads.
        is_error: the call failed; ``content`` says why and how to fix it.
        details: structured data for the application (not sent to the model). In JSON (the
            session log, `HISTORY_ADAPTER`) it is written as JSON-ready data that never fails:
            what pydantic cannot serialize becomes a marker naming its type (``jsonable``).
    """

    role: Literal["tool_result"] = "tool_result"
    tool_call_id: str
    tool_name: str
    content: list[UserContent] = Field(default_factory=list)
    is_error: bool = False
    details: Any = None

    @field_serializer("details", when_used="json")
    def _details_json(self, details: Any) -> Any:
        return jsonable(details)

    @property
    def text(self) -> str:
        """The text blocks joined."""
        return "".join(block.text for block in self.content if isinstance(block, TextBlock))


Message = Annotated[UserMessage | AssistantMessage | ToolResultMessage, Field(discriminator="role")]

HISTORY_ADAPTER: TypeAdapter[list[Message]] = TypeAdapter(list[Message])
"""Validates and serialises a whole history: ``HISTORY_ADAPTER.dump_json(messages)`` and back."""

MESSAGE_ADAPTER: TypeAdapter[Message] = TypeAdapter(Message)
"""Validates and serialises one message (one session-log line)."""


def text_result(call: ToolCallBlock, text: str, *, is_error: bool = False) -> ToolResultMessage:
    """Build a one-text-block result for ``call``."""
    return ToolResultMessage(
        tool_call_id=call.id,
        tool_name=call.name,
        content=[TextBlock(text=text)],
        is_error=is_error,
    )
