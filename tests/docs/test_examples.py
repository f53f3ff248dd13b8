"""Every Python block of the README and of the site's pages runs as written (the convention for
stated output is in ``blocks``): a page's blocks in order, in one fresh temporary folder. A block
that talks to Claude runs against a local replay server (the real SDK, a recorded-shape answer),
never the real API."""

from __future__ import annotations

import logging
import os
import sys
import types
from pathlib import Path

import pytest
from models.replay_server import ReplayServer, reply

from .blocks import README, ROOT, Block, blocks, output_mismatch, pages, stated_output

PAGES = [page for page in pages() if blocks(page)]


def _release_captured_stderr() -> None:
    """DBOS's console log handler keeps the stderr of the moment ``dbos`` was imported: when a
    block imported it, that is this test's captured stream, closed after the test, and the next
    block's launch would flush it. Point the handler at the process's real stderr instead."""
    for handler in logging.getLogger("dbos").handlers:
        if isinstance(handler, logging.StreamHandler) and handler.stream is sys.stderr:
            handler.stream = sys.__stderr__


def _run(block: Block, main: types.ModuleType, monkeypatch: pytest.MonkeyPatch) -> None:
    """Run ``block`` as the ``__main__`` module (as ``python page.py`` would: pydantic resolves a
    model's postponed annotations through ``sys.modules[cls.__module__]``)."""
    main.__dict__.pop("result", None)
    monkeypatch.setitem(sys.modules, "__main__", main)
    with ReplayServer() as server:
        server.add(reply([{"type": "text", "text": "Nothing changed."}], name="claude-sonnet-4-6"))
        monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test-docs")
        monkeypatch.setenv("ANTHROPIC_BASE_URL", server.url)
        try:
            exec(compile(block.code, block.where, "exec"), main.__dict__)
        finally:
            _release_captured_stderr()


def test_the_readme_and_the_pages_have_python_blocks() -> None:
    # The 25 blocks the README held before the site moved them into pages are all still run.
    assert sum(len(blocks(page)) for page in PAGES) >= 25
    assert blocks(README)


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(ROOT)) for p in PAGES])
def test_every_python_block_of_a_page_runs_in_order_and_prints_what_it_states(
    page: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    main = types.ModuleType("__main__")  # one namespace for the page's blocks
    for block in blocks(page):
        capsys.readouterr()
        _run(block, main, monkeypatch)
        printed = capsys.readouterr().out
        stated = stated_output(block.code)
        if stated is not None:
            mismatch = output_mismatch(stated, printed)
            assert mismatch is None, f"{block.where} does not print what it states:\n{mismatch}"
        result = main.__dict__.get("result")
        if result is not None and hasattr(result, "state"):
            assert result.error is None or result.state != "failed", (
                f"{block.where}: {result.error}"
            )
        assert os.getcwd() == str(tmp_path), f"{block.where} left the page's folder"


# -- the convention itself ---------------------------------------------------------------------


def test_every_code_fence_of_a_page_is_closed() -> None:
    """A page's code fences come in pairs: an unclosed last block (docs/concepts/states.md had
    one) renders as a block swallowing the rest of the page and is not run as an example."""
    unclosed = [
        str(page.relative_to(ROOT))
        for page in pages()
        if sum(line.startswith("```") for line in page.read_text().splitlines()) % 2
    ]
    assert unclosed == []


def test_a_block_whose_output_differs_from_its_stated_comment_is_reported() -> None:
    code = "print(1 + 1)  # -> 3\n"
    stated = stated_output(code)
    assert stated == ["3"]
    assert output_mismatch(stated, "2\n") is not None
    assert output_mismatch(["2"], "2\n") is None


def test_stated_output_lines_are_all_of_the_output_in_order_and_dots_match_a_prefix() -> None:
    code = 'print("a")  # -> a\nprint("b: a long message")\n# -> b: a long ...\ns = "# -> not a comment"\n'
    stated = stated_output(code)
    assert stated == ["a", "b: a long ..."]
    assert output_mismatch(stated, "a\nb: a long message\n") is None
    assert output_mismatch(stated, "a\nb: a long message\nextra\n") is not None  # unstated line
    assert output_mismatch(stated, "b: a long message\na\n") is not None  # order
    assert output_mismatch(stated, "a\nb: short\n") is not None


def test_a_block_that_states_nothing_is_only_run() -> None:
    assert stated_output('print("anything")  # a plain comment\n') is None
