"""Built-in workspace tools for one folder: ``list_files``, ``read_file``, ``write_file`` and
``edit_file`` (confined to it), ``run_command`` (in a bubblewrap sandbox where it can: `Sandbox`),
plus the `Permissions` hook that guards commands and writes.

Example::

    from statemachine_agent import Agent
    from statemachine_agent.workspace import Permissions, workspace_tools

    agent = Agent(model, tools=workspace_tools("."), before_tool_call=Permissions(allow_all=True))
"""

from __future__ import annotations

import os

from .._errors import SandboxUnavailableError
from .._tools import Tool
from ._command import DEFAULT_TIMEOUT_SECONDS, MAX_OUTPUT_CHARS, command_tool, run_shell
from ._files import MAX_READ_CHARS, MAX_READ_LINES, file_tools
from ._paths import Workspace
from ._permissions import (
    GUARDED,
    PREVIEW_LINES,
    READ_TOOLS,
    CallPreview,
    Permissions,
    Question,
    describe_call,
    preview_call,
)
from ._sandbox import (
    DEFAULT_ENV,
    DEFAULT_HIDDEN,
    INSTALL_HINT,
    Sandbox,
    SandboxMode,
    SandboxStatus,
    check_sandbox,
)


def workspace_tools(
    workspace: Workspace | str | os.PathLike[str],
    *,
    sandbox: Sandbox | SandboxStatus | SandboxMode = "auto",
) -> list[Tool]:
    """The five built-in tools bound to ``workspace`` (a `Workspace` or a folder path).

    Args:
        sandbox: how ``run_command`` is sandboxed: a `Sandbox` configuration, just its mode
            (``"auto"``: bubblewrap where it works, else unsandboxed with a logged warning;
            ``"require"``; ``"off"``), or a `SandboxStatus` already checked by `check_sandbox`.
            The file tools are confined to the workspace either way.

    Raises:
        NotADirectoryError: the folder does not exist.
        SandboxUnavailableError: ``mode="require"`` and bubblewrap is missing or fails here.
        UsageError: a `Sandbox.writable` path does not exist.
    """
    ws = workspace if isinstance(workspace, Workspace) else Workspace(workspace)
    if isinstance(sandbox, str):
        sandbox = Sandbox(mode=sandbox)
    status = sandbox if isinstance(sandbox, SandboxStatus) else check_sandbox(sandbox)
    return [*file_tools(ws), command_tool(ws, status)]


__all__ = [
    "DEFAULT_ENV",
    "DEFAULT_HIDDEN",
    "DEFAULT_TIMEOUT_SECONDS",
    "GUARDED",
    "INSTALL_HINT",
    "MAX_OUTPUT_CHARS",
    "MAX_READ_CHARS",
    "MAX_READ_LINES",
    "PREVIEW_LINES",
    "READ_TOOLS",
    "CallPreview",
    "Permissions",
    "Question",
    "Sandbox",
    "SandboxMode",
    "SandboxStatus",
    "SandboxUnavailableError",
    "Workspace",
    "check_sandbox",
    "describe_call",
    "preview_call",
    "run_shell",
    "workspace_tools",
]
