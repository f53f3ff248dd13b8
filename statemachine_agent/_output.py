"""Typed results: ``Agent(output_type=SomeModel)`` answers through a final result tool.

The tool's input schema is the pydantic model's JSON schema. A valid call ends the run ``done``
(its result is marked ``terminate=True``) and `RunResult.output` is the validated instance; an
invalid one is answered with an error result listing every field error (the tools' own argument
validation), and the model tries again, up to ``output_retries`` times (the ``output_invalid``
branch of ``tools_finished`` ends the run ``failed`` after that). An answer in plain text is sent
back the same way (``output_missing``).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from ._errors import UsageError
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
