"""An MCP server's tools as `Tool` objects, and a call's MCP result as a `ToolResult`."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import jsonschema  # type: ignore[import-untyped]  # the mcp SDK's own dependency
import mcp.types as mt
from pydantic import BaseModel, ConfigDict, ValidationError
from pydantic_core import InitErrorDetails, PydanticCustomError

from .._errors import ToolDefinitionError
from .._messages import ImageBlock, TextBlock
from .._tools import Tool, ToolContext, ToolResult

if TYPE_CHECKING:
    from ._server import MCPServer


class _AnyArguments(BaseModel):
    """Placeholder arguments model: an MCP tool's arguments are checked against the server's
    JSON Schema (`MCPTool.validate`), not by a pydantic model."""

    model_config = ConfigDict(extra="allow")


CallFunction = Callable[["MCPTool", dict[str, Any], ToolContext], Awaitable[ToolResult]]


@dataclass(eq=False)
class MCPTool(Tool):
    """A tool of an MCP server (built by `MCPServer`; the model sees ``name``, which is the
    server's name for it with the server's prefix).

    Attributes:
        server: the `MCPServer` that gives it.
        remote_name: the tool's name on the server.
        schema: the server's JSON Schema of the arguments (what the model sees, and what each
            call's arguments are validated against, every error reported).
    """

    server: MCPServer | None = None
    remote_name: str = ""
    schema: dict[str, Any] = field(default_factory=dict)
    _validator: Any = field(init=False, repr=False, default=None)

    def __post_init__(self) -> None:
        super().__post_init__()
        try:
            cls = jsonschema.validators.validator_for(
                self.schema, default=jsonschema.Draft202012Validator
            )
            cls.check_schema(self.schema)
        except jsonschema.SchemaError as exc:
            raise ToolDefinitionError(
                f"tool {self.name!r} of {self._owner()}: its input schema is not a valid JSON "
                f"Schema: {exc.message}"
            ) from exc
        self._validator = cls(self.schema)
        self.input_schema = dict(self.schema)
        self.input_schema.setdefault("properties", {})

    def _owner(self) -> str:
        return "an MCP server" if self.server is None else self.server.name

    def validate(self, arguments: dict[str, Any]) -> dict[str, Any]:
        """Check ``arguments`` against the server's JSON Schema; returns them unchanged.

        Raises:
            pydantic.ValidationError: one line per JSON Schema error (as for any tool).
        """
        errors = sorted(self._validator.iter_errors(arguments), key=lambda e: list(e.path))
        if not errors:
            return dict(arguments)
        details: list[InitErrorDetails] = [
            {
                "type": PydanticCustomError("json_schema", "{message}", {"message": e.message}),
                "loc": tuple(e.absolute_path),
                "input": e.instance,
            }
            for e in errors
        ]
        raise ValidationError.from_exception_data(f"{self.name} arguments", details)

    def call(self, kwargs: dict[str, Any], ctx: ToolContext | None) -> Awaitable[Any]:
        """Send the call to the server (see `MCPServer`)."""
        assert self.server is not None and ctx is not None
        return self.server._call(self, kwargs, ctx)


def mcp_tool(server: MCPServer, listed: mt.Tool, timeout_seconds: float | None) -> MCPTool:
    """The `MCPTool` of a tool the server listed.

    Raises:
        ToolDefinitionError: the prefixed name breaks the tool-name rule, or the schema is not
            a JSON Schema (naming the server).
    """
    name = f"{server.prefix}{listed.name}"
    try:
        return MCPTool(
            name=name,
            description=listed.description or listed.title or listed.name,
            function=_never_called,
            args_model=_AnyArguments,
            timeout_seconds=timeout_seconds,
            context_param="ctx",  # the call always gets its `ToolContext` (`MCPTool.call`)
            server=server,
            remote_name=listed.name,
            schema=dict(listed.input_schema),
            idempotent=_hinted_idempotent(listed),
        )
    except ToolDefinitionError as exc:
        raise ToolDefinitionError(f"{server.name}: {exc}") from exc


def _hinted_idempotent(listed: mt.Tool) -> bool:
    """The server's annotations say a repeated call changes nothing: ``idempotentHint`` or
    ``readOnlyHint`` is true (both default to false in the MCP schema)."""
    hints = listed.annotations
    return hints is not None and bool(hints.idempotent_hint or hints.read_only_hint)


async def _never_called(**arguments: Any) -> None:  # `MCPTool.call` replaces it
    raise AssertionError("an MCP tool is called through its server")


def to_tool_result(result: mt.CallToolResult) -> ToolResult:
    """A call's MCP result as the loop's `ToolResult`.

    Text becomes text blocks, images image blocks; audio, resource links and embedded resources
    become a text line each (the model reads their URI, name and type); structured content is
    kept in ``details`` and, when there is no other content, sent as JSON text. ``isError``
    makes an error result whose text is the server's message.
    """
    blocks: list[TextBlock | ImageBlock] = []
    for item in result.content:
        if isinstance(item, mt.TextContent):
            blocks.append(TextBlock(text=item.text))
        elif isinstance(item, mt.ImageContent):
            blocks.append(ImageBlock(media_type=item.mime_type, data=item.data))
        elif isinstance(item, mt.ResourceLink):
            extra = f", {item.mime_type}" if item.mime_type else ""
            about = f": {item.description}" if item.description else ""
            blocks.append(TextBlock(text=f"[resource link] {item.name} <{item.uri}>{extra}{about}"))
        elif isinstance(item, mt.EmbeddedResource):
            res = item.resource
            if isinstance(res, mt.TextResourceContents):
                blocks.append(TextBlock(text=f"[resource <{res.uri}>]\n{res.text}"))
            else:
                blocks.append(
                    TextBlock(
                        text=f"[resource <{res.uri}>: {res.mime_type or 'binary'}, "
                        f"{len(res.blob) * 3 // 4} bytes, not shown]"
                    )
                )
        elif isinstance(item, mt.AudioContent):
            blocks.append(TextBlock(text=f"[audio: {item.mime_type}, not shown]"))
    structured = result.structured_content
    if not blocks and structured is not None:
        blocks.append(TextBlock(text=json.dumps(structured, ensure_ascii=False)))
    if result.is_error and not any(isinstance(b, TextBlock) for b in blocks):
        blocks.insert(0, TextBlock(text="The MCP tool reported an error (no message)."))
    content: str | list[TextBlock | ImageBlock]
    if all(isinstance(b, TextBlock) for b in blocks):
        content = "\n".join(b.text for b in blocks if isinstance(b, TextBlock)) or "(no output)"
    else:
        content = blocks
    return ToolResult(content=content, is_error=result.is_error, details=structured)


def progress_update(progress: float, total: float | None, message: str | None) -> dict[str, Any]:
    """A progress notification as the call's progress update (a `ToolExecutionUpdate`)."""
    return {"progress": progress, "total": total, "message": message}


__all__ = ["MCPTool", "mcp_tool", "progress_update", "to_tool_result"]
