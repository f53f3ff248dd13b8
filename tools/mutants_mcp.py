"""Fourteen realistic one-line bugs in the MCP tools and their seam (issue 36), for
``tools/plant_bugs.py --bugs mcp``: each is planted alone in a temporary copy of the repository and
``tests/mcp`` with ``tests/durable/test_durable_mcp.py`` must catch it (see `TESTS`).

The bugs are exact search/replace edits (`Edit`, paths relative to the package) against the MCP
code: content conversion (``mcp/_convert.py``), the server and its connection
(``mcp/_server.py``), the tool table of the loop (``_sources.py``) and the CLI (``cli/_mcp.py``).

Run ``tools/plant_bugs.py --bugs mcp --copy-in ..``: the copy must not be under /tmp, which the
bubblewrap sandbox of ``test_a_sandboxed_stdio_server_runs...`` replaces (its server script would
be missing).

Measured (issue 36's tests as merged): 10 caught, 4 survived (2, 5, 12, 14). The tests added for
them (tests/mcp/test_mcp_legacy_servers.py against servers/legacy_server.py, a handshake-era
server; tests/mcp/test_mcp_cli.py's ``--mcp-url`` test) catch all fourteen.
"""

from __future__ import annotations

from plant_bugs import Bug, Edit


def _e(file: str, old: str, new: str) -> tuple[Edit, ...]:
    return (Edit(file, old, new),)


TESTS = ("tests/mcp", "tests/durable/test_durable_mcp.py")
"""What runs against each bug (from the repository root)."""

BUGS: tuple[Bug, ...] = (
    Bug(
        1,
        "an image result sent as a text caption, not an image block",
        _e(
            "mcp/_convert.py",
            "blocks.append(ImageBlock(media_type=item.mime_type, data=item.data))",
            'blocks.append(TextBlock(text=f"[image: {item.mime_type}]"))',
        ),
    ),
    Bug(
        2,
        "a resource link's description dropped",
        _e(
            "mcp/_convert.py",
            'about = f": {item.description}" if item.description else ""',
            'about = ""',
        ),
    ),
    Bug(
        3,
        "isError ignored: a failed MCP call reported as a success",
        _e(
            "mcp/_convert.py",
            "return ToolResult(content=content, is_error=result.is_error, details=structured)",
            "return ToolResult(content=content, is_error=False, details=structured)",
        ),
    ),
    Bug(
        4,
        "the clash check compares unprefixed names",
        _e(
            "_sources.py",
            "            if item.name in merged:\n",
            '            if getattr(item, "remote_name", item.name) in merged:\n',
        ),
    ),
    Bug(
        5,
        "a legacy notifications/tools/list_changed ignored",
        _e(
            "mcp/_server.py",
            "        if isinstance(message, mt.ToolListChangedNotification):\n"
            "            self._changed()\n",
            "        if isinstance(message, mt.ToolListChangedNotification):\n            pass\n",
        ),
    ),
    Bug(
        6,
        "the server's timeout_seconds not passed to its tools",
        _e(
            "mcp/_server.py",
            "mcp_tool(self, t, self.timeout_seconds)",
            "mcp_tool(self, t, None)",
        ),
    ),
    Bug(
        7,
        "no cancellation sent to the server on abort",
        _e(
            "mcp/_server.py",
            "        await cancel_task(call)\n        if ctx.signal.aborted:\n",
            "        if ctx.signal.aborted:\n",
        ),
    ),
    Bug(
        8,
        "only the server process killed on close, not its process group",
        _e(
            "mcp/_server.py",
            "os.killpg(group, signal.SIGKILL)",
            "os.kill(group, signal.SIGKILL)",
        ),
    ),
    Bug(
        9,
        "a connection closed mid-call not marked broken: no reconnect",
        _e(
            "mcp/_server.py",
            "                    connection.broken = True\n",
            "                    pass\n",
        ),
    ),
    Bug(
        10,
        "progress notifications dropped",
        _e(
            "mcp/_server.py",
            "            ctx.progress(progress_update(progress, total, message))\n",
            "            pass\n",
        ),
    ),
    Bug(
        11,
        "argument validation reports only the first error",
        _e(
            "mcp/_convert.py",
            "            for e in errors\n        ]",
            "            for e in errors[:1]\n        ]",
        ),
    ),
    Bug(
        12,
        "tool definitions sent sorted by name, not in declaration order",
        _e(
            "_sources.py",
            "ToolDefinition(t.name, t.description, t.input_schema) for t in tools.values()]",
            "ToolDefinition(t.name, t.description, t.input_schema)\n"
            "            for t in sorted(tools.values(), key=lambda t: t.name)]",
        ),
    ),
    Bug(
        13,
        "the server's idempotent flag not given to its tools (durable recovery)",
        _e(
            "mcp/_server.py",
            "                        t.idempotent = self.idempotent\n",
            "                        t.idempotent = False\n",
        ),
    ),
    Bug(
        14,
        "the CLI's --mcp-url servers dropped",
        _e(
            "cli/_mcp.py",
            "    for name, url in map(_named_url, urls):\n",
            "    for name, url in map(_named_url, urls[:0]):\n",
        ),
    ),
)
