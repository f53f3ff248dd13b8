"""A real MCP server (the mcp package's `MCPServer`) for the replays of peer frameworks' MCP bug
reports (tests/mcp/test_mcp_peer_reports.py).

``python peer_server.py [--http PORT [--legacy]] [--noisy-start] [--pid-file PATH]``: stdio by
default, streamable HTTP on 127.0.0.1:PORT with ``--http``; ``--legacy`` refuses the 2026
protocol (an HTTP 400 to its ``server/discover`` probe, as a server on an older SDK does), so the
client falls back to the initialize handshake and a session id. ``--noisy-start`` writes a line that is not
JSON and a line that is not UTF-8 to stdout before serving (a server's stray log output);
``--pid-file`` appends this process's pid to PATH at start (one line per start).
"""

from __future__ import annotations

import argparse
import asyncio
import os
from typing import Any

from mcp import MCPError
from mcp.server.mcpserver import MCPServer
from mcp.types import INVALID_PARAMS

GARBAGE = b"server starting... \xff\xfe\xc3(\n"


def build() -> MCPServer:
    server = MCPServer("peer")
    arrived = 0
    everyone = asyncio.Event()

    @server.tool()
    def add(a: int, b: int) -> int:
        """Add two integers."""
        return a + b

    @server.tool()
    def pid() -> int:
        """This server process's id."""
        return os.getpid()

    @server.tool()
    async def meet(n: int) -> str:
        """Returns once n calls of meet are in flight at the same time (a barrier)."""
        nonlocal arrived
        arrived += 1
        if arrived >= n:
            everyone.set()
        await everyone.wait()
        return f"met {n}"

    @server.tool()
    def lookup(title: str) -> str:
        """Fails with a JSON-RPC protocol error (not an isError result) for unknown titles."""
        if title != "Dune":
            raise MCPError(code=INVALID_PARAMS, message=f"No book titled {title!r} in the catalog.")
        return "Frank Herbert"

    return server


def legacy_only(app: Any) -> Any:
    """The ASGI app, answering requests of a post-2025 protocol version with HTTP 400."""

    async def wrapped(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            version = dict(scope["headers"]).get(b"mcp-protocol-version", b"")
            if version.decode("latin-1") >= "2026":
                await send({"type": "http.response.start", "status": 400, "headers": []})
                await send({"type": "http.response.body", "body": b"unsupported protocol version"})
                return
        await app(scope, receive, send)

    return wrapped


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--http", type=int)
    parser.add_argument("--legacy", action="store_true")
    parser.add_argument("--noisy-start", action="store_true")
    parser.add_argument("--pid-file")
    options = parser.parse_args()
    if options.pid_file:
        with open(options.pid_file, "a") as out:
            out.write(f"{os.getpid()}\n")
    if options.noisy_start:
        os.write(1, GARBAGE)
    server = build()
    if options.http and options.legacy:
        import uvicorn

        app = legacy_only(server.streamable_http_app(host="127.0.0.1"))
        uvicorn.run(app, host="127.0.0.1", port=options.http)
    elif options.http:
        server.run("streamable-http", host="127.0.0.1", port=options.http)
    else:
        server.run()


if __name__ == "__main__":
    main()
