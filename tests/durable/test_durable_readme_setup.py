"""Issue 33 retrial, finding 6: what the README says of the durable set-up, done as it says, each
command a process: a factory package without ``__init__.py``, a relative SQLite URL resolved
from the working folder, and the transcript of a finished run read with ``status --json``."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

import pytest

pytest.importorskip("dbos", reason="the durable tests need the dbos extra")

from docs.blocks import documentation_text
from worker_process import cli, start_worker

from statemachine_agent.durable import Client

SAFETY_SECONDS = 60.0  # only ends a hung wait; nothing is asserted about time
README = Path(__file__).resolve().parents[2] / "README.md"
FACTORY = """
from statemachine_agent import Agent
from statemachine_agent.models import FunctionModel
from statemachine_agent.testing.steps import text_response


def make_agent() -> Agent:
    return Agent(FunctionModel(lambda messages, request: text_response("Hi from myapp.")))
"""


def test_a_factory_without_init_on_a_relative_sqlite_url_and_the_transcript_by_status_json(
    tmp_path: Path,
) -> None:
    project = tmp_path / "project"
    (project / "myapp").mkdir(parents=True)
    (project / "myapp" / "agents.py").write_text(FACTORY)  # no __init__.py
    db = "sqlite:///runs.sqlite"  # relative: the working folder's runs.sqlite

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(cli(*args), cwd=project, capture_output=True, text=True,
                              timeout=SAFETY_SECONDS, check=False)  # fmt: skip

    worker = start_worker(db, "readme-worker", dict(os.environ), "--factory",
                          "myapp.agents:make_agent", cwd=project)  # fmt: skip
    try:
        assert run("submit", "--db", db, "--id", "r1", "Hello").returncode == 0
        client = Client(f"sqlite:///{project / 'runs.sqlite'}")  # the absolute form, same file
        try:
            assert client.result("r1", timeout_seconds=SAFETY_SECONDS).text == "Hi from myapp."
        finally:
            client.close()
        status = run("status", "--db", db, "--json", "r1")
    finally:
        worker.send_signal(signal.SIGTERM)
        try:
            worker.wait(timeout=SAFETY_SECONDS)
        finally:
            worker.kill()
            worker.wait()
    assert (project / "runs.sqlite").exists()
    messages = json.loads(status.stdout)["result"]["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant"]
    assert messages[1]["content"][0]["text"] == "Hi from myapp."


def test_readme_states_the_sqlite_url_forms_the_factory_package_and_the_durable_transcript() -> (
    None
):
    text = " ".join(documentation_text().split())
    assert "`myapp` needs no `__init__.py`" in text
    assert "`sqlite:////abs/path/runs.sqlite` (four slashes: an absolute path)" in text
    assert "`sqlite:///runs.sqlite` (three: relative to the working folder" in text
    assert "`statemachine-agent status --db $DB --json RUN_ID` prints its whole result" in text
    assert "there is no `replay` of a durable run" in text


def test_readme_gives_both_exits_of_json_into_head() -> None:
    text = " ".join(documentation_text().split())
    assert "command exits 141 without a traceback" in text
    assert "before `head` closed it ends as usual, exit code 0" in text
