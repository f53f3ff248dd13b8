"""The file tools: ``list_files``, ``read_file``, ``write_file``, ``edit_file``.

Each returns text the model reads plus a one-line ``details["summary"]`` the terminal view shows.
Failures the model can fix raise `ToolError` (an error result that says what to do).

Lines are split on ``\n`` only (a trailing ``\r`` is not shown), so the line numbers the tools
show are the ones editors and ``grep -n`` show; ``str.splitlines`` would also split on form feeds,
``\x85``, U+2028 and lone ``\r``. ``read_file`` streams, so a huge file costs a bounded amount of
memory; ``edit_file`` only edits UTF-8 text and keeps the file's line endings.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO, ParamSpec

from .._errors import ToolError
from .._tools import Tool, ToolResult, tool
from ._paths import Workspace, display_name

P = ParamSpec("P")

MAX_LIST_ENTRIES = 500
MAX_READ_LINES = 2000
MAX_READ_CHARS = 60_000
BINARY_SNIFF_BYTES = 8192
NEAREST_CONTEXT_LINES = 2
COUNT_CHUNK_BYTES = 1 << 20  # read size when counting the lines past what read_file shows
# Bytes of one line read_file keeps: enough for MAX_READ_CHARS characters of up to 4 bytes each.
LINE_READ_LIMIT = 4 * MAX_READ_CHARS + 4


def split_lines(text: str) -> list[str]:
    """``text`` split on ``\n`` only, without a trailing ``\r`` per line.

    A final ``\n`` ends the last line rather than starting an empty one: ``"a\r\nb\n"`` ->
    ``["a", "b"]``, ``""`` -> ``[]``.
    """
    if not text:
        return []
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
    return [line.removesuffix("\r") for line in lines]


def _numbered(lines: list[str], first: int) -> str:
    return "\n".join(f"{first + i:>5}\t{line}" for i, line in enumerate(lines))


def _plural(count: int, word: str) -> str:
    return f"{count} {word}" + ("" if count == 1 else "s")


def _shown_safely(function: Callable[P, ToolResult]) -> Callable[P, ToolResult]:
    """``function`` with its result text and `ToolError` messages made UTF-8 safe
    (`display_name`): a path from the model or a file name may hold lone surrogates, which would
    break the session log, ``--json`` output and provider requests."""

    @functools.wraps(function)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> ToolResult:
        try:
            result = function(*args, **kwargs)
        except ToolError as exc:
            raise ToolError(display_name(str(exc))) from exc
        if isinstance(result.content, str):
            return dataclasses.replace(result, content=display_name(result.content))
        return result

    return wrapper


def file_tools(workspace: Workspace) -> list[Tool]:
    """The four file tools bound to ``workspace``."""

    def file_key(args: dict[str, object]) -> str | None:
        return workspace.resource_key(args.get("path"))

    @tool(name="list_files")
    @_shown_safely
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
    @_shown_safely
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
        if start_line < 1 and target.stat().st_size:
            raise ToolError("start_line counts from 1.")
        with _open(target, path) as handle:
            head = handle.read(BINARY_SNIFF_BYTES)
            if b"\0" in head:
                return ToolResult(
                    f"{path} is a binary file ({os.fstat(handle.fileno()).st_size} bytes); it is "
                    "not shown.",
                    details={"summary": "binary file"},
                )
            handle.seek(0)
            shown, total = _read_lines(handle, start_line, end_line)
        if not total:
            return ToolResult(f"{path} is empty.", details={"summary": "empty file"})
        if start_line > total:
            raise ToolError(
                f"start_line {start_line} is past the end of {path}, which has "
                f"{_plural(total, 'line')}."
            )
        last = total if end_line is None else min(end_line, total)
        if last < start_line:
            raise ToolError(f"end_line ({end_line}) is before start_line ({start_line}).")
        text = _numbered(shown, start_line)
        end_shown = start_line + len(shown) - 1
        if end_shown < last:
            text += (
                f"\n[Showing lines {start_line}-{end_shown} of {total} (size cap). "
                f"Read on with start_line={end_shown + 1}.]"
            )
        summary = f"lines {start_line}-{end_shown} of {total}"
        return ToolResult(text, details={"summary": summary})

    @tool(name="write_file", resource=file_key)
    @_shown_safely
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
        _atomic_write(target, content.encode("utf-8"))
        lines = content.count("\n") + (0 if content.endswith("\n") or not content else 1)
        verb = "Replaced" if existed else "Created"
        summary = f"{verb.lower()}, {_plural(lines, 'line')}"
        return ToolResult(
            f"{verb} {workspace.relative(target)} ({_plural(lines, 'line')}, "
            f"{len(content.encode())} bytes).",
            details={"summary": summary},
        )

    @tool(name="edit_file", resource=file_key)
    @_shown_safely
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
        text = _read_text_strict(target, path)
        if "\r\n" in text and "\r\n" not in old_text:
            # The model writes \n; a CRLF file keeps its CRLF line endings (also in a mixed file
            # when old_text only matches with CRLF).
            crlf_old = _to_crlf(old_text)
            mostly_crlf = text.count("\r\n") * 2 > text.count("\n")
            if crlf_old in text and (mostly_crlf or old_text not in text):
                old_text, new_text = crlf_old, _to_crlf(new_text)
        count = text.count(old_text)
        if count == 0:
            raise ToolError(_no_match(path, text, old_text))
        if count > 1 and not replace_all:
            raise ToolError(_many_matches(path, text, old_text, count))
        first_line = text[: text.index(old_text)].count("\n") + 1
        updated = (
            text.replace(old_text, new_text) if replace_all else text.replace(old_text, new_text, 1)
        )
        _atomic_write(target, updated.encode("utf-8"))
        new_lines = split_lines(updated)
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


def _open(target: Path, path: str) -> BinaryIO:
    """``target`` opened for reading bytes; an OSError becomes a `ToolError` naming ``path``."""
    try:
        return target.open("rb")
    except OSError as exc:
        raise ToolError(f"Cannot read {path}: {exc.strerror or exc}.") from exc


def _read_lines(handle: BinaryIO, start_line: int, end_line: int | None) -> tuple[list[str], int]:
    """Stream ``handle``: the lines read_file shows from ``start_line`` (within ``end_line`` and
    the size caps), and the file's total number of lines.

    Memory stays bounded whatever the file size: reading stops at ``end_line`` or at the cap,
    and the rest of the file is only counted, a chunk at a time.
    """
    shown: list[str] = []
    size = 0
    number, partial = _skip_lines(handle, start_line - 1)
    if number < start_line - 1:  # the file ended first
        return shown, number + partial
    while True:
        raw = _read_line(handle)
        if not raw:
            return shown, number
        number += 1
        if end_line is not None and number > end_line:
            break
        line = raw.decode("utf-8", errors="replace").removesuffix("\n").removesuffix("\r")
        if len(shown) >= MAX_READ_LINES or size + len(line) > MAX_READ_CHARS:
            if not shown:  # a single line longer than the cap
                shown = [line[:MAX_READ_CHARS] + " [line cut]"]
            break
        shown.append(line)
        size += len(line) + 1
    return shown, number + _count_lines(handle)


def _skip_lines(handle: BinaryIO, count: int) -> tuple[int, bool]:
    """Move past ``count`` lines a chunk at a time (far faster than line by line); returns the
    lines passed and, when the file ended first, whether a last line without ``\n`` remains."""
    skipped = 0
    last = b"\n"
    while skipped < count:
        position = handle.tell()
        chunk = handle.read(COUNT_CHUNK_BYTES)
        if not chunk:
            return skipped, last != b"\n"
        last = chunk[-1:]
        found = chunk.count(b"\n")
        if skipped + found < count:
            skipped += found
            continue
        index = -1
        for _ in range(count - skipped):
            index = chunk.index(b"\n", index + 1)
        handle.seek(position + index + 1)
        skipped = count
    return skipped, False


def _read_line(handle: BinaryIO) -> bytes:
    """The next line, at most `LINE_READ_LIMIT` bytes of it (the rest of a longer line is skipped
    so the next read starts a line); ``b""`` at the end of the file."""
    raw = handle.readline(LINE_READ_LIMIT)
    if raw and not raw.endswith(b"\n"):
        while chunk := handle.readline(COUNT_CHUNK_BYTES):
            if chunk.endswith(b"\n"):
                break
    return raw


def _count_lines(handle: BinaryIO) -> int:
    """The number of lines from the current position to the end (a last line without a final
    ``\n`` counts), reading `COUNT_CHUNK_BYTES` at a time."""
    count = 0
    last = b"\n"
    while chunk := handle.read(COUNT_CHUNK_BYTES):
        count += chunk.count(b"\n")
        last = chunk[-1:]
    return count + (last != b"\n")


def _read_text_strict(target: Path, path: str) -> str:
    """The UTF-8 text of ``target``, exactly (no newline translation, no replaced bytes).

    Raises:
        ToolError: the file cannot be read, holds NUL bytes (binary) or is not valid UTF-8; an
            edit would corrupt it, so it is refused and the file is left unchanged.
    """
    with _open(target, path) as handle:
        data = handle.read()
    if b"\0" in data:
        raise ToolError(
            f"{path} is a binary file (it contains NUL bytes); edit_file only edits text files. "
            "The file was not changed."
        )
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ToolError(
            f"{path} is not UTF-8 text (byte {exc.start} cannot be decoded); edit_file only edits "
            "UTF-8 text files, so it was not changed. Use run_command to change it with another "
            "tool."
        ) from exc


def _to_crlf(text: str) -> str:
    return text.replace("\r\n", "\n").replace("\n", "\r\n")


def _atomic_write(target: Path, content: bytes) -> None:
    """Write through a temporary file and a rename, so a crash never leaves half a file."""
    target.parent.mkdir(parents=True, exist_ok=True)
    mode = target.stat().st_mode & 0o7777 if target.exists() else None
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(content)
        if mode is not None:
            os.chmod(tmp, mode)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _no_match(path: str, text: str, old_text: str) -> str:
    lines = split_lines(text)
    wanted = [line for line in split_lines(old_text) if line.strip()] or [old_text]
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
    span = len(split_lines(old_text)) or 1
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
    lines = split_lines(text)
    shown = "\n".join(_numbered([lines[n - 1]], n) for n in starts if n <= len(lines))
    return (
        f"old_text occurs {count} times in {path} (at lines {', '.join(map(str, starts))}); it "
        "must be unique. Include more surrounding lines to pick one, or set replace_all=true to "
        f"replace every occurrence. The matches start at:\n{shown}"
    )
