"""The users' stateful kit with automatic compaction on (issue 13, deliverable 4): a user's state
machine runs with ``compaction=kit_compaction()``, compactions happen, and every one is checked
as it happens; a compaction bug put in by hand is caught with a short shrunk example."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import pytest
from hypothesis import settings
from hypothesis.stateful import run_state_machine_as_test
from kit_find import FIND as BASE_FIND
from kit_find import kit_failure

from statemachine_agent import (
    Agent,
    Allow,
    AssistantMessage,
    Compaction,
    Deny,
    LoopData,
    Message,
    State,
    ToolCallInfo,
    ToolResultMessage,
    TurnInfo,
    UserMessage,
)
from statemachine_agent.session import SUMMARY_PREFIX
from statemachine_agent.testing import (
    AgentKit,
    CompactionWatch,
    Declared,
    agent_state_machine,
    kit_compaction,
    produced_messages,
)
from statemachine_agent.testing.steps import call, text_response, tool_response

# A hypothesis search (and shrink) is CPU bound: seconds alone, minutes on a loaded 2-core
# machine. The timeout only catches a hang; no behaviour here depends on time.
pytestmark = pytest.mark.timeout(900)

FIND = settings(BASE_FIND, max_examples=60)


# -- a user's agent and hooks, with compaction on ----------------------------------------------


def users_agent(kit: AgentKit) -> Agent:
    """A user's agent: a before hook that rewrites lookups, a should_continue hook and a guard."""

    def one_key(info: ToolCallInfo) -> Allow | None:
        return Allow({"key": "a"}) if info.tool.name == "lookup" else None

    def keep_going(info: TurnInfo) -> bool:
        return info.turn < 4

    def few_continuations(data: LoopData) -> bool:
        return data.continuations < 2

    agent = kit.agent(before_tool_call=one_key, should_continue=keep_going, max_turns=6)
    agent.machine.add_guard("model_replied", State.AWAITING_MODEL, few_continuations)
    return agent


def declared_agent(kit: AgentKit) -> Agent:
    """A user's agent with hooks described to the oracle: writes are denied."""

    def no_writes(info: ToolCallInfo) -> Deny | None:
        return Deny("writes are not allowed here") if info.tool.name == "write" else None

    return kit.agent(before_tool_call=no_writes, max_turns=5)


@pytest.mark.parametrize(
    ("factory", "declared", "compaction"),
    [
        (users_agent, None, kit_compaction()),
        (
            declared_agent,
            Declared(before=lambda name, args: "deny" if name == "write" else "allow"),
            kit_compaction(),
        ),
        (users_agent, None, kit_compaction(keep_recent_turns=1)),
    ],
    ids=["hooks", "declared_to_the_oracle", "hooks_keeping_one_turn"],
)
def test_a_users_state_machine_with_compaction_on_compacts_and_keeps_every_invariant(
    factory: Any, declared: Declared | None, compaction: Compaction
) -> None:
    produced: list[int] = []

    def check(agent: Agent) -> None:  # the user's own check sees what the runs left
        messages = produced_messages(agent)
        assert all(not m.text.startswith(SUMMARY_PREFIX) for m in messages if m.role == "user")
        produced.append(len(messages))

    machine = agent_state_machine(
        factory, check=check, declared=declared, compaction=compaction, name="Compacting"
    )
    run_state_machine_as_test(machine, settings=FIND)
    assert machine.compaction == compaction
    assert machine.compactions > 0  # the runs compacted: the checks above were not vacuous
    assert produced


def test_the_kits_compaction_is_off_unless_asked_for() -> None:
    machine = agent_state_machine(name="NotCompacting")
    run_state_machine_as_test(machine, settings=settings(FIND, max_examples=5))
    assert machine.compaction is None and machine.compactions == 0


# -- a compaction bug put in by hand is caught ---------------------------------------------------


def _unchecked(
    messages: Sequence[Message], summary: str, *, start: int, held: bool = False
) -> list[Message]:
    """`compact_history` without its own protocol check (so the kit's check is what catches)."""
    return [UserMessage(SUMMARY_PREFIX + summary), *messages[start:]]


def cuts_between_a_call_and_its_result(monkeypatch: pytest.MonkeyPatch) -> None:
    """The kept window starts one message late when that lands on a tool result: the call is
    summarized away and its result kept."""
    right = Compaction.kept_start

    def kept_start(self: Compaction, messages: Sequence[Message], window: int | None = None) -> int:
        start = right(self, messages, window)
        if 0 < start < len(messages) - 1 and isinstance(messages[start + 1], ToolResultMessage):
            return start + 1
        return start

    monkeypatch.setattr(Compaction, "kept_start", kept_start)
    monkeypatch.setattr("statemachine_agent._cuts.compact_history", _unchecked)


def drops_a_tool_result(monkeypatch: pytest.MonkeyPatch) -> None:
    """The compacted history loses the first tool result of the kept window."""

    def compact_history(
        messages: Sequence[Message], summary: str, *, start: int, held: bool = False
    ) -> list[Message]:
        kept = list(messages[start:])
        results = [i for i, m in enumerate(kept) if isinstance(m, ToolResultMessage)]
        if results:
            del kept[results[0]]
        return [UserMessage(SUMMARY_PREFIX + summary), *kept]

    monkeypatch.setattr("statemachine_agent._cuts.compact_history", compact_history)


def cuts_inside_a_turn(monkeypatch: pytest.MonkeyPatch) -> None:
    """The cut lands on the first response after the prompt (the prompt is summarized away, its
    response kept): a valid history, but not a turn boundary, so only the cut check catches it."""
    right = Compaction.kept_start

    def kept_start(self: Compaction, messages: Sequence[Message], window: int | None = None) -> int:
        start = right(self, messages, window)
        later = messages[start + 1] if 0 < start < len(messages) - 1 else None
        if messages[start].role == "user" and isinstance(later, AssistantMessage):
            return start + 1
        return start

    monkeypatch.setattr(Compaction, "kept_start", kept_start)
    monkeypatch.setattr("statemachine_agent._cuts.compact_history", _unchecked)


@pytest.mark.parametrize(
    ("plant", "expected"),
    [
        (cuts_between_a_call_and_its_result, "is not a turn boundary"),
        (drops_a_tool_result, "the kept window is not the old history's tail"),
        (cuts_inside_a_turn, "is not a turn boundary"),
    ],
    ids=["cut_between_call_and_result", "dropped_tool_result", "cut_inside_a_turn"],
)
def test_the_kit_with_compaction_catches_a_planted_compaction_bug(
    monkeypatch: pytest.MonkeyPatch, plant: Any, expected: str
) -> None:
    plant(monkeypatch)
    machine = agent_state_machine(compaction=kit_compaction(), name="BrokenCompaction")
    report, _example = kit_failure(machine, FIND)
    assert re.search(r"compaction \d+: ", report), report  # caught at the compaction itself
    assert expected in report, report


# -- the watch on its own ----------------------------------------------------------------------


async def test_the_watch_reports_each_compaction_and_what_a_run_added_through_them() -> None:
    from statemachine_agent.models import ScriptedModel

    def lookup(q: str) -> str:
        """Look something up.

        Args:
            q: what to look up.
        """
        return f"found {q}"

    steps = [tool_response(call("lookup", {"q": f"q{n}"}, id=f"c{n}")) for n in range(1, 6)]
    agent = Agent(
        ScriptedModel([*steps, text_response("done")]),
        tools=[lookup],
        compaction=Compaction(threshold=2, keep_recent_turns=2, summarize=lambda old: "s"),
    )
    watch = CompactionWatch(agent)
    agent.subscribe(watch)
    result = await agent.run("look up five things")
    assert result.state == State.DONE
    # before requests 4, 5 and 6 the history holds 3 turns; the oldest is cut each time
    assert watch.cuts == [3, 3, 3]
    assert watch.problems == []
    added = watch.added_since(0)
    assert added[0] == UserMessage("look up five things")
    roles = [m.role for m in added]
    assert roles == ["user", *(["assistant", "tool_result"] * 5), "assistant"]
    assert [m.tool_call_id for m in added if isinstance(m, ToolResultMessage)] == [
        f"c{n}" for n in range(1, 6)
    ]
