"""`Workspace`: the root folder the built-in tools are confined to.

Every path a tool receives goes through `Workspace.resolve`, which follows symlinks and refuses
anything that lands outside the root. Listing honours ``.gitignore`` files (``pathspec``) and never
enters ``.git``.

File names that are not valid UTF-8 reach Python as lone surrogates (``surrogateescape``); they
would break JSON and UTF-8 encoding downstream (session log, ``--json``, provider requests), so
every name shown to the model goes through `display_name` (``caf\\xe9.txt``), and `resolve`
accepts that shown form back.
"""

from __future__ import annotations

import difflib
import os
import re
from collections.abc import Iterator
from pathlib import Path

import pathspec

from .._errors import ToolError

ALWAYS_SKIPPED = frozenset({".git"})
SUGGESTION_SCAN_LIMIT = 5000  # files looked at for a "did you mean" suggestion
# A non-ASCII byte of a file name as `display_name` shows it.
_ESCAPED_BYTE = re.compile(r"\\x([89a-fA-F][0-9a-fA-F])")


def display_name(text: str) -> str:
    r"""``text`` (a file name or any text holding one) made safe to encode as UTF-8.

    Undecodable bytes of a file name (lone surrogates from ``surrogateescape``) become four
    characters ``\xNN``: the name ``b"caf\xe9.txt"`` is shown as ``caf\xe9.txt``. Other text is
    returned unchanged.
    """
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        pass
    try:
        return os.fsencode(text).decode("utf-8", "backslashreplace")
    except UnicodeEncodeError:  # a surrogate that is not an escaped byte
        return text.encode("utf-8", "backslashreplace").decode("utf-8")


_ONLY_INSIDE = (
    "Only paths inside the workspace root can be used (relative paths like src/app.py; no '..' "
    "out of it, no absolute paths elsewhere, no symlinks pointing outside)."
)


def _unescape_name(path: str) -> str:
    r"""The inverse of `display_name`: ``\xNN`` escapes of non-ASCII bytes back to surrogates."""
    return _ESCAPED_BYTE.sub(lambda m: chr(0xDC00 + int(m.group(1), 16)), path)


class Workspace:
    """A folder the tools may read and change, and nothing outside it.

    Args:
        root: the workspace folder; it must exist.

    Raises:
        NotADirectoryError: ``root`` is not a directory.
    """

    def __init__(self, root: str | os.PathLike[str]) -> None:
        resolved = Path(root).expanduser().resolve()
        if not resolved.is_dir():
            raise NotADirectoryError(f"workspace {str(root)!r} is not a directory")
        self.root = resolved

    def __repr__(self) -> str:
        return f"Workspace({str(self.root)!r})"

    # -- paths ----------------------------------------------------------------------------------

    def resolve(self, path: str) -> Path:
        """The absolute, symlink-free path of ``path`` (relative to the root, or absolute).

        ``~`` is not expanded: ``~/x`` and ``~user/x`` are names inside the workspace, never a
        home folder. A name shown by `display_name` (``caf\\xe9.txt``) finds the file whose real
        name has that undecodable byte, unless a file with the literal name exists.

        Raises:
            ToolError: the path is empty, holds a NUL byte, or it (or a symlink on the way) leads
                outside the root.
        """
        if not path or not path.strip():
            raise ToolError("The path is empty. Give a path relative to the workspace root.")
        if "\0" in path:  # no file name holds one; the OS would refuse it with a ValueError
            shown = display_name(path).replace("\0", "\\0")
            raise ToolError(
                f"Refused: {shown} holds a NUL byte (\\0), which no path can contain. "
                f"{_ONLY_INSIDE}"
            )
        candidate = self.root / path  # an absolute path replaces the root
        if "\\x" in path and not os.path.lexists(candidate):
            unescaped = self.root / _unescape_name(path)
            if os.path.lexists(unescaped):
                candidate = unescaped
        try:
            resolved = candidate.resolve()
        except (OSError, RuntimeError) as exc:  # a symlink loop
            raise ToolError(display_name(f"Cannot resolve {path}: {exc}")) from exc
        if not resolved.is_relative_to(self.root):
            raise ToolError(
                f"Refused: {display_name(path)} is outside the workspace. {_ONLY_INSIDE}"
            )
        return resolved

    def relative(self, path: Path) -> str:
        """``path`` relative to the root, with ``/`` separators (``.`` for the root itself), as
        shown to the model (`display_name`)."""
        rel = path.relative_to(self.root).as_posix()
        return display_name(rel) or "."

    def resource_key(self, path: object) -> str | None:
        """The write-queue key of a path argument: the resolved file, or None when invalid."""
        if not isinstance(path, str):
            return None
        try:
            return f"file:{self.resolve(path)}"
        except ToolError:
            return None

    # -- walking --------------------------------------------------------------------------------

    def walk(self, start: Path, *, recursive: bool = True) -> Iterator[tuple[str, bool]]:
        """Entries under ``start`` as (path relative to the root as `relative` shows it,
        is_directory), sorted per folder, skipping ``.git`` and what ``.gitignore`` files ignore.
        Symlinked folders are listed but not entered; an entry that cannot be examined (a symlink
        loop, no permission) is listed as a non-directory."""
        specs = self._specs_above(start)
        yield from self._walk(start, specs, recursive)

    def _walk(
        self, folder: Path, specs: list[tuple[Path, pathspec.GitIgnoreSpec]], recursive: bool
    ) -> Iterator[tuple[str, bool]]:
        local = _load_gitignore(folder)
        if local is not None:
            specs = [*specs, (folder, local)]
        try:
            entries = sorted(os.scandir(folder), key=lambda e: e.name)
        except OSError:
            return
        for entry in entries:
            if entry.name in ALWAYS_SKIPPED:
                continue
            path = Path(entry.path)
            try:
                is_dir = entry.is_dir(follow_symlinks=True)
                enter = is_dir and not entry.is_symlink()
            except OSError:  # ELOOP, EACCES...: list it, never fail the whole listing
                is_dir = enter = False
            if _ignored(path, is_dir, specs):
                continue
            yield self.relative(path), is_dir
            if recursive and enter:
                yield from self._walk(path, specs, recursive)

    def _specs_above(self, start: Path) -> list[tuple[Path, pathspec.GitIgnoreSpec]]:
        specs = []
        folder = self.root
        parts = start.relative_to(self.root).parts
        for part in ("", *parts[:-1]) if parts else ():
            folder = folder / part if part else folder
            spec = _load_gitignore(folder)
            if spec is not None:
                specs.append((folder, spec))
        return specs

    def is_ignored(self, path: Path) -> bool:
        """``path`` (inside the root) is ignored by a ``.gitignore`` or lies in ``.git`` or in an
        ignored folder (as in git, a file in an excluded folder cannot be re-included)."""
        rel = path.relative_to(self.root)
        if any(part in ALWAYS_SKIPPED for part in rel.parts):
            return True
        for depth in range(1, len(rel.parts) + 1):
            current = self.root.joinpath(*rel.parts[:depth])
            is_dir = depth < len(rel.parts) or current.is_dir()
            if _ignored(current, is_dir, self._specs_above(current)):
                return True
        return False

    # -- suggestions ----------------------------------------------------------------------------

    def suggest(self, path: str, *, directories: bool = False) -> str | None:
        """The existing file (or folder) whose relative path is closest to ``path``, if any."""
        wanted = path.strip().removeprefix("./")
        if Path(wanted).is_absolute():
            try:
                wanted = Path(wanted).relative_to(self.root).as_posix()
            except ValueError:
                return None
        candidates = []
        for index, (rel, is_dir) in enumerate(self.walk(self.root)):
            if index >= SUGGESTION_SCAN_LIMIT:
                break
            if is_dir == directories:
                candidates.append(rel)
        close = difflib.get_close_matches(wanted, candidates, n=1, cutoff=0.6)
        if close:
            return close[0]
        name = Path(wanted).name
        same_name = [c for c in candidates if Path(c).name == name]
        return same_name[0] if same_name else None

    def not_found(self, path: str, *, kind: str = "File") -> ToolError:
        """The error for a missing path, with a "Did you mean" suggestion when one is close."""
        text = f"{kind} not found: {path}."
        suggestion = self.suggest(path, directories=kind == "Directory")
        if suggestion is not None:
            text += f" Did you mean {suggestion}?"
        return ToolError(text)


def _load_gitignore(folder: Path) -> pathspec.GitIgnoreSpec | None:
    ignore_file = folder / ".gitignore"
    try:
        lines = ignore_file.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return None
    return pathspec.GitIgnoreSpec.from_lines(lines)


def _ignored(path: Path, is_dir: bool, specs: list[tuple[Path, pathspec.GitIgnoreSpec]]) -> bool:
    """Whether ``specs`` (shallowest first) ignore ``path``.

    As in git, a deeper ``.gitignore`` overrides a shallower one: the deepest file with a matching
    pattern decides (its last matching pattern, so ``!keep.log`` re-includes what a parent's
    ``*.log`` excluded).
    """
    for base, spec in reversed(specs):
        rel = path.relative_to(base).as_posix()
        decision = spec.check_file(rel + "/" if is_dir else rel).include
        if decision is not None:
            return decision
    return False
