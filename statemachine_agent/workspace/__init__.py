"""Built-in workspace tools, confined to one folder: ``list_files``, ``read_file``,
``write_file``, ``edit_file`` and ``run_command``, plus the `Permissions` hook that guards commands
and writes.

Example::

    from statemachine_agent import Agent
    from statemachine_agent.workspace import Permissions, workspace_tools

    agent = Agent(model, tools=workspace_tools("."), before_tool_call=Permissions(allow_all=True))
"""

from __future__ import annotations

import os

from .._tools import Tool
from ._command import DEFAULT_TIMEOUT_SECONDS, MAX_OUTPUT_CHARS, command_tool, run_shell
from ._files import MAX_READ_CHARS, MAX_READ_LINES, file_tools
from ._paths import Workspace
from ._permissions import GUARDED, Permissions, describe_call


def workspace_tools(workspace: Workspace | str | os.PathLike[str]) -> list[Tool]:
    """The five built-in tools bound to ``workspace`` (a `Workspace` or a folder path).

    Raises:
        NotADirectoryError: the folder does not exist.
    """
    ws = workspace if isinstance(workspace, Workspace) else Workspace(workspace)
    return [*file_tools(ws), command_tool(ws)]


__all__ = [
    "DEFAULT_TIMEOUT_SECONDS",
    "GUARDED",
    "MAX_OUTPUT_CHARS",
    "MAX_READ_CHARS",
    "MAX_READ_LINES",
    "Permissions",
    "Workspace",
    "describe_call",
    "run_shell",
    "workspace_tools",
]
