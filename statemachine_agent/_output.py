"""Typed results: ``Agent(output_type=SomeModel)`` answers through a final result tool.

The tool's input schema is the pydantic model's JSON schema. A valid call ends the run ``done``
(its result is marked ``terminate=True``) and `RunResult.output` is the validated instance; an
invalid one is answered with an error result listing every field error (the tools' own argument
validation), and the model tries again, up to ``output_retries`` times (the ``output_invalid``
branch of ``tools_finished`` ends the run ``failed`` after that). An answer in plain text is sent
back the same way (``output_missing``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel

from ._errors import UsageError
from ._messages import AssistantMessage, Message, ToolResultMessage
from ._result import answer_text
from ._tools import Tool, ToolResult

OUTPUT_TOOL_NAME = "final_result"
"""The name of the final result tool."""

OUTPUT_MISSING_PROMPT = (
    f"Answer by calling the {OUTPUT_TOOL_NAME} tool with the final result; a text answer is not "
    "accepted."
)
"""What the model is told when it answers in text while a typed result is expected."""


def output_tool(output_type: type[BaseModel]) -> Tool:
    """The final result tool for ``output_type``.

    Raises:
        UsageError: ``output_type`` is not a pydantic model class.
    """
    if not (isinstance(output_type, type) and issubclass(output_type, BaseModel)):
        raise UsageError(
            f"output_type must be a pydantic BaseModel subclass (or str), got {output_type!r}"
        )

    def final_result(**fields: Any) -> ToolResult:
        value = output_type.model_validate(fields)  # validated already: rebuilds the instance
        return ToolResult(
            content=value.model_dump_json(),
            details=value.model_dump(mode="json"),
            terminate=True,
        )

    doc = (output_type.__doc__ or "").strip()
    description = "Give the final result of the task. Call it once, when you are done."
    if doc and doc != BaseModel.__doc__:
        description += f" The result: {doc}"
    return Tool(
        name=OUTPUT_TOOL_NAME,
        description=description,
        function=final_result,
        args_model=output_type,
        run_in_thread=False,
    )


TEXT_QUOTE_CHARS = 200
"""How much of a text answer `last_output_error` quotes."""


def last_output_error(messages: Sequence[Message]) -> str:
    """Why the last attempt at a final result failed, quoted for the ``output_invalid`` error:
    the validation error its ``final_result`` call was answered with (every field error, as the
    model read it), or the text answer that came instead of a call (its first
    `TEXT_QUOTE_CHARS` characters). Read from the end of ``messages``, the run's history."""
    for message in reversed(messages):
        if (
            isinstance(message, ToolResultMessage)
            and message.tool_name == OUTPUT_TOOL_NAME
            and message.is_error
        ):
            return f"the last validation error: {message.text}"
        if isinstance(message, AssistantMessage):
            if message.tool_calls:
                continue  # its results follow it: already read
            text = message.text
            if len(text) > TEXT_QUOTE_CHARS:
                text = text[:TEXT_QUOTE_CHARS] + "..."
            return f"the last answer was text, not a {OUTPUT_TOOL_NAME} call: {text!r}"
    return "no attempt is in the history"


def final_output(
    new: Sequence[Message], output_type: type[BaseModel] | None, final_text: str | None
) -> Any:
    """What a run that ended ``done`` returns as its output: the validated final result of the
    ``output_type`` (from the last successful final result tool's details in ``new``, the
    run's messages), or without one the text answer (``final_text`` when a result ended the
    run, else the last answer's text)."""
    if output_type is None:
        return final_text if final_text is not None else answer_text(new)
    for message in reversed(new):
        if (
            isinstance(message, ToolResultMessage)
            and message.tool_name == OUTPUT_TOOL_NAME
            and not message.is_error
            and message.details is not None
        ):
            return output_type.model_validate(message.details)
    return None
