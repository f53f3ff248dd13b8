"""The file tools: list_files, read_file, write_file, edit_file."""

from __future__ import annotations

from pathlib import Path

from statemachine_agent.workspace import MAX_READ_LINES

from .conftest import run_calls


def test_list_files_flat_and_recursive(workspace: Path) -> None:
    _, results = run_calls(
        workspace, [("list_files", {}), ("list_files", {"path": ".", "recursive": True})]
    )
    assert results[0].text == "README.md\nsrc/"
    assert results[1].text == "README.md\nsrc/\nsrc/math.py"
    assert results[1].details == {"summary": "3 entries"}


def test_list_files_on_a_file_is_an_error(workspace: Path) -> None:
    _, results = run_calls(workspace, [("list_files", {"path": "README.md"})])
    assert results[0].is_error and "use read_file" in results[0].text


def test_read_file_numbers_lines_and_takes_a_range(workspace: Path) -> None:
    (workspace / "five.txt").write_text("a\nb\nc\nd\ne\n")
    _, results = run_calls(
        workspace,
        [
            ("read_file", {"path": "five.txt"}),
            ("read_file", {"path": "five.txt", "start_line": 2, "end_line": 3}),
            ("read_file", {"path": "five.txt", "start_line": 9}),
        ],
    )
    assert results[0].text == "    1\ta\n    2\tb\n    3\tc\n    4\td\n    5\te"
    assert results[1].text == "    2\tb\n    3\tc"
    assert (
        results[2].is_error and "past the end" in results[2].text and "5 lines" in results[2].text
    )


def test_read_file_caps_long_files_with_a_note(workspace: Path) -> None:
    count = MAX_READ_LINES + 500
    (workspace / "long.txt").write_text("".join(f"line {i}\n" for i in range(1, count + 1)))
    _, results = run_calls(workspace, [("read_file", {"path": "long.txt"})])
    text = results[0].text
    assert not results[0].is_error
    assert f"line {MAX_READ_LINES}\n" in text + "\n"
    assert f"line {MAX_READ_LINES + 1}\n" not in text
    assert text.endswith(
        f"[Showing lines 1-{MAX_READ_LINES} of {count} (size cap). "
        f"Read on with start_line={MAX_READ_LINES + 1}.]"
    )


def test_read_file_binary_and_folder(workspace: Path) -> None:
    (workspace / "blob.bin").write_bytes(b"\x00\x01\x02")
    _, results = run_calls(
        workspace, [("read_file", {"path": "blob.bin"}), ("read_file", {"path": "src"})]
    )
    assert "binary file" in results[0].text
    assert results[1].is_error and "list_files" in results[1].text


def test_write_file_creates_folders_and_replaces(workspace: Path) -> None:
    _, results = run_calls(
        workspace,
        [("write_file", {"path": "pkg/new/mod.py", "content": "x = 1\ny = 2\n"})],
    )
    assert results[0].text == "Created pkg/new/mod.py (2 lines, 12 bytes)."
    assert (workspace / "pkg/new/mod.py").read_text() == "x = 1\ny = 2\n"
    _, results = run_calls(workspace, [("write_file", {"path": "pkg/new/mod.py", "content": "z"})])
    assert results[0].text.startswith("Replaced pkg/new/mod.py")
    assert not [p for p in (workspace / "pkg/new").iterdir() if p.name.endswith(".tmp")]


def test_edit_file_replaces_a_unique_match(workspace: Path) -> None:
    _, results = run_calls(
        workspace,
        [("edit_file", {"path": "src/math.py", "old_text": "a + b", "new_text": "b + a"})],
    )
    assert not results[0].is_error
    assert (workspace / "src/math.py").read_text() == "def add(a, b):\n    return b + a\n"
    assert "    2\t    return b + a" in results[0].text


def test_edit_file_missing_match_shows_the_nearest_lines(workspace: Path) -> None:
    (workspace / "m.py").write_text("import os\n\n\ndef sub(a, b):\n    return a - b\n\nX = 1\n")
    _, results = run_calls(
        workspace,
        [("edit_file", {"path": "m.py", "old_text": "    return a-b", "new_text": "x"})],
    )
    text = results[0].text
    assert results[0].is_error
    assert text.startswith("old_text was not found in m.py")
    assert "    5\t    return a - b" in text
    assert (workspace / "m.py").read_text().count("a - b") == 1


def test_edit_file_whitespace_only_difference_is_named(workspace: Path) -> None:
    _, results = run_calls(
        workspace,
        [("edit_file", {"path": "src/math.py", "old_text": "def  add(a,  b):", "new_text": "x"})],
    )
    assert results[0].is_error and "whitespace is ignored" in results[0].text


def test_edit_file_non_unique_match_is_an_error_listing_lines(workspace: Path) -> None:
    (workspace / "dup.py").write_text("x = 1\ny = 2\nx = 1\n")
    _, results = run_calls(
        workspace,
        [("edit_file", {"path": "dup.py", "old_text": "x = 1", "new_text": "x = 3"})],
    )
    text = results[0].text
    assert results[0].is_error
    assert text.startswith("old_text occurs 2 times in dup.py (at lines 1, 3)")
    assert "replace_all" in text and "    3\tx = 1" in text
    assert (workspace / "dup.py").read_text() == "x = 1\ny = 2\nx = 1\n"
    _, results = run_calls(
        workspace,
        [
            (
                "edit_file",
                {"path": "dup.py", "old_text": "x = 1", "new_text": "x = 3", "replace_all": True},
            )
        ],
    )
    assert not results[0].is_error
    assert (workspace / "dup.py").read_text() == "x = 3\ny = 2\nx = 3\n"


def test_writes_to_one_file_queue_in_declaration_order(workspace: Path) -> None:
    calls = [
        ("write_file", {"path": "notes.txt", "content": "one\n"}),
        ("edit_file", {"path": "./notes.txt", "old_text": "one", "new_text": "two"}),
        ("edit_file", {"path": "notes.txt", "old_text": "two", "new_text": "three"}),
    ]
    _, results = run_calls(workspace, calls)
    assert [r.is_error for r in results] == [False, False, False]
    assert (workspace / "notes.txt").read_text() == "three\n"
