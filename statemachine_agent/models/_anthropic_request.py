"""Request encoding for the Anthropic Messages API, without the SDK.

`RequestEncoder` turns a projected history (already valid for a provider, see ``_context.py``) into
the JSON ``messages`` list, the ``system`` blocks and the ``tools`` list of a request:

- consecutive user-side messages (`UserMessage`, `ToolResultMessage`) become one user message with
  the ``tool_result`` blocks first (``is_error`` kept), then the text and images;
- `ToolCallBlock` becomes ``tool_use`` whose ``input`` is always a JSON object (see `tool_input`);
- `ThinkingBlock` keeps its ``signature``; `ProviderBlock` data is sent verbatim; text keeps its
  ``citations``;
- thinking and redacted thinking signed by another model (the message's ``model`` is not the
  request's, see `same_model`) are not sent: the API checks each signature against the model it
  is sent to; the text and tool blocks of those messages stay;
- blank text blocks (``_protocol.is_blank``) and messages left empty are never sent;
- every string is valid UTF-8: a lone surrogate (``os.fsdecode`` of a name that is not UTF-8, a
  cut emoji) is replaced by U+FFFD, a surrogate pair joined into its character (`valid_text`).

Messages are immutable once in a history, so each run of messages is encoded once and the encoded
dict is reused by every later request (per-turn cost does not grow with the history). Prompt-caching
breakpoints are added on copies, never on the cached dicts.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any, TypeVar

from .._messages import (
    AssistantMessage,
    ImageBlock,
    Message,
    ProviderBlock,
    TextBlock,
    ThinkingBlock,
    ToolCallBlock,
    ToolResultMessage,
    UserMessage,
)
from .._protocol import is_blank
from ._base import ToolDefinition

CACHE_CONTROL: dict[str, str] = {"type": "ephemeral"}
# Block types the API does not accept a cache_control on.
_NO_CACHE_CONTROL = frozenset({"thinking", "redacted_thinking"})

JSONDict = dict[str, Any]


_J = TypeVar("_J")
_DATED = re.compile(r"-(latest|\d{8})$")
_CLAUDE_ID = re.compile(r"claude-(?:[a-z]+-\d+(?:-\d+)?|\d+(?:-\d+)?-[a-z]+)")


def valid_text(text: str) -> str:
    """``text`` as valid Unicode for a UTF-8 request body: a surrogate pair held as two code points
    becomes its character, and each lone surrogate becomes U+FFFD. The same str when it is valid
    (the usual case: one encode attempt)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
    return text


def valid_json(value: _J) -> _J:
    """``value`` (JSON data: dicts, lists, strings, numbers) with every string, keys included,
    passed through `valid_text`; the same objects where nothing changed."""
    if isinstance(value, str):
        return valid_text(value)  # type: ignore[return-value]
    if isinstance(value, dict):
        items = [(valid_json(k), valid_json(v)) for k, v in value.items()]
        if all(a is k and b is v for (a, b), (k, v) in zip(items, value.items(), strict=True)):
            return value
        return dict(items)  # type: ignore[return-value]
    if isinstance(value, list):
        out = [valid_json(v) for v in value]
        if all(a is b for a, b in zip(out, value, strict=True)):
            return value
        return out  # type: ignore[return-value]
    return value


def same_model(a: str | None, b: str | None) -> bool:
    """Whether two model names may be one model, so that the thinking one signed is sent to the
    other.

    Names are compared once a ``-latest`` or date suffix is removed (``claude-haiku-4-5`` and
    ``claude-haiku-4-5-20251001`` are one model). Only two Claude model ids
    (``claude-<family>-<version>`` or ``claude-<version>-<family>``) are ever told apart: a name
    that is not one (None, a proxy's alias, a test name) counts as the same model.
    """
    if a is None or b is None:
        return True
    a, b = _DATED.sub("", a), _DATED.sub("", b)
    return a == b or not (_CLAUDE_ID.fullmatch(a) and _CLAUDE_ID.fullmatch(b))


def tool_input(call: ToolCallBlock) -> JSONDict:
    """The ``input`` object sent back for ``call``.

    The API requires an object. A call whose arguments did not parse (or were cut off) is sent
    with its argument text under ``"_raw_arguments"``, and a call whose arguments were another JSON
    value under ``"_value"``, so the model sees what it sent next to the error result explaining
    why the call did not run. Such calls are never executed.
    """
    if isinstance(call.input, dict) and call.raw_arguments is None and not call.truncated:
        return call.input
    if call.raw_arguments is not None:
        return {"_raw_arguments": call.raw_arguments}
    if call.input is None or isinstance(call.input, dict):
        return {} if call.input is None else dict(call.input)
    return {"_value": call.input}


def _image(block: ImageBlock) -> JSONDict | None:
    if block.data is not None:
        source: JSONDict = {"type": "base64", "media_type": block.media_type, "data": block.data}
    elif block.url is not None:
        source = {"type": "url", "url": block.url}
    else:
        return None
    return {"type": "image", "source": source}


def _text(block: TextBlock) -> JSONDict:
    if block.citations:
        return {"type": "text", "text": block.text, "citations": block.citations}
    return {"type": "text", "text": block.text}


def _user_block(block: TextBlock | ImageBlock) -> JSONDict | None:
    if isinstance(block, TextBlock):
        return None if is_blank(block) else _text(block)
    return _image(block)


def is_thinking(block: object) -> bool:
    """A thinking or redacted-thinking block (both carry a model's signature)."""
    return isinstance(block, ThinkingBlock) or (
        isinstance(block, ProviderBlock) and block.data.get("type") == "redacted_thinking"
    )


def encode_blocks(message: Message, model: str | None = None) -> list[JSONDict]:
    """The API content blocks of one message (a tool result is one ``tool_result`` block).

    Args:
        message: the message.
        model: the model the request goes to; thinking signed by another model is left out.
    """
    if isinstance(message, UserMessage):
        return [b for b in map(_user_block, message.content) if b is not None]
    if isinstance(message, ToolResultMessage):
        result: JSONDict = {
            "type": "tool_result",
            "tool_use_id": message.tool_call_id,
            "is_error": message.is_error,
        }
        content = [b for b in map(_user_block, message.content) if b is not None]
        if content:
            result["content"] = content
        return [result]
    out: list[JSONDict] = []
    foreign = not same_model(message.model, model)
    for block in message.content:
        if foreign and is_thinking(block):
            continue  # signed by another model: that model's signature fails on this one
        if isinstance(block, TextBlock):
            if not is_blank(block):
                out.append(_text(block))
        elif isinstance(block, ToolCallBlock):
            out.append(
                {"type": "tool_use", "id": block.id, "name": block.name, "input": tool_input(block)}
            )
        elif isinstance(block, ThinkingBlock):
            # Without a signature (or with an empty one) the API rejects a thinking block.
            if block.signature:
                out.append(
                    {"type": "thinking", "thinking": block.thinking, "signature": block.signature}
                )
        elif isinstance(block, ProviderBlock) and block.provider == "anthropic":
            out.append(_without_cache_control(block.data))
        # Images in an assistant message have no Anthropic form: dropped.
    return out


def _without_cache_control(data: JSONDict) -> JSONDict:
    # Only this encoder places breakpoints, so the limit of four always holds.
    if "cache_control" not in data:
        return data
    return {k: v for k, v in data.items() if k != "cache_control"}


def _role(message: Message) -> str:
    return "assistant" if isinstance(message, AssistantMessage) else "user"


def _encode_run(run: Sequence[Message], model: str | None) -> JSONDict | None:
    blocks = valid_json([block for message in run for block in encode_blocks(message, model)])
    if not blocks:
        return None
    if _role(run[0]) == "user":
        # Tool results first in their user message (the API requires it).
        results = [b for b in blocks if b["type"] == "tool_result"]
        if results and len(results) != len(blocks):
            blocks = results + [b for b in blocks if b["type"] != "tool_result"]
    return {"role": _role(run[0]), "content": blocks}


def with_cache_control(block: JSONDict) -> JSONDict:
    """A copy of ``block`` carrying a prompt-caching breakpoint."""
    return {**block, "cache_control": CACHE_CONTROL}


class RequestEncoder:
    """Encodes requests, reusing the encoding of every message run seen before.

    Args:
        cache: add prompt-caching breakpoints (last tool, last system block, last block of the
            newest message: at most three of the API's four).
        model: the model the requests go to (thinking signed by another model is not sent).
    """

    def __init__(self, *, cache: bool = True, model: str | None = None) -> None:
        self.cache = cache
        self.model = model
        # Keyed by the ids of a run's messages; the messages are kept so the ids stay theirs.
        self._runs: dict[tuple[int, ...], tuple[tuple[Message, ...], JSONDict | None]] = {}
        self._tools_key: tuple[Any, ...] | None = None
        self._tools: list[JSONDict] = []

    def messages(self, messages: Sequence[Message]) -> list[JSONDict]:
        """The ``messages`` list of a request for the projected history ``messages``."""
        out: list[JSONDict] = []
        used: set[tuple[int, ...]] = set()
        start = 0
        n = len(messages)
        while start < n:
            role = _role(messages[start])
            end = start + 1
            while end < n and _role(messages[end]) == role:
                end += 1
            run = tuple(messages[start:end])
            start = end
            key = tuple(map(id, run))
            cached = self._runs.get(key)
            if cached is None or any(a is not b for a, b in zip(cached[0], run, strict=True)):
                cached = (run, _encode_run(run, self.model))
                self._runs[key] = cached
            used.add(key)
            encoded = cached[1]
            if encoded is None:
                continue
            if out and out[-1]["role"] == encoded["role"]:
                # An emptied run between two of the same role: join them (rare; not cached).
                out[-1] = {
                    "role": encoded["role"],
                    "content": [*out[-1]["content"], *encoded["content"]],
                }
            else:
                out.append(encoded)
        if len(self._runs) > 2 * len(used) + 32:
            self._runs = {key: self._runs[key] for key in used}
        if self.cache and out:
            out[-1] = _mark_last(out[-1])
        return out

    def system(self, system: str | None) -> list[JSONDict] | None:
        """The ``system`` blocks (None when there is no system prompt)."""
        if system is None or not system.strip():
            return None
        block: JSONDict = {"type": "text", "text": valid_text(system)}
        return [with_cache_control(block) if self.cache else block]

    def tools(
        self, tools: Sequence[ToolDefinition], extra: Sequence[JSONDict] = ()
    ) -> list[JSONDict]:
        """The ``tools`` list: ``tools`` then ``extra`` (server tools, sent verbatim)."""
        key = (tuple(tools), tuple(json.dumps(e, sort_keys=True) for e in extra))
        if key != self._tools_key:
            encoded = [
                {"name": t.name, "description": t.description, "input_schema": t.input_schema}
                for t in tools
            ]
            encoded += [_without_cache_control(e) for e in extra]
            encoded = valid_json(encoded)
            if self.cache and encoded:
                encoded[-1] = with_cache_control(encoded[-1])
            self._tools_key, self._tools = key, encoded
        return self._tools


def _mark_last(message: JSONDict) -> JSONDict:
    content: list[JSONDict] = message["content"]
    for i in range(len(content) - 1, -1, -1):
        if content[i].get("type") not in _NO_CACHE_CONTROL:
            marked = [*content[:i], with_cache_control(content[i]), *content[i + 1 :]]
            return {"role": message["role"], "content": marked}
    return message


def count_breakpoints(body: JSONDict) -> int:
    """How many ``cache_control`` breakpoints a request body holds (for checks and tests)."""
    count = 0
    stack: list[Any] = [body.get("tools"), body.get("system"), body.get("messages")]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            if item.get("cache_control") is not None:
                count += 1
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return count
