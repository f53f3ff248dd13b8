"""Issue 37, item 3, beyond one level and beyond a crash inside a tool: a grandchild's run is read
back under its own caller's run (not flattened into the parent's), and a resume closes a child
run the crash cut between its calls (no call open, only its run)."""

from __future__ import annotations

import json
from pathlib import Path

from statemachine_agent import Agent, State
from statemachine_agent.models import ScriptedModel
from statemachine_agent.session import read_session
from statemachine_agent.session._check import check_session
from statemachine_agent.testing import assert_valid_history
from statemachine_agent.testing.steps import call, text_response, tool_response

from .subagent_helpers import USAGE, orchestrator, researcher


async def test_a_grandchilds_logged_run_is_read_back_under_its_callers_run(
    tmp_path: Path,
) -> None:
    path = tmp_path / "three.jsonl"
    grandchild = researcher()
    middle = Agent(
        ScriptedModel(
            [
                tool_response(call("deeper", {"prompt": "otters"}, id="m1"), usage=USAGE),
                text_response("Middle: otters hold hands.", usage=USAGE),
            ]
        ),
        tools=[grandchild.as_tool("deeper", "Research deeper.")],
    )
    parent = orchestrator(middle, session=path)
    result = await parent.run("go")
    parent.close()
    assert result.state is State.DONE
    data = read_session(path)
    assert set(data.children) == {"p1"}  # only the parent's own call ran a sub-agent
    child = data.children["p1"]
    assert child.messages == middle.messages
    assert set(child.children) == {"m1"}
    assert child.children["m1"].messages == grandchild.messages
    assert child.children["m1"].state is State.DONE
    assert check_session(path)[1] == []


def _cut_after_the_childs_call(path: Path, into: Path) -> None:
    """What a crash after the child's call was answered, before its next state, leaves."""
    lines = path.read_text().splitlines(keepends=True)
    cut = next(
        i
        for i, line in enumerate(lines)
        if (body := json.loads(line))["type"] == "child" and body["record"]["type"] == "tool_result"
    )
    into.write_text("".join(lines[: cut + 1]))


async def test_resume_closes_a_child_run_cut_between_its_calls(tmp_path: Path) -> None:
    path = tmp_path / "tree.jsonl"
    child = researcher()
    parent = orchestrator(child, session=path)
    assert (await parent.run("go")).state is State.DONE
    parent.close()
    crashed = tmp_path / "crashed.jsonl"
    _cut_after_the_childs_call(path, crashed)
    before = read_session(crashed).children["p1"]
    assert before.run_open and not before.repairs  # the child's run open, none of its calls
    resumed = Agent.resume(
        crashed,
        model=ScriptedModel([text_response("Recovered.")]),
        tools=[researcher().as_tool("research", "Research a topic.")],
    )
    assert resumed.state is State.ABORTED
    resumed.close()
    data, problems = check_session(crashed)
    assert problems == []  # the child's run was closed in the log too
    assert data.children["p1"].state is State.ABORTED
    assert not data.children["p1"].run_open
    assert_valid_history(data.children["p1"].messages)
