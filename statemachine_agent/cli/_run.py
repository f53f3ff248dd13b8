"""``statemachine-agent run`` and ``approve``: an agent working in a folder with the built-in
workspace tools.

The run command goes in four named steps: its options checked and turned into values
(`_checked_options`, with `load_model` for ``--model`` and `resolve_sandbox` for the sandbox),
the agent built (`_agent_for`), the run with its live view or JSON lines (`_run_and_show`, around
`execute`), and its ending: what is printed after it and the exit code (`_end`).

Exit codes by terminal state (`EXIT_CODES`): ``done`` 0, ``failed`` 1, ``max_turns`` 3,
``aborted`` 130 (Ctrl-C, as a shell reports an interrupted command); 2 is a usage error (click).
"""

from __future__ import annotations

import shlex
import sys
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import click
from rich.console import Console

from .._agent import Agent
from .._errors import AgentError, UsageError
from .._hooks import Decision
from .._machine import State
from .._result import RunResult
from .._sources import ToolSource
from .._tools import Tool
from ..models._base import Model
from ..session import SessionCorruptError
from ..workspace import Permissions, SandboxStatus, Workspace
from ._execute import EXIT_CODES, build_agent, execute, interactive_terminal
from ._hints import continue_command, pending_text
from ._mcp import check_allow_rules, mcp_option, mcp_servers, mcp_url_option
from ._model_option import load_model
from ._options import check_prompt, parse_decisions, resolve_sandbox
from ._session import continue_refusal_of, corrupt_advice, repair_session, repaired_line
from ._subagent_option import subagent_option, subagent_tools


@dataclass(frozen=True)
class RunOptions:
    """The run command's options, checked (`_checked_options`)."""

    prompt: str | None
    """The task; None continues the session log's run."""
    workspace: Path
    model_spec: str
    """``--model`` as given (the continue and approve hints repeat it)."""
    model: Model
    max_turns: int
    session: Path | None
    system_file: Path | None
    system: str | None
    """The system prompt read from ``system_file`` (None: the default)."""
    yes: bool
    allow: Sequence[str]
    permissions: Permissions
    sandbox: SandboxStatus
    sandbox_flags: list[str]
    """The sandbox options as command-line words (for the continue hint)."""
    decisions: dict[str, Decision] | None
    """``--approve`` / ``--deny``: the decisions on the session's pending calls."""
    json_lines: bool
    mcp_flags: tuple[str, ...] = ()
    """``--mcp`` / ``--mcp-url`` / ``--subagent`` as command-line words (the continue and
    approve hints)."""


@click.command("run")
@click.argument("prompt", required=False, callback=check_prompt)
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
# Tool sources besides the built-in workspace tools (e.g. MCP servers: --mcp NAME=CMD, --mcp-url
# URL) go here, as RunOptions fields turned into tools in build_agent's call in `_agent_for`.
@mcp_option
@mcp_url_option
@subagent_option
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
    subagent_specs: Sequence[str] = (),
) -> None:
    """Run an agent on PROMPT in a workspace folder, showing the state machine as it goes.

    Without PROMPT, --session FILE must name an existing log: its run continues where it stopped
    (after max_turns or an abort), for up to --max-turns more turns.

    Reading and listing files is always allowed, and so are --subagent calls (a sub-agent
    only reads). Commands, writes and MCP tool calls (--mcp,
    --mcp-url) ask for confirmation in an interactive terminal; --yes or --allow permit them up front; without a terminal (or with
    --json) they are otherwise denied, and the model is told why. Ctrl-C aborts the run cleanly.

    Commands run in a bubblewrap sandbox where bwrap works: the workspace (and --writable paths)
    and a private /tmp are writable, the rest read-only; no network (--allow-network); ~/.ssh,
    ~/.aws, ~/.config/gcloud, ~/.netrc (and --hide paths) hidden; a short environment
    allow-list; --mcp servers run in the same sandbox. Where bwrap is missing, commands run unsandboxed with a warning
    (--sandbox=require refuses instead); --no-sandbox turns it off.

    With --session and no terminal, a command or write that no rule allows is not denied: the
    run stops awaiting approval (exit code 4) with the pending calls printed; decide them with
    `statemachine-agent approve FILE --call ID` (or --approve ID / --deny ID:REASON here).

    Exit codes: 0 done, 1 failed, 3 max_turns, 4 awaiting approval, 130 aborted, 2 usage error.
    """

    console = Console(stderr=json_lines)
    options = _checked_options(
        prompt,
        workspace=workspace,
        model_spec=model_spec,
        max_turns=max_turns,
        session=session,
        system_file=system_file,
        yes=yes,
        allow=allow,
        sandbox_mode=sandbox_mode,
        no_sandbox=no_sandbox,
        allow_network=allow_network,
        writable=writable,
        hide=hide,
        approve=approve,
        deny=deny,
        json_lines=json_lines,
    )
    check_allow_rules(allow, mcp_specs, mcp_urls)
    # Checked here, started by the run: stdio servers under the --sandbox settings.
    servers = mcp_servers(mcp_specs, mcp_urls, workspace, options.sandbox)
    flags = [w for spec in mcp_specs for w in ("--mcp", spec)]
    flags += [w for url in mcp_urls for w in ("--mcp-url", url)]
    subagents, subagent_flags = subagent_tools(subagent_specs, workspace, max_turns=max_turns)
    options.permissions.tools.update(t.name for t in subagents)  # they only read: always allowed
    flags += subagent_flags
    options = replace(options, mcp_flags=tuple(flags))
    if repair:
        _repair(options.session, console)
    agent = _agent_for(options, [*servers, *subagents])
    result = _run_and_show(agent, options, console)
    _end(result, options, console)


def _checked_options(
    prompt: str | None,
    *,
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
) -> RunOptions:
    """The options as values, each checked before any file is changed.

    Raises:
        click.BadParameter: a bad ``--allow`` rule, ``--model``, ``--writable`` or ``--deny``.
        click.UsageError: no PROMPT and no log to continue; ``--approve`` / ``--deny`` without
            ``--session`` or with a PROMPT; a log whose run cannot be continued; a sandbox the
            options contradict or cannot have (``--sandbox=require``); no API key.
    """
    try:
        permissions = Permissions(
            allow_all=yes,
            allow=allow,
            how_to_allow="The user can allow it by running again with --yes or --allow {tool}.",
            workspace=Workspace(workspace),
            guard_other_tools=True,  # the --mcp servers' tools, as run_command
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
    return RunOptions(
        prompt=prompt,
        workspace=workspace,
        model_spec=model_spec,
        model=model,
        max_turns=max_turns,
        session=session,
        system_file=system_file,
        system=system,
        yes=yes,
        allow=allow,
        permissions=permissions,
        sandbox=sandbox,
        sandbox_flags=sandbox_flags,
        decisions=decisions,
        json_lines=json_lines,
    )


def _repair(session: Path | None, console: Console) -> None:
    """``--repair``: move the log's unreadable lines aside (saying so), before it is opened.

    Raises:
        click.ClickException: the log cannot be repaired (exit 1).
    """
    if session is None or not session.exists():
        return
    try:
        moved, side = repair_session(session)
    except AgentError as exc:
        raise click.ClickException(str(exc)) from exc
    if moved:
        console.print(repaired_line(session, moved, side), soft_wrap=True, markup=False)


def _agent_for(options: RunOptions, tool_sources: Sequence[Tool | ToolSource] = ()) -> Agent:
    """The agent of the run: the workspace tools (and ``tool_sources``: the ``--mcp`` servers
    and ``--subagent`` tools),
    the permission hook, the session log (a continued run may make ``--max-turns`` more turns).

    Raises:
        click.UsageError: the agent's configuration is refused.
        click.ClickException: the session log is corrupt (the message names ``--repair``) or
            not a session log (exit 1).
    """
    try:
        agent = build_agent(
            Workspace(options.workspace),
            options.model,
            permissions=options.permissions,
            system=options.system,
            max_turns=options.max_turns,
            session=options.session,
            sandbox=options.sandbox,
            tool_sources=tool_sources,
        )
    except UsageError as exc:
        raise click.UsageError(str(exc)) from exc
    except SessionCorruptError as exc:  # not a usage error: exit 1, naming --repair
        raise click.ClickException(corrupt_advice(exc.path, exc.problems)) from exc
    except AgentError as exc:  # e.g. not a session log: not a usage error, exit 1
        raise click.ClickException(str(exc)) from exc
    if options.prompt is None and agent.session is not None:
        # Continuing: the run keeps counting its turns (`RunCounts`), and --max-turns is how
        # many more this invocation may make.
        agent.max_turns = agent.session.counts.turns + options.max_turns
    return agent


def _run_and_show(agent: Agent, options: RunOptions, console: Console) -> RunResult:
    """Run with the live view (asking at a terminal for calls no rule allows) or JSON lines;
    the agent is closed after.

    Raises:
        click.UsageError: no PROMPT and the logged run has nothing to continue.
        SystemExit: 130 after a second Ctrl-C; 141 when the ``--json`` reader went away.
    """
    interactive = not options.json_lines and interactive_terminal(console)
    options.permissions.defer = options.session is not None and not interactive
    hint = continue_command(
        workspace=options.workspace,
        model_spec=options.model_spec,
        max_turns=options.max_turns,
        session=options.session,
        system_file=options.system_file,
        yes=options.yes,
        allow=options.allow,
        sandbox_flags=options.sandbox_flags,
        mcp_flags=options.mcp_flags,
    )
    try:
        return execute(
            agent,
            options.prompt,
            console=console,
            json_lines=options.json_lines,
            interactive=interactive,
            continue_hint=hint,
            sandbox=options.sandbox,
            decisions=options.decisions,
        )
    except UsageError as exc:  # e.g. no PROMPT and the logged run ended with an answer
        raise click.UsageError(str(exc)) from exc
    except KeyboardInterrupt:
        console.print("[red]Interrupted: quit without waiting for the run to end.[/red]")
        sys.exit(130)
    finally:
        agent.close()


def _end(result: RunResult, options: RunOptions, console: Console) -> None:
    """After the run: the calls awaiting approval and how to decide them, the session log's
    name (not with ``--json``); then exit with the ending's code (`EXIT_CODES`).

    Raises:
        SystemExit: always.
    """
    if result.state is State.AWAITING_APPROVAL and not options.json_lines:
        text = pending_text(result.pending, _approve_hint(options), Workspace(options.workspace))
        console.print(text, soft_wrap=True, markup=False, highlight=False)
    if options.session is not None and not options.json_lines:
        console.print(f"[dim]Session log: {options.session}[/dim]", soft_wrap=True)
    sys.exit(EXIT_CODES.get(result.state, 1))


def _approve_hint(options: RunOptions) -> str:
    """How to decide the calls awaiting approval (the ``approve`` command line)."""
    hint = (
        f"To decide: statemachine-agent approve {shlex.quote(str(options.session))} --call ID "
        f"[--deny ID:REASON] -w {shlex.quote(str(options.workspace))} "
        f"-m {shlex.quote(options.model_spec)}"
    )
    if options.mcp_flags:  # the servers whose tools the pending calls need
        hint += " " + shlex.join(options.mcp_flags)
    if options.model_spec.startswith("script:"):
        hint += "\n(a script plays from its first step again: give one holding the steps to come)"
    return hint


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
@mcp_option
@mcp_url_option
@subagent_option
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
    mcp_specs: Sequence[str] = (),
    mcp_urls: Sequence[str] = (),
    subagent_specs: Sequence[str] = (),
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
        mcp_specs=mcp_specs,
        mcp_urls=mcp_urls,
        subagent_specs=subagent_specs,
    )
