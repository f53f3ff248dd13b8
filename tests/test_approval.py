"""The cases of issue "A run that waits for a person": deferred calls, decisions, the
``awaiting_approval`` state across processes."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from loop_helpers import REVIEW, review_writes
from loop_helpers import file_tools as make_tools

from statemachine_agent import (
    Agent,
    ApprovalRequested,
    Approve,
    CallDecided,
    Deny,
    PendingCall,
    State,
    StateChanged,
    ToolResultMessage,
    UsageError,
    tool,
)
from statemachine_agent.models import ScriptedModel
from statemachine_agent.session import check_session, read_session
from statemachine_agent.testing import assert_valid_history
from statemachine_agent.testing.steps import call, text_response, tool_response


def case1_script(final: str = "All three done.") -> list[dict[str, Any]]:
    return [
        tool_response(
            call("read", {"path": "a"}, id="r_a"),
            call("write", {"path": "b"}, id="w_b"),
            call("read", {"path": "c"}, id="r_c"),
        ),
        text_response(final),
    ]


def test_deferred_call_waits_then_runs_once_approved() -> None:
    log: list[str] = []
    model = ScriptedModel(case1_script())
    agent = Agent(model, tools=make_tools(log), before_tool_call=review_writes)
    events: list[Any] = []
    agent.subscribe(events.append)
    first = agent.run_sync("Read a, write b, read c")
    assert first.state is State.AWAITING_APPROVAL
    assert sorted(log) == ["read a", "read c"]  # one batch, run at once: no order promised
    assert first.pending == (PendingCall("w_b", "write", {"path": "b"}, REVIEW),)
    assert agent.pending == list(first.pending)
    assert len(model.requests) == 1
    assert [m.role for m in agent.messages] == ["user", "assistant"]  # results held, none sent
    assert any(isinstance(e, ApprovalRequested) for e in events)
    entered = [e.dest for e in events if isinstance(e, StateChanged)]
    assert entered[-1] == "awaiting_approval"

    second = agent.run_sync(decisions={"w_b": Approve()})
    assert second.state is State.DONE
    assert second.text == "All three done."
    assert log[2:] == ["write b"]  # after the reads, which ran in the first run
    assert len(model.requests) == 2
    tail = model.requests[1].messages[-3:]
    assert [m.tool_call_id for m in tail if isinstance(m, ToolResultMessage)] == [
        "r_a",
        "w_b",
        "r_c",
    ]
    assert [m.text for m in tail] == ["contents of a", "wrote b", "contents of c"]
    assert second.pending == ()
    assert any(isinstance(e, CallDecided) and e.decision == "approve" for e in events)
    assert_valid_history(agent.messages)


CHILD = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from statemachine_agent import Agent, Defer, tool
    from statemachine_agent.models import ScriptedModel
    from statemachine_agent.testing.steps import call, text_response, tool_response

    log_path, side = Path(sys.argv[1]), Path(sys.argv[2])

    @tool
    def read(path: str) -> str:
        \"\"\"Read a file.\"\"\"
        with side.open("a") as f:
            f.write(f"read {path}\\n")
        return f"contents of {path}"

    @tool
    def write(path: str) -> str:
        \"\"\"Write a file.\"\"\"
        with side.open("a") as f:
            f.write(f"write {path}\\n")
        return f"wrote {path}"

    def review(info):
        return Defer("writes need review") if info.tool.name == "write" else None

    script = [
        tool_response(
            call("read", {"path": "a"}, id="r_a"),
            call("write", {"path": "b"}, id="w_b"),
            call("read", {"path": "c"}, id="r_c"),
        ),
        text_response("unused"),
    ]
    agent = Agent(ScriptedModel(script), tools=[read, write], before_tool_call=review,
                  session=log_path)
    result = agent.run_sync("Read a, write b, read c")
    print(result.state.value, [c.id for c in result.pending])
    """
)


def test_another_process_denies(tmp_path: Path) -> None:
    log_path, side = tmp_path / "run.jsonl", tmp_path / "side.txt"
    child = tmp_path / "child.py"
    child.write_text(CHILD)
    done = subprocess.run(
        [sys.executable, str(child), str(log_path), str(side)],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "awaiting_approval ['w_b']"
    assert sorted(side.read_text().splitlines()) == ["read a", "read c"]  # ran at once

    log: list[str] = []
    model = ScriptedModel([text_response("b was not written.")])
    agent = Agent.resume(log_path, model=model, tools=make_tools(log))
    assert agent.state is State.AWAITING_APPROVAL
    assert agent.pending == [PendingCall("w_b", "write", {"path": "b"}, REVIEW)]
    result = agent.run_sync(decisions={"w_b": Deny("not today")})
    assert result.state is State.DONE
    assert log == []  # the write never ran (nor did the reads again)
    write_result = next(
        m for m in result.messages if isinstance(m, ToolResultMessage) and m.tool_call_id == "w_b"
    )
    assert write_result.is_error and "not today" in write_result.text
    assert [m.text for m in model.requests[0].messages[-3:]] == [
        "contents of a",
        "Denied: not today",
        "contents of c",
    ]
    agent.close()
    _data, problems = check_session(log_path)
    assert problems == []
    lines = log_path.read_text().count("\n")
    again = Agent.resume(log_path, model=ScriptedModel([]), tools=make_tools(log))
    assert again.messages == result.messages
    again.close()
    assert log_path.read_text().count("\n") == lines  # resuming again adds nothing


def logged_case1_agent(path: Path) -> Agent:
    """The agent of case 1, deferring writes, logging to ``path``."""
    return Agent(
        ScriptedModel(case1_script()),
        tools=make_tools([]),
        before_tool_call=review_writes,
        session=path,
    )


def test_check_accepts_a_log_that_ends_awaiting_approval(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    agent = logged_case1_agent(path)
    assert agent.run_sync("go").state is State.AWAITING_APPROVAL
    agent.close()
    data, problems = check_session(path)
    assert problems == []
    assert [c.id for c in data.pending] == ["w_b"]
    assert [r.tool_call_id for r in data.pending_results] == ["r_a", "r_c"]
    assert read_session(path).repairs == []


def test_deciding_one_call_at_a_time_with_edited_arguments() -> None:
    log: list[str] = []
    script = [
        tool_response(
            call("write", {"path": "x"}, id="w_x"), call("write", {"path": "y"}, id="w_y")
        ),
        text_response("Both written."),
    ]
    model = ScriptedModel(script)
    agent = Agent(model, tools=make_tools(log), before_tool_call=review_writes)
    assert agent.run_sync("write x and y").state is State.AWAITING_APPROVAL
    partial = agent.run_sync(decisions={"w_x": Approve()})
    assert partial.state is State.AWAITING_APPROVAL
    assert [c.id for c in partial.pending] == ["w_y"]
    assert len(model.requests) == 1  # no request while a call is pending
    assert log == ["write x"]
    with pytest.raises(UsageError, match="'w_x'"):
        agent.run_sync(decisions={"w_x": Approve()})  # decided already
    final = agent.run_sync(decisions={"w_y": Approve(arguments={"path": "y2"})})
    assert final.state is State.DONE
    assert log == ["write x", "write y2"]
    assert [m.text for m in model.requests[1].messages[-2:]] == ["wrote x", "wrote y2"]
    assert_valid_history(agent.messages)


def test_a_prompt_while_pending_is_refused() -> None:
    agent = Agent(
        ScriptedModel(case1_script()), tools=make_tools([]), before_tool_call=review_writes
    )
    agent.run_sync("go")
    before = list(agent.messages)
    with pytest.raises(UsageError, match="w_b") as caught:
        agent.run_sync("something else")
    assert "awaiting approval" in str(caught.value)
    with pytest.raises(UsageError, match="no pending call has id 'nope'"):
        agent.run_sync(decisions={"nope": Approve()})
    assert agent.messages == before
    assert agent.state is State.AWAITING_APPROVAL
    assert [c.id for c in agent.pending] == ["w_b"]


def test_abort_while_pending() -> None:
    log: list[str] = []
    model = ScriptedModel([*case1_script(), text_response("Fresh answer.")])
    agent = Agent(model, tools=make_tools(log), before_tool_call=review_writes)
    agent.run_sync("go")
    assert agent.abort("the user left") is True
    assert agent.state is State.ABORTED
    assert agent.pending == []
    result = next(
        m for m in agent.messages if isinstance(m, ToolResultMessage) and m.tool_call_id == "w_b"
    )
    assert result.is_error
    assert result.text == "Not run: the run was aborted while this call was awaiting approval."
    assert_valid_history(agent.messages)
    after = agent.run_sync("Start over")
    assert after.state is State.DONE
    assert_valid_history(model.requests[-1].messages, request=True)
    assert "write b" not in log


def test_terminating_denial_answers_every_pending_call() -> None:
    log: list[str] = []
    script = [
        tool_response(
            call("write", {"path": "x"}, id="w_x"), call("write", {"path": "y"}, id="w_y")
        ),
        text_response("never"),
    ]
    agent = Agent(ScriptedModel(script), tools=make_tools(log), before_tool_call=review_writes)
    agent.run_sync("go")
    result = agent.run_sync(decisions={"w_x": Deny("stop everything", terminate=True)})
    assert result.state is State.ABORTED
    assert log == []
    texts = [m.text for m in result.messages if isinstance(m, ToolResultMessage)]
    assert texts == [
        "Denied: stop everything",
        "Not run: an earlier call of this batch ended the run.",
    ]
    assert_valid_history(result.messages)


def test_a_tool_that_requires_approval_is_deferred_unless_allowed() -> None:
    ran: list[str] = []

    @tool(requires_approval=True)
    def deploy(target: str) -> str:
        """Deploy."""
        ran.append(target)
        return f"deployed {target}"

    script = [tool_response(call("deploy", {"target": "prod"}, id="d1")), text_response("ok")]
    agent = Agent(ScriptedModel(script), tools=[deploy])
    first = agent.run_sync("deploy")
    assert first.state is State.AWAITING_APPROVAL
    assert first.pending[0].reason == "deploy requires approval"
    assert agent.run_sync(decisions={"d1": Approve()}).state is State.DONE
    assert ran == ["prod"]


def test_pending_event_and_state_in_json(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    agent = logged_case1_agent(path)
    agent.run_sync("go")
    agent.close()
    records = [json.loads(line) for line in path.read_text().splitlines()]
    pending = [r for r in records if r["type"] == "pending"]
    assert pending[-1]["calls"] == [
        {"id": "w_b", "tool_name": "write", "arguments": {"path": "b"}, "reason": REVIEW}
    ]
    assert records[-1]["type"] == "run_end" and records[-1]["state"] == "awaiting_approval"


# -- case 6: the CLI -----------------------------------------------------------------------------


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "statemachine_agent", *args],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )


def test_cli_stops_awaiting_approval_and_approve_continues(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    session = tmp_path / "run.jsonl"
    write = {"type": "tool_use", "id": "c1", "name": "write_file"}
    write["input"] = {"path": "out.txt", "content": "written once\n"}  # type: ignore[assignment]
    first = tmp_path / "first.json"
    first.write_text(json.dumps([{"content": [write], "stop_reason": "tool_use"}]))
    done = cli(
        "run", "Write out.txt", "-w", str(ws), "-m", f"script:{first}", "--session", str(session)
    )
    assert done.returncode == 4, done.stdout + done.stderr
    output = " ".join((done.stdout + done.stderr).split())
    assert "Awaiting approval:" in output
    assert "⏸ write_file" in output and "✓ write_file" not in output  # held, not succeeded
    assert 'c1: write_file {"path": "out.txt", "content": "written once\\n"}' in output
    assert f"statemachine-agent approve {session} --call ID" in output
    assert not (ws / "out.txt").exists()

    second = tmp_path / "second.json"
    second.write_text(
        json.dumps(
            [{"content": [{"type": "text", "text": "Wrote it."}], "stop_reason": "end_turn"}]
        )
    )
    done = cli("approve", str(session), "--call", "c1", "-w", str(ws), "-m", f"script:{second}")
    assert done.returncode == 0, done.stdout + done.stderr
    assert (ws / "out.txt").read_text() == "written once\n"
    writes = [
        json.loads(line)
        for line in session.read_text().splitlines()
        if '"tool_result"' in line and '"c1"' in line
    ]
    assert len(writes) == 1  # written once, its result logged once
    _data, problems = check_session(session)
    assert problems == []


def test_json_lists_the_pending_calls(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    steps = [
        {
            "content": [
                {"type": "tool_use", "id": "c9", "name": "run_command", "input": {"command": "ls"}}
            ],
            "stop_reason": "tool_use",
        }
    ]
    script = tmp_path / "s.json"
    script.write_text(json.dumps(steps))
    session = tmp_path / "run.jsonl"
    done = cli(
        "run", "list", "-w", str(ws), "-m", f"script:{script}", "--session", str(session), "--json"
    )
    assert done.returncode == 4, done.stderr
    events = [json.loads(line) for line in done.stdout.splitlines()]
    pending = [e for e in events if e["type"] == "approval_requested"]
    assert pending and pending[0]["calls"][0]["id"] == "c9"
    assert pending[0]["calls"][0]["reason"] == "permission needed to run the command: ls"


def test_the_kit_exercises_deferrals_decisions_and_resumes() -> None:
    """The property kit reaches awaiting_approval, decides (approve, edit, deny, stop), aborts
    while pending and resumes in a new agent, checking the invariants after every step."""
    from hypothesis import Phase, settings
    from hypothesis.stateful import run_state_machine_as_test

    from statemachine_agent.testing import AgentKit, agent_state_machine

    seen: dict[str, int] = {"awaiting": 0, "decided": 0, "approved": 0, "denied": 0, "resumed": 0}
    agents: set[int] = set()

    def build(kit: AgentKit) -> Agent:
        agent = kit.agent()

        def count(event: Any) -> None:
            if isinstance(event, ApprovalRequested):
                seen["awaiting"] += 1
            elif isinstance(event, CallDecided):
                seen["decided"] += 1
                seen["approved" if event.decision == "approve" else "denied"] += 1

        agent.subscribe(count)
        return agent

    def check(agent: Agent) -> None:
        if id(agent) not in agents and agent.state is State.AWAITING_APPROVAL:
            seen["resumed"] += bool(agents)
        agents.add(id(agent))

    machine = agent_state_machine(build, check=check)
    run_state_machine_as_test(
        machine,
        settings=settings(
            max_examples=100,
            stateful_step_count=5,
            derandomize=True,
            deadline=None,
            database=None,
            phases=[Phase.explicit, Phase.generate],
        ),
    )
    assert seen["awaiting"] >= 5, seen
    assert seen["approved"] >= 3 and seen["denied"] >= 2, seen


def test_restore_refuses_pending_calls_that_are_not_in_the_last_message() -> None:
    agent = Agent(
        ScriptedModel(case1_script()), tools=make_tools([]), before_tool_call=review_writes
    )
    agent.run_sync("go")
    fresh = Agent(ScriptedModel([]), tools=make_tools([]))
    with pytest.raises(UsageError, match="not calls of the last message"):
        fresh.restore(
            agent.messages,
            State.AWAITING_APPROVAL,
            pending=([PendingCall("zzz", "write", {}, "x")], []),
        )
    assert fresh.pending == []


def test_abort_while_pending_is_a_whole_run_in_events_and_in_the_log(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    agent = logged_case1_agent(path)
    agent.run_sync("go")
    events: list[Any] = []
    agent.subscribe(events.append)
    assert agent.abort("the user left")
    assert events[0].type == "run_start"
    assert events[-1].type == "run_end" and events[-1].result.state is State.ABORTED
    agent.close()
    _data, problems = check_session(path)
    assert problems == []


def test_approve_all_decides_every_pending_call(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    session = tmp_path / "run.jsonl"
    calls = [
        {
            "type": "tool_use",
            "id": f"c{i}",
            "name": "write_file",
            "input": {"path": f"{n}.txt", "content": n},
        }
        for i, n in ((1, "a"), (2, "b"))
    ]
    first = tmp_path / "first.json"
    first.write_text(json.dumps([{"content": calls, "stop_reason": "tool_use"}]))
    done = cli("run", "Write", "-w", str(ws), "-m", f"script:{first}", "--session", str(session))
    assert done.returncode == 4, done.stdout + done.stderr
    second = tmp_path / "second.json"
    second.write_text(
        json.dumps([{"content": [{"type": "text", "text": "Both."}], "stop_reason": "end_turn"}])
    )
    done = cli("approve", str(session), "--all", "-w", str(ws), "-m", f"script:{second}")
    assert done.returncode == 0, done.stdout + done.stderr
    assert (ws / "a.txt").read_text() == "a" and (ws / "b.txt").read_text() == "b"
