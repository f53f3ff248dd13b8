"""``statemachine-agent run``: an agent working in a folder with the built-in workspace tools.

Exit codes by terminal state (`EXIT_CODES`): ``done`` 0, ``failed`` 1, ``max_turns`` 3,
``aborted`` 130 (Ctrl-C, as a shell reports an interrupted command); 2 is a usage error (click).
"""

from __future__ import annotations

import asyncio
import json
import os
import shlex
import signal
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any

import click
from rich.console import Console

from .._agent import Agent
from .._errors import AgentError, SessionCorruptError, UsageError
from .._hooks import Approve, Decision, Deny, PendingCall
from .._machine import State
from .._messages import StopReason
from .._result import RunResult
from ..models._base import Model
from ..models._offline import ScriptedModel
from ..workspace import (
    DEFAULT_HIDDEN,
    CallPreview,
    Permissions,
    Sandbox,
    SandboxStatus,
    SandboxUnavailableError,
    Workspace,
    check_sandbox,
    preview_call,
    workspace_tools,
)
from ._session import continue_refusal_of, corrupt_advice, repair_session, repaired_line
from ._view import JsonLinesView, LiveView, final_line, preview_renderable, sandbox_line

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

ABORT_REASON = "interrupted by the user (Ctrl-C)"
PIPE_CLOSED = "the reader of the --json output went away (a closed pipe)"
SIGPIPE_EXIT = 141
"""The exit code after the ``--json`` reader went away: 128 + SIGPIPE, as ``git log | head``."""

API_STOP_REASONS = tuple(
    reason.value for reason in StopReason if reason not in (StopReason.ABORTED, StopReason.ERROR)
)
"""The stop reasons a script step may give: the Messages API's."""


def load_model(spec: str) -> Model:
    """The model for ``--model``: ``script:FILE`` (a JSON list of `ScriptedModel` steps, or an
    object with a ``steps`` list) or an Anthropic model name.

    Raises:
        click.BadParameter: the script cannot be read, holds no steps, or a step is malformed
            or has a stop reason the Messages API does not send (the message names the step);
            or ``spec`` is the path of an existing file (it suggests ``script:FILE``).
        click.UsageError: a model name is given but ``ANTHROPIC_API_KEY`` is not set.
    """
    if spec.startswith("script:"):
        path = Path(spec.removeprefix("script:")).expanduser()
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise click.BadParameter(
                f"cannot read the script {path}: {exc}", param_hint="--model"
            ) from exc
        steps = data.get("steps") if isinstance(data, dict) else data
        if not isinstance(steps, list):
            raise click.BadParameter(
                f"{path} must hold a JSON list of steps (Anthropic-shaped responses), or an "
                'object {"steps": [...]}',
                param_hint="--model",
            )
        if not steps:
            raise click.BadParameter(
                f"{path} holds no steps: a script needs at least one response (for example "
                '{"content": [{"type": "text", "text": "Done."}], "stop_reason": "end_turn"}).',
                param_hint="--model",
            )
        for number, step in enumerate(steps, 1):
            reason = step.get("stop_reason") if isinstance(step, dict) else None
            if reason is not None and reason not in API_STOP_REASONS:
                raise click.BadParameter(
                    f"{path}: step {number}: unknown stop_reason {reason!r}; the known stop "
                    f"reasons are {', '.join(API_STOP_REASONS)}",
                    param_hint="--model",
                )
        try:
            return ScriptedModel(steps, name=f"script:{path.name}")
        except UsageError as exc:  # a malformed step; the message names it
            raise click.BadParameter(f"{path}: {exc}", param_hint="--model") from exc
    if Path(spec).expanduser().is_file():
        raise click.BadParameter(
            f"{spec} is a file, not a model name: to play it back as a script, use "
            f"--model script:{spec}",
            param_hint="--model",
        )
    if not os.environ.get("ANTHROPIC_API_KEY"):
        raise click.UsageError(
            f"--model {spec} needs an Anthropic API key, and ANTHROPIC_API_KEY is not set.\n"
            "Set it first (export ANTHROPIC_API_KEY=sk-ant-...; get a key at "
            "console.anthropic.com), or run offline with --model script:FILE."
        )
    from ..models import AnthropicModel  # imported on use: it loads the anthropic SDK

    model: Model = AnthropicModel(spec)
    return model


class Interrupts:
    """Ctrl-C (SIGINT) while a run is in progress, and the confirmation prompts.

    The first Ctrl-C aborts the run cleanly (the engine answers every open call; the call of a
    prompt that is waiting is answered as interrupted by the user, not as declined); a second
    one quits at once. The handler is installed with
    ``loop.add_signal_handler``, so it wakes the loop whichever thread the signal lands on; for
    the same reason prompts read the terminal through the loop instead of a blocking ``input``.

    Args:
        agent: the running agent.
        view: paused during prompts and told when an abort is on its way (may be None).
        console: where prompts are written.
    """

    def __init__(self, agent: Agent, view: LiveView | None, console: Console) -> None:
        self.agent = agent
        self.view = view
        self.console = console
        self.count = 0
        self._answer: asyncio.Future[str | None] | None = None
        self._prompting: asyncio.Lock | None = None

    def _on_sigint(self) -> None:
        self.count += 1
        if self.count > 1:
            raise KeyboardInterrupt
        if self._answer is not None and not self._answer.done():
            self._answer.set_result(None)
        self.agent.abort(ABORT_REASON)
        if self.view is not None:
            self.view.note("Aborting… (press Ctrl-C again to quit at once)")

    @contextmanager
    def installed(self, loop: asyncio.AbstractEventLoop) -> Iterator[None]:
        """Handle SIGINT inside the block (where the loop can: its main thread, not Windows)."""
        try:
            loop.add_signal_handler(signal.SIGINT, self._on_sigint)
        except (NotImplementedError, RuntimeError, ValueError):
            yield
            return
        try:
            yield
        finally:
            loop.remove_signal_handler(signal.SIGINT)

    async def confirm(self, question: str) -> bool | None:
        """Ask the person at the terminal, after the call's preview (a `Question`'s: a diff,
        a new file's head, a command). Returns True for yes; False for no, an empty answer or
        end of input; None when Ctrl-C interrupted the prompt (or came before it): the call is
        then answered as interrupted, not declined. One prompt at a time; the live view holds
        its output meanwhile."""
        if self._prompting is None:
            self._prompting = asyncio.Lock()
        async with self._prompting:
            if self.count:  # Ctrl-C came already: the run is being aborted
                return None
            with self.view.paused() if self.view is not None else nullcontext():
                preview = getattr(question, "preview", None)
                # A one-line command is in the question itself.
                if isinstance(preview, CallPreview) and (
                    preview.kind != "command" or "\n" in preview.text
                ):
                    self.console.print(preview_renderable(preview), soft_wrap=True)
                return await self._ask(question)

    async def _ask(self, question: str) -> bool | None:
        # rich's Confirm blocks in input(); this is its prompt, read without blocking the loop.
        loop = asyncio.get_running_loop()
        fd = sys.stdin.fileno()
        while True:
            self.console.print(f"{question} [bold magenta]\\[y/n][/] [cyan](n)[/]: ", end="")
            answer: asyncio.Future[str | None] = loop.create_future()
            self._answer = answer

            def on_readable(answer: asyncio.Future[str | None] = answer) -> None:
                if not answer.done():
                    answer.set_result(os.read(fd, 4096).decode(errors="replace"))

            loop.add_reader(fd, on_readable)
            try:
                line = await answer
            finally:
                loop.remove_reader(fd)
                self._answer = None
            if line is None:  # Ctrl-C
                self.console.print()
                return None
            if not line:  # end of input
                self.console.print()
                return False
            reply = line.strip().lower()
            if reply in ("y", "yes"):
                return True
            if reply in ("", "n", "no"):
                return False
            self.console.print("[prompt.invalid]Please enter Y or N")


def build_agent(
    workspace: Workspace,
    model: Model,
    *,
    permissions: Permissions,
    system: str | None = None,
    max_turns: int = 50,
    session: Path | None = None,
    sandbox: SandboxStatus | Sandbox | None = None,
    tool_sources: Sequence[Any] = (),
    **kwargs: Any,
) -> Agent:
    """An agent with the workspace tools and the permission hook; with ``session``, it continues
    (or starts) that session log. ``sandbox`` is passed to `workspace_tools` (default: auto);
    ``tool_sources`` (MCP servers: ``--mcp``, ``--mcp-url``) add their tools."""
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
            for source in agent.tool_sources:  # MCP servers: stopped inside this event loop
                await source.aclose()
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


def _interactive(console: Console) -> bool:
    return console.is_terminal and sys.stdin.isatty()


def _check_prompt(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    if value is not None and not value.strip():
        raise click.BadParameter(
            'it is empty; say what the agent should do, e.g. "Make the tests pass"', ctx, param
        )
    return value


def continue_command(
    *,
    workspace: Path,
    model_spec: str,
    max_turns: int,
    session: Path | None,
    system_file: Path | None,
    yes: bool,
    allow: Sequence[str],
    sandbox_flags: Sequence[str] = (),
) -> str:
    """How to continue a run that stopped (``max_turns`` or ``aborted``) from the command line:
    the same options and the session log, without a prompt. Without a session log there is
    nothing to continue from, so it says to rerun with one."""
    if session is None:
        return (
            "To be able to continue a run that stops, run it with --session FILE (a session "
            "log); then `statemachine-agent run --session FILE ...` without a PROMPT continues it."
        )
    words = ["statemachine-agent", "run", "--session", str(session)]
    words += ["--max-turns", str(max_turns), "-w", str(workspace), "-m", model_spec]
    if system_file is not None:
        words += ["--system", str(system_file)]
    if yes:
        words.append("--yes")
    for rule in allow:
        words += ["--allow", rule]
    words += sandbox_flags
    turns = f"{max_turns} more turn{'s' if max_turns != 1 else ''}"
    hint = f"To continue (up to {turns}; raise --max-turns for more): {shlex.join(words)}"
    if model_spec.startswith("script:"):
        hint += "\n(a script plays from its first step again: give one holding the steps to come)"
    return hint


def resolve_sandbox(
    mode: str | None,
    *,
    no_sandbox: bool = False,
    allow_network: bool = False,
    writable: Sequence[Path] = (),
    hide: Sequence[str] = (),
) -> tuple[SandboxStatus, list[str]]:
    """The ``run_command`` sandbox the options ask for, checked on this machine; and the same
    options as command-line words (for the continue hint).

    Raises:
        click.UsageError: ``--no-sandbox`` with another ``--sandbox`` mode, or
            ``--sandbox=require`` and bubblewrap is missing or fails (exit code 2; the message
            names bubblewrap and how to install it).
    """
    if no_sandbox and mode not in (None, "off"):
        raise click.UsageError(f"--no-sandbox contradicts --sandbox={mode}; give one of them.")
    chosen = "off" if no_sandbox else (mode or "auto")
    # Relative paths are relative to the current folder (not the workspace); ~ stays as given.
    writable = [path.resolve() for path in writable]
    hide = [path if path.startswith("~") else str(Path(path).resolve()) for path in hide]
    config = Sandbox.model_validate(
        {
            "mode": chosen,
            "allow_network": allow_network,
            "writable": tuple(writable),
            "hidden": (*DEFAULT_HIDDEN, *hide),
        }
    )
    try:
        status = check_sandbox(config, warn=False)
    except SandboxUnavailableError as exc:
        raise click.UsageError(
            f"{exc}\nOr run with --sandbox=auto to run commands unsandboxed with a warning, or "
            "--no-sandbox."
        ) from exc
    except UsageError as exc:
        raise click.BadParameter(str(exc), param_hint="--writable") from exc
    flags = ["--no-sandbox"] if chosen == "off" else []
    if chosen == "require":
        flags += ["--sandbox", "require"]
    if allow_network:
        flags.append("--allow-network")
    for extra in writable:
        flags += ["--writable", str(extra)]
    for hidden in hide:
        flags += ["--hide", hidden]
    return status, flags


@click.command("run")
@click.argument("prompt", required=False, callback=_check_prompt)
@click.option(
    "--workspace",
    "-w",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    default=".",
    show_default=True,
    help="The folder the agent works in; its file tools cannot reach outside it (for "
    "run_command, see --sandbox).",
)
@click.option(
    "--model",
    "-m",
    "model_spec",
    required=True,
    metavar="NAME|script:FILE",
    help="An Anthropic model name (needs ANTHROPIC_API_KEY), or script:FILE for an offline "
    "run that plays back a JSON list of responses.",
)
@click.option("--max-turns", type=click.IntRange(min=1), default=50, show_default=True)
@click.option(
    "--session",
    type=click.Path(dir_okay=False, path_type=Path),
    help="A JSONL session log: continued when it exists, created otherwise. Without PROMPT, "
    "the run it holds continues (after max_turns or an abort).",
)
@click.option(
    "--system",
    "system_file",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="A file holding the system prompt (the default describes the workspace).",
)
@click.option("--yes", "-y", is_flag=True, help="Allow every command and write without asking.")
@click.option(
    "--allow",
    multiple=True,
    metavar="RULE",
    help="Allow without asking: run_command, write_file, edit_file, writes (both write tools), "
    "or run_command:PREFIX (e.g. 'run_command:python3 -m unittest'). Repeatable.",
)
@click.option(
    "--sandbox",
    "sandbox_mode",
    type=click.Choice(["auto", "require", "off"]),
    help="run_command's bubblewrap sandbox: auto (default: on where bwrap works, else off with "
    "a warning), require (refuse to run without it), off.",
)
@click.option("--no-sandbox", is_flag=True, help="Same as --sandbox=off.")
@click.option(
    "--allow-network", is_flag=True, help="Let sandboxed commands use the network (default: off)."
)
@click.option(
    "--writable",
    multiple=True,
    type=click.Path(exists=True, path_type=Path),
    help="Also writable by sandboxed commands, besides the workspace and a private /tmp. "
    "Repeatable.",
)
@click.option(
    "--hide",
    multiple=True,
    metavar="PATH",
    help="Also hidden from sandboxed commands, besides ~/.ssh, ~/.aws, ~/.config/gcloud and "
    "~/.netrc. Repeatable.",
)
@click.option(
    "--approve",
    "approve",
    multiple=True,
    metavar="ID",
    help="With --session and no PROMPT: approve this call awaiting approval. Repeatable.",
)
@click.option(
    "--deny",
    "deny",
    multiple=True,
    metavar="ID:REASON",
    help="With --session and no PROMPT: deny this call awaiting approval. Repeatable.",
)
@click.option(
    "--repair",
    is_flag=True,
    help="With --session: move the log's unreadable lines (if any) to FILE.unreadable, "
    "nothing lost, and resume without them.",
)
@click.option(
    "--mcp",
    "mcp_specs",
    multiple=True,
    metavar="NAME=COMMAND ARGS",
    help="Add a stdio MCP server's tools (named NAME_tool), started in the workspace. Repeatable.",
)
@click.option(
    "--mcp-url",
    "mcp_urls",
    multiple=True,
    metavar="URL",
    help="Add the tools of a streamable HTTP MCP server. Repeatable.",
)
@click.option("--json", "json_lines", is_flag=True, help="Print events as JSON lines on stdout.")
def run_command(
    prompt: str | None,
    workspace: Path,
    model_spec: str,
    max_turns: int,
    session: Path | None,
    system_file: Path | None,
    yes: bool,
    allow: Sequence[str],
    sandbox_mode: str | None,
    no_sandbox: bool,
    allow_network: bool,
    writable: Sequence[Path],
    hide: Sequence[str],
    approve: Sequence[str],
    deny: Sequence[str],
    json_lines: bool,
    repair: bool = False,
    mcp_specs: Sequence[str] = (),
    mcp_urls: Sequence[str] = (),
) -> None:
    """Run an agent on PROMPT in a workspace folder, showing the state machine as it goes.

    Without PROMPT, --session FILE must name an existing log: its run continues where it stopped
    (after max_turns or an abort), for up to --max-turns more turns.

    Reading and listing files is always allowed. Commands and writes ask for confirmation in an
    interactive terminal; --yes or --allow permit them up front; without a terminal (or with
    --json) they are otherwise denied, and the model is told why. Ctrl-C aborts the run cleanly.

    Commands run in a bubblewrap sandbox where bwrap works: the workspace (and --writable paths)
    and a private /tmp are writable, the rest read-only; no network (--allow-network); ~/.ssh,
    ~/.aws, ~/.config/gcloud, ~/.netrc (and --hide paths) hidden; a short environment
    allow-list. Where bwrap is missing, commands run unsandboxed with a warning
    (--sandbox=require refuses instead); --no-sandbox turns it off.

    With --session and no terminal, a command or write that no rule allows is not denied: the
    run stops awaiting approval (exit code 4) with the pending calls printed; decide them with
    `statemachine-agent approve FILE --call ID` (or --approve ID / --deny ID:REASON here).

    Exit codes: 0 done, 1 failed, 3 max_turns, 4 awaiting approval, 130 aborted, 2 usage error.
    """
    console = Console(stderr=json_lines)
    try:
        permissions = Permissions(
            allow_all=yes,
            allow=allow,
            how_to_allow="The user can allow it by running again with --yes or --allow {tool}.",
            workspace=Workspace(workspace),
        )
    except UsageError as exc:
        raise click.BadParameter(str(exc), param_hint="--allow") from exc
    if prompt is None:
        if session is None:
            raise click.UsageError(
                "Missing argument 'PROMPT': say what the agent should do, or give --session FILE "
                "naming an existing session log to continue its run."
            )
        if not session.exists() or session.stat().st_size == 0:
            raise click.UsageError(
                f"No PROMPT and {session} does not exist (or is empty): there is no run to "
                "continue; give a PROMPT to start one."
            )
    sandbox, sandbox_flags = resolve_sandbox(
        sandbox_mode,
        no_sandbox=no_sandbox,
        allow_network=allow_network,
        writable=writable,
        hide=hide,
    )
    model = load_model(model_spec)
    system = system_file.read_text(encoding="utf-8") if system_file is not None else None
    decisions = parse_decisions(approve, deny) or None
    if decisions is not None and (prompt is not None or session is None):
        raise click.UsageError("--approve and --deny continue a session: give --session, no PROMPT")
    if prompt is None and session is not None:
        # Refused before the log is opened: a usage error changes no file (opening it writes
        # its repairs and cuts a torn last line).
        refusal = continue_refusal_of(session, deciding=decisions is not None)
        if refusal is not None:
            raise click.UsageError(refusal)
    if repair and session is not None and session.exists():
        try:
            moved, side = repair_session(session)
        except AgentError as exc:
            raise click.ClickException(str(exc)) from exc
        if moved:
            console.print(repaired_line(session, moved, side), soft_wrap=True, markup=False)
    try:
        agent = build_agent(
            Workspace(workspace),
            model,
            permissions=permissions,
            system=system,
            max_turns=max_turns,
            session=session,
            sandbox=sandbox,
            tool_sources=mcp_servers(mcp_specs, mcp_urls, workspace),
        )
    except UsageError as exc:
        raise click.UsageError(str(exc)) from exc
    except SessionCorruptError as exc:  # not a usage error: exit 1, naming --repair
        raise click.ClickException(corrupt_advice(exc.path, exc.problems)) from exc
    except AgentError as exc:  # e.g. not a session log: not a usage error, exit 1
        raise click.ClickException(str(exc)) from exc
    if prompt is None and agent.session is not None:
        # Continuing: the run keeps counting its turns (`RunCounts`), and --max-turns is how
        # many more this invocation may make.
        agent.max_turns = agent.session.counts.turns + max_turns
    interactive = not json_lines and _interactive(console)
    permissions.defer = session is not None and not interactive
    approve_hint = (
        f"To decide: statemachine-agent approve {shlex.quote(str(session))} --call ID "
        f"[--deny ID:REASON] -w {shlex.quote(str(workspace))} -m {shlex.quote(model_spec)}"
    )
    if model_spec.startswith("script:"):
        approve_hint += (
            "\n(a script plays from its first step again: give one holding the steps to come)"
        )
    hint = continue_command(
        workspace=workspace,
        model_spec=model_spec,
        max_turns=max_turns,
        session=session,
        system_file=system_file,
        yes=yes,
        allow=allow,
        sandbox_flags=sandbox_flags,
    )
    try:
        result = execute(
            agent,
            prompt,
            console=console,
            json_lines=json_lines,
            interactive=interactive,
            continue_hint=hint,
            sandbox=sandbox,
            decisions=decisions,
        )
    except UsageError as exc:  # e.g. no PROMPT and the logged run ended with an answer
        raise click.UsageError(str(exc)) from exc
    except KeyboardInterrupt:
        console.print("[red]Interrupted: quit without waiting for the run to end.[/red]")
        sys.exit(130)
    finally:
        agent.close()
    if result.state is State.AWAITING_APPROVAL and not json_lines:
        text = pending_text(result.pending, approve_hint, Workspace(workspace))
        console.print(text, soft_wrap=True, markup=False, highlight=False)
    if session is not None and not json_lines:
        console.print(f"[dim]Session log: {session}[/dim]", soft_wrap=True)
    sys.exit(EXIT_CODES.get(result.state, 1))


def mcp_servers(specs: Sequence[str], urls: Sequence[str], workspace: Path) -> list[Any]:
    """The MCP servers of ``--mcp NAME=COMMAND ARGS`` (stdio, in the workspace, tools named
    ``NAME_tool``) and ``--mcp-url URL``.

    Raises:
        UsageError: a ``--mcp`` without ``NAME=`` or a command; the mcp extra is missing.
    """
    if not specs and not urls:
        return []
    try:
        from ..mcp import MCPServer
    except ImportError as exc:
        raise UsageError(str(exc)) from exc
    servers = [MCPServer.from_spec(spec, cwd=workspace) for spec in specs]
    return servers + [MCPServer.http(url) for url in urls]


PENDING_ARGUMENTS_CHARS = 120
"""The most characters of a pending call's arguments (as JSON) `pending_text` prints on its line;
what the call would do is previewed under it."""


def pending_text(
    calls: Sequence[PendingCall], approve_hint: str, workspace: Workspace | None = None
) -> str:
    """The calls waiting for a decision, one a line (its arguments as JSON, cut to
    `PENDING_ARGUMENTS_CHARS`), each guarded call's `preview_call` under it (the preview a
    ``[y/n]`` prompt shows: an edit's diff, a new file's head trimmed to `PREVIEW_LINES` with a
    note, a command of several lines), and how to decide them.

    Args:
        workspace: where an edit's file is read for its diff; without one the diff is of the
            edit's own ``old_text`` and ``new_text`` (e.g. ``status`` of a durable run).
    """
    lines = ["Awaiting approval:"]
    for call in calls:
        arguments = json.dumps(call.arguments, ensure_ascii=False)
        if len(arguments) > PENDING_ARGUMENTS_CHARS:
            arguments = arguments[: PENDING_ARGUMENTS_CHARS - 1] + "…"
        lines.append(f"  {call.id}: {call.tool_name} {arguments} ({call.reason})")
        preview = preview_call(call.tool_name, call.arguments, workspace)
        if preview is not None and (preview.kind != "command" or "\n" in preview.text):
            lines += [f"      {line}" for line in preview.text.splitlines()]
            lines += [f"      {preview.note}"] if preview.note else []
    lines.append(approve_hint)
    return "\n".join(lines)


def parse_decisions(approve: Sequence[str], deny: Sequence[str]) -> dict[str, Decision]:
    """``--approve ID`` and ``--deny ID:REASON`` as decisions.

    Raises:
        click.BadParameter: a ``--deny`` without a reason, or one call decided twice.
    """
    decisions: dict[str, Decision] = {}
    for call_id in approve:
        decisions[call_id.strip()] = Approve()
    for item in deny:
        call_id, _, reason = item.partition(":")
        if not call_id.strip() or not reason.strip():
            raise click.BadParameter(
                f"{item!r}: give ID:REASON, e.g. --deny c2:'not today'", param_hint="--deny"
            )
        if call_id.strip() in decisions:
            raise click.BadParameter(f"call {call_id.strip()!r} is decided twice")
        decisions[call_id.strip()] = Deny(reason.strip())
    return decisions


@click.command("approve")
@click.argument("session", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--call", "calls", multiple=True, metavar="ID", help="Approve this call. Repeatable.")
@click.option("--all", "approve_all", is_flag=True, help="Approve every pending call.")
@click.option(
    "--deny", multiple=True, metavar="ID:REASON", help="Deny this call (the model reads REASON)."
)
@click.option(
    "--workspace",
    "-w",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    default=".",
    show_default=True,
)
@click.option("--model", "-m", "model_spec", required=True, metavar="NAME|script:FILE")
@click.option("--max-turns", type=click.IntRange(min=1), default=50, show_default=True)
@click.option("--yes", "-y", is_flag=True, help="Allow every later command and write.")
@click.option("--allow", multiple=True, metavar="RULE", help="As for run. Repeatable.")
@click.option("--json", "json_lines", is_flag=True, help="Print events as JSON lines on stdout.")
@click.pass_context
def approve_command(
    ctx: click.Context,
    session: Path,
    calls: Sequence[str],
    approve_all: bool,
    deny: Sequence[str],
    workspace: Path,
    model_spec: str,
    max_turns: int,
    yes: bool,
    allow: Sequence[str],
    json_lines: bool,
) -> None:
    """Decide the calls of a session awaiting approval and continue its run.

    Approved calls run once (they need no permission rule: a person approved them); denied ones
    get an error result with the reason; once no call is pending the run goes on with the model.
    Calls left undecided stay pending. Exit codes as for `run` (4: still awaiting approval).
    """
    if approve_all:
        from ..session import read_session

        pending = [c.id for c in read_session(session).pending]
        if not pending:
            raise click.UsageError(f"no call of {session} is awaiting approval: nothing to decide")
        calls = [*calls, *pending]
    if not calls and not deny:
        raise click.UsageError("say what to decide: --call ID, --all, or --deny ID:REASON")
    ctx.invoke(
        run_command,
        prompt=None,
        workspace=workspace,
        model_spec=model_spec,
        max_turns=max_turns,
        session=session,
        system_file=None,
        yes=yes,
        allow=allow,
        sandbox_mode=None,
        no_sandbox=False,
        allow_network=False,
        writable=(),
        hide=(),
        approve=calls,
        deny=deny,
        json_lines=json_lines,
        repair=False,
    )
