"""The CLI's durable commands on a SQLite file: a worker with the built-in workspace tools and a
scripted model, ``submit`` and ``status`` from other processes, a clean stop on SIGTERM."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

pytest.importorskip("dbos", reason="the durable tests need the dbos extra")

from worker_process import cli as _cli
from worker_process import start_worker

SAFETY_SECONDS = 60.0  # only ends a hung wait; nothing is asserted about time


def test_worker_submit_status_with_the_workspace_tools(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "notes.txt").write_text("hello\n")
    script = tmp_path / "script.json"
    script.write_text(
        json.dumps(
            [
                {
                    "content": [
                        {"type": "tool_use", "id": "t1", "name": "list_files", "input": {}}
                    ],
                    "stop_reason": "tool_use",
                },
                {"content": [{"type": "text", "text": "One file."}], "stop_reason": "end_turn"},
            ]
        )
    )
    db = f"sqlite:///{tmp_path / 'runs.sqlite'}"
    env = dict(os.environ)
    worker = start_worker(db, "cli-worker", env, "-w", str(workspace), "-m", f"script:{script}")
    try:
        submitted = subprocess.run(
            _cli("submit", "--db", db, "--id", "cli-run", "What is in the folder?"),
            env=env,
            capture_output=True,
            text=True,
            timeout=SAFETY_SECONDS,
        )
        assert (submitted.returncode, submitted.stdout.strip()) == (0, "cli-run"), submitted.stderr
        deadline = time.monotonic() + SAFETY_SECONDS
        while True:
            status = subprocess.run(
                _cli("status", "--db", db, "--json", "cli-run"),
                env=env,
                capture_output=True,
                text=True,
                timeout=SAFETY_SECONDS,
            )
            assert status.returncode == 0, status.stderr
            data = json.loads(status.stdout)
            if data["status"] == "SUCCESS":
                break
            assert data["status"] in ("ENQUEUED", "PENDING"), data
            assert time.monotonic() < deadline, "the run never finished"
            time.sleep(0.1)
        assert data["executor_id"] == "cli-worker"
        assert data["result"]["state"] == "done"
        results = [m for m in data["result"]["messages"] if m["role"] == "tool_result"]
        assert "notes.txt" in results[0]["content"][0]["text"]
        plain = subprocess.run(
            _cli("status", "--db", db, "cli-run"),
            env=env,
            capture_output=True,
            text=True,
            timeout=SAFETY_SECONDS,
        )
        assert plain.stdout.splitlines() == [
            "cli-run: SUCCESS (workflow status; worker cli-worker); "
            "the run ended in state done after 2 turn(s)",
            "One file.",
        ]
        missing = subprocess.run(
            _cli("status", "--db", db, "no-such-run"),
            env=env,
            capture_output=True,
            text=True,
            timeout=SAFETY_SECONDS,
        )
        assert missing.returncode == 1
        assert "no run with id 'no-such-run'" in missing.stderr
    finally:
        worker.send_signal(signal.SIGTERM)
        worker.wait(timeout=30)
    assert worker.returncode == 0
