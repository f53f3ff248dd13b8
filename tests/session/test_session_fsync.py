"""Issue 15, bug 3: ``SessionLog(fsync=True)`` syncs every line it writes to disk (header
included); ``fsync=False`` never calls ``os.fsync``."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from statemachine_agent import Agent, tool
from statemachine_agent.models import ScriptedModel
from statemachine_agent.session import SessionLog
from statemachine_agent.testing.steps import call, text_response, tool_response


@tool
def list_files() -> str:
    """List the files."""
    return "README.md"


def run_logged(path: Path, *, fsync: bool) -> None:
    script = [tool_response(call("list_files", {}, id="l1")), text_response("One file.")]
    log = SessionLog(path, fsync=fsync)
    agent = Agent(ScriptedModel(script), tools=[list_files], session=log)
    assert agent.run_sync("List the files").text == "One file."
    log.close()


@pytest.mark.parametrize("fsync", [True, False])
def test_fsync_once_per_written_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fsync: bool
) -> None:
    path = tmp_path / "run.jsonl"
    synced: list[tuple[int, int]] = []  # (inode of the synced file, its size when synced)
    real_fsync = os.fsync

    def spy(fd: int) -> None:
        stat = os.fstat(fd)
        synced.append((stat.st_ino, stat.st_size))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", spy)
    run_logged(path, fsync=fsync)
    data = path.read_bytes()
    lines = data.splitlines(keepends=True)
    # header, run start, messages, tool result, states, run end: a real run's worth of lines
    assert len(lines) >= 8 and b'"type":"header"' in lines[0]
    if not fsync:
        assert synced == []
        return
    inode = path.stat().st_ino
    ends = [sum(len(line) for line in lines[: i + 1]) for i in range(len(lines))]
    # One sync per line (the header's first), in order, each after its line was written (the
    # syncs run on the log's own thread, so later lines may be in the file already).
    assert len(synced) == len(lines)
    assert all(ino == inode for ino, _size in synced)
    sizes = [size for _ino, size in synced]
    assert sizes == sorted(sizes) and all(
        size >= end for size, end in zip(sizes, ends, strict=True)
    )
    assert sizes[-1] == len(data)
