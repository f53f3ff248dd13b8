"""``statemachine-agent replay SESSION.jsonl`` and ``statemachine-agent check SESSION.jsonl``.

``replay`` prints the transcript in the order things happened (messages, tool results as their
calls finished, state changes, runs) with the state path and token usage. ``check`` lists every
violation of a log and exits 1 when there is any.
"""

from __future__ import annotations

import codecs
import contextlib
import fcntl
import json
import logging
import os
import shlex
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.markup import escape
from rich.text import Text

from .._agent import continue_refusal
from .._errors import AgentError, UsageError
from .._machine import State
from .._messages import (
    AssistantMessage,
    Message,
    TextBlock,
    ThinkingBlock,
    ToolCallBlock,
    Usage,
    UserMessage,
)
from .._states import RUN_STOPS
from ..session import SessionData, SessionLog, read_session, write_html
from ..session._check import check_session
from ..session._html import REPLACEMENT, read_log_to_render
from ..session._read import Record
from ._result_text import result_lines, result_mark
from ._view import PYTHON_ADVICE, usage_text

_STATE_STYLES = {
    "idle": "dim",
    "awaiting_model": "cyan",
    "executing_tools": "yellow",
    "done": "bold green",
    "aborted": "bold red",
    "max_turns": "bold magenta",
    "failed": "bold red",
}
_WIDTH = 300


LONE_SURROGATES_REPLACED = "statemachine_agent.lone_surrogates_replaced"
"""The codec error handler (`codecs.register_error`) that prints a lone surrogate as U+FFFD."""


def _lone_surrogates_replaced(error: UnicodeError) -> tuple[str | bytes, int]:
    if not isinstance(error, UnicodeEncodeError):
        raise error
    bad = error.object[error.start : error.end]
    if not all("\ud800" <= char <= "\udfff" for char in bad):
        raise error  # a character this encoding lacks: not ours to hide
    try:  # as bytes: a UTF-8 encoder takes only ASCII text from an error handler
        return REPLACEMENT.encode(error.encoding) * len(bad), error.end
    except UnicodeEncodeError:
        return "?" * len(bad), error.end


codecs.register_error(LONE_SURROGATES_REPLACED, _lone_surrogates_replaced)


def _print_lone_surrogates_replaced() -> None:
    """Let standard output print a log's lone surrogates (a cut emoji, a file name that is not
    UTF-8; the log's JSON holds them as ``\\udXXX`` escapes, UTF-8 has no encoding for them) as
    U+FFFD, as the replay page shows them, instead of failing mid-transcript (``strict``, or
    ``surrogateescape`` as under a C or POSIX locale: it fails on any surrogate outside
    U+DC80-DCFF and writes those inside as bytes that are not UTF-8). A stream set up with
    other errors (``PYTHONIOENCODING=utf-8:backslashreplace``, say) is left as it is."""
    if getattr(sys.stdout, "errors", None) in ("strict", "surrogateescape") and hasattr(
        sys.stdout, "reconfigure"
    ):
        sys.stdout.reconfigure(errors=LONE_SURROGATES_REPLACED)


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    # The commands print torn and corrupt lines themselves; the reader's warnings repeat them.
    logger = logging.getLogger("statemachine_agent.session")
    before = logger.disabled
    logger.disabled = True
    try:
        yield
    finally:
        logger.disabled = before


UNREADABLE_SUFFIX = ".unreadable"
"""`repair_session` keeps the lines it cuts from ``FILE`` in ``FILE.unreadable``."""


def repair_session(path: Path) -> tuple[list[int], Path]:
    """Move the unreadable lines of a session log (complete lines that are not valid records:
    `SessionCorruptError`, and a torn last line: a crash mid-write, which resume would drop) to
    ``path.unreadable`` so that the log resumes without them.

    Nothing is lost: the cut lines are appended to the side file byte for byte (a torn line
    gets a newline), and the log is rewritten through a temporary file and a rename, so a crash
    leaves the old log or the new one.

    Returns:
        The numbers of the lines moved (1-based; empty when every line is readable, and then
        nothing is written) and the side file's path.

    Raises:
        click.ClickException: another agent has the log open, or it cannot be rewritten.
        AgentError: the file is not a session log.
    """
    side = path.with_name(path.name + UNREADABLE_SUFFIX)
    with path.open("rb") as handle:
        try:  # the lock a `SessionLog` takes: no agent writes the log while it is rewritten
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise click.ClickException(
                f"session log {path} is in use by another agent; stop it first"
            ) from None
        with _quiet():
            data = read_session(path, strict=False)
        moved = {number for number, _ in [*data.corrupt, *data.torn_tail]}
        if not moved:
            return [], side
        chunks = handle.read().splitlines(keepends=True)
        kept = b"".join(c for n, c in enumerate(chunks, 1) if n not in moved)
        cut = [
            c if c.endswith((b"\n", b"\r")) else c + b"\n"
            for n, c in enumerate(chunks, 1)
            if n in moved
        ]
        try:
            with side.open("ab") as out:
                out.writelines(cut)
                out.flush()
                os.fsync(out.fileno())
            fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
            try:
                with os.fdopen(fd, "wb") as out:
                    out.write(kept)
                    out.flush()
                    os.fsync(out.fileno())
                os.chmod(tmp, os.stat(path).st_mode & 0o7777)
                os.replace(tmp, path)
            except BaseException:
                Path(tmp).unlink(missing_ok=True)
                raise
        except OSError as exc:
            raise click.ClickException(f"cannot repair {path}: {exc}") from exc
    return sorted(moved), side


def close_as_resume_would(path: Path) -> str | None:
    """Write what resuming the log would write first (`SessionLog.open`): an error result for
    each call with no recorded result, and the end of a run the process died in (``aborted``,
    or the terminal state it had reached). Run after `repair_session`.

    Returns:
        What was written, in one sentence; None when the log needed nothing.

    Raises:
        click.ClickException: another agent has the log open, or it is still unreadable.
    """
    try:
        with _quiet():
            data = read_session(path)
            if not data.repairs and not data.run_open:
                return None
            SessionLog.open(path).close()
    except AgentError as exc:  # in use (UsageError), or corrupt again
        raise click.ClickException(str(exc)) from exc
    done = []
    children = list(_sub_agent_runs(data))
    repairs = len(data.repairs) + sum(len(child.repairs) for child in children)
    if repairs:
        where = " (sub-agent runs' included)" if any(c.repairs for c in children) else ""
        done.append(
            f"answered {repairs} call(s){where} that had no recorded result with an error result"
        )
    if data.run_open:
        state = data.state.value if data.state in RUN_STOPS else State.ABORTED.value
        done.append(f"recorded the end of the run the process died in as {state!r}")
    open_children = sum(child.run_open for child in children)
    if open_children:
        done.append(f"ended {open_children} sub-agent run(s) it died in as 'aborted'")
    said = done[-1] if len(done) == 1 else f"{', '.join(done[:-1])} and {done[-1]}"
    return f"Closed {path} as resume would: {said}."


def _sub_agent_runs(data: SessionData) -> Iterator[SessionData]:
    """The log's sub-agent runs (`SessionData.children`), theirs included, depth first."""
    for child in data.children.values():
        yield child
        yield from _sub_agent_runs(child)


def repaired_line(path: Path, moved: list[int], side: Path) -> str:
    """What `repair_session` did, in one sentence."""
    lines = ", ".join(map(str, moved))
    return (
        f"Moved {len(moved)} unreadable line(s) of {path} (line {lines}) to {side}; the log "
        "now holds every other line, unchanged."
    )


def continue_refusal_of(path: Path, *, deciding: bool) -> str | None:
    """Why ``run --session PATH`` without a PROMPT cannot go on, read without changing the file
    (`Agent.run`'s rules on the history a resume would start from), or None when it can.

    Args:
        path: an existing session log.
        deciding: decisions were given (``--approve``/``--deny``).

    Returns:
        The usage error's message, or None (also for a file that is not a session log: opening
        it reports that).
    """
    try:
        with _quiet():
            data = read_session(path, strict=False)
    except AgentError:
        return None
    quoted = shlex.quote(str(path))
    if data.pending and not deciding:
        ids = ", ".join(call.id for call in data.pending)
        return (
            f"calls {ids} of {path} are awaiting approval: decide them first with --approve ID "
            f"or --deny ID:REASON (or `statemachine-agent approve {quoted} --call ID`)"
        )
    if deciding and not data.pending:
        return f"no call of {path} is awaiting approval: there is nothing to decide"
    if data.pending:
        return None
    refusal = continue_refusal(data.messages)
    return None if refusal is None else f"{refusal} ({path} is unchanged)"


def corrupt_advice(path: Path, problems: list[tuple[int, str]]) -> str:
    """The error for a session log with unreadable lines, naming the CLI's ways to go on."""
    lines = "; ".join(f"line {n}: {why}" for n, why in problems)
    quoted = shlex.quote(str(path))
    return (
        f"session log {path} has {len(problems)} unreadable line(s): {lines}.\n"
        "To resume without them, add --repair to this command (it moves them to "
        f"{path}{UNREADABLE_SUFFIX}, so nothing is lost), or run "
        f"`statemachine-agent check {quoted} --fix` first."
    )


def _clip(text: str, limit: int = _WIDTH) -> str:
    text = text.strip()
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _state(name: object) -> str:
    value = str(name)
    return f"[{_STATE_STYLES.get(value, 'white')}]{escape(value)}[/]"


def _args(call: ToolCallBlock) -> str:
    raw = call.raw_arguments if call.raw_arguments is not None else json.dumps(call.input)
    return _clip(raw, 120)


def _print_message(console: Console, message: Message, *, repair: bool = False) -> None:
    if isinstance(message, UserMessage):
        console.print(Text("user › ", style="bold blue") + Text(_clip(message.text)))
    elif isinstance(message, AssistantMessage):
        for block in message.content:
            if isinstance(block, TextBlock) and block.text.strip():
                console.print(Text("assistant › ", style="bold") + Text(_clip(block.text)))
            elif isinstance(block, ThinkingBlock):
                console.print(Text(f"  (thinking) {_clip(block.thinking, 120)}", style="dim"))
            elif isinstance(block, ToolCallBlock):
                console.print(
                    Text("  → ", style="yellow")
                    + Text(f"{block.name}({_args(block)})")
                    + Text(f"  [{block.id}]", style="dim")
                )
        tail = f"  stop: {message.stop_reason}  usage: {usage_text(message.usage)}"
        if message.error:
            tail += f"  error: {message.error}"
        console.print(Text(tail, style="dim"))
    else:
        mark, style = result_mark(message)
        line = Text(f"  ← {mark} {message.tool_name} ", style=style)
        line += Text(result_lines(message, width=160))
        line += Text(f"  [{message.tool_call_id}]", style="dim")
        if repair:
            line += Text("  (answered on resume)", style="magenta")
        console.print(line)


def _print_record(console: Console, record: Record, runs: list[int]) -> None:
    body = record.body
    if record.message is not None:
        _print_message(console, record.message, repair=bool(body.get("repair")))
    elif record.type == "state":
        console.print(
            f"  [dim]state[/] {_state(body.get('source'))} [dim]→[/] {_state(body.get('dest'))}"
            f" [dim]({escape(str(body.get('trigger')))}: {escape(str(body.get('label')))})[/]"
        )
    elif record.type == "run_start":
        runs.append(record.line)
        console.rule(f"run {len(runs)}", style="dim")
    elif record.type == "run_end":
        usage = Usage.model_validate(body.get("usage") or {})
        line = f"run ended: {_state(body.get('state'))}"
        if body.get("turns") is not None:
            line += f"  turns {body.get('turns')}"
        line += f"  usage {usage_text(usage)}"
        console.print(line)
        if body.get("error"):
            # The engine's advice is for Python callers; the replay ends with the command line.
            error = str(body["error"]).split(PYTHON_ADVICE, 1)[0]
            console.print(Text(f"  {error}", style="dim"))
    elif record.type == "child" and record.inner is not None:
        _print_child(console, record)
    elif record.type == "history":
        console.print(
            f"[magenta]history replaced ({escape(str(body.get('reason')))}): "
            f"{len(record.messages)} message(s)[/]"
        )
        if body.get("summary"):
            console.print(Text(f"  summary: {_clip(str(body['summary']))}", style="dim"))


def _print_child(console: Console, record: Record) -> None:
    """A sub-agent's record, indented under the call that runs it (its run's start named)."""
    inner = record.inner
    assert inner is not None
    body = record.body
    if inner.type == "run_start":
        console.print(
            Text(f"    ┌ sub-agent {body.get('tool_name')} [{body.get('call_id')}]", style="cyan")
        )
        return
    with console.capture() as captured:
        _print_record(console, inner, [])
    for line in captured.get().splitlines():
        console.print(Text("    │ ", style="cyan") + Text.from_ansi(line))


def _print_header(console: Console, data: SessionData) -> None:
    header: dict[str, Any] = data.header or {}
    tools = ", ".join(header.get("tools") or []) or "none"
    console.print(f"[bold]session[/] {escape(str(data.path))}")
    console.print(
        f"[dim]model[/] {escape(str(header.get('model')))}  [dim]tools[/] {escape(tools)}  "
        f"[dim]created[/] {escape(str(header.get('created_at')))}"
    )


@click.command("replay")
@click.argument("session", type=click.Path(path_type=Path))  # checked by read_log_to_render
@click.option(
    "--html",
    "html_out",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Write a self-contained HTML replay (state diagram, timeline, transcript) to this file "
    "instead of printing the transcript.",
)
def replay_command(session: Path, html_out: Path | None) -> None:
    """Print the transcript of SESSION.jsonl with its state path and token usage (or, with
    --html, write it as one HTML page that opens offline)."""
    _print_lone_surrogates_replaced()
    console = Console(highlight=False, soft_wrap=True)
    try:
        with _quiet():
            data = read_log_to_render(session)  # the check write_html makes
    except UsageError as exc:
        raise click.BadParameter(str(exc), param_hint="SESSION") from exc
    except AgentError as exc:
        raise click.ClickException(str(exc)) from exc
    if html_out is not None:
        try:
            write_html(data, html_out)  # a temporary file renamed over it: never half a page
        except OSError as exc:
            raise click.ClickException(f"cannot write {html_out}: {exc}") from exc
        console.print(f"wrote {escape(str(html_out))}: open it in a browser (works offline)")
        return
    _print_header(console, data)
    runs: list[int] = []
    for record in data.records:
        _print_record(console, record, runs)
    console.rule(style="dim")
    path = data.state_path
    console.print("[bold]state path[/] " + (" [dim]→[/] ".join(_state(s) for s in path) or "-"))
    console.print(f"[bold]usage[/] {usage_text(data.usage)}")
    for n, why in data.corrupt:
        console.print(f"[red]line {n} unreadable (skipped): {escape(why)}[/]")
    for n, why in data.torn_tail:
        console.print(f"[yellow]line {n} torn at the end of the log (dropped): {escape(why)}[/]")
    for repair in data.repairs:
        console.print(
            f"[yellow]call {escape(repair.tool_call_id)} ({escape(repair.tool_name)}) has no "
            "recorded result; resume will answer it with an error result[/]"
        )
    if data.state is not None and data.state.value in ("max_turns", "aborted"):
        console.print(
            f"The last run stopped ({_state(data.state.value)}); to continue it: "
            f"statemachine-agent run --session {escape(shlex.quote(str(session)))} "
            "--max-turns N -w DIR -m MODEL"
        )


@click.command("check")
@click.argument("session", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option(
    "--fix",
    is_flag=True,
    help="Move unreadable lines (a torn last line too) to SESSION.jsonl.unreadable (nothing is "
    "lost), close a run the process died in as resume would, then check what is left.",
)
def check_command(session: Path, fix: bool) -> None:
    """Validate SESSION.jsonl and list every violation (exit code 1 when there is any)."""
    _print_lone_surrogates_replaced()
    console = Console(highlight=False, soft_wrap=True)
    try:
        if fix:
            moved, side = repair_session(session)
            if moved:
                console.print(escape(repaired_line(session, moved, side)))
            closed = close_as_resume_would(session)
            if closed is not None:
                console.print(escape(closed))
        with _quiet():
            data, problems = check_session(session)
    except AgentError as exc:
        raise click.ClickException(str(exc)) from exc
    lines = len(data.records) + (data.header is not None)
    if not problems:
        console.print(
            f"[green]✓[/] {escape(str(session))}: valid ({lines} lines, "
            f"{len(data.messages)} messages, state {_state(data.state or 'idle')})"
        )
        return
    console.print(f"[red]✗[/] {escape(str(session))}: {len(problems)} violation(s)")
    for problem in problems:
        console.print(f"  - {escape(problem)}")
    quoted = escape(shlex.quote(str(session)))
    if not fix and data.corrupt:
        console.print(
            f"To resume without the unreadable lines: statemachine-agent check {quoted} --fix "
            "(or run --repair)"
        )
    elif not fix and (data.torn_tail or data.run_open or data.repairs):
        console.print(
            f"To close it as resume would (a torn line is moved to {escape(str(session))}"
            f"{UNREADABLE_SUFFIX}, "
            f"nothing is lost): statemachine-agent check {quoted} --fix (or continue it: "
            f'statemachine-agent run --session {quoted} "PROMPT")'
        )
    raise SystemExit(1)
