"""``statemachine-agent demo``: the offline demo. A scripted model fixes a real failing test in a
scratch copy of a small bundled project; every tool call (listing, reading, running the tests,
editing) really happens there."""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

import click
from rich.console import Console

from .._result import RunResult
from ..demo import PROJECT, demo_script
from ..models._offline import ScriptedModel
from ..workspace import Permissions, Sandbox, SandboxStatus, Workspace, check_sandbox
from ._execute import EXIT_CODES, build_agent, execute


def prepare(base: Path) -> tuple[Path, Path]:
    """Copy the bundled project to ``base/project``; returns (workspace, session log path).

    Raises:
        click.UsageError: ``base/project`` or ``base/session.jsonl`` exists already (the demo
            would continue an old session log instead of starting its own).
    """
    workspace = base / "project"
    session = base / "session.jsonl"
    for used in (workspace, session):
        if used.exists():
            raise click.UsageError(f"{used} exists already; give --into an empty folder")
    base.mkdir(parents=True, exist_ok=True)
    shutil.copytree(PROJECT, workspace, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    return workspace, session


def run_demo(
    base: Path,
    *,
    console: Console,
    delay_seconds: float = 0.0,
    json_lines: bool = False,
    sandbox: SandboxStatus | None = None,
) -> tuple[RunResult, Path, Path]:
    """Run the scripted demo session in a copy of the project under ``base``.

    Args:
        sandbox: how the demo's commands are sandboxed (default: checked here, mode auto);
            stated before the run.

    Returns:
        The run's result, the workspace folder and the session log path.
    """
    if sandbox is None:
        sandbox = check_sandbox(Sandbox(), warn=False)
    workspace, session = prepare(base)
    prompt, steps = demo_script()
    paced: list[dict[str, Any]] = [{**step, "delay_seconds": delay_seconds} for step in steps]
    model = ScriptedModel(paced, name="demo-script")
    # The demo approves its own calls: the script is fixed and the workspace is a scratch copy.
    agent = build_agent(
        Workspace(workspace),
        model,
        permissions=Permissions(allow_all=True),
        session=session,
        sandbox=sandbox,
    )
    try:
        result = execute(agent, prompt, console=console, json_lines=json_lines, sandbox=sandbox)
    finally:
        if agent.session is not None:
            agent.session.close()
    return result, workspace, session


@click.command("demo")
@click.option(
    "--into",
    type=click.Path(file_okay=False, path_type=Path),
    help="Folder to put the project copy and the session log in (default: a new temporary folder).",
)
@click.option(
    "--delay",
    type=click.FloatRange(min=0),
    default=0.5,
    show_default=True,
    help="Seconds the scripted model waits before each response, to follow along.",
)
@click.option("--json", "json_lines", is_flag=True, help="Print events as JSON lines on stdout.")
def demo_command(into: Path | None, delay: float, json_lines: bool) -> None:
    """Watch an agent fix a failing test, offline (no API key, no network).

    A scripted model plays the model's side; the tools are real: it lists and reads the files of
    a copy of a small project, runs its tests (they fail), edits the bug, runs them again (they
    pass) and answers. Ctrl-C aborts, as in `run`.
    """
    console = Console(stderr=json_lines)
    base = into if into is not None else Path(tempfile.mkdtemp(prefix="statemachine-agent-demo-"))
    if not json_lines:
        console.print(
            "[bold]statemachine-agent demo[/bold]: a scripted model (offline) fixes a failing "
            "test; every tool call is real.\n"
            f"Workspace: {base / 'project'}\n",
            soft_wrap=True,
        )
    result, workspace, session = run_demo(
        base, console=console, delay_seconds=delay, json_lines=json_lines
    )
    if not json_lines:
        # soft_wrap: paths are printed whole, to be copied.
        console.print(f"\nWorkspace:   {workspace}\nSession log: {session}", soft_wrap=True)
        console.print(f"Try: cd {workspace} && python3 -m unittest -v", soft_wrap=True)
        console.print(f"     statemachine-agent replay {session}", soft_wrap=True)
        console.print(f"     statemachine-agent check {session}", soft_wrap=True)
        if into is None:
            console.print(
                f"(The scratch folder is kept on purpose, to look at; rm -r {base} removes it.)",
                soft_wrap=True,
            )
    sys.exit(EXIT_CODES.get(result.state, 1))
