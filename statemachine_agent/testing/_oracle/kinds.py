"""Result kinds (`classify`) and the abstract form of a history (`tokens_of`)."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Any

# Public names only (the engine's internals may change under it): the oracle sees the loop as a
# user does.
from ... import (
    AssistantMessage,
    Message,
    ToolResultMessage,
)

# -- result kinds ------------------------------------------------------------------------------

_TAG = re.compile(r"out-[A-Za-z0-9]+")

_PREFIXES: tuple[tuple[str, str], ...] = (
    ("not run: the arguments of this call were truncated", "truncated"),
    ("not run: the call was cut off by the model's context window", "window_cut"),
    ("not run: the response was cut off by the model's context window", "window_not_run"),
    ("not run: the response was cut off by the output token limit", "stopped_not_run"),
    ("not run: the response's stop reason", "unknown_stop"),
    # The safety net of a terminal state: no built-in path leaves a call for it to answer, so a
    # result of this kind is an engine fault the oracle must see, not another "not run".
    ("not run: the run ended in state", "ended_by_transition"),
    ("not run: an earlier call of this batch ended the run", "after_termination"),
    ("not run: the usage limit", "limit"),
    ("not run: the run was aborted while this call was awaiting approval", "not_run_pending"),
    ("not run", "not_run"),
    ("interrupted while running", "interrupted"),
    ("not executed: the model's response was a refusal", "refused"),
    ("no result recorded", "no_result"),
    ("cancellederror:", "own_cancel"),
    ("timed out", "timeout"),
    ("denied:", "denied"),
    ("the before_tool_call hook failed", "before_failed"),
    ("the after_tool_call hook failed", "after_failed"),
    ("unknown tool", "unknown_tool"),
    ("invalid arguments", "invalid"),
    ("stopped early", "stopped"),
    ("after-rewritten", "rewritten"),
)


_CHILD = re.compile(r"^Sub-agent '[^']+' ended in state '([a-z_]+)'")


def classify(result: ToolResultMessage) -> str:
    """The kind of a tool result, read from its text as the README and docstrings word it:
    ``ok[tag]``, ``error[tag]`` (an exception), ``tool_error[tag]``, ``timeout``, ``denied``,
    ``before_failed``, ``after_failed``, ``rewritten``, ``unknown_tool``, ``invalid``,
    ``truncated``, ``stopped_not_run`` (a cut response under ``max_tokens_policy="stop"``),
    ``unknown_stop`` (calls of a response with an unknown stop reason), ``window_cut`` and
    ``window_not_run`` (calls of a response cut by the context window), ``refused``,
    ``not_run``, ``ended_by_transition`` (never predicted: the terminal states' safety net),
    ``interrupted``, ``own_cancel`` (a tool's own `asyncio.CancelledError`), ``stopped``, ``no_result``,
    ``child_<state>`` (a sub-agent's run that ended in that state, `Agent.as_tool`).
    The tag is the ``out-...`` text the call was given, so a result sent to the wrong call shows."""
    text = result.text.strip()
    child = _CHILD.match(text)
    if child is not None and result.is_error:
        return f"child_{child.group(1)}"  # a sub-agent's run that did not end done
    low = text.lower()
    for prefix, kind in _PREFIXES:
        if low.startswith(prefix):
            return kind
    match = _TAG.search(text)
    tag = match.group(0) if match else "?"
    if not result.is_error:
        return f"ok[{tag}]"
    if low.startswith("job failed"):
        return f"tool_error[{tag}]"
    if re.match(r"^[A-Za-z_][A-Za-z0-9_]*(Error|Exception):", text):
        return f"error[{tag}]"
    return f"other[{text[:60]}]"


def matches(kind: str, allowed: Iterable[str]) -> bool:
    for pattern in allowed:
        if pattern == kind or (pattern.endswith("[*]") and kind.startswith(pattern[:-2])):
            return True
    return False


Token = tuple[Any, ...]
"""An abstract message: ``("user",)``, ``("assistant", stop_reason, call_ids)``, ``("result",
call_id, kind)``."""


def tokens_of(messages: Sequence[Message]) -> list[Token]:
    """The abstract form of a history (result kinds by `classify`)."""
    out: list[Token] = []
    for message in messages:
        if isinstance(message, ToolResultMessage):
            out.append(("result", message.tool_call_id, classify(message)))
        elif isinstance(message, AssistantMessage):
            out.append(
                (
                    "assistant",
                    str(message.stop_reason),
                    tuple(c.id for c in message.tool_calls),
                )
            )
        else:
            out.append(("user",))
    return out


def kind_of_dict(message: dict[str, Any]) -> str:
    return classify(ToolResultMessage.model_validate(message))
