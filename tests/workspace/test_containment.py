"""Issue 15, bugs 4 and 9: containment is a path check, not a string-prefix check, and a
recursive listing never enters a symlink to a folder outside the root. Every path used is under
tmp_path."""

from __future__ import annotations

import os
from pathlib import Path

from statemachine_agent import State

from .conftest import run_calls

REFUSED_TAIL = (
    " is outside the workspace. Only paths inside the workspace root can be used (relative paths "
    "like src/app.py; no '..' out of it, no absolute paths elsewhere, no symlinks pointing "
    "outside)."
)


def test_sibling_folder_sharing_the_root_prefix_is_outside(workspace: Path, tmp_path: Path) -> None:
    evil = tmp_path / "ws-evil"  # "ws-evil" starts with "ws", the root's name
    evil.mkdir()
    (evil / "secret.txt").write_text("SECRET-SIBLING")
    before = sorted(p.name for p in evil.iterdir())
    calls = [
        ("read_file", {"path": "../ws-evil/secret.txt"}),
        ("write_file", {"path": str(evil / "created.txt"), "content": "x"}),
        ("write_file", {"path": str(evil / "secret.txt"), "content": "overwritten"}),
        ("edit_file", {"path": "../ws-evil/secret.txt", "old_text": "SECRET", "new_text": "x"}),
        ("list_files", {"path": "../ws-evil"}),
    ]
    result, results = run_calls(workspace, calls)
    assert result.state is State.DONE
    assert [(r.text, r.is_error) for r in results] == [
        (f"Refused: {args['path']}{REFUSED_TAIL}", True) for _, args in calls
    ]
    assert sorted(p.name for p in evil.iterdir()) == before == ["secret.txt"]
    assert (evil / "secret.txt").read_text() == "SECRET-SIBLING"


def test_recursive_listing_shows_an_outside_symlink_but_does_not_enter_it(
    workspace: Path, tmp_path: Path
) -> None:
    outside = tmp_path / "outside"
    (outside / "deep").mkdir(parents=True)
    (outside / "secret.txt").write_text("SECRET")
    (outside / "deep" / "more.txt").write_text("SECRET")
    os.symlink(outside, workspace / "link")
    _, results = run_calls(
        workspace, [("list_files", {"recursive": True}), ("list_files", {"path": "link"})]
    )
    assert results[0].text == "README.md\nlink/\nsrc/\nsrc/math.py"
    assert not results[0].is_error
    assert results[1].is_error and results[1].text == f"Refused: link{REFUSED_TAIL}"
