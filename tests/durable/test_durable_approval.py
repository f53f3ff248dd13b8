"""``awaiting_approval`` under DBOS: the run waits durably for decisions sent from any process
(`send_decisions`, ``statemachine-agent decide``), and ends with the history and result the
in-process engine gives for the same script and decisions."""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import AsyncIterator, Callable, Mapping
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("dbos", reason="the durable tests need the dbos extra")

from dbos import DBOS
from durable_agents import CHECK_CALL, DEPLOY_CALL, approval_agent

from statemachine_agent import (
    Agent,
    Approve,
    Decision,
    Defer,
    Deny,
    PendingCall,
    RunResult,
    State,
    ToolCallInfo,
    ToolResultMessage,
    Usage,
    UsageError,
    tool,
)
from statemachine_agent._protocol import NOT_RUN_PENDING, assert_valid_history
from statemachine_agent.durable import (
    DECISION_TOPIC,
    Client,
    abort,
    launch,
    pending,
    run,
    send_decisions,
    shutdown,
)
from statemachine_agent.models import FunctionModel

HERE = Path(__file__).resolve().parent
SAFETY_SECONDS = 60.0  # only ends a hung wait; nothing is asserted about time
REVIEW = "deploys need review"


class Factory:
    def __init__(self) -> None:
        self.build: Callable[[], Agent] = approval_agent

    def __call__(self) -> Agent:
        return self.build()


@pytest.fixture
def side(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "side-effects.txt"
    monkeypatch.setenv("SMA_SIDE_FILE", str(path))
    return path


@pytest.fixture
async def factory(tmp_path: Path, side: Path) -> AsyncIterator[Factory]:
    subject = Factory()
    await launch(f"sqlite:///{tmp_path / 'runs.sqlite'}", subject, executor_id="approvals")
    try:
        yield subject
    finally:
        shutdown()


def _lines(side: Path) -> list[str]:
    return side.read_text(encoding="utf-8").splitlines() if side.exists() else []


async def _pending_becomes(run_id: str, ids: list[str]) -> tuple[PendingCall, ...]:
    """Wait until the run waits for decisions on exactly the calls ``ids``."""
    deadline = time.monotonic() + SAFETY_SECONDS
    while True:
        calls = await pending(run_id, wait_seconds=SAFETY_SECONDS)
        if [c.id for c in calls] == ids:
            return calls
        assert time.monotonic() < deadline, f"the run never waited for {ids} (now {calls})"
        await asyncio.sleep(0.02)


async def _decide_cli(tmp_path: Path, run_id: str, *decisions: str) -> list[str]:
    """``statemachine-agent decide`` on the test's database, from another process: its output
    lines (it must exit 0)."""
    decide = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "statemachine_agent",
        "decide",
        "--db",
        f"sqlite:///{tmp_path / 'runs.sqlite'}",
        run_id,
        *decisions,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await decide.communicate()
    assert decide.returncode == 0, err.decode()
    return out.decode().splitlines()


def _results(result: RunResult) -> dict[str, ToolResultMessage]:
    return {m.tool_call_id: m for m in result.messages if isinstance(m, ToolResultMessage)}


# -- decisions from another process -----------------------------------------------------------


async def test_denial_from_another_process_gives_the_denied_result(
    factory: Factory, tmp_path: Path, side: Path
) -> None:
    task = asyncio.ensure_future(run("Deploy to prod.", run_id="deny-run"))
    calls = await _pending_becomes("deny-run", [DEPLOY_CALL])
    assert calls == (
        PendingCall(DEPLOY_CALL, "deploy", {"target": "prod"}, "deploy requires approval"),
    )
    assert _lines(side) == ["check prod"]  # the rest of the batch ran; deploy waits

    out = await _decide_cli(tmp_path, "deny-run", "--deny", f"{DEPLOY_CALL}:not on a Friday")
    assert out == [f"deny-run: sent 1 decision(s) ({DEPLOY_CALL}: deny)"]

    result = await asyncio.wait_for(task, SAFETY_SECONDS)
    assert result.state == State.DONE
    denied = _results(result)[DEPLOY_CALL]
    assert (denied.text, denied.is_error) == ("Denied: not on a Friday", True)
    assert result.text == ("Settled: check: prod is healthy; deploy: Denied: not on a Friday")
    assert _lines(side) == ["check prod"]  # deploy never ran
    assert_valid_history(result.messages)


# -- the same history as the in-process engine --------------------------------------------------


def _hooked_agent(log: list[str]) -> Agent:
    """Three calls in one batch; a hook defers both deploys."""

    def model(messages: list[Any], request: Any) -> Any:
        results = [m for m in messages if isinstance(m, ToolResultMessage)]
        if not results:
            return {
                "content": [
                    {"type": "tool_use", "id": "c1", "name": "check", "input": {"target": "a"}},
                    {"type": "tool_use", "id": "d1", "name": "deploy", "input": {"target": "a"}},
                    {"type": "tool_use", "id": "d2", "name": "deploy", "input": {"target": "b"}},
                ],
                "stop_reason": "tool_use",
                "usage": {"input_tokens": 11, "output_tokens": 3},
            }
        text = "; ".join(f"{m.tool_call_id}={m.text}" for m in results)
        return {  # usage reported by every request: the durable total must sum them all
            "content": [{"type": "text", "text": text}],
            "stop_reason": "end_turn",
            "usage": {"input_tokens": 100 + len(results), "output_tokens": 5},
        }

    def check(target: str) -> str:
        """Check."""
        log.append(f"check {target}")
        return f"{target} ok"

    def deploy(target: str) -> str:
        """Deploy."""
        log.append(f"deploy {target}")
        return f"deployed {target}"

    def review(info: ToolCallInfo) -> Defer | None:
        return Defer(REVIEW) if info.tool.name == "deploy" else None

    return Agent(FunctionModel(model), tools=[tool(check), tool(deploy)], before_tool_call=review)


SCENARIOS: dict[str, tuple[list[Mapping[str, Decision]], State, list[str], str]] = {
    # rounds of decisions, the final state, what ran, the final answer (or error)
    "approve-with-arguments-then-deny": (
        [{"d1": Approve(arguments={"target": "a2"})}, {"d2": Deny("not b")}],  # two waits
        State.DONE,
        ["check a", "deploy a2"],
        "c1=a ok; d1=deployed a2; d2=Denied: not b",
    ),
    "terminating-denial": (
        [{"d2": Deny("stop everything", terminate=True)}],
        State.ABORTED,
        ["check a"],
        "A tool call was denied and ended the run: stop everything",
    ),
}


USAGE = {
    # the first request, then the one after the last decision (the final answer) if any
    "approve-with-arguments-then-deny": Usage(input_tokens=11 + 103, output_tokens=3 + 5),
    "terminating-denial": Usage(input_tokens=11, output_tokens=3),
}


@pytest.mark.parametrize("scenario", list(SCENARIOS))
async def test_durable_history_is_the_in_process_history(factory: Factory, scenario: str) -> None:
    rounds, state, ran, ending = SCENARIOS[scenario]
    in_process_log: list[str] = []
    agent = _hooked_agent(in_process_log)
    expected = await agent.run("Check and deploy.")
    usage = expected.usage
    start = len(agent.messages) - len(expected.new_messages)
    for decisions in rounds:
        expected = await agent.run(decisions=decisions)
        usage = usage + expected.usage
    assert expected.state == state

    durable_log: list[str] = []
    factory.build = lambda: _hooked_agent(durable_log)
    task = asyncio.ensure_future(run("Check and deploy.", run_id=scenario))
    waiting = ["d1", "d2"]
    for decisions in rounds:
        await _pending_becomes(scenario, waiting)
        await send_decisions(scenario, decisions)
        waiting = [cid for cid in waiting if cid not in decisions]
    got = await asyncio.wait_for(task, SAFETY_SECONDS)

    assert durable_log == in_process_log == ran
    assert got.messages == expected.messages
    assert got.new_messages == expected.messages[start:]
    assert (got.state, got.turns, got.error, got.stop_reason, got.text, got.usage) == (
        expected.state,
        expected.turns,
        expected.error,
        expected.stop_reason,
        expected.text,
        usage,
    )
    assert (got.text if state == State.DONE else got.error) == ending
    assert got.usage == USAGE[scenario]
    assert_valid_history(got.messages)


async def test_a_call_is_decided_once_whoever_sends_it(factory: Factory, side: Path) -> None:
    """Two processes approve the same call: the second decision is dropped, the tool runs once."""
    task = asyncio.ensure_future(run("Deploy to prod.", run_id="twice-run"))
    await _pending_becomes("twice-run", [DEPLOY_CALL])
    approve = {"decisions": {DEPLOY_CALL: {"decision": "approve", "arguments": None}}}
    await DBOS.send_async("twice-run", approve, topic=DECISION_TOPIC)
    await DBOS.send_async("twice-run", approve, topic=DECISION_TOPIC)
    result = await asyncio.wait_for(task, SAFETY_SECONDS)
    assert result.state == State.DONE
    assert _lines(side) == ["check prod", "deploy prod"]
    assert _results(result)[DEPLOY_CALL].text == "deployed to prod"
    assert_valid_history(result.messages)


async def test_a_stale_decision_for_a_call_already_decided_is_dropped_and_the_run_waits_on(
    factory: Factory,
) -> None:
    """Another process decides a call the run already decided (it was quicker): the run drops
    that decision and keeps waiting for the calls still pending; each call runs once."""
    log: list[str] = []
    factory.build = lambda: _hooked_agent(log)
    task = asyncio.ensure_future(run("Check and deploy.", run_id="stale-run"))
    await _pending_becomes("stale-run", ["d1", "d2"])
    await send_decisions("stale-run", {"d1": Approve()})
    await _pending_becomes("stale-run", ["d2"])
    stale = {"decisions": {"d1": {"decision": "approve", "arguments": None}}}
    # Apart in time, so the run reads them in this order.
    await DBOS.send_async("stale-run", stale, topic=DECISION_TOPIC)
    await asyncio.sleep(0.01)
    await DBOS.send_async("stale-run", {"decisions": {}}, topic=DECISION_TOPIC)  # nothing usable
    await asyncio.sleep(0.01)
    # Sent as is, not through send_decisions: the pending calls are re-published meanwhile.
    deny = {"decisions": {"d2": {"decision": "deny", "reason": "not b", "terminate": False}}}
    await DBOS.send_async("stale-run", deny, topic=DECISION_TOPIC)
    result = await asyncio.wait_for(task, SAFETY_SECONDS)
    assert result.state == State.DONE
    assert log == ["check a", "deploy a"]
    assert result.text == "c1=a ok; d1=deployed a; d2=Denied: not b"
    assert [m.tool_call_id for m in result.messages if isinstance(m, ToolResultMessage)] == [
        "c1",
        "d1",
        "d2",
    ]
    assert await pending("stale-run") == ()
    assert_valid_history(result.messages)


async def test_decide_all_from_the_cli_approves_every_pending_call(
    factory: Factory, tmp_path: Path
) -> None:
    log: list[str] = []
    factory.build = lambda: _hooked_agent(log)
    task = asyncio.ensure_future(run("Check and deploy.", run_id="all-run"))
    await _pending_becomes("all-run", ["d1", "d2"])
    out = await _decide_cli(tmp_path, "all-run", "--all")
    assert out == ["all-run: sent 2 decision(s) (d1: approve, d2: approve)"]
    result = await asyncio.wait_for(task, SAFETY_SECONDS)
    assert result.state == State.DONE
    assert log[0] == "check a"  # ran before the wait; the two approved deploys ran at once:
    assert sorted(log[1:]) == ["deploy a", "deploy b"]  # each once, in no promised order
    assert result.text == "c1=a ok; d1=deployed a; d2=deployed b"


# -- endings while waiting: the in-process abort of a waiting run ---------------------------------


async def _in_process_abort(reason: str) -> list[Any]:
    agent = approval_agent()
    first = await agent.run("Deploy to prod.")
    assert first.state == State.AWAITING_APPROVAL
    assert agent.abort(reason)
    assert agent.state == State.ABORTED
    return agent.messages


async def test_no_decision_in_time_ends_the_run_aborted(factory: Factory, side: Path) -> None:
    result = await asyncio.wait_for(
        run("Deploy to prod.", run_id="timeout-run", approval_timeout_seconds=0.2),
        SAFETY_SECONDS,
    )
    reason = (
        "No decision came within approval_timeout_seconds=0.2; the calls awaiting approval "
        "were not run."
    )
    assert result.state == State.ABORTED
    assert result.error == reason
    assert _results(result)[DEPLOY_CALL].text == NOT_RUN_PENDING
    assert _results(result)[CHECK_CALL].text == "prod is healthy"
    assert _lines(side) == ["check prod"]
    assert result.messages == await _in_process_abort(reason)
    assert await pending("timeout-run") == ()
    assert_valid_history(result.messages)


async def test_abort_reaches_a_waiting_run(factory: Factory, side: Path) -> None:
    task = asyncio.ensure_future(run("Deploy to prod.", run_id="abort-waiting"))
    await _pending_becomes("abort-waiting", [DEPLOY_CALL])
    await abort("abort-waiting", "not today")
    result = await asyncio.wait_for(task, SAFETY_SECONDS)
    assert (result.state, result.error) == (State.ABORTED, "not today")
    assert _lines(side) == ["check prod"]  # deploy never ran
    assert result.messages == await _in_process_abort("not today")
    assert_valid_history(result.messages)


# -- wrong decisions are refused before anything is sent ---------------------------------------


async def test_wrong_decisions_are_refused_and_nothing_is_sent(
    factory: Factory, side: Path, tmp_path: Path
) -> None:
    db = f"sqlite:///{tmp_path / 'runs.sqlite'}"
    task = asyncio.ensure_future(run("Deploy to prod.", run_id="wrong-run"))
    await _pending_becomes("wrong-run", [DEPLOY_CALL])
    with pytest.raises(UsageError, match=r"no pending call of run 'wrong-run' has id 'nope' "):
        await send_decisions("wrong-run", {"nope": Approve()})
    with pytest.raises(UsageError, match="must be Approve"):
        await send_decisions("wrong-run", {DEPLOY_CALL: "yes"})  # type: ignore[dict-item]
    with pytest.raises(UsageError, match="no decision given"):
        await send_decisions("wrong-run", {})
    with pytest.raises(UsageError, match="no run with id 'ghost'"):
        await send_decisions("ghost", {DEPLOY_CALL: Approve()})
    client = Client(db)  # the same checks from a process that runs no agent
    try:
        assert client.status("wrong-run").pending == await pending("wrong-run")
        with pytest.raises(UsageError, match=r"has id 'nope' \(pending: call_deploy\)"):
            client.send_decisions("wrong-run", {"nope": Deny("no")})
        with pytest.raises(UsageError, match="no run with id 'ghost'"):
            client.send_decisions("ghost", {DEPLOY_CALL: Approve()})
    finally:
        client.close()
    assert not task.done()
    assert _lines(side) == ["check prod"]
    await send_decisions("wrong-run", {DEPLOY_CALL: Approve()})
    result = await asyncio.wait_for(task, SAFETY_SECONDS)
    assert result.state == State.DONE
    with pytest.raises(UsageError, match="'wrong-run' is not awaiting approval"):
        await send_decisions("wrong-run", {DEPLOY_CALL: Approve()})
    assert _lines(side) == ["check prod", "deploy prod"]


def test_a_negative_approval_timeout_is_refused() -> None:
    with pytest.raises(UsageError, match="approval_timeout_seconds must be 0 or more"):
        asyncio.run(run("Go.", approval_timeout_seconds=-1))


async def test_calls_before_launch_say_to_launch_first() -> None:
    """Without `launch` in this process the module's functions refuse with a UsageError that
    says what to do (not DBOS's own "No DBOS was created yet")."""
    from statemachine_agent import Approve, UsageError
    from statemachine_agent import durable as d
    from statemachine_agent.durable._state import process

    assert process.factory is None  # no fixture launched DBOS here
    for call in (
        lambda: d.run("go"),
        lambda: d.pending("run-1"),
        lambda: d.send_decisions("run-1", {"c1": Approve()}),
        lambda: d.abort("run-1"),
    ):
        with pytest.raises(UsageError, match=r"launch\(\.\.\.\) first"):
            await call()


# -- issue 32: a run's counts across decisions and a worker restart ------------------------------


def _in_process_limited() -> tuple[RunResult, int]:
    """`limited_approval_agent` deferring, then approved, in one process: the last result and
    the requests its model got."""
    from durable_agents import limited_approval_agent

    agent = limited_approval_agent()
    first = agent.run_sync("Deploy to prod.")
    assert first.state == State.AWAITING_APPROVAL
    return agent.run_sync(decisions={DEPLOY_CALL: Approve()}), first.counts.requests


def test_a_restarted_worker_keeps_the_runs_counts_and_does_not_send_r2_past_max_requests(
    tmp_path: Path, side: Path
) -> None:
    """Worker 1 runs R1 and waits for a decision; it is killed; worker 2 (the same executor id)
    recovers the run; another process approves: max_requests=1 was used by R1, so the run stops
    before R2, with the turns and error of the same flow in one process."""
    import os
    import signal
    import subprocess

    from worker_process import cli, start_worker

    db = f"sqlite:///{tmp_path / 'runs.sqlite'}"
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(HERE), env.get("PYTHONPATH", "")])
    factory_options = ("--factory", "durable_agents:limited_approval_agent")
    run_id = "limited-run"

    first = start_worker(db, "limited-worker", env, *factory_options)
    try:
        submitted = subprocess.run(
            cli("submit", "--db", db, "--id", run_id, "Deploy to prod."),
            env=env,
            capture_output=True,
            text=True,
            timeout=SAFETY_SECONDS,
        )
        assert submitted.returncode == 0, submitted.stderr
        client = Client(db)
        try:
            deadline = time.monotonic() + SAFETY_SECONDS
            while not client.status(run_id).pending:
                assert first.poll() is None, first.communicate()
                assert time.monotonic() < deadline, "the run never reached awaiting_approval"
                time.sleep(0.05)
        finally:
            client.close()
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=SAFETY_SECONDS)
    finally:
        first.kill()
        first.wait()
    assert _lines(side) == ["request", "check prod"]

    second = start_worker(db, "limited-worker", env, *factory_options)  # recovers the run
    try:
        client = Client(db)
        try:
            client.send_decisions(run_id, {DEPLOY_CALL: Approve()})
            result = client.result(run_id, timeout_seconds=SAFETY_SECONDS)
        finally:
            client.close()
    finally:
        second.send_signal(signal.SIGTERM)
        second.wait(timeout=SAFETY_SECONDS)

    side.unlink()  # the in-process flow logs to the same file
    expected, _ = _in_process_limited()
    assert _lines(side) == ["request", "check prod", "deploy prod"]  # one request there too
    assert result.state == expected.state == State.MAX_TURNS
    assert (result.turns, result.error) == (expected.turns, expected.error)
    assert expected.error is not None
    assert "the usage limit max_requests=1 was reached: 1 used" in expected.error
    assert_valid_history(result.messages)


async def test_a_durable_run_decided_at_its_turn_cap_stops_as_in_process(
    factory: Factory, side: Path
) -> None:
    """A durable run's decided part is the same run: it keeps counting its turns, as
    ``agent.run(decisions=...)`` does."""

    def capped() -> Agent:
        agent = approval_agent()
        agent.max_turns = 1
        return agent

    in_process = capped()
    await in_process.run("Deploy to prod.")
    expected = await in_process.run(decisions={DEPLOY_CALL: Approve()})

    factory.build = capped
    task = asyncio.ensure_future(run("Deploy to prod.", run_id="capped-run"))
    await _pending_becomes("capped-run", [DEPLOY_CALL])
    await send_decisions("capped-run", {DEPLOY_CALL: Approve()})
    got = await asyncio.wait_for(task, SAFETY_SECONDS)
    assert (got.state, got.turns, got.error) == (expected.state, expected.turns, expected.error)
    assert got.state == State.MAX_TURNS and got.turns == 1
    assert expected.error is not None
    assert expected.error.startswith("Stopped after 1 turn(s): the max_turns limit (1) was")
