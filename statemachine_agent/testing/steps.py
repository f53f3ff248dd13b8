"""Builders of `ScriptedModel` steps in the Anthropic Messages API JSON shape.

>>> script = [tool_response(call("list_files", {}, id="t1")), text_response("Done.")]
"""

from __future__ import annotations

import itertools
import secrets
from typing import Any

# A random prefix per process: a session continued in another process never reuses an id.
_PREFIX = secrets.token_hex(4)
_ids = itertools.count(1)


def call(name: str, arguments: Any = None, *, id: str | None = None) -> dict[str, Any]:
    """A ``tool_use`` block. ``arguments`` may be a string: raw argument text, parsed as a stream
    would be (so invalid JSON can be scripted). The id defaults to a fresh ``call_<prefix>_N``,
    unique across processes (``<prefix>`` is random per process)."""
    return {
        "type": "tool_use",
        "id": id or f"call_{_PREFIX}_{next(_ids)}",
        "name": name,
        "input": {} if arguments is None else arguments,
    }


def tool_response(
    *calls: dict[str, Any], text: str | None = None, stop_reason: str = "tool_use", **extra: Any
) -> dict[str, Any]:
    """A response holding ``calls`` (after ``text`` when given)."""
    content: list[dict[str, Any]] = [{"type": "text", "text": text}] if text is not None else []
    return {"content": [*content, *calls], "stop_reason": stop_reason, **extra}


def text_response(text: str, *, stop_reason: str = "end_turn", **extra: Any) -> dict[str, Any]:
    """A text-only response (``extra`` may hold ``delay_seconds``, ``usage``, ``stop_details``)."""
    return {"content": [{"type": "text", "text": text}], "stop_reason": stop_reason, **extra}


def error_step(
    kind: str = "overloaded_error", message: str = "Overloaded", **extra: Any
) -> dict[str, Any]:
    """A recorded error (``{"error": {"type": ..., "message": ...}}``)."""
    return {"error": {"type": kind, "message": message}, **extra}
