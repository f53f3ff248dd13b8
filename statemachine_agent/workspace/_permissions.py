"""`Permissions`: the ``before_tool_call`` hook that guards commands and writes.

Reading and listing are always allowed. ``run_command``, ``write_file`` and ``edit_file`` run when
everything is allowed (``--yes``), when an allow rule covers the call, or when the person at the
terminal says yes; otherwise they are denied with a reason the model reads.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from .._errors import UsageError
from .._events import CallDecided
from .._hooks import Allow, Defer, Deny, ToolCallInfo

GUARDED = ("run_command", "write_file", "edit_file")
"""The tools that need permission."""
WRITE_TOOLS = ("write_file", "edit_file")
_SHELL_CONTROL = (";", "&", "|", "`", "$(", ">", "<", "\n")

Confirm = Callable[[str], "bool | Awaitable[bool]"]
"""Ask the person: ``confirm(question) -> bool`` (sync or async)."""


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
    return f"call {name}"


class Permissions:
    """Decides whether a guarded tool call may run (use as ``Agent(before_tool_call=...)``).

    Args:
        allow_all: allow every call (``--yes``).
        allow: allow rules: a tool name (``run_command``, ``write_file``, ``edit_file``),
            ``writes`` for both write tools, or ``run_command:PREFIX`` for commands that are
            ``PREFIX`` or start with ``PREFIX`` and a space, and contain no shell control
            characters (``; & | ` $( > <``).
        confirm: asks the person at the terminal; None when there is nobody to ask.
        how_to_allow: what the model is told about how the user can allow a denied call
            (``{tool}`` is replaced by the tool's name); the CLI names its flags.
        defer: with nobody to ask (no ``confirm``), defer the call for a person's later decision
            (the run stops in ``awaiting_approval``) instead of denying it; for runs with a
            session log, which any process can continue.
        on_decided: told each answer ``confirm`` gave, as a `CallDecided` (``approve`` or
            ``deny``), when it came; e.g. ``agent.session.record``, so the session log holds
            how long a call waited for the person (the replay page draws it apart).

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
        on_decided: Callable[[CallDecided], object] | None = None,
    ) -> None:
        self.allow_all = allow_all
        self.defer = defer
        self.on_decided = on_decided
        self.how_to_allow = how_to_allow
        self.confirm = confirm
        self.tools: set[str] = set()
        self.command_prefixes: list[str] = []
        for rule in allow:
            rule = rule.strip()
            if rule == "writes":
                self.tools.update(WRITE_TOOLS)
            elif rule in GUARDED:
                self.tools.add(rule)
            elif rule.startswith("run_command:") and rule.split(":", 1)[1].strip():
                self.command_prefixes.append(rule.split(":", 1)[1].strip())
            else:
                raise UsageError(
                    f"unknown allow rule {rule!r}: use run_command, write_file, edit_file, "
                    "writes, or run_command:PREFIX"
                )

    def allows(self, name: str, arguments: dict[str, Any]) -> bool:
        """An allow rule (or ``allow_all``) covers this call without asking."""
        if self.allow_all or name not in GUARDED or name in self.tools:
            return True
        if name == "run_command":
            command = str(arguments.get("command", "")).strip()
            if any(mark in command for mark in _SHELL_CONTROL):
                return False
            return any(
                command == prefix or command.startswith(prefix + " ")
                for prefix in self.command_prefixes
            )
        return False

    async def __call__(self, info: ToolCallInfo) -> Allow | Deny | Defer:
        """The ``before_tool_call`` hook."""
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
        answer = self.confirm(f"Allow the agent to {what}?")
        if inspect.isawaitable(answer):
            answer = await answer
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
