"""Confinement to the workspace root, "did you mean", .gitignore (issue 6, cases 1 and 2)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from statemachine_agent import State, ToolError
from statemachine_agent.workspace import Workspace

from .conftest import run_calls


def test_paths_escaping_the_root_are_refused(workspace: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside.txt"
    outside.write_text("SECRET-OUTSIDE")
    system = tmp_path / "system"  # stands in for a system folder such as /etc; never the real one
    system.mkdir()
    (system / "passwd").write_text("root:x:0:0")
    os.symlink(system, workspace / "etc_link")
    os.symlink(outside, workspace / "innocent.txt")
    calls = [
        ("read_file", {"path": "../outside.txt"}),
        ("read_file", {"path": str(system / "passwd")}),
        ("read_file", {"path": "etc_link/passwd"}),
        ("list_files", {"path": "etc_link"}),
        ("read_file", {"path": "innocent.txt"}),
        ("write_file", {"path": "../outside.txt", "content": "overwritten"}),
        ("write_file", {"path": "../created.txt", "content": "x"}),
        ("write_file", {"path": "etc_link/evil.conf", "content": "x"}),
        ("edit_file", {"path": "innocent.txt", "old_text": "SECRET", "new_text": "x"}),
        ("list_files", {"path": "..", "recursive": True}),
    ]
    result, results = run_calls(workspace, calls)
    assert result.state is State.DONE
    for item in results:
        assert item.is_error, item.text
        assert item.text.startswith("Refused: "), item.text
        assert "outside the workspace" in item.text
        assert "SECRET" not in item.text and "root:" not in item.text
    assert outside.read_text() == "SECRET-OUTSIDE"
    assert not (tmp_path / "created.txt").exists()
    assert sorted(p.name for p in system.iterdir()) == ["passwd"]


def test_absolute_path_inside_the_root_is_allowed(workspace: Path) -> None:
    _, results = run_calls(workspace, [("read_file", {"path": str(workspace / "README.md")})])
    assert not results[0].is_error
    assert "# demo" in results[0].text


def test_a_missing_path_suggests_the_nearest_existing_ones(workspace: Path) -> None:
    _, results = run_calls(workspace, [("read_file", {"path": "src/maths.py"})])
    assert results[0].is_error
    assert results[0].text == "File not found: src/maths.py. Did you mean src/math.py?"


def test_not_found_without_a_close_match(workspace: Path) -> None:
    _, results = run_calls(workspace, [("read_file", {"path": "zzz/qqqq.rs"})])
    assert results[0].text == "File not found: zzz/qqqq.rs."


def test_missing_folder_suggests_a_folder(workspace: Path) -> None:
    _, results = run_calls(workspace, [("list_files", {"path": "srcc"})])
    assert results[0].text == "Directory not found: srcc. Did you mean src?"


def test_resolve_rejects_empty_path(workspace: Path) -> None:
    with pytest.raises(ToolError, match="empty"):
        Workspace(workspace).resolve("  ")


def test_walk_honours_gitignore_files_and_skips_git(workspace: Path) -> None:
    (workspace / ".gitignore").write_text("*.log\nbuild/\n")
    (workspace / "app.log").write_text("x")
    (workspace / "build").mkdir()
    (workspace / "build" / "out.js").write_text("x")
    (workspace / ".git").mkdir()
    (workspace / ".git" / "HEAD").write_text("ref")
    (workspace / "src" / ".gitignore").write_text("generated.py\n")
    (workspace / "src" / "generated.py").write_text("x")
    (workspace / "src" / "keep.log.txt").write_text("x")
    ws = Workspace(workspace)
    listed = [rel for rel, _ in ws.walk(ws.root)]
    assert listed == [".gitignore", "README.md", "src", "src/.gitignore", "src/keep.log.txt",
                      "src/math.py"]  # fmt: skip
    assert ws.is_ignored(workspace / "src" / "generated.py")
    assert ws.is_ignored(workspace / "build" / "out.js")
    assert not ws.is_ignored(workspace / "src" / "math.py")


def test_write_queue_key_is_the_resolved_file(workspace: Path) -> None:
    ws = Workspace(workspace)
    key = ws.resource_key("src/math.py")
    assert key == f"file:{workspace.resolve() / 'src' / 'math.py'}"
    assert ws.resource_key("./src/../src/math.py") == key
    assert ws.resource_key("../escape") is None


# -- review of issue 6 (bugs 4, 5, 8) -----------------------------------------------------------


def test_symlink_loop_does_not_break_listing_or_suggestions(workspace: Path) -> None:
    os.symlink("loop2", workspace / "loop1")
    os.symlink("loop1", workspace / "loop2")
    _, results = run_calls(
        workspace,
        [
            ("list_files", {}),
            ("list_files", {"recursive": True}),
            ("read_file", {"path": "src/maths.py"}),
            ("read_file", {"path": "loop1"}),
        ],
    )
    assert results[0].text == "README.md\nloop1\nloop2\nsrc/"
    assert results[1].text == "README.md\nloop1\nloop2\nsrc/\nsrc/math.py"
    assert results[2].text == "File not found: src/maths.py. Did you mean src/math.py?"
    assert results[3].is_error and results[3].text.startswith("Cannot resolve loop1")


def test_nested_gitignore_negation_reincludes_a_file(workspace: Path) -> None:
    # Expected listing is what `git status --untracked-files=all` shows for this tree.
    (workspace / "g" / "sub").mkdir(parents=True)
    (workspace / "g" / ".gitignore").write_text("*.log\ndropped/\n")
    (workspace / "g" / "sub" / ".gitignore").write_text("!keep.log\n")
    (workspace / "g" / "sub" / "keep.log").write_text("k")
    (workspace / "g" / "sub" / "drop.log").write_text("d")
    (workspace / "g" / "top.log").write_text("t")
    (workspace / "g" / "dropped").mkdir()
    (workspace / "g" / "dropped" / ".gitignore").write_text("!*\n")  # cannot re-include
    (workspace / "g" / "dropped" / "x.txt").write_text("x")
    _, results = run_calls(workspace, [("list_files", {"path": "g", "recursive": True})])
    assert results[0].text == "g/.gitignore\ng/sub/\ng/sub/.gitignore\ng/sub/keep.log"
    ws = Workspace(workspace)
    assert not ws.is_ignored(workspace / "g" / "sub" / "keep.log")
    assert ws.is_ignored(workspace / "g" / "sub" / "drop.log")
    assert ws.is_ignored(workspace / "g" / "top.log")
    assert ws.is_ignored(workspace / "g" / "dropped" / "x.txt")


def test_tilde_in_a_tool_path_is_not_expanded(
    workspace: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / "x").write_text("HOME-SECRET")
    monkeypatch.setenv("HOME", str(home))
    (workspace / "~").mkdir()
    (workspace / "~" / "x").write_text("inside")
    _, results = run_calls(
        workspace,
        [("read_file", {"path": "~/x"}), ("read_file", {"path": "~root/x"})],
    )
    assert results[0].text == "    1\tinside"
    assert results[1].text.startswith("File not found: ~root/x.")
    assert Workspace(workspace).resolve("~/x") == workspace.resolve() / "~" / "x"
