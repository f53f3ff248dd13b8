"""Every Python block of the README runs as written, each in a fresh temporary folder, so an
example cannot drift from the code. The block that talks to Claude runs against a local replay
server (the real SDK, a recorded-shape answer), never the real API."""

from __future__ import annotations

import logging
import os
import re
import runpy
import sys
from pathlib import Path

import pytest
from models.replay_server import ReplayServer, reply

README = Path(__file__).resolve().parents[1] / "README.md"
BLOCKS = re.findall(r"^```python\n(.*?)^```", README.read_text(encoding="utf-8"), re.M | re.S)


def _release_captured_stderr() -> None:
    """DBOS's console log handler keeps the stderr of the moment ``dbos`` was imported: when a
    block imported it, that is this test's captured stream, closed after the test, and the next
    block's launch would flush it. Point the handler at the process's real stderr instead."""
    for handler in logging.getLogger("dbos").handlers:
        if isinstance(handler, logging.StreamHandler) and handler.stream is sys.stderr:
            handler.stream = sys.__stderr__


def _first_line(code: str) -> str:
    return next(line for line in code.splitlines() if line.strip())[:60]


def test_the_readme_has_python_blocks() -> None:
    assert len(BLOCKS) >= 6


@pytest.mark.parametrize("code", BLOCKS, ids=[f"block{i}" for i in range(len(BLOCKS))])
def test_readme_block_runs(
    code: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    script = tmp_path / "block.py"
    script.write_text(code, encoding="utf-8")
    with ReplayServer() as server:
        server.add(reply([{"type": "text", "text": "Nothing changed."}], name="claude-sonnet-4-6"))
        monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test-readme")
        monkeypatch.setenv("ANTHROPIC_BASE_URL", server.url)
        try:
            namespace = runpy.run_path(str(script), run_name="__main__")
        finally:
            _release_captured_stderr()
    result = namespace.get("result")
    if result is not None and hasattr(result, "state"):
        assert result.error is None or result.state != "failed", result.error
    assert os.getcwd() == str(tmp_path)
