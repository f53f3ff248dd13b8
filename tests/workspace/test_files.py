"""The file tools: list_files, read_file, write_file, edit_file."""

from __future__ import annotations

import os
import tracemalloc
from pathlib import Path
from typing import Any

from statemachine_agent.workspace import MAX_READ_CHARS, MAX_READ_LINES, workspace_tools

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


# -- review of issue 6 (bugs 1-3, 6, 7) ---------------------------------------------------------


def test_non_utf8_file_name_is_shown_escaped_and_usable_by_that_name(workspace: Path) -> None:
    (workspace / os.fsdecode(b"caf\xe9.txt")).write_text("hello\n")
    calls: list[tuple[str, dict[str, Any]]] = [
        ("list_files", {}),
        ("read_file", {"path": "caf\\xe9.txt"}),
        ("read_file", {"path": "caff\\xe9.txt"}),
        ("edit_file", {"path": "caf\\xe9.txt", "old_text": "hello", "new_text": "bye"}),
    ]
    # Sequential: a read and an edit of one file in one parallel batch may see either version.
    result, results = run_calls(workspace, calls, tool_execution="sequential")
    for item in results:
        item.text.encode("utf-8")  # no lone surrogates left to break JSON / UTF-8 downstream
    assert results[0].text == "README.md\ncaf\\xe9.txt\nsrc/"
    assert results[1].text == "    1\thello"
    assert results[2].text == "File not found: caff\\xe9.txt. Did you mean caf\\xe9.txt?"
    assert results[3].text.startswith("Edited caf\\xe9.txt.")
    assert (workspace / os.fsdecode(b"caf\xe9.txt")).read_bytes() == b"bye\n"
    for message in result.messages:
        message.model_dump_json().encode("utf-8")


def test_edit_file_keeps_crlf_line_endings(workspace: Path) -> None:
    (workspace / "crlf.txt").write_bytes(b"alpha\r\nbeta\r\ngamma\r\n")
    _, results = run_calls(
        workspace,
        [
            ("edit_file", {"path": "crlf.txt", "old_text": "beta", "new_text": "BETA\nextra"}),
            ("edit_file", {"path": "crlf.txt", "old_text": "alpha\nBETA\n", "new_text": "A\n"}),
        ],
    )
    assert [r.is_error for r in results] == [False, False]
    assert results[0].text.endswith("    1\talpha\n    2\tBETA\n    3\textra\n    4\tgamma")
    assert (workspace / "crlf.txt").read_bytes() == b"A\r\nextra\r\ngamma\r\n"


def test_edit_file_keeps_lf_lines_of_a_mostly_lf_file(workspace: Path) -> None:
    (workspace / "mixed.txt").write_bytes(b"one\ntwo\nthree\r\nfour\n")
    _, results = run_calls(
        workspace, [("edit_file", {"path": "mixed.txt", "old_text": "two", "new_text": "2\n2b"})]
    )
    assert not results[0].is_error
    assert (workspace / "mixed.txt").read_bytes() == b"one\n2\n2b\nthree\r\nfour\n"


def test_edit_file_refuses_non_utf8_and_binary_files_unchanged(workspace: Path) -> None:
    latin = "caf\xe9 = 1\nx = 2\n".encode("latin-1")
    (workspace / "lat.txt").write_bytes(latin)
    (workspace / "blob.dat").write_bytes(b"x = 2\n\x00\x01")
    _, results = run_calls(
        workspace,
        [
            ("edit_file", {"path": "lat.txt", "old_text": "x = 2", "new_text": "x = 3"}),
            ("edit_file", {"path": "blob.dat", "old_text": "x = 2", "new_text": "x = 3"}),
        ],
    )
    assert results[0].is_error and results[0].text.startswith("lat.txt is not UTF-8 text")
    assert "not changed" in results[0].text
    assert results[1].is_error and results[1].text.startswith("blob.dat is a binary file")
    assert "not changed" in results[1].text
    assert (workspace / "lat.txt").read_bytes() == latin
    assert (workspace / "blob.dat").read_bytes() == b"x = 2\n\x00\x01"


def _peak_bytes(function: Any, **kwargs: Any) -> tuple[Any, int]:
    tracemalloc.start()
    try:
        value = function(**kwargs)
        return value, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_read_file_streams_a_large_file_in_bounded_memory(workspace: Path) -> None:
    line = b"some text line\n"
    count = (24 << 20) // len(line)  # 24 MiB
    (workspace / "big.txt").write_bytes(line * count)
    (workspace / "one_line.txt").write_bytes(b"a" * (24 << 20))
    read_file = {t.name: t for t in workspace_tools(workspace)}["read_file"].function
    limit = 8 << 20  # well below the file size: the file is never held whole
    head, peak = _peak_bytes(read_file, path="big.txt", end_line=3)
    assert peak < limit
    assert head.content == "    1\tsome text line\n    2\tsome text line\n    3\tsome text line"
    assert head.details == {"summary": f"lines 1-3 of {count}"}
    capped, peak = _peak_bytes(read_file, path="big.txt")
    assert peak < limit
    assert capped.content.endswith(
        f"[Showing lines 1-{MAX_READ_LINES} of {count} (size cap). "
        f"Read on with start_line={MAX_READ_LINES + 1}.]"
    )
    cut, peak = _peak_bytes(read_file, path="one_line.txt")
    assert peak < limit
    assert cut.content == "    1\t" + "a" * MAX_READ_CHARS + " [line cut]"
    assert cut.details == {"summary": "lines 1-1 of 1"}


def test_line_numbers_split_on_newline_only(workspace: Path) -> None:
    (workspace / "ff.py").write_text("a = 1\n\x0c\nb = 2\x85\u2028\x1c\nc = 3\r\nd = 4")
    _, results = run_calls(
        workspace,
        [
            ("read_file", {"path": "ff.py"}),
            ("read_file", {"path": "ff.py", "start_line": 4}),
        ],
    )
    assert (
        results[0].text
        == "    1\ta = 1\n    2\t\x0c\n    3\tb = 2\x85\u2028\x1c\n    4\tc = 3\n    5\td = 4"
    )
    assert results[1].text == "    4\tc = 3\n    5\td = 4"
    _, results = run_calls(
        workspace,
        [
            ("edit_file", {"path": "ff.py", "old_text": "c = 3", "new_text": "c = 4"}),
            ("edit_file", {"path": "ff.py", "old_text": "d = 5", "new_text": "x"}),
        ],
    )
    assert results[0].details == {"summary": "replaced 1 occurrence at line 4"}
    assert results[0].text.endswith("    4\tc = 4\n    5\td = 4")
    assert "    5\td = 4" in results[1].text
    (workspace / "dup.txt").write_text("x\x0cy\nx\n")
    _, results = run_calls(
        workspace, [("edit_file", {"path": "dup.txt", "old_text": "x", "new_text": "z"})]
    )
    assert "(at lines 1, 2)" in results[0].text and "    2\tx" in results[0].text


def test_read_file_start_line_deep_in_a_file_and_past_its_end(workspace: Path) -> None:
    count = 300_000  # a few MiB: the lines before start_line are skipped in several chunks
    (workspace / "many.txt").write_text("".join(f"line {i}\n" for i in range(1, count + 1)))
    (workspace / "open_end.txt").write_text("a\nb")  # no final newline: still 2 lines
    _, results = run_calls(
        workspace,
        [
            ("read_file", {"path": "many.txt", "start_line": 250_000, "end_line": 250_001}),
            ("read_file", {"path": "many.txt", "start_line": count}),
            ("read_file", {"path": "many.txt", "start_line": count + 1}),
            ("read_file", {"path": "open_end.txt", "start_line": 2}),
            ("read_file", {"path": "open_end.txt", "start_line": 3}),
        ],
    )
    assert results[0].text == "250000\tline 250000\n250001\tline 250001"
    assert results[0].details == {"summary": f"lines 250000-250001 of {count}"}
    assert results[1].text == f"{count}\tline {count}"
    assert results[2].text == f"start_line {count + 1} is past the end of many.txt, which has " + (
        f"{count} lines."
    )
    assert results[3].text == "    2\tb"
    assert results[4].text == "start_line 3 is past the end of open_end.txt, which has 2 lines."
