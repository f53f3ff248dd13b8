"""Issue 37, item 3: the parent's session log records the child's run inline (``child`` lines
tagged with the call id), so replay, check and resume work on the whole tree, and a crash
mid-child resumes with the protocol kept at both levels."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from click.testing import CliRunner

from statemachine_agent import Agent, State, ToolResultMessage
from statemachine_agent.cli import main
from statemachine_agent.models import ScriptedModel
from statemachine_agent.session import read_session
from statemachine_agent.session._check import check_session
from statemachine_agent.testing import assert_valid_history
from statemachine_agent.testing.steps import text_response

from .subagent_helpers import orchestrator, researcher


def _lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


async def _logged_tree(tmp_path: Path) -> tuple[Path, Agent, Agent]:
    path = tmp_path / "tree.jsonl"
    child = researcher()
    parent = orchestrator(child, session=path)
    result = await parent.run("go")
    assert result.state is State.DONE
    parent.close()
    return path, parent, child


async def test_the_parents_log_holds_the_childs_run_inline_tagged_with_the_call(
    tmp_path: Path,
) -> None:
    path, _parent, _child = await _logged_tree(tmp_path)
    lines = _lines(path)
    nested = [line for line in lines if line["type"] == "child"]
    assert nested and all(line["call_id"] == "p1" for line in nested)
    assert all(line["tool_name"] == "research" for line in nested)
    assert next(line["record"]["type"] for line in nested) == "run_start"
    assert nested[-1]["record"]["type"] == "run_end"
    # the child's lines sit between the parent's start of call p1 and its result
    types = [(line["type"], line.get("call_id")) for line in lines]
    start = types.index(("tool_start", "p1"))
    first = next(i for i, line in enumerate(lines) if line["type"] == "child")
    result = next(
        i
        for i, line in enumerate(lines)
        if line["type"] == "tool_result" and line["message"]["tool_call_id"] == "p1"
    )
    assert start < first and max(i for i, x in enumerate(lines) if x["type"] == "child") < result


async def test_reading_the_log_gives_both_histories(tmp_path: Path) -> None:
    path, parent, child = await _logged_tree(tmp_path)
    data = read_session(path)
    assert data.messages == parent.messages  # the child's lines are not the parent's history
    assert set(data.children) == {"p1"}
    assert data.children["p1"].messages == child.messages
    assert data.children["p1"].state is State.DONE
    assert data.notes == []


async def test_check_is_clean_on_a_logged_tree(tmp_path: Path) -> None:
    path, _parent, _child = await _logged_tree(tmp_path)
    _data, problems = check_session(path)
    assert problems == []


def _cut_inside_the_child(path: Path, into: Path) -> None:
    """What a crash while the child's tool ran leaves: the lines up to the child's tool start."""
    lines = path.read_text().splitlines(keepends=True)
    cut = next(
        i
        for i, line in enumerate(lines)
        if (body := json.loads(line))["type"] == "child" and body["record"]["type"] == "tool_start"
    )
    into.write_text("".join(lines[: cut + 1]))


async def test_a_crash_mid_child_is_reported_by_check_at_both_levels(tmp_path: Path) -> None:
    path, _parent, _child = await _logged_tree(tmp_path)
    crashed = tmp_path / "crashed.jsonl"
    _cut_inside_the_child(path, crashed)
    _data, problems = check_session(crashed)
    assert any(p.startswith("call 'p1' (research) has no recorded result") for p in problems)
    assert any(
        p.startswith("sub-agent run of call 'p1': call 'c1' (lookup) has no recorded result")
        for p in problems
    )


async def test_resume_after_a_crash_mid_child_keeps_the_protocol_at_both_levels(
    tmp_path: Path,
) -> None:
    path, _parent, _child = await _logged_tree(tmp_path)
    crashed = tmp_path / "crashed.jsonl"
    _cut_inside_the_child(path, crashed)
    research = researcher().as_tool("research", "Research a topic.")
    resumed = Agent.resume(
        crashed, model=ScriptedModel([text_response("Recovered.")]), tools=[research]
    )
    assert resumed.state is State.ABORTED
    p1 = next(
        m for m in resumed.messages if isinstance(m, ToolResultMessage) and m.tool_call_id == "p1"
    )
    assert p1.is_error is True
    assert_valid_history(resumed.messages)
    result = await resumed.run()
    assert result.state is State.DONE
    resumed.close()
    data, problems = check_session(crashed)
    assert problems == []  # the child's open call and run were closed in the log too
    assert_valid_history(data.children["p1"].messages)
    assert data.children["p1"].state is State.ABORTED


async def test_replay_shows_the_childs_run_indented_under_its_call(tmp_path: Path) -> None:
    path, _parent, _child = await _logged_tree(tmp_path)
    out = CliRunner().invoke(main, ["replay", str(path)])
    assert out.exit_code == 0, out.output
    assert "┌ sub-agent research [p1]" in out.output
    assert "    │   ← ✓ lookup facts about otters  [c1]" in out.output
    indented = [line for line in out.output.splitlines() if line.startswith("    │ ")]
    assert any("Otters hold hands." in line for line in indented)
