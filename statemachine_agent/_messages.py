"""Messages of a history: pydantic models discriminated by ``role`` and blocks by ``type``.

A history is a ``list[Message]``. It is append-only in the engine: a message is never mutated after it
has been appended, which lets the context projection and the provider adapters cache per message.
``HISTORY_ADAPTER`` round-trips a whole history to JSON and back unchanged.

The engine's per-turn code tells messages apart by ``role`` and blocks by ``type`` rather than
with ``isinstance``: an ``isinstance`` on a message class that fails runs pydantic's metaclass
``__instancecheck__``, several times the cost of reading the field (benchmarks/README.md, "Why
the code is shaped this way"). One that succeeds on the exact class is cheap and is kept where a
type checker needs it; so does one whose class is not a pydantic model (a plain class's check
reads the instance's ``__class__`` through pydantic's attribute hook, as every read of a
message's field does, several times the cost of a plain object's). Per-turn code reads a
message's field once and loops instead of using comprehensions: on Python 3.11 a comprehension
is a function made and called each time (the figures: benchmarks/README.md).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from enum import StrEnum
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    TypeAdapter,
    field_serializer,
    model_validator,
)

from ._compact import SharedFieldsSet, builder, holder, shared
from ._jsonable import jsonable
from ._strict_json import holds_non_finite


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
    """A frozen message model; the ones a history keeps are stored compactly (`keep`)."""

    model_config = ConfigDict(frozen=True, extra="forbid")


# -- compact storage (issue 39) -------------------------------------------------------------------
# A history holds many small frozen models, so their per-instance overhead is most of its memory:
# pydantic gives each validated instance a dict of its own (a 6-field one is 272 bytes) and a
# ``set`` of the names of the fields set (216 bytes, more when built by insertion). A message the
# history keeps holds instead one ``SharedFieldsSet`` shared by every instance of its class with
# the same names, and a key-sharing dict (CPython shares the keys of the instance dicts of a plain
# class: 157 bytes for 7 fields). Nothing public changes: the same fields in the same order, the
# same ``model_dump`` output, ``model_fields_set``, equality, copies and pickles (a copy or an
# unpickled message has its own ordinary dict and set, which pydantic then updates as usual).
# The engine's tool results, and a tool call or response built by its constructor's usual call
# (`ToolCallBlock.__init__`, `AssistantMessage.__init__`), are built compact at once, without
# validating values already of their fields' types: the same message validation would build.


_Compactor = Callable[[Any], None]
_COMPACTORS: dict[type, _Compactor] = {}
_NESTED = {"content": "list", "usage": "one"}  # the fields of our messages that hold our models


def _no_compaction(_value: Any) -> None:
    pass


def _compactor(cls: type) -> _Compactor:
    """``cls``'s compaction, generated once per class: attribute stores in bytecode into an
    instance of a plain class, whose ``__dict__`` then shares its keys (the way `dataclasses`
    writes an ``__init__``), and the class's usual shared fields set compared before any other
    is looked up; several times cheaper than a generic loop of ``setattr``."""
    if not issubclass(cls, _Model):  # a value pydantic did not validate (model_construct)
        _COMPACTORS[cls] = _no_compaction
        return _no_compaction
    names = tuple(cls.model_fields)
    lines = [
        "def compact(model):",
        "    fields_set = model.__pydantic_fields_set__",
        "    if type(fields_set) is Shared:",
        "        return",
        "    values = model.__dict__",
    ]
    for name in names:
        kind = _NESTED.get(name)
        if kind == "list":
            lines += [
                f"    for item in values.get({name!r}) or ():",
                "        (compactors.get(type(item)) or make(type(item)))(item)",
            ]
        elif kind == "one":
            lines += [
                f"    item = values.get({name!r})",
                "    if item is not shared_item:",
                "        (compactors.get(type(item)) or make(type(item)))(item)",
            ]
    lines += [
        f"    if len(values) == {len(names)}:",  # every field (as validation leaves them)
        "        held = Holder()",
        *(f"        held.{name} = values[{name!r}]" for name in names),
        "        setattr_(model, '__dict__', held.__dict__)",
        "    usual = last[0]",
        "    if fields_set != usual:",
        "        usual = last[0] = shared(fields_set)",
        "    setattr_(model, '__pydantic_fields_set__', usual)",
    ]
    namespace: dict[str, Any] = {
        "Shared": SharedFieldsSet,
        "Holder": holder(cls),
        "compactors": _COMPACTORS,
        "make": _compactor,
        "setattr_": object.__setattr__,
        "shared": shared,
        "shared_item": globals().get("NO_USAGE"),  # kept once, when it is made
        "last": [SharedFieldsSet()],  # the fields set this class's last message shared
    }
    exec("\n".join(lines), namespace)  # generated from the field names above
    made: _Compactor = namespace["compact"]
    _COMPACTORS[cls] = made
    return made


def keep(message: BaseModel) -> None:
    """Store a message the history keeps compactly, in place (a history holds many: their
    bytes, benchmarks/README.md), with the blocks and usage it holds. A message already kept is
    left as it is; nothing public about it changes (see ``SharedFieldsSet``).

    Args:
        message: a message of this module (another value is left alone).
    """
    (_COMPACTORS.get(type(message)) or _compactor(type(message)))(message)


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
keep(NO_USAGE)


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


_SCANNED = (dict, list, float)  # a tuple: ``dict | list | float`` built a union object a call


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

    if not TYPE_CHECKING:  # (type checkers keep the fields' signature)

        def __init__(self, /, **data: Any) -> None:
            # The usual call, ``ToolCallBlock(id=..., name=..., input={...})`` with str names and
            # a dict input holding no non-finite number, is built as validation would build it
            # (values kept as given, the same fields set), already compact for a history.
            if len(data) == 3 and type(self) is ToolCallBlock:  # (not a subclass's fields)
                id_ = data.get("id")
                name = data.get("name")
                value = data.get("input")
                if (
                    type(id_) is str
                    and type(name) is str
                    and type(value) is dict
                    and not (value and holds_non_finite(value))
                ):
                    _fill_call(self, "tool_call", id_, name, value, None, False)
                    return
            super().__init__(**data)

    @model_validator(mode="before")
    @classmethod
    def _json_input(cls, data: Any) -> Any:
        # An input holding NaN or an infinite float is not JSON: a history holding it could not
        # be sent again nor logged. It is kept as argument text (the call is answered with an
        # error naming the field; it never runs), as arguments that did not parse are.
        if isinstance(data, dict) and data.get("raw_arguments") is None:
            value = data.get("input")
            # An empty dict or list (a call without arguments) holds none: no scan is called.
            if isinstance(value, _SCANNED) and value and holds_non_finite(value):
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

    if not TYPE_CHECKING:  # (type checkers keep the fields' signature)

        def __init__(self, /, **data: Any) -> None:
            # The usual call, ``AssistantMessage(content=[...], stop_reason=...)`` with blocks
            # already built and a str stop reason, is built as validation would build it (the
            # list copied, the stop reason coerced, the same fields set), already compact with
            # its blocks (as `keep` would leave it).
            if len(data) == 2 and type(self) is AssistantMessage:
                content = data.get("content")
                reason = data.get("stop_reason")
                if type(content) is list and type(reason) is str:
                    for block in content:
                        known = _BLOCK_CLASSES.get(type(block))
                        if known is None or known[0] != block.type:
                            break
                        known[1](block)  # compacted (a block already compact is left as it is)
                    else:
                        _fill_assistant(
                            self,
                            "assistant",
                            list(content),
                            _KNOWN_STOP_REASONS.get(reason, reason),
                            None,
                            None,
                            NO_USAGE,
                            None,
                            None,
                        )
                        return
            super().__init__(**data)

    @property
    def tool_calls(self) -> list[ToolCallBlock]:
        """The tool-call blocks, in declaration order."""
        calls: list[ToolCallBlock] = []
        for block in self.content:  # a loop: a comprehension is a function call (see `_messages`)
            if isinstance(block, ToolCallBlock):
                calls.append(block)
        return calls

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


# Each message class's compaction is generated here, on import, rather than by the first message
# of its class a history keeps: a run's first turns would pay for compiling them.
_KEPT_CLASSES: tuple[type[_Model], ...] = (
    *(TextBlock, ThinkingBlock, ImageBlock, ToolCallBlock, ProviderBlock),
    *(UserMessage, AssistantMessage, ToolResultMessage),
)
for _cls in _KEPT_CLASSES:
    _COMPACTORS.get(_cls) or _compactor(_cls)

_text_block = builder(TextBlock, ("text",))
_fill_call = builder(ToolCallBlock, ("id", "name", "input"), into=True)
_fill_assistant = builder(AssistantMessage, ("content", "stop_reason"), into=True)
_BLOCK_CLASSES: dict[type, tuple[str, _Compactor]] = {
    cls: (cls.model_fields["type"].default, _COMPACTORS[cls])
    for cls in (TextBlock, ThinkingBlock, ImageBlock, ToolCallBlock, ProviderBlock)
}  # each block class's tag (which validation finds a block's class by) and compaction
_user_message = builder(UserMessage, ("content",))
_result_4 = builder(ToolResultMessage, ("tool_call_id", "tool_name", "content", "is_error"))
_result_5 = builder(
    ToolResultMessage, ("tool_call_id", "tool_name", "content", "is_error", "details")
)


def text_block(text: str) -> TextBlock:
    """``TextBlock(text=text)``, built already compact for a history (issue 39).

    Raises:
        pydantic.ValidationError: ``text`` is not a str (as ``TextBlock(text=text)``).
    """
    if type(text) is str:
        block: TextBlock = _text_block("text", text, None)
        return block
    return TextBlock(text=text)


def user_text(text: str) -> UserMessage:
    """``UserMessage(text)`` (a prompt), built already compact for a history (issue 39): the same
    message, fields set included.

    Raises:
        pydantic.ValidationError: ``text`` is not a str (as ``UserMessage(text)``).
    """
    if type(text) is str:
        message: UserMessage = _user_message("user", [_text_block("text", text, None)])
        return message
    return UserMessage(text)


def tool_result(
    call: ToolCallBlock,
    content: list[TextBlock | ImageBlock],
    is_error: bool,
    details: Any,
) -> ToolResultMessage:
    """``ToolResultMessage(tool_call_id=call.id, tool_name=call.name, content=content,
    is_error=is_error, details=details)``, built already compact for a history (issue 39): the
    engine's result of a call. It is the same message, fields set included.

    Args:
        call: the call answered.
        content: blocks already validated (`TextBlock` or `ImageBlock` instances, as a tool's
            output becomes); the message holds a copy of the list.
        is_error: the call failed (another type than bool goes through validation).
        details: structured data for the application.

    Raises:
        pydantic.ValidationError: ``is_error`` is not a bool and validation refuses it.
    """
    if type(is_error) is bool:
        message: ToolResultMessage = _result_5(
            "tool_result", call.id, call.name, list(content), is_error, details
        )
        return message
    return ToolResultMessage(
        tool_call_id=call.id,
        tool_name=call.name,
        content=content,
        is_error=is_error,
        details=details,
    )


def text_result(call: ToolCallBlock, text: str, *, is_error: bool = False) -> ToolResultMessage:
    """Build a one-text-block result for ``call`` (already compact for a history, issue 39).

    Raises:
        pydantic.ValidationError: ``text`` is not a str.
    """
    if type(text) is str and type(is_error) is bool:  # else validation says what is wrong
        message: ToolResultMessage = _result_4(
            "tool_result", call.id, call.name, [_text_block("text", text, None)], is_error, None
        )
        return message
    return ToolResultMessage(
        tool_call_id=call.id,
        tool_name=call.name,
        content=[TextBlock(text=text)],
        is_error=is_error,
    )
