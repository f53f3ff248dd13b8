"""Issue 37, item 4: the live CLI view indents a sub-agent's activity under the parent's call
and keeps the parent's status (state, turn, running calls) its own."""

from __future__ import annotations

import io
from typing import Any

from rich.console import Console

from statemachine_agent import Agent, Event, RunEnd, ToolExecutionEnd, ToolExecutionStart
from statemachine_agent.cli._view import NESTED_INDENT, LiveView
from statemachine_agent.models import ScriptedModel
from statemachine_agent.testing.steps import call, text_response, tool_response

from .subagent_helpers import USAGE, orchestrator, researcher


def _console() -> tuple[Console, io.StringIO]:
    out = io.StringIO()
    return Console(file=out, width=120, color_system=None, force_terminal=False), out


def _rendered(view: LiveView) -> str:
    console, out = _console()
    console.print(view._render())
    return out.getvalue()


def _line(output: str, text: str) -> str:
    return next(line for line in output.splitlines() if text in line)


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" "))


async def test_live_view_indents_a_sub_agents_activity_under_the_parents_call() -> None:
    console, out = _console()
    view = LiveView(console)
    parent = orchestrator(researcher())
    parent.subscribe(view.handle)
    result = await parent.run("go")
    assert result.state.value == "done"
    output = out.getvalue()
    # The parent's own lines stay at the margin, the child's one level in.
    assert _indent(_line(output, "✓ research")) == 0
    assert _indent(_line(output, "Done: otters hold hands.")) == 0
    assert _indent(_line(output, "✓ lookup")) == NESTED_INDENT
    assert _indent(_line(output, "Otters hold hands.")) == NESTED_INDENT
    assert _indent(_line(output, "↳ research (call p1)")) == NESTED_INDENT
    assert "done · 2 turns" in _line(output, "↳ research: ")
    parent_moves = [line for line in output.splitlines() if "→" in line and _indent(line) == 2]
    child_moves = [line for line in output.splitlines() if "→" in line and _indent(line) == 4]
    assert parent_moves and child_moves
    assert len(parent_moves) + len(child_moves) == output.count("→")
    # The tokens count the whole tree, as the parent's counts do.
    assert view.usage == result.counts.usage != result.usage
    assert view.nested == {}


async def test_live_view_keeps_the_parents_state_and_calls_apart_from_a_sub_agents() -> None:
    # The child's call has the same id as the parent's (ids are per run): its end must not end
    # the parent's spinner, and its states, turns and ending must not become the parent's.
    child = researcher(
        [
            tool_response(call("lookup", {"topic": "otters"}, id="p1"), usage=USAGE),
            text_response("Otters hold hands.", usage=USAGE),
        ]
    )
    parent = orchestrator(child)
    console, _out = _console()
    view = LiveView(console)
    parent.subscribe(view.handle)
    seen: dict[str, Any] = {}

    def after_view(event: Event) -> None:  # subscribed after the view: sees it updated
        if event.parent is None:
            return
        if isinstance(event, ToolExecutionStart):
            seen["child call running"] = _rendered(view)
        elif isinstance(event, ToolExecutionEnd):
            seen["after child call"] = (set(view.running), _rendered(view))
        elif isinstance(event, RunEnd):
            seen["after child end"] = (view.state, view.turn)

    parent.subscribe(after_view)
    await parent.run("go")
    live = seen["child call running"]
    assert _indent(_line(live, "research {")) == 0  # the parent's call, at the margin
    assert _indent(_line(live, "lookup {")) >= NESTED_INDENT  # the child's, one level in
    child_status = _line(live, "research  executing_tools")
    assert _indent(child_status) == NESTED_INDENT and "turn 1" in child_status
    running, live = seen["after child call"]
    assert "p1" in running  # the parent's call p1 is still running
    assert "research {" in live
    assert seen["after child end"] == ("executing_tools", 1)


async def test_live_view_indents_a_sub_agents_own_sub_agent_one_level_deeper() -> None:
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
    parent = orchestrator(middle)
    console, out = _console()
    view = LiveView(console)
    parent.subscribe(view.handle)
    await parent.run("go")
    output = out.getvalue()
    assert _indent(_line(output, "✓ research")) == 0
    assert _indent(_line(output, "✓ deeper")) == NESTED_INDENT
    assert _indent(_line(output, "↳ deeper (call m1)")) == 2 * NESTED_INDENT
    assert _indent(_line(output, "✓ lookup")) == 2 * NESTED_INDENT
    assert _indent(_line(output, "Otters hold hands.")) == 2 * NESTED_INDENT
