"""MCP tools under the loop's own machinery, as local tools are: permission hooks,
``requires_approval``, write queues (``resource=``), the session log and its resume, and the
bubblewrap sandbox; against the real demo server (tests/mcp/servers/demo_server.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from mcp_servers import calls, results, stdio_server, text

from statemachine_agent import (
    Agent,
    Approve,
    Deny,
    State,
    ToolCallInfo,
    ToolResultMessage,
)
from statemachine_agent.models import ScriptedModel
from statemachine_agent.session import read_session
from statemachine_agent.workspace import Sandbox, check_sandbox


def answer(text: str = "done") -> dict[str, Any]:
    return {"content": [{"type": "text", "text": text}], "stop_reason": "end_turn"}


async def test_before_tool_call_deny_keeps_an_mcp_call_from_reaching_the_server(
    tmp_path: Path,
) -> None:
    target = tmp_path / "denied.txt"
    seen: list[str] = []

    def guard(info: ToolCallInfo) -> Deny | None:
        seen.append(info.tool.name)
        return Deny("writes are not allowed here") if info.tool.name == "write" else None

    model = ScriptedModel(
        [calls(("write", {"path": str(target), "text": "x"}), ("add", {"a": 1, "b": 2})), answer()]
    )
    async with Agent(model, tools=[stdio_server()], before_tool_call=guard) as agent:
        result = await agent.run("go")
    assert result.state is State.DONE
    write, add = results(result)
    assert write.is_error and "writes are not allowed here" in text(write)
    assert (add.is_error, text(add)) == (False, "3")
    assert seen == ["write", "add"]
    assert not target.exists()  # the server never got the call


async def test_requires_approval_holds_an_mcp_call_until_approved_then_the_server_runs_it(
    tmp_path: Path,
) -> None:
    target = tmp_path / "approved.txt"
    model = ScriptedModel([calls(("write", {"path": str(target), "text": "ok"})), answer()])
    async with Agent(model, tools=[stdio_server(requires_approval=True)]) as agent:
        waiting = await agent.run("go")
        assert waiting.state is State.AWAITING_APPROVAL
        (pending,) = waiting.pending
        assert pending.tool_name == "write"
        assert not target.exists()  # nothing ran before the decision
        result = await agent.run(decisions={pending.id: Approve()})
    assert result.state is State.DONE
    (write,) = [m for m in result.messages if isinstance(m, ToolResultMessage)]
    assert (write.is_error, text(write)) == (False, "written")
    assert target.read_text() == "ok"


async def test_mcp_calls_on_one_resource_run_one_at_a_time_in_declaration_order(
    tmp_path: Path,
) -> None:
    target = tmp_path / "queue.txt"
    other = tmp_path / "other.txt"
    batch = calls(
        ("slow_append", {"path": str(target), "text": "a"}),
        ("slow_append", {"path": str(other), "text": "x"}),
        ("slow_append", {"path": str(target), "text": "b"}),
    )
    model = ScriptedModel([batch, answer()])
    async with Agent(model, tools=[stdio_server(resource="path")]) as agent:
        result = await agent.run("go")
    assert [text(r) for r in results(result)] == ["appended"] * 3
    # The two calls on queue.txt ran in turn, in declaration order, each alone on its path
    # (the server writes each call's text and how many calls on its path overlapped it).
    assert target.read_text() == "a1b1"
    assert other.read_text() == "x1"


async def test_the_session_log_holds_mcp_calls_and_results_and_a_resumed_agent_calls_on(
    tmp_path: Path,
) -> None:
    log = tmp_path / "session.jsonl"
    first = ScriptedModel([calls(("add", {"a": 2, "b": 2})), answer("four")])
    async with Agent(first, tools=[stdio_server()], session=log) as agent:
        assert (await agent.run("add")).state is State.DONE
    data = read_session(log)
    (call,) = [c for m in data.messages for c in getattr(m, "tool_calls", [])]
    (logged,) = [m for m in data.messages if isinstance(m, ToolResultMessage)]
    assert (call.name, call.input) == ("add", {"a": 2, "b": 2})
    assert (logged.tool_call_id, text(logged), logged.is_error) == (call.id, "4", False)
    second = ScriptedModel([calls(("echo", {"text": "again"})), answer("echoed")])
    resumed = Agent.resume(log, model=second, tools=[stdio_server()])
    async with resumed:
        assert [m.role for m in resumed.messages][:4] == [
            "user",
            "assistant",
            "tool_result",
            "assistant",
        ]
        result = await resumed.run("echo")
    assert result.state is State.DONE
    (echo,) = results(result)
    assert text(echo) == "again"
    replayed = read_session(log)
    assert [text(m) for m in replayed.messages if isinstance(m, ToolResultMessage)] == [
        "4",
        "again",
    ]


async def test_a_resumed_agent_runs_an_approved_mcp_call_held_in_its_session_log(
    tmp_path: Path,
) -> None:
    log, target = tmp_path / "session.jsonl", tmp_path / "approved.txt"
    first = ScriptedModel([calls(("write", {"path": str(target), "text": "ok"}))])
    async with Agent(first, tools=[stdio_server(requires_approval=True)], session=log) as agent:
        waiting = await agent.run("go")
    assert waiting.state is State.AWAITING_APPROVAL
    (pending,) = waiting.pending
    # A new process's agent: not entered (`async with`), so its server's tools are not listed
    # yet when the decided call runs; the run lists them first.
    resumed = Agent.resume(log, model=ScriptedModel([answer()]), tools=[stdio_server()])
    try:
        result = await resumed.run(decisions={pending.id: Approve()})
    finally:
        await resumed.aclose()
    assert result.state is State.DONE
    (write,) = results(result)
    assert (write.is_error, text(write)) == (False, "written")
    assert target.read_text() == "ok"


@pytest.mark.skipif(
    check_sandbox(Sandbox(mode="auto"), warn=False).bwrap is None,
    reason="bubblewrap cannot run here (not installed or no user namespaces)",
)
async def test_a_sandboxed_stdio_server_runs_and_cannot_write_outside_its_workspace(
    tmp_path: Path,
) -> None:
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    inside, outside = workspace / "inside.txt", tmp_path / "outside.txt"
    server = stdio_server(cwd=workspace, sandbox=Sandbox(mode="require"))
    model = ScriptedModel(
        [
            calls(
                ("write", {"path": str(inside), "text": "in"}),
                ("write", {"path": str(outside), "text": "out"}),
            ),
            answer(),
        ]
    )
    async with Agent(model, tools=[server]) as agent:
        result = await agent.run("go")
    assert result.state is State.DONE
    wrote, refused = results(result)
    assert (wrote.is_error, text(wrote)) == (False, "written")
    assert inside.read_text() == "in"
    assert refused.is_error and "Read-only file system" in text(refused)
    assert not outside.exists()
