"""One run of the CLI: the agent with the workspace tools (`build_agent`), run with a live view or
JSON lines and Ctrl-C handling (`execute`), and the exit code of its ending (`EXIT_CODES`)."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Sequence
from contextlib import nullcontext
from pathlib import Path
from typing import Any

from rich.console import Console

from .._agent import Agent
from .._hooks import Decision
from .._machine import State
from .._result import RunResult
from .._sources import ToolSource
from .._tools import Tool
from ..models._base import Model
from ..workspace import Permissions, Sandbox, SandboxStatus, Workspace, workspace_tools
from ._interrupts import Interrupts
from ._view import JsonLinesView, LiveView, final_line, sandbox_line

EXIT_CODES = {
    State.DONE: 0,
    State.FAILED: 1,
    State.MAX_TURNS: 3,
    State.AWAITING_APPROVAL: 4,
    State.ABORTED: 130,
}
"""The process exit code of each terminal state."""

SYSTEM_PROMPT = """\
You are a careful software agent working in the folder {root} (the workspace). Use the tools to \
look around before you change anything: list_files, read_file, then edit_file or write_file, and \
run_command to run tests or other commands. Paths are relative to the workspace; the file tools \
cannot reach outside it. When the task is done, answer with a short summary of what you did \
and how you checked it."""
PIPE_CLOSED = "the reader of the --json output went away (a closed pipe)"
SIGPIPE_EXIT = 141
"""The exit code after the ``--json`` reader went away: 128 + SIGPIPE, as ``git log | head``."""


def build_agent(
    workspace: Workspace,
    model: Model,
    *,
    permissions: Permissions,
    system: str | None = None,
    max_turns: int = 50,
    session: Path | None = None,
    sandbox: SandboxStatus | Sandbox | None = None,
    tool_sources: Sequence[Tool | ToolSource] = (),
    **kwargs: Any,
) -> Agent:
    """An agent with the workspace tools and the permission hook; with ``session``, it continues
    (or starts) that session log. ``sandbox`` is passed to `workspace_tools` (default: auto);
    ``tool_sources`` (the ``--mcp`` servers, the ``--subagent`` tools) add their tools."""
    system_prompt = system if system is not None else SYSTEM_PROMPT.format(root=workspace.root)
    tools = workspace_tools(workspace, sandbox=sandbox if sandbox is not None else "auto")
    options: dict[str, Any] = {
        "tools": [*tools, *tool_sources],
        "system": system_prompt,
        "max_turns": max_turns,
        "before_tool_call": permissions,
        **kwargs,
    }
    if session is not None:
        return Agent.resume(session, model=model, **options)
    return Agent(model, **options)


def execute(
    agent: Agent,
    prompt: str | None,
    *,
    console: Console,
    json_lines: bool = False,
    interactive: bool = False,
    continue_hint: str | None = None,
    sandbox: SandboxStatus | None = None,
    decisions: dict[str, Decision] | None = None,
) -> RunResult:
    """Run ``prompt`` on ``agent`` with a live view (or JSON lines on stdout) and Ctrl-C handling.

    Args:
        prompt: the task; None continues the agent's history (see `Agent.run`).
        interactive: ask at the terminal for calls the permission hook does not allow already
            (sets the hook's ``confirm``).
        continue_hint: printed under a ``max_turns`` or ``aborted`` final line (see `final_line`).
        sandbox: the ``run_command`` sandbox, stated before the run starts (live view) or in
            the ``run_start`` line under ``"sandbox"`` (JSON lines).
        decisions: for a run awaiting approval, the decisions on its pending calls.

    Returns:
        The run's result; the final line has been printed (not in JSON mode).

    Raises:
        SystemExit: 141 (`SIGPIPE_EXIT`) when the reader of the JSON lines went away; the run
            was aborted then (its session log, if any, holds everything until then).
        UsageError: ``prompt`` is None and there is nothing to continue.
    """
    view = None if json_lines else LiveView(console)
    interrupts = Interrupts(agent, view, console)
    if interactive and isinstance(agent.before_tool_call, Permissions):
        agent.before_tool_call.confirm = interrupts.confirm
        if agent.session is not None:  # the log keeps when the person answered
            agent.before_tool_call.on_decided = agent.session.record
    if sandbox is not None and (view is not None or sandbox.problem is not None):
        console.print(sandbox_line(sandbox), soft_wrap=True)  # on stderr with JSON lines
    run_start = {"sandbox": sandbox.as_dict()} if sandbox is not None else None
    lines: JsonLinesView | None = None
    if view is not None:
        unsubscribe = agent.subscribe(view.handle)
    else:
        lines = JsonLinesView(sys.stdout, run_start, on_closed=lambda: agent.abort(PIPE_CLOSED))
        unsubscribe = agent.subscribe(lines.handle)

    async def main() -> RunResult:
        try:
            with interrupts.installed(asyncio.get_running_loop()):
                return await agent.run(prompt, decisions=decisions)
        finally:
            if agent.tool_table is not None:  # MCP servers: stopped inside this event loop
                await agent.tool_table.aclose()
            # Close the provider's HTTP client inside this event loop, before asyncio.run ends it.
            aclose = getattr(agent.model, "aclose", None)
            if aclose is not None:
                await aclose()

    try:
        with view if view is not None else nullcontext():
            result = asyncio.run(main())
    finally:
        unsubscribe()
    if view is not None:
        console.print(final_line(result, continue_hint=continue_hint), soft_wrap=True)
    if lines is not None and lines.closed:
        sys.exit(SIGPIPE_EXIT)  # the reader is gone: quietly, as a shell reports SIGPIPE
    return result


def interactive_terminal(console: Console) -> bool:
    """A person is at the terminal: the console writes to one and stdin reads from one."""
    return console.is_terminal and sys.stdin.isatty()
