"""A real MCP server for the tests, built with the mcp package's `MCPServer`.

``python demo_server.py [--http PORT] [--no-tools] [--hang-on-start] [--pid-file PATH]``: stdio by
default (nothing but protocol on stdout), streamable HTTP on 127.0.0.1:PORT with ``--http``.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import os
import subprocess
import sys
from pathlib import Path

import mcp.types as mt
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import BaseModel

PNG = base64.b64encode(
    bytes.fromhex(
        "89504e470d0a1a0a0000000d4948445200000001000000010806000000"
        "1f15c4890000000d49444154789c6360000002000001e221bc330000000049454e44ae426082"
    )
).decode()


class Point(BaseModel):
    x: int
    y: int


def _append(path: str, text: str) -> None:
    with open(path, "a") as out:
        out.write(text)


def build(no_tools: bool) -> MCPServer:
    server = MCPServer("demo")
    if no_tools:
        return server
    cancelled = asyncio.Event()

    @server.tool()
    def add(a: int, b: int) -> int:
        """Add two integers."""
        return a + b

    @server.tool()
    def echo(text: str, times: int = 1) -> str:
        """Repeat a text."""
        return text * times

    @server.tool()
    def point(x: int, y: int) -> Point:
        """A structured point."""
        return Point(x=x, y=y)

    @server.tool()
    def image() -> list[mt.ContentBlock]:
        """A 1x1 PNG and a caption."""
        return [
            mt.TextContent(text="a red dot"),
            mt.ImageContent(data=PNG, mime_type="image/png"),
        ]

    @server.tool()
    def link() -> list[mt.ContentBlock]:
        """A resource link."""
        return [
            mt.ResourceLink(name="report", uri="file:///tmp/report.txt", mime_type="text/plain")
        ]

    @server.tool()
    def fail(message: str) -> str:
        """Always fails with the message."""
        raise ToolError(message)

    @server.tool()
    def crash() -> str:
        """The server process dies mid-call."""
        os._exit(3)

    @server.tool()
    async def hang(ctx: Context) -> str:
        """Reports progress, then never returns (until cancelled)."""
        await ctx.report_progress(1, 2, "started")
        try:
            await asyncio.Event().wait()
        except BaseException:
            cancelled.set()
            raise
        return "never"

    @server.tool()
    async def was_cancelled() -> str:
        """Waits until a hang call was cancelled."""
        await cancelled.wait()
        return "cancelled"

    @server.tool()
    async def steps(n: int, ctx: Context) -> str:
        """Reports n progress steps."""
        for i in range(n):
            await ctx.report_progress(i + 1, n, f"step {i + 1}")
        return f"{n} steps"

    @server.tool()
    async def grow(ctx: Context) -> str:
        """Adds the tool `late` and says the list changed (both protocol eras' ways)."""

        def late() -> str:
            """A tool added at run time."""
            return "late"

        server.add_tool(late)
        await ctx.notify_tools_changed()
        with contextlib.suppress(Exception):
            await ctx.request_context.session.send_tool_list_changed()
        return "grown"

    @server.tool()
    def spawn(pid_file: str) -> str:
        """Starts a child process in the server's process group; writes both pids."""
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
        Path(pid_file).write_text(f"{os.getpid()} {child.pid}")
        return "spawned"

    active: dict[str, int] = {}

    @server.tool()
    async def slow_append(path: str, text: str) -> str:
        """Appends text and how many calls on this path were in flight at once (it works a
        while, as a real write would, so calls sent together overlap)."""
        active[path] = active.get(path, 0) + 1
        peak = active[path]
        await asyncio.sleep(0.2)
        peak = max(peak, active[path])
        _append(path, f"{text}{peak}")
        active[path] -= 1
        return "appended"

    hinted = os.environ.get("DEMO_IDEMPOTENT_HINT") == "1"

    @server.tool(annotations=mt.ToolAnnotations(idempotent_hint=True) if hinted else None)
    async def mark(path: str, text: str) -> str:
        """Appends a line to path (and to the FIFO DEMO_SIGNAL names, if any); the line "slow"
        then waits until cancelled when DEMO_HANG=1 (a call in flight when its client dies).
        With DEMO_IDEMPOTENT_HINT=1 the server annotates it ``idempotentHint``."""
        _append(path, text + "\n")
        fifo = os.environ.get("DEMO_SIGNAL")
        if fifo:
            _append(fifo, text + "\n")
        if text == "slow" and os.environ.get("DEMO_HANG") == "1":
            await asyncio.Event().wait()
        return f"marked {text}"

    @server.tool(annotations=mt.ToolAnnotations(idempotent_hint=True))
    def lookup(key: str) -> str:
        """Annotated idempotent by the server."""
        return key

    @server.tool(annotations=mt.ToolAnnotations(read_only_hint=True))
    def peek(key: str) -> str:
        """Annotated read-only by the server."""
        return key

    @server.tool()
    def write(path: str, text: str) -> str:
        """Writes a file."""
        try:
            Path(path).write_text(text)
        except OSError as exc:
            raise ToolError(str(exc)) from exc
        return "written"

    return server


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--http", type=int)
    parser.add_argument("--no-tools", action="store_true")
    parser.add_argument("--hang-on-start", action="store_true")
    options = parser.parse_args()
    if options.hang_on_start:
        sys.stdin.read()  # never answers the handshake
        return
    server = build(options.no_tools)
    if options.http:
        server.run("streamable-http", host="127.0.0.1", port=options.http)
    else:
        server.run()


if __name__ == "__main__":
    main()
