"""Issue 4, case 4: SIGKILL a scripted agent at random moments, resume it, finish the run.

The child (crash_child.py) logs a session of three parallel batches of sleeping tools, each model
request waiting ``MODEL_DELAY_SECONDS``. The kill moments are random but reproducible: drawn from
``random.Random(SEED)`` (set ``SESSION_CRASH_SEED`` to explore others; each test prints its seed and
plan, shown on failure). Each plan waits for a randomly chosen line of the log (polled, never a
fixed sleep after start), then a random extra delay, then SIGKILLs:

- ``model-request``: after the n-th transition to ``awaiting_model``, within the request's delay;
- ``mid-batch``: after the k-th result of batch b was logged, while other calls still sleep;
- ``mid-write``: after a random line, then the last line is cut at a random byte. A real kill in
  the middle of a write cannot be forced reliably (each line is one small write that is flushed at
  once), so the torn tail such a crash leaves is simulated by truncating the file.

Then the session is resumed in this process and the run finished. Every time: the history is
valid, no completed tool result is lost, and no call runs again (the tools' marker file counts
real runs; every call id, old or new, starts at most once).
"""

from __future__ import annotations

import os
import random
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from statemachine_agent import AssistantMessage, State, ToolResultMessage
from statemachine_agent.session import read_session
from statemachine_agent.session._check import check_session
from statemachine_agent.testing import assert_valid_history

from .killing import LogLines, complete_lines, load_script, marker_counts, run_and_kill

CHILD = Path(__file__).with_name("crash_child.py")
child = load_script(CHILD)

SEED = int(os.environ.get("SESSION_CRASH_SEED", "4004"))
MOMENTS = ("model-request", "mid-batch", "mid-write")
KILLS_PER_MOMENT = 2
RESULTS_PER_BATCH = len(child.SLEEPS)


@dataclass(frozen=True)
class Kill:
    """When to kill: once the log holds ``count`` lines of ``kind`` (and ``after_results`` tool
    results), wait ``wait_seconds``, kill; ``tear`` keeps that fraction of the last line."""

    moment: str
    kind: str
    count: int
    after_results: int = 0
    wait_seconds: float = 0.0
    tear: float | None = None

    def reached(self, lines: LogLines) -> bool:
        results = sum(1 for line in lines if line["type"] == "tool_result")
        if self.kind == "line":
            return len(lines) >= self.count
        hits = sum(1 for line in lines if line["type"] == "state" and line["dest"] == self.kind)
        return hits >= self.count and results >= self.after_results

    def __str__(self) -> str:
        tear = "" if self.tear is None else f"-tear{self.tear:.2f}"
        return (
            f"{self.moment}-{self.kind}{self.count}-r{self.after_results}"
            f"+{self.wait_seconds * 1000:.0f}ms{tear}"
        )


def plan_kill(rng: random.Random, moment: str) -> Kill:
    if moment == "model-request":  # request n of BATCHES + 1; the kill lands inside its delay
        wait = rng.uniform(0, 0.6 * child.MODEL_DELAY_SECONDS)
        return Kill(moment, "awaiting_model", rng.randint(1, child.BATCHES + 1), wait_seconds=wait)
    if moment == "mid-batch":  # batch b has logged k of its results; the slowest call still sleeps
        batch, done = rng.randrange(child.BATCHES), rng.randrange(RESULTS_PER_BATCH)
        after = batch * RESULTS_PER_BATCH + done
        wait = rng.uniform(0, 0.03)
        return Kill(moment, "executing_tools", batch + 1, after, wait_seconds=wait)
    # A full run logs 25 lines; line 3 on leaves the header and the run start whole.
    return Kill(moment, "line", rng.randint(3, 24), tear=rng.uniform(0.05, 0.95))


def plan_kills(seed: int) -> list[Kill]:
    rng = random.Random(seed)
    return [plan_kill(rng, moment) for moment in MOMENTS * KILLS_PER_MOMENT]


def tear_last_line(log: Path, keep: float) -> None:
    raw = log.read_bytes()
    start = raw.rstrip(b"\n").rfind(b"\n") + 1
    last = raw[start:]
    log.write_bytes(raw[: start + max(1, int(len(last) * keep))])


def landed(lines: LogLines) -> str:
    """Where the kill landed, for the failure report."""
    if not lines:
        return "empty log"
    last = lines[-1]
    return f"line {len(lines)}: {last['type']} {last.get('dest', '')}".strip()


def results(messages: list[object]) -> dict[str, ToolResultMessage]:
    return {m.tool_call_id: m for m in messages if isinstance(m, ToolResultMessage)}


@pytest.mark.parametrize("kill", plan_kills(SEED), ids=str)
def test_sigkill_then_resume_loses_nothing_and_reruns_nothing(tmp_path: Path, kill: Kill) -> None:
    log, markers = tmp_path / "s.jsonl", tmp_path / "markers.txt"
    print(f"SESSION_CRASH_SEED={SEED} kill={kill}")
    killed = run_and_kill(CHILD, log, markers, kill.reached, then_wait_seconds=kill.wait_seconds)
    print(f"killed={killed} at {landed(complete_lines(log))}")
    if kill.tear is not None:
        tear_last_line(log, kill.tear)

    completed = results([r.message for r in read_session(log).records])  # what the log shows
    started_before, ended_before = marker_counts(markers, "start"), marker_counts(markers, "end")
    assert all(ended_before[call_id] == 1 for call_id in completed)

    agent = child.make_agent(log, markers)
    assert_valid_history(agent.messages)
    resumed = results(agent.messages)
    for call_id, result in completed.items():
        assert resumed[call_id] == result  # no completed result lost

    if child.can_continue(agent):
        result = agent.run_sync() if agent.messages else agent.run_sync(child.PROMPT)
        assert result.state is State.DONE, result.error
    last = agent.messages[-1]
    assert isinstance(last, AssistantMessage) and last.text == child.FINAL
    assert_valid_history(agent.messages)
    final = results(agent.messages)
    for call_id, result in completed.items():
        assert final[call_id] == result

    started_after = marker_counts(markers, "start")
    for call_id in resumed:  # no call of the resumed history runs again, finished or not
        assert started_after[call_id] == started_before[call_id] <= 1, call_id
    assert max(started_after.values()) == 1  # nor does any new one run twice

    again = read_session(log)
    assert again.repairs == [] and again.messages == agent.messages
    assert check_session(log)[1] == []


def grown_by(log: Path, lines: int) -> Callable[[LogLines], bool]:
    """A kill condition: the log holds ``lines`` more complete lines than it does now."""
    target = len(complete_lines(log)) + lines
    return lambda now: len(now) >= target


def test_the_child_itself_resumes_after_two_kills(tmp_path: Path) -> None:
    log, markers = tmp_path / "s.jsonl", tmp_path / "markers.txt"
    rng = random.Random(SEED)
    growths = [rng.randint(4, 12), rng.randint(2, 8)]
    print(f"SESSION_CRASH_SEED={SEED} kill after {growths[0]} lines, then {growths[1]} more")
    for lines in growths:
        run_and_kill(CHILD, log, markers, grown_by(log, lines))
    assert not run_and_kill(CHILD, log, markers, lambda _lines: False)  # runs to the end
    data, problems = check_session(log)
    assert problems == []
    assert data.state is State.DONE
    assert data.messages[-1].text == child.FINAL
    assert max(marker_counts(markers, "start").values()) == 1
