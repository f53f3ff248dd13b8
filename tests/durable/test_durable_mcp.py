"""A durable run whose MCP calls are DBOS steps: the worker is SIGKILLed while an MCP call is in
flight (a real stdio server, tests/mcp/servers/demo_server.py), then relaunched. The recovered
run follows the idempotency rule: the completed MCP call is not sent again (its recorded step
is replayed); the call in flight is answered "no result recorded..." unless the server was
declared ``idempotent=True``, or its tool is annotated ``idempotentHint`` by the server (and the
server option does not say ``idempotent=False``), when it is sent again.

``python test_durable_mcp.py DB RUN_ID`` is the worker process of the test."""

from __future__ import annotations

import asyncio
import json
import os
import select
import signal
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("dbos", reason="the durable tests need the dbos extra")
pytest.importorskip("mcp", reason="the MCP tests need the mcp extra")

from statemachine_agent import Agent, State, ToolResultMessage
from statemachine_agent.durable import decode_result
from statemachine_agent.models import FunctionModel
from statemachine_agent.testing import assert_valid_history

HERE = Path(__file__).resolve()
SERVER = HERE.parent.parent / "mcp" / "servers" / "demo_server.py"
SAFETY_SECONDS = 120.0  # only ends a hung wait; nothing is asserted about time
FINAL = "Both marks are in."
NO_RESULT_START = "no result recorded"


def _model(messages: list[object], request: object) -> object:
    if not any(isinstance(m, ToolResultMessage) for m in messages):
        side = os.environ["SMA_SIDE_FILE"]
        return {
            "content": [
                {"type": "tool_use", "id": "call_fast", "name": "mark",
                 "input": {"path": side, "text": "fast"}},
                {"type": "tool_use", "id": "call_slow", "name": "mark",
                 "input": {"path": side, "text": "slow"}},
            ],
            "stop_reason": "tool_use",
        }  # fmt: skip
    return FINAL


def mcp_agent() -> Agent:
    """The demo server's ``mark`` twice, one call after the other (so the first call's step is
    recorded before the second starts)."""
    from statemachine_agent.mcp import MCPServer

    names = ("DEMO_HANG", "DEMO_SIGNAL", "DEMO_IDEMPOTENT_HINT")
    passed = {k: os.environ[k] for k in names if k in os.environ}
    server = MCPServer.stdio(
        sys.executable,
        [str(SERVER)],
        name="demo",
        env=passed,
        idempotent={"1": True, "0": False}.get(os.environ.get("SMA_MCP_IDEMPOTENT", "0")),
    )
    return Agent(FunctionModel(_model), tools=[server], tool_execution="sequential")


async def _worker(db: str, run_id: str) -> None:
    from statemachine_agent.durable import encode_result, launch, run, shutdown

    await launch(db, mcp_agent, executor_id="mcp-crash-worker", poll_seconds=0.1)
    try:
        result = await run("Mark twice.", run_id=run_id)
        print(json.dumps(encode_result(result)), flush=True)
    finally:
        shutdown()


def _env(
    side: Path, *, idempotent: bool | None, fifo: Path | None, hint: bool = False
) -> dict[str, str]:
    """The worker's environment; ``idempotent`` None leaves the server option unset (the
    server's ``idempotentHint`` decides), ``hint`` makes the server annotate ``mark`` so."""
    env = dict(os.environ)
    env["SMA_SIDE_FILE"] = str(side)
    env["SMA_MCP_IDEMPOTENT"] = {True: "1", False: "0", None: "hint"}[idempotent]
    env["DEMO_IDEMPOTENT_HINT"] = "1" if hint else "0"
    env["DEMO_HANG"] = "1" if fifo is not None else "0"
    env.pop("DEMO_SIGNAL", None)
    if fifo is not None:
        env["DEMO_SIGNAL"] = str(fifo)
    return env


def _read_line(fd: int) -> str:
    """One line from the FIFO (waiting for the server to write it)."""
    line = b""
    while not line.endswith(b"\n"):
        ready, _, _ = select.select([fd], [], [], SAFETY_SECONDS)
        assert ready, "the server never wrote its mark"
        line += os.read(fd, 1)
    return line.decode().strip()


def _kill_and_recover(
    tmp_path: Path, idempotent: bool | None, hint: bool = False
) -> tuple[list[str], ToolResultMessage]:
    """Kill the worker while ``slow``'s MCP call is in flight, relaunch it; the side file's
    lines and ``slow``'s answer (after checking what holds in every case)."""
    db = f"sqlite:///{tmp_path / 'runs.sqlite'}"
    side, fifo = tmp_path / "marks.txt", tmp_path / "marks.fifo"
    os.mkfifo(fifo)
    listen = os.open(fifo, os.O_RDWR)  # open both ways: neither side blocks on opening it
    worker = subprocess.Popen(
        [sys.executable, str(HERE), db, "mcp-run"],
        env=_env(side, idempotent=idempotent, fifo=fifo, hint=hint),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        # The calls run one after the other: once "slow" is marked, fast's step is recorded
        # and slow's call is in flight (the server holds it).
        assert [_read_line(listen), _read_line(listen)] == ["fast", "slow"]
        worker.send_signal(signal.SIGKILL)
    finally:
        worker.kill()
        worker.wait()
        os.close(listen)

    relaunch = subprocess.run(
        [sys.executable, str(HERE), db, "mcp-run"],
        env=_env(side, idempotent=idempotent, fifo=None, hint=hint),
        capture_output=True,
        text=True,
        timeout=SAFETY_SECONDS,
    )
    assert relaunch.returncode == 0, relaunch.stderr
    result = decode_result(json.loads(relaunch.stdout.strip().splitlines()[-1]))
    assert (result.state, result.text) == (State.DONE, FINAL)
    answers = {m.tool_call_id: m for m in result.messages if isinstance(m, ToolResultMessage)}
    fast, slow = answers["call_fast"], answers["call_slow"]
    assert (fast.is_error, fast.content[0].text) == (False, "marked fast")  # type: ignore[union-attr]
    lines = side.read_text().splitlines()
    assert lines.count("fast") == 1  # the completed MCP call was not sent again
    assert_valid_history(result.messages)
    return lines, slow


@pytest.mark.parametrize("idempotent", [False, True], ids=["not-idempotent", "idempotent"])
def test_a_durable_mcp_call_in_flight_when_the_worker_is_killed_is_recovered_by_the_rule(
    tmp_path: Path, idempotent: bool
) -> None:
    lines, slow = _kill_and_recover(tmp_path, idempotent)
    if idempotent:
        assert lines == ["fast", "slow", "slow"]
        assert (slow.is_error, slow.content[0].text) == (False, "marked slow")  # type: ignore[union-attr]
    else:
        assert lines == ["fast", "slow"]
        assert slow.is_error
        assert slow.content[0].text.startswith(NO_RESULT_START)  # type: ignore[union-attr]


@pytest.mark.parametrize("option", [None, False], ids=["hint-decides", "option-overrides"])
def test_a_tool_the_server_hints_idempotent_is_sent_again_on_recovery_unless_the_option_says_no(
    tmp_path: Path, option: bool | None
) -> None:
    lines, slow = _kill_and_recover(tmp_path, option, hint=True)
    if option is None:  # the server's idempotentHint: the call in flight is sent again
        assert lines == ["fast", "slow", "slow"]
        assert (slow.is_error, slow.content[0].text) == (False, "marked slow")  # type: ignore[union-attr]
    else:  # idempotent=False on the server overrides the hint
        assert lines == ["fast", "slow"]
        assert slow.is_error
        assert slow.content[0].text.startswith(NO_RESULT_START)  # type: ignore[union-attr]


if __name__ == "__main__":
    asyncio.run(_worker(sys.argv[1], sys.argv[2]))
