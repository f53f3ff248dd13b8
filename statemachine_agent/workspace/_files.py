"""The file tools: ``list_files``, ``read_file``, ``write_file``, ``edit_file``.

Each returns text the model reads plus a one-line ``details["summary"]`` the terminal view shows.
Failures the model can fix raise `ToolError` (an error result that says what to do).
"""

from __future__ import annotations

import difflib
import os
import tempfile
from pathlib import Path

from .._errors import ToolError
from .._tools import Tool, ToolResult, tool
from ._paths import Workspace

MAX_LIST_ENTRIES = 500
MAX_READ_LINES = 2000
MAX_READ_CHARS = 60_000
BINARY_SNIFF_BYTES = 8192
NEAREST_CONTEXT_LINES = 2


def _numbered(lines: list[str], first: int) -> str:
    return "\n".join(f"{first + i:>5}\t{line}" for i, line in enumerate(lines))


def _plural(count: int, word: str) -> str:
    return f"{count} {word}" + ("" if count == 1 else "s")


def file_tools(workspace: Workspace) -> list[Tool]:
    """The four file tools bound to ``workspace``."""

    def file_key(args: dict[str, object]) -> str | None:
        return workspace.resource_key(args.get("path"))

    @tool(name="list_files")
    def list_files(path: str = ".", recursive: bool = False) -> ToolResult:
        """List the files and folders in a folder of the workspace (folders end with '/').

        Entries ignored by .gitignore files and the .git folder are left out.

        Args:
            path: the folder, relative to the workspace root.
            recursive: also list everything below it.
        """
        folder = workspace.resolve(path)
        if not folder.exists():
            raise workspace.not_found(path, kind="Directory")
        if not folder.is_dir():
            raise ToolError(f"{path} is a file, not a folder; use read_file to read it.")
        lines: list[str] = []
        total = 0
        for rel, is_dir in workspace.walk(folder, recursive=recursive):
            total += 1
            if len(lines) < MAX_LIST_ENTRIES:
                lines.append(rel + "/" if is_dir else rel)
        if not lines:
            return ToolResult(
                f"{workspace.relative(folder)}/ is empty.", details={"summary": "empty folder"}
            )
        text = "\n".join(lines)
        if total > len(lines):
            text += (
                f"\n[{total - len(lines)} more entries not shown; list a subfolder, or "
                "use recursive=false]"
            )
        return ToolResult(text, details={"summary": f"{total} entr{'y' if total == 1 else 'ies'}"})

    @tool(name="read_file")
    def read_file(path: str, start_line: int = 1, end_line: int | None = None) -> ToolResult:
        """Read a text file of the workspace; each line is prefixed by its number and a tab.

        Long files are cut (a note at the end says how to read on).

        Args:
            path: the file, relative to the workspace root.
            start_line: the first line to show (1-based).
            end_line: the last line to show (inclusive); the default is the end of the file.
        """
        target = workspace.resolve(path)
        if not target.exists():
            raise workspace.not_found(path)
        if target.is_dir():
            raise ToolError(f"{path} is a folder; use list_files to see what it contains.")
        data = target.read_bytes()
        if b"\0" in data[:BINARY_SNIFF_BYTES]:
            return ToolResult(
                f"{path} is a binary file ({len(data)} bytes); it is not shown.",
                details={"summary": "binary file"},
            )
        lines = data.decode("utf-8", errors="replace").splitlines()
        if not lines:
            return ToolResult(f"{path} is empty.", details={"summary": "empty file"})
        if start_line < 1:
            raise ToolError("start_line counts from 1.")
        if start_line > len(lines):
            raise ToolError(
                f"start_line {start_line} is past the end of {path}, which has "
                f"{_plural(len(lines), 'line')}."
            )
        last = len(lines) if end_line is None else min(end_line, len(lines))
        if last < start_line:
            raise ToolError(f"end_line ({end_line}) is before start_line ({start_line}).")
        shown: list[str] = []
        size = 0
        for line in lines[start_line - 1 : last]:
            if len(shown) >= MAX_READ_LINES or size + len(line) > MAX_READ_CHARS:
                break
            shown.append(line)
            size += len(line) + 1
        if not shown:  # a single line longer than the cap
            shown = [lines[start_line - 1][:MAX_READ_CHARS] + " [line cut]"]
        text = _numbered(shown, start_line)
        end_shown = start_line + len(shown) - 1
        if end_shown < last:
            text += (
                f"\n[Showing lines {start_line}-{end_shown} of {len(lines)} (size cap). "
                f"Read on with start_line={end_shown + 1}.]"
            )
        summary = f"lines {start_line}-{end_shown} of {len(lines)}"
        return ToolResult(text, details={"summary": summary})

    @tool(name="write_file", resource=file_key)
    def write_file(path: str, content: str) -> ToolResult:
        """Create a file, or replace a file's whole content; missing folders are created.

        Args:
            path: the file, relative to the workspace root.
            content: the complete new content.
        """
        target = workspace.resolve(path)
        if target.is_dir():
            raise ToolError(f"{path} is a folder; give a file path.")
        existed = target.exists()
        _atomic_write(target, content)
        lines = content.count("\n") + (0 if content.endswith("\n") or not content else 1)
        verb = "Replaced" if existed else "Created"
        summary = f"{verb.lower()}, {_plural(lines, 'line')}"
        return ToolResult(
            f"{verb} {workspace.relative(target)} ({_plural(lines, 'line')}, "
            f"{len(content.encode())} bytes).",
            details={"summary": summary},
        )

    @tool(name="edit_file", resource=file_key)
    def edit_file(path: str, old_text: str, new_text: str, replace_all: bool = False) -> ToolResult:
        """Replace an exact piece of a file's text with new text.

        ``old_text`` must match the file exactly (whitespace included) and, unless ``replace_all``
        is set, exactly once: include enough surrounding lines to make it unique.

        Args:
            path: the file, relative to the workspace root.
            old_text: the exact text to replace.
            new_text: the text to put in its place.
            replace_all: replace every occurrence instead of requiring a unique one.
        """
        target = workspace.resolve(path)
        if not target.exists():
            raise workspace.not_found(path)
        if target.is_dir():
            raise ToolError(f"{path} is a folder; give a file path.")
        if not old_text:
            raise ToolError("old_text is empty; to write a whole file use write_file.")
        if old_text == new_text:
            raise ToolError("old_text and new_text are the same; nothing would change.")
        text = target.read_text(encoding="utf-8", errors="replace")
        count = text.count(old_text)
        if count == 0:
            raise ToolError(_no_match(path, text, old_text))
        if count > 1 and not replace_all:
            raise ToolError(_many_matches(path, text, old_text, count))
        first_line = text[: text.index(old_text)].count("\n") + 1
        updated = (
            text.replace(old_text, new_text) if replace_all else text.replace(old_text, new_text, 1)
        )
        _atomic_write(target, updated)
        new_lines = updated.splitlines()
        span = max(new_text.count("\n") + 1, 1)
        lo = max(first_line - 1 - NEAREST_CONTEXT_LINES, 0)
        hi = min(first_line - 1 + span + NEAREST_CONTEXT_LINES, len(new_lines))
        where = "" if count == 1 else f" ({count} occurrences)"
        return ToolResult(
            f"Edited {workspace.relative(target)}{where}. Lines {lo + 1}-{hi} now read:\n"
            + _numbered(new_lines[lo:hi], lo + 1),
            details={"summary": f"replaced {_plural(count, 'occurrence')} at line {first_line}"},
        )

    return [list_files, read_file, write_file, edit_file]


def _atomic_write(target: Path, content: str) -> None:
    """Write through a temporary file and a rename, so a crash never leaves half a file."""
    target.parent.mkdir(parents=True, exist_ok=True)
    mode = target.stat().st_mode & 0o7777 if target.exists() else None
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as handle:
            handle.write(content)
        if mode is not None:
            os.chmod(tmp, mode)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _no_match(path: str, text: str, old_text: str) -> str:
    lines = text.splitlines()
    wanted = [line for line in old_text.splitlines() if line.strip()] or [old_text]
    message = f"old_text was not found in {path} (it must match exactly, whitespace included)."
    if " ".join(old_text.split()) in " ".join(text.split()):
        message += " It matches when whitespace is ignored: check the indentation and line breaks."
    if not lines:
        return message + f" {path} is empty."
    # The nearest lines: where the first line of old_text fits best.
    scores = [
        difflib.SequenceMatcher(None, wanted[0].strip(), line.strip()).ratio() for line in lines
    ]
    best = max(range(len(lines)), key=lambda i: scores[i])
    span = len(old_text.splitlines()) or 1
    lo = max(best - NEAREST_CONTEXT_LINES, 0)
    hi = min(best + span + NEAREST_CONTEXT_LINES, len(lines))
    return (
        f"{message} The nearest lines are {lo + 1}-{hi}:\n"
        + _numbered(lines[lo:hi], lo + 1)
        + "\nCopy the exact text from the file (without the line numbers) and try again."
    )


def _many_matches(path: str, text: str, old_text: str, count: int) -> str:
    starts: list[int] = []
    index = text.find(old_text)
    while index != -1 and len(starts) < 10:
        starts.append(text[:index].count("\n") + 1)
        index = text.find(old_text, index + 1)
    lines = text.splitlines()
    shown = "\n".join(_numbered([lines[n - 1]], n) for n in starts if n <= len(lines))
    return (
        f"old_text occurs {count} times in {path} (at lines {', '.join(map(str, starts))}); it "
        "must be unique. Include more surrounding lines to pick one, or set replace_all=true to "
        f"replace every occurrence. The matches start at:\n{shown}"
    )
