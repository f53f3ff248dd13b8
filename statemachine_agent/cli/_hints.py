"""What the CLI prints after a run that stopped: how to continue it (`continue_command`), and the
calls awaiting a person's decision with how to decide them (`pending_text`)."""

from __future__ import annotations

import json
import shlex
from collections.abc import Sequence
from pathlib import Path

from .._hooks import PendingCall
from ..workspace import Workspace, preview_call


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
    mcp_flags: Sequence[str] = (),
) -> str:
    """How to continue a run that stopped (``max_turns`` or ``aborted``) from the command line:
    the same options (``mcp_flags``: the ``--mcp`` / ``--mcp-url`` words, so the logged MCP
    calls find their tools again) and the session log, without a prompt. Without a session log there is
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
    words += mcp_flags
    turns = f"{max_turns} more turn{'s' if max_turns != 1 else ''}"
    hint = f"To continue (up to {turns}; raise --max-turns for more): {shlex.join(words)}"
    if model_spec.startswith("script:"):
        hint += "\n(a script plays from its first step again: give one holding the steps to come)"
    return hint


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
