"""Helpers the test modules import (``from loop_helpers import ...``): a pair of file tools with a
policy that defers writes, the script that pauses a run on such a write, pydantic's own error
text, the tool results and the roles of a history, the result of a call an abort kept from
starting."""

from __future__ import annotations

from typing import Any

from pydantic import TypeAdapter, ValidationError

from statemachine_agent import Defer, ToolCallInfo, ToolResultMessage, tool
from statemachine_agent.testing.steps import call, text_response, tool_response

REVIEW = "writes need review"
"""The reason `review_writes` defers a ``write`` call with."""


def file_tools(log: list[str]) -> list[Any]:
    """``read(path)`` and ``write(path)`` tools that append what they did to ``log``."""

    @tool
    def read(path: str) -> str:
        """Read a file."""
        log.append(f"read {path}")
        return f"contents of {path}"

    @tool
    def write(path: str) -> str:
        """Write a file."""
        log.append(f"write {path}")
        return f"wrote {path}"

    return [read, write]


def review_writes(info: ToolCallInfo) -> Defer | None:
    """A ``before_tool_call`` policy: every ``write`` waits for a person (`REVIEW`)."""
    return Defer(REVIEW) if info.tool.name == "write" else None


def hello_then_read_a_and_write_b() -> list[dict[str, Any]]:
    """Scripted steps: a greeting; then calls ``read`` a (``r1``) and ``write`` b (``w1``); then
    the answer. With `file_tools` and `review_writes`, the second run stops awaiting approval."""
    return [
        text_response("Hello."),
        tool_response(call("read", {"path": "a"}, id="r1"), call("write", {"path": "b"}, id="w1")),
        text_response("Read a, wrote b."),
    ]


def pydantic_message(kind: Any, value: Any) -> str:
    """pydantic's own message for ``value`` not being a ``kind``: its wording belongs to the
    installed pydantic version, so the expected text is taken from it, not written here."""
    try:
        TypeAdapter(kind).validate_python(value)
    except ValidationError as exc:
        return str(exc.errors()[0]["msg"])
    raise AssertionError(f"{value!r} is a valid {kind}")


NOT_RUN = "Not run: the run was aborted before this call started."
"""The result of a call an abort kept from starting."""


def roles(messages: list[Any]) -> list[str]:
    """The role of each message, in order."""
    return [m.role for m in messages]


def results_of(messages: list[Any]) -> list[ToolResultMessage]:
    """The tool results among ``messages``, in order."""
    return [m for m in messages if isinstance(m, ToolResultMessage)]
