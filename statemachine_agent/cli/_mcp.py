"""``run --mcp NAME=COMMAND ARGS`` and ``--mcp-url URL``: MCP servers whose tools join the
workspace tools (the ``mcp`` extra)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import click

from .._errors import UsageError

if TYPE_CHECKING:
    from ..mcp import MCPServer

mcp_option = click.option(
    "--mcp",
    "mcp_specs",
    multiple=True,
    metavar="NAME=COMMAND ARGS",
    help="Add a stdio MCP server's tools (named NAME_tool), started in the workspace folder "
    "when the run starts and stopped after it. Repeatable. Needs the mcp extra.",
)
mcp_url_option = click.option(
    "--mcp-url",
    "mcp_urls",
    multiple=True,
    metavar="URL",
    help="Add the tools of a streamable HTTP MCP server (e.g. http://127.0.0.1:8000/mcp). "
    "Repeatable. Needs the mcp extra.",
)


def mcp_servers(specs: Sequence[str], urls: Sequence[str], workspace: Path) -> list[MCPServer]:
    """The MCP servers of ``--mcp NAME=COMMAND ARGS`` (stdio, started in ``workspace``, tools
    named ``NAME_tool``) and ``--mcp-url URL`` (none is started here).

    Raises:
        click.BadParameter: a ``--mcp`` without ``NAME=`` or a command; the mcp extra is
            missing.
    """
    if not specs and not urls:
        return []
    try:
        from ..mcp import MCPServer
    except ImportError as exc:
        raise click.BadParameter(str(exc), param_hint="--mcp") from exc
    try:
        servers = [MCPServer.from_spec(spec, cwd=workspace) for spec in specs]
    except UsageError as exc:
        raise click.BadParameter(str(exc), param_hint="--mcp") from exc
    return servers + [MCPServer.http(url) for url in urls]
