"""`Permissions`: the ``before_tool_call`` hook that guards commands and writes.

Reading and listing are always allowed. ``run_command``, ``write_file`` and ``edit_file`` (and,
with ``guard_other_tools``, every tool that is not a workspace tool: an MCP server's, for one) run
when everything is allowed (``--yes``), when an allow rule covers the call, or when the person at
the terminal says yes; otherwise they are denied with a reason the model reads.
"""

from __future__ import annotations

import dataclasses
import difflib
import inspect
import json
import re
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, Literal

from .._errors import ToolError, UsageError
from .._events import CallDecided
from .._hooks import Allow, Defer, Deny, Interrupted, ToolCallInfo
from ._paths import Workspace

GUARDED = ("run_command", "write_file", "edit_file")
"""The tools that need permission."""
WRITE_TOOLS = ("write_file", "edit_file")
READ_TOOLS = ("list_files", "read_file")
"""The workspace tools that never need permission (they only read the workspace)."""
_TOOL_NAME = re.compile(r"[a-zA-Z0-9_-]{1,64}")
_SHELL_CONTROL = (";", "&", "|", "`", "$(", ">", "<", "\n")

Confirm = Callable[[str], "bool | Awaitable[bool | None] | None"]
"""Ask the person: ``confirm(question) -> bool`` (sync or async). The question is a `Question`
(a ``str``) carrying a `CallPreview` of the call. None means the person interrupted the prompt
(Ctrl-C): the call is answered as interrupted, not as declined."""

PREVIEW_LINES = 40
"""The most lines a `CallPreview` shows (a diff, a new file's head); a note says how many more."""

INTERRUPTED_AT_PROMPT = (
    "Interrupted by the user (Ctrl-C) at the prompt asking permission to {what}: the call was "
    "not run and the run was aborted. The user did not decline it; if it is still needed, it "
    "can be asked for again when the run continues."
)
"""The result of a call whose permission prompt the person interrupted (``{what}``: the call)."""


@dataclasses.dataclass(frozen=True)
class CallPreview:
    """What a guarded call would do, shown with its permission prompt.

    Attributes:
        kind: ``"diff"`` (``edit_file``: a unified diff of the file), ``"file"`` (``write_file``:
            the new content's first lines) or ``"command"`` (``run_command``: the command line).
        text: the preview, at most `PREVIEW_LINES` lines.
        note: what was left out or could not be shown (empty when nothing was), e.g.
            ``"… 12 more lines of the diff not shown"``.
    """

    kind: Literal["diff", "file", "command"]
    text: str
    note: str = ""


class Question(str):
    """A permission question (a ``str``, so any ``confirm`` can print it) with the call's
    `CallPreview` (None when there is nothing to show) for a prompt that shows it."""

    preview: CallPreview | None

    def __new__(cls, text: str, preview: CallPreview | None = None) -> Question:
        question = super().__new__(cls, text)
        question.preview = preview
        return question


def _trimmed(lines: list[str], what: str) -> tuple[str, str]:
    rest = len(lines) - PREVIEW_LINES
    note = f"… {rest} more line{'s' if rest != 1 else ''} {what} not shown" if rest > 0 else ""
    return "\n".join(lines[:PREVIEW_LINES]), note


def preview_call(
    name: str, arguments: dict[str, Any], workspace: Workspace | None = None
) -> CallPreview | None:
    """The `CallPreview` of a guarded call: for ``edit_file`` the unified diff (``difflib``) of
    the file as the edit would leave it (read from ``workspace``; without one, or when the text
    is not found, the diff of ``old_text`` against ``new_text``), for ``write_file`` the new
    content's head (and, replacing a file, its diff), for ``run_command`` the whole command.
    None for other tools. Never raises: a file that cannot be read gets a note instead, and so
    does an edit the tool will refuse (``old_text`` not found, or found more than once without
    ``replace_all``: ``edit_file`` replaces one unique occurrence or, with it, every one).
    """
    if name == "run_command":
        return CallPreview("command", str(arguments.get("command", "")))
    path = str(arguments.get("path", ""))
    if name == "write_file":
        content = str(arguments.get("content", ""))
        lines = content.splitlines()
        if not lines:
            return CallPreview("file", "", "(an empty file)")
        text, note = _trimmed(lines, "of the new file")
        return CallPreview("file", text, note)
    if name != "edit_file":
        return None
    old, new = str(arguments.get("old_text", "")), str(arguments.get("new_text", ""))
    before = after = None
    note = ""
    if workspace is not None:
        try:
            current = workspace.resolve(path).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError, ToolError) as exc:
            note = f"({path} cannot be read: {exc}; the edit's own text is shown)"
        else:
            if old and old in current.replace("\r\n", "\n"):
                before = current.replace("\r\n", "\n")
                count = -1 if arguments.get("replace_all") else 1
                after = before.replace(old, new, count)
                found = before.count(old)
                if found > 1 and not arguments.get("replace_all"):
                    note = (
                        f"(old_text occurs {found} times in {path}: the edit will fail unless "
                        "replace_all is set; the first occurrence is shown)"
                    )
            else:
                note = f"(old_text is not in {path} as it is now: the edit will fail)"
    if before is None or after is None:
        before, after = old, new
    diff = list(
        difflib.unified_diff(
            before.splitlines(), after.splitlines(), f"a/{path}", f"b/{path}", lineterm=""
        )
    )
    text, trimmed = _trimmed(diff, "of the diff")
    return CallPreview("diff", text, " ".join(filter(None, [trimmed, note])))


def describe_call(name: str, arguments: dict[str, Any]) -> str:
    """A short description of a guarded call, for a confirmation prompt."""
    if name == "run_command":
        return f"run the command: {arguments.get('command')}"
    if name == "write_file":
        lines = len(str(arguments.get("content", "")).splitlines())
        return f"write {arguments.get('path')} ({lines} line{'' if lines == 1 else 's'})"
    if name == "edit_file":
        lines = len(str(arguments.get("old_text", "")).splitlines()) or 1
        return f"edit {arguments.get('path')} (replace {lines} line{'' if lines == 1 else 's'})"
    shown = json.dumps(arguments, ensure_ascii=False, default=str)
    if len(shown) > 200:
        shown = shown[:199] + "…"
    return f"call {name} with {shown}"


class Permissions:
    """Decides whether a guarded tool call may run (use as ``Agent(before_tool_call=...)``).

    Args:
        allow_all: allow every call (``--yes``).
        allow: allow rules: a tool name (``run_command``, ``write_file``, ``edit_file``),
            ``writes`` for both write tools, or ``run_command:PREFIX`` for commands that are
            ``PREFIX`` or start with ``PREFIX`` and a space, and contain no shell control
            characters anywhere, quoted or not (a newline, ``; & | ` $( > <``): the command
            runs under ``/bin/sh -c``, where any of them could start a second command or
            redirect the output.
        confirm: asks the person at the terminal; None when there is nobody to ask.
        how_to_allow: what the model is told about how the user can allow a denied call
            (``{tool}`` is replaced by the tool's name); the CLI names its flags.
        defer: with nobody to ask (no ``confirm``), defer the call for a person's later decision
            (the run stops in ``awaiting_approval``) instead of denying it; for runs with a
            session log, which any process can continue.
        workspace: where ``edit_file`` previews read the file to show its diff (`preview_call`).
        on_decided: told each answer ``confirm`` gave, as a `CallDecided` (``approve`` or
            ``deny``), when it came; e.g. ``agent.session.record``, so the session log holds
            how long a call waited for the person (the replay page draws it apart).
        guard_other_tools: also guard every tool that is not a workspace tool (`READ_TOOLS`
            stay free), e.g. an MCP server's: such a tool can do whatever its server can, and
            the server's own ``readOnlyHint`` is its claim, not a guarantee. An allow rule may
            then also be such a tool's name (``notes_add_note``) or a name prefix ending in
            ``*`` (``notes_*``: every tool of the ``--mcp notes=...`` server); the CLI sets it.

    Raises:
        UsageError: an allow rule names no guarded tool.
    """

    def __init__(
        self,
        *,
        allow_all: bool = False,
        allow: Iterable[str] = (),
        confirm: Confirm | None = None,
        how_to_allow: str = "The user can allow it in the agent's permission settings.",
        defer: bool = False,
        workspace: Workspace | None = None,
        on_decided: Callable[[CallDecided], object] | None = None,
        guard_other_tools: bool = False,
    ) -> None:
        self.allow_all = allow_all
        self.guard_other_tools = guard_other_tools
        self.workspace = workspace
        self.defer = defer
        self.on_decided = on_decided
        self.how_to_allow = how_to_allow
        self.confirm = confirm
        self.tools: set[str] = set()
        self.command_prefixes: list[str] = []
        self.tool_prefixes: list[str] = []
        for rule in allow:
            rule = rule.strip()
            if rule == "writes":
                self.tools.update(WRITE_TOOLS)
            elif rule in GUARDED:
                self.tools.add(rule)
            elif rule.startswith("run_command:") and rule.split(":", 1)[1].strip():
                self.command_prefixes.append(rule.split(":", 1)[1].strip())
            elif guard_other_tools and rule not in READ_TOOLS and _TOOL_NAME.fullmatch(rule):
                self.tools.add(rule)
            elif guard_other_tools and rule.endswith("*") and _TOOL_NAME.fullmatch(rule[:-1]):
                self.tool_prefixes.append(rule[:-1])
            else:
                others = ", a tool's name, or NAME_*" if guard_other_tools else ""
                raise UsageError(
                    f"unknown allow rule {rule!r}: use run_command, write_file, edit_file, "
                    f"writes, run_command:PREFIX{others}"
                )

    def guards(self, name: str) -> bool:
        """Calls of the tool ``name`` need permission (an allow rule, ``allow_all`` or a yes)."""
        if name in GUARDED:
            return True
        return self.guard_other_tools and name not in READ_TOOLS

    def allows(self, name: str, arguments: dict[str, Any]) -> bool:
        """An allow rule (or ``allow_all``) covers this call without asking."""
        if self.allow_all or not self.guards(name) or name in self.tools:
            return True
        if name not in GUARDED:  # another tool (an MCP server's): by name or NAME_* only
            return any(name.startswith(prefix) for prefix in self.tool_prefixes)
        if name == "run_command":
            raw = str(arguments.get("command", ""))
            # Scanned before stripping (a trailing newline is a control character too) and
            # whether quoted or not: inside double quotes sh still runs $(...) and backticks.
            if any(mark in raw for mark in _SHELL_CONTROL):
                return False
            command = raw.strip()
            return any(
                command == prefix or command.startswith(prefix + " ")
                for prefix in self.command_prefixes
            )
        return False

    async def __call__(self, info: ToolCallInfo) -> Allow | Deny | Defer:
        """The ``before_tool_call`` hook. A prompt interrupted by Ctrl-C (``confirm`` returned
        None) answers the call `Interrupted`: its result says so, without "Denied: "."""
        name, arguments = info.tool.name, info.arguments
        if self.allows(name, arguments):
            return Allow()
        what = describe_call(name, arguments)
        if self.confirm is None and self.defer:
            return Defer(f"permission needed to {what}")
        if self.confirm is None:
            return Deny(
                f"Permission needed to {what}, and there is no interactive terminal to ask. "
                + self.how_to_allow.replace("{tool}", name)
            )
        preview = preview_call(name, arguments, self.workspace)
        answer = self.confirm(Question(f"Allow the agent to {what}?", preview))
        if inspect.isawaitable(answer):
            answer = await answer
        if answer is None:  # interrupted (Ctrl-C): not the person's "no"
            return Interrupted(INTERRUPTED_AT_PROMPT.format(what=what))
        if answer:
            self._decided(CallDecided(info.call.id, "approve"))
            return Allow()
        denial = Deny(
            f"The user declined to let you {what}. Do not retry it as is; ask the user or take "
            "another approach."
        )
        self._decided(CallDecided(info.call.id, "deny", reason=denial.reason))
        return denial

    def _decided(self, event: CallDecided) -> None:
        if self.on_decided is not None:
            self.on_decided(event)
