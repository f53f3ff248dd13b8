"""`Workspace`: the root folder the built-in tools are confined to.

Every path a tool receives goes through `Workspace.resolve`, which follows symlinks and refuses
anything that lands outside the root. Listing honours ``.gitignore`` files (``pathspec``) and never
enters ``.git``.
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Iterator
from pathlib import Path

import pathspec

from .._errors import ToolError

ALWAYS_SKIPPED = frozenset({".git"})
SUGGESTION_SCAN_LIMIT = 5000  # files looked at for a "did you mean" suggestion


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

        Raises:
            ToolError: the path is empty, or it (or a symlink on the way) leads outside the root.
        """
        if not path or not path.strip():
            raise ToolError("The path is empty. Give a path relative to the workspace root.")
        candidate = Path(path).expanduser()
        if not candidate.is_absolute():
            candidate = self.root / candidate
        try:
            resolved = candidate.resolve()
        except (OSError, RuntimeError) as exc:  # a symlink loop
            raise ToolError(f"Cannot resolve {path}: {exc}") from exc
        if not resolved.is_relative_to(self.root):
            raise ToolError(
                f"Refused: {path} is outside the workspace. Only paths inside the workspace root "
                "can be used (relative paths like src/app.py; no '..' out of it, no absolute "
                "paths elsewhere, no symlinks pointing outside)."
            )
        return resolved

    def relative(self, path: Path) -> str:
        """``path`` relative to the root, with ``/`` separators (``.`` for the root itself)."""
        rel = path.relative_to(self.root).as_posix()
        return rel or "."

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
        """Entries under ``start`` as (path relative to the root, is_directory), sorted per
        folder, skipping ``.git`` and what ``.gitignore`` files ignore. Symlinked folders are
        listed but not entered."""
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
            is_dir = entry.is_dir(follow_symlinks=True)
            if _ignored(path, is_dir, specs):
                continue
            yield self.relative(path), is_dir
            if recursive and is_dir and not entry.is_symlink():
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
        """``path`` (inside the root) is ignored by a ``.gitignore`` or lies in ``.git``."""
        rel = path.relative_to(self.root)
        if any(part in ALWAYS_SKIPPED for part in rel.parts):
            return True
        specs = self._specs_above(path)
        return _ignored(path, path.is_dir(), specs)

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
    for base, spec in specs:
        rel = path.relative_to(base).as_posix()
        if spec.match_file(rel + "/" if is_dir else rel):
            return True
    return False
