"""Results addressed by call id, requests after a paused response, new messages after a mid-run
compaction, a reopened log's waiting batch: the oracle's scenario classes for them, each pinned
on one scenario with the values the rules give. (They came from a list of bugs the suite missed:
tools/fresh_bugs.py, bugs 5, 7, 14, 15 and 16.)"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from statemachine_agent import AssistantMessage, ToolCallBlock, ToolResultMessage, UserMessage
from statemachine_agent.testing import (
    Call,
    Input,
    RunSpec,
    Scenario,
    Step,
    check_scenario,
    play,
)
from statemachine_agent.testing._kit import ScriptPlayer
from statemachine_agent.testing._oracle import compare
from statemachine_agent.testing._oracle.requests import expected_request, shown
from statemachine_agent.testing._oracle.scenario_agent import render_step, still_reused

_QUEUED = (Input("follow_up", None, 0), Input("steer", None, 0))
# The explore pass's seed 4155387802 case: the second run's first call is compacted away before
# its reused_id step.
COMPACTED_REUSE = Scenario(
    runs=(
        RunSpec(
            (Step("pause_turn"), Step("tool_use", (Call(),)), Step("end_turn")), inputs=_QUEUED
        ),
        RunSpec(
            (
                Step("tool_use", (Call(),)),
                Step("max_tokens", (Call(tool="write"),)),
                Step("reused_id"),
            ),
            inputs=_QUEUED,
        ),
    ),
    max_tokens_policy="stop",
    compaction=True,
)


def test_a_result_message_built_for_another_call_answers_the_call_it_came_from() -> None:
    """A tool returning a `ToolResultMessage` built with another call's id, and an after hook
    replacing a result with one built so, each answer their own call (bug 5)."""
    scenario = Scenario(
        (RunSpec((Step("tool_use", (Call("job", "message"), Call(after="readdress"))), Step())),)
    )
    obs = asyncio.run(play(scenario))
    run = obs.runs[0]
    results = [m for m in run.new_messages if isinstance(m, ToolResultMessage)]
    assert [(m.tool_call_id, m.tool_name, m.text) for m in results] == [
        ("r1_1", "job", "out-r11"),
        ("r1_2", "job", "after-rewritten r1_2"),
    ]
    problems, prediction = compare(scenario, obs)
    assert problems == []
    assert "readdressed_result" in prediction.labels


def test_every_request_after_a_paused_response_carries_its_content_joined() -> None:
    """A pause_turn response, its continuation (a batch), a final answer: the third request
    holds the paused response's text joined before the continuation's (bug 7)."""
    scenario = Scenario(
        (RunSpec((Step("pause_turn"), Step("tool_use", (Call(),)), Step())),), compaction=False
    )
    obs = asyncio.run(play(scenario))
    sent = obs.runs[0].sent
    assert len(sent) == 3
    assert [shown(m) for m in sent[2][1]] == [
        ("user", "do the task"),
        ("assistant", (("text", "step 1"), ("text", "step 2"), ("call", "r1_1", "job"))),
        ("result", "r1_1", "out-r11", False),
    ]
    assert [shown(m) for m in sent[2][1]] == expected_request(sent[2][0])
    prediction = check_scenario(scenario)
    assert "request_after_pause" in prediction.labels


def test_after_a_mid_run_compaction_new_messages_start_at_the_runs_first_kept_message() -> None:
    """An agent that compacts mid-run: `RunResult.new_messages` is what the run added that the
    compactions kept (never the summary, never an earlier run's message), `messages` the
    history, `usage` its responses' sum (bug 14)."""
    scenario = Scenario(
        (
            RunSpec((Step("tool_use", (Call(),)), Step())),
            RunSpec((Step("tool_use", (Call(),)), Step())),
        ),
        compaction=True,
    )
    obs = asyncio.run(play(scenario))
    second = obs.runs[1]
    # The second run's second request compacts, keeping the newest two turns: the cut (3) is
    # before the run's prompt (4), which moves to 2, just after the summary and the kept
    # answer of the first run.
    assert second.compaction_cuts == [3]
    assert second.result_problems == []
    assert [(m.role, m.text) for m in second.new_messages] == [
        ("user", "do the task"),
        ("assistant", "step 1"),
        ("tool_result", "out-r21"),
        ("assistant", "step 2"),
    ]
    check_scenario(scenario)


def test_a_reopened_log_keeps_the_batch_waiting_and_never_runs_a_finished_call_again(
    tmp_path: Path,
) -> None:
    """A batch of a call that ran and one deferred, the log reopened whole while it waits: the
    resumed agent has the same pending id, the ran call's result is kept (not pending, not run
    again) and the decision applies (bugs 15 and 16)."""
    scenario = Scenario(
        (
            RunSpec((Step("tool_use", (Call(), Call(before="defer"))),)),
            RunSpec((Step(),), prompt=False, decisions=(("r1_2", "approve"),)),
        ),
        grace="realistic",
        reopen=True,
    )
    obs = asyncio.run(play(scenario, tmp_path))
    assert obs.reopen_problems == []
    first, second = obs.runs
    assert first.state == "awaiting_approval" and first.ran == ["r1_1"]
    assert second.ran == ["r1_2"] and second.state == "done"
    assert second.results == [("r1_1", "ok[out-r11]"), ("r1_2", "ok[out-r12]")]
    problems, prediction = compare(scenario, obs)
    assert problems == []
    assert {"reopen", "reopen_awaiting_approval"} <= prediction.labels


def test_a_reopened_log_keeps_a_denied_call_of_a_partly_decided_batch_answered() -> None:
    """Found by the explore pass (seed 1980920301): three deferred calls, the first denied while
    the other two still wait; the log is closed and resumed. The denial's result is held until
    the batch ends, so the log's decision line is its record: the resumed agent must not list
    the denied call as pending again, and approving the other two ends the run ``done``."""

    def deferred_write() -> Call:
        return Call(tool="job", behaviour="return", args="valid", before="defer", key="a")

    scenario = Scenario(
        runs=(
            RunSpec(steps=(Step(kind="tool_use", calls=(deferred_write(),) * 3),)),
            RunSpec(steps=(), prompt=False, decisions=(("r1_1", "deny"),)),
            RunSpec(
                steps=(Step(kind="end_turn"),),
                prompt=False,
                decisions=(("r1_2", "approve"), ("r1_3", "approve")),
            ),
        ),
        reopen=True,
    )
    check_scenario(scenario)


def test_a_reused_id_step_after_a_compaction_reuses_an_id_the_history_still_holds() -> None:
    """Found by the explore pass (seed 4155387802): the second run's first call ``r2_1`` is
    compacted away (a follow-up after a token-limit stop goes on), so a ``reused_id`` step's
    reuse of it is no clash (no id twice in one history sent). The scenario's model reuses an
    id the history still holds instead, and the run fails on it as the oracle predicts: two
    turns, three requests, ``r2_1`` run once."""
    scenario = COMPACTED_REUSE
    obs = asyncio.run(play(scenario))
    second = obs.runs[1]
    assert second.compaction_cuts != []
    assert (second.state, second.turns, second.requests) == ("failed", 2, 3)
    assert second.ran == ["r2_1"]
    problems, prediction = compare(scenario, obs)
    assert problems == []
    assert "reused_id" in prediction.labels


def test_a_reused_id_with_no_call_left_in_the_request_repeats_the_responses_own_call() -> None:
    """`still_reused`: the reused id kept while the request holds it, else the oldest of the
    run's own ids it holds (never another id, such as an earlier run's), else (none left) the
    response's last call repeated, so the response always clashes; a step whose calls are all
    new is left as it is."""
    first = render_step(Step("tool_use", (Call(),)), ("r1_1",), 1, [])

    def holding(call_id: str) -> AssistantMessage:
        return AssistantMessage(content=[ToolCallBlock(id=call_id, name="job", input={})])

    second = render_step(Step("tool_use", (Call(), Call())), ("r1_2", "r1_3"), 2, ["r1_1"])
    step = render_step(Step("reused_id"), (), 3, ["r1_1", "r1_2", "r1_3"])

    def ids(step: dict[str, Any], sent: list[Any]) -> list[str]:
        return [b["id"] for b in still_reused(step, [first, None, second], sent)["content"][1:]]

    assert ids(step, [holding("r1_1")]) == ["r1_1"]
    assert ids(step, [UserMessage("x"), holding("r0_9"), holding("r1_3"), holding("r1_2")]) == [
        "r1_3"
    ]
    assert ids(step, [UserMessage("x"), holding("r0_9")]) == ["r1_1", "r1_1"]
    fresh = render_step(Step("tool_use", (Call(),)), ("r1_4",), 2, ["r1_1"])
    assert still_reused(fresh, [first], [UserMessage("x")]) is fresh


def test_the_kits_script_player_reuses_an_id_the_request_still_holds() -> None:
    """The users' kit plays scenario steps through `ScriptPlayer`, not `ScenarioModel`: the same
    compacting scenario played by it also fails on the reused id as the oracle predicts."""
    obs = asyncio.run(play(COMPACTED_REUSE, model=ScriptPlayer()))
    second = obs.runs[1]
    assert second.compaction_cuts != []
    assert (second.state, second.turns, second.requests, second.ran) == ("failed", 2, 3, ["r2_1"])
    assert compare(COMPACTED_REUSE, obs)[0] == []
