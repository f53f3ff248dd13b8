"""Issue 33 retrial, finding 5: ``status`` of a durable run awaiting approval previews each
pending call as the ``[y/n]`` prompt does (a new file's head trimmed with a note), not as one
escaped JSON string. The worker and every command run as processes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

import pytest

pytest.importorskip("dbos", reason="the durable tests need the dbos extra")

from worker_process import cli, start_worker

from statemachine_agent.durable import Client
from statemachine_agent.workspace import PREVIEW_LINES

SAFETY_SECONDS = 60.0  # only ends a hung wait; nothing is asserted about time


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        cli(*args), capture_output=True, text=True, timeout=SAFETY_SECONDS, check=False
    )


def test_status_previews_a_pending_write_as_the_prompt_does(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    content = "".join(f"row {i}\n" for i in range(98))
    call = {"id": "w1", "name": "write_file", "input": {"path": "big.txt", "content": content}}
    script = tmp_path / "script.json"
    script.write_text(
        json.dumps(
            [
                {"content": [{"type": "tool_use", **call}], "stop_reason": "tool_use"},
                {"content": [{"type": "text", "text": "Finished."}], "stop_reason": "end_turn"},
            ]
        )
    )
    db = f"sqlite:///{tmp_path / 'runs.sqlite'}"
    worker = start_worker(
        db, "preview-worker", dict(os.environ), "-w", str(workspace), "-m", f"script:{script}"
    )
    try:
        assert _run("submit", "--db", db, "--id", "r-big", "Write it.").returncode == 0
        client = Client(db)
        try:
            client.pending("r-big", wait_seconds=SAFETY_SECONDS)  # once it waits
        finally:
            client.close()
        status = _run("status", "--db", db, "r-big")
    finally:
        worker.send_signal(signal.SIGTERM)
        try:
            worker.wait(timeout=SAFETY_SECONDS)
        finally:
            worker.kill()
            worker.wait()
    assert status.returncode == 0, status.stderr
    lines = status.stdout.splitlines()
    assert lines[1] == "Awaiting approval:"
    assert lines[2].startswith('  w1: write_file {"path": "big.txt", "content": "row 0\\nrow 1')
    assert len(lines[2]) < 250  # not the whole content as one escaped string
    head = lines[3 : 3 + PREVIEW_LINES]
    assert head == [f"      row {i}" for i in range(PREVIEW_LINES)]
    assert lines[3 + PREVIEW_LINES] == (
        f"      … {98 - PREVIEW_LINES} more lines of the new file not shown"
    )
    assert "row 97" not in status.stdout
