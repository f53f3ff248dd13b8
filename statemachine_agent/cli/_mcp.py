"""``run --mcp NAME=COMMAND ARGS`` and ``--mcp-url [NAME=]URL``: MCP servers whose tools join the
workspace tools (the ``mcp`` extra), guarded by the permission rules like ``run_command``."""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import click

from .._errors import UsageError
from ..workspace import GUARDED, READ_TOOLS, SandboxStatus

if TYPE_CHECKING:
    from ..mcp import MCPServer

mcp_option = click.option(
    "--mcp",
    "mcp_specs",
    multiple=True,
    metavar="NAME=COMMAND ARGS",
    help="Add a stdio MCP server's tools (named NAME_tool), started in the workspace folder "
    "(relative paths in COMMAND ARGS are relative to it) when the run starts, under the "
    "--sandbox settings, and stopped after it. Its calls need permission as run_command's do "
    "(--allow NAME_tool, --allow 'NAME_*', --yes). Repeatable. Needs the mcp extra.",
)
mcp_url_option = click.option(
    "--mcp-url",
    "mcp_urls",
    multiple=True,
    metavar="[NAME=]URL",
    help="Add the tools of a streamable HTTP MCP server (e.g. "
    "docs=http://127.0.0.1:8000/mcp: tools named docs_tool; without NAME= unprefixed). Its "
    "calls need permission as --mcp's do. Repeatable. Needs the mcp extra.",
)

_NAMED_URL = re.compile(r"([A-Za-z0-9_-]+)=(https?://.*)", re.IGNORECASE)


def _named_url(value: str) -> tuple[str | None, str]:
    """``NAME=URL`` as (NAME, URL); a plain URL as (None, URL)."""
    match = _NAMED_URL.fullmatch(value.strip())
    return (match.group(1), match.group(2)) if match else (None, value.strip())


def check_allow_rules(allow: Sequence[str], specs: Sequence[str], urls: Sequence[str]) -> None:
    """Refuse an ``--allow`` rule that can name no tool of this run: a rule that is not a
    workspace rule must name an MCP tool, i.e. start with a server's ``NAME_`` (any name is
    possible when an unnamed ``--mcp-url`` server gives unprefixed tools).

    Raises:
        click.BadParameter: such a rule, naming the servers' prefixes.
    """
    prefixes = [f"{spec.partition('=')[0].strip()}_" for spec in specs if "=" in spec]
    prefixes += [f"{name}_" for name, _ in map(_named_url, urls) if name is not None]
    unnamed = any(_named_url(url)[0] is None for url in urls)
    for raw in allow:
        rule = raw.strip()
        if rule in (*GUARDED, "writes") or rule.startswith("run_command:") or unnamed:
            continue
        if rule in READ_TOOLS or not any(rule.startswith(p) for p in prefixes):
            servers = ", ".join(f"{p}tool or '{p}*'" for p in prefixes) or "none: no --mcp given"
            raise click.BadParameter(
                f"unknown allow rule {rule!r}: use run_command, write_file, edit_file, writes, "
                f"run_command:PREFIX, or an MCP server's tool ({servers})",
                param_hint="--allow",
            )


def mcp_servers(
    specs: Sequence[str],
    urls: Sequence[str],
    workspace: Path,
    sandbox: SandboxStatus | None = None,
) -> list[MCPServer]:
    """The MCP servers of ``--mcp NAME=COMMAND ARGS`` (stdio, started in ``workspace``, under
    ``sandbox`` when it is active, tools named ``NAME_tool``) and ``--mcp-url [NAME=]URL``
    (tools named ``NAME_tool``, or as the server names them); none is started here.

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
    confined = sandbox.config if sandbox is not None and sandbox.active else None
    try:
        servers = [MCPServer.from_spec(spec, cwd=workspace, sandbox=confined) for spec in specs]
    except UsageError as exc:
        raise click.BadParameter(str(exc), param_hint="--mcp") from exc
    for name, url in map(_named_url, urls):
        if name is None:
            servers.append(MCPServer.http(url))
        else:
            servers.append(MCPServer.http(url, name=name, prefix=f"{name}_"))
    return servers
