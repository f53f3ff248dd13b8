"""A real MCP server for the tests of the handshake-era (legacy) protocol, built on the ``mcp``
package's low-level `Server` served by its handshake-only loop (`serve_loop`: the client's
``server/discover`` probe fails and it falls back to the ``initialize`` handshake, as with servers
of before 2026-07-28), lists its tools in pages of two
(``nextCursor``), says a changed list only by a ``notifications/tools/list_changed``, and answers
with resource links, embedded resources and audio.

``python legacy_server.py`` (stdio).
"""

from __future__ import annotations

from typing import Any

import anyio
import mcp.types as mt
from mcp.server.lowlevel import NotificationOptions, Server
from mcp.server.runner import serve_loop
from mcp.server.stdio import stdio_server

PAGE = 2
_INPUT = {"type": "object", "properties": {}}

_tools = [
    mt.Tool(name=name, description=f"Tool {name}.", input_schema=_INPUT)
    for name in ("zeta", "alpha", "mid", "beta", "grow", "contents")
]


async def list_tools(ctx: Any, params: mt.PaginatedRequestParams | None) -> mt.ListToolsResult:
    start = int(params.cursor) if params is not None and params.cursor else 0
    end = start + PAGE
    cursor = str(end) if end < len(_tools) else None
    return mt.ListToolsResult(tools=_tools[start:end], next_cursor=cursor)


async def call_tool(ctx: Any, params: mt.CallToolRequestParams) -> mt.CallToolResult:
    if params.name == "grow":  # a tool added at run time, said the legacy way only
        if not any(t.name == "late" for t in _tools):
            _tools.append(mt.Tool(name="late", description="Added.", input_schema=_INPUT))
        await ctx.session.send_tool_list_changed()
        return mt.CallToolResult(content=[mt.TextContent(text="grown")])
    if params.name == "contents":  # every other kind of content, once each
        link = mt.ResourceLink(
            name="report",
            uri="file:///tmp/report.txt",
            mime_type="text/plain",
            description="the weekly report",
        )
        text = mt.TextResourceContents(uri="file:///tmp/notes.md", text="# Notes")
        blob = mt.BlobResourceContents(
            uri="file:///tmp/data.bin", mime_type="application/octet-stream", blob="AAECAw=="
        )
        audio = mt.AudioContent(data="AAAA", mime_type="audio/wav")
        content: list[mt.ContentBlock] = [
            link,
            mt.EmbeddedResource(resource=text),
            mt.EmbeddedResource(resource=blob),
            audio,
        ]
        return mt.CallToolResult(content=content)
    return mt.CallToolResult(content=[mt.TextContent(text=params.name)])


async def main() -> None:
    server: Server[Any] = Server("legacy", on_list_tools=list_tools, on_call_tool=call_tool)
    options = server.create_initialization_options(NotificationOptions(tools_changed=True))
    async with stdio_server() as (read_stream, write_stream):
        await serve_loop(server, read_stream, write_stream, lifespan_state={}, init_options=options)


if __name__ == "__main__":
    anyio.run(main)
