"""Issue 4, case 4: SIGKILL a scripted agent at several moments, resume it, finish the run.

The child (crash_child.py) logs a session of three parallel batches; the test kills it once the log
holds a given number of lines (during a model request, mid-batch, or after it; two kills also tear
the last line, as a crash mid-write would), then resumes in this process. Every time: the history is
valid, no completed tool result is lost, and no call the resumed history holds runs again.
"""

from __future__ import annotations

import importlib.util
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from types import ModuleType

import pytest

from statemachine_agent import AssistantMessage, State, ToolResultMessage
from statemachine_agent.session import read_session
from statemachine_agent.session._check import check_session
from statemachine_agent.testing import assert_valid_history

CHILD = Path(__file__).with_name("crash_child.py")


def load_child() -> ModuleType:
    spec = importlib.util.spec_from_file_location("_session_crash_child", CHILD)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def kill_after_lines(log: Path, markers: Path, lines: int) -> None:
    """Start the child and SIGKILL it once ``log`` holds ``lines`` lines (or when it exits)."""
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    child = subprocess.Popen([sys.executable, str(CHILD), str(log), str(markers)], env=env)
    try:
        deadline = time.monotonic() + 60  # a safety net only; nothing is asserted about time
        while child.poll() is None and time.monotonic() < deadline:
            if log.exists() and log.read_bytes().count(b"\n") >= lines:
                break
            time.sleep(0.002)
    finally:
        if child.poll() is None:
            child.send_signal(signal.SIGKILL)
        child.wait()


def tear_last_line(log: Path, keep: float) -> None:
    raw = log.read_bytes()
    start = raw.rstrip(b"\n").rfind(b"\n") + 1
    last = raw[start:]
    log.write_bytes(raw[: start + max(1, int(len(last) * keep))])


def starts(markers: Path) -> Counter[str]:
    if not markers.exists():
        return Counter()
    return Counter(
        line.split()[1] for line in markers.read_text().splitlines() if line.startswith("start ")
    )


@pytest.mark.parametrize(
    ("lines", "tear"),
    [(4, None), (7, 0.5), (8, None), (15, 0.3), (21, None)],
    ids=["model-request", "torn-assistant-or-result", "mid-batch", "torn-later", "late"],
)
def test_case4_sigkill_then_resume_loses_nothing_and_reruns_nothing(
    tmp_path: Path, lines: int, tear: float | None
) -> None:
    log, markers = tmp_path / "s.jsonl", tmp_path / "markers.txt"
    kill_after_lines(log, markers, lines)
    if tear is not None:
        tear_last_line(log, tear)

    before = read_session(log)
    completed = {
        r.message.tool_call_id: r.message
        for r in before.records
        if isinstance(r.message, ToolResultMessage)
    }
    started_before = starts(markers)

    child = load_child()
    agent = child.make_agent(log, markers)
    assert_valid_history(agent.messages)
    in_history = {m.tool_call_id: m for m in agent.messages if isinstance(m, ToolResultMessage)}
    for call_id, result in completed.items():
        assert in_history[call_id] == result  # no completed result lost
    known_calls = set(in_history)

    if child.can_continue(agent):
        result = agent.run_sync() if agent.messages else agent.run_sync("do the work")
        assert result.state is State.DONE, result.error
    last = agent.messages[-1]
    assert isinstance(last, AssistantMessage) and last.text == "all done"
    assert_valid_history(agent.messages)
    final = {m.tool_call_id: m for m in agent.messages if isinstance(m, ToolResultMessage)}
    for call_id, result in completed.items():
        assert final[call_id] == result
    started_after = starts(markers)
    for call_id in known_calls:  # the engine never runs a call of the resumed history again
        assert started_after[call_id] == started_before[call_id] <= 1

    again = read_session(log)
    assert again.repairs == [] and again.messages == agent.messages
    assert check_session(log)[1] == []


def test_case4_the_child_itself_resumes_after_a_kill(tmp_path: Path) -> None:
    log, markers = tmp_path / "s.jsonl", tmp_path / "markers.txt"
    kill_after_lines(log, markers, 9)
    kill_after_lines(log, markers, 10**9)  # run the child again to the end: it resumes
    data, problems = check_session(log)
    assert problems == []
    assert data.state is State.DONE
    assert data.messages[-1].text == "all done"  # type: ignore[union-attr]
    assert max(starts(markers).values()) == 1
