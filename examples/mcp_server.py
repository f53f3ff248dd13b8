"""A small MCP server (the official ``mcp`` package's `MCPServer`) for the README's example.

Run on stdio (what ``MCPServer.stdio`` starts): ``python examples/mcp_server.py``; on streamable
HTTP: ``python examples/mcp_server.py --http 8000`` (``http://127.0.0.1:8000/mcp``).
"""

from __future__ import annotations

import sys

from mcp.server.mcpserver import MCPServer

server = MCPServer("notes")
NOTES: list[str] = []


@server.tool()
def add_note(text: str) -> str:
    """Keep a note."""
    NOTES.append(text)
    return f"note {len(NOTES)} kept"


@server.tool()
def list_notes() -> list[str]:
    """Every note kept, oldest first."""
    return NOTES


if __name__ == "__main__":
    if "--http" in sys.argv:
        server.run("streamable-http", port=int(sys.argv[sys.argv.index("--http") + 1]))
    else:
        server.run()
