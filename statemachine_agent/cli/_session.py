"""``statemachine-agent replay SESSION.jsonl`` and ``statemachine-agent check SESSION.jsonl``.

``replay`` prints the transcript in the order things happened (messages, tool results as their
calls finished, state changes, runs) with the state path and token usage. ``check`` lists every
violation of a log and exits 1 when there is any.
"""

from __future__ import annotations

import contextlib
import json
import logging
import shlex
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.markup import escape
from rich.text import Text

from .._errors import AgentError, UsageError
from .._messages import (
    AssistantMessage,
    Message,
    TextBlock,
    ThinkingBlock,
    ToolCallBlock,
    Usage,
    UserMessage,
)
from ..session import SessionData, write_html
from ..session._check import check_session
from ..session._html import read_log_to_render
from ..session._read import Record
from ._view import PYTHON_ADVICE, result_lines, usage_text

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
        style = "red" if message.is_error else "green"
        mark = "✗" if message.is_error else "✓"
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
    elif record.type == "history":
        console.print(
            f"[magenta]history replaced ({escape(str(body.get('reason')))}): "
            f"{len(record.messages)} message(s)[/]"
        )
        if body.get("summary"):
            console.print(Text(f"  summary: {_clip(str(body['summary']))}", style="dim"))


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
def check_command(session: Path) -> None:
    """Validate SESSION.jsonl and list every violation (exit code 1 when there is any)."""
    console = Console(highlight=False, soft_wrap=True)
    try:
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
    raise SystemExit(1)
