"""The oracle's sub-agent scenarios (issue 37, item 5): a parent tool that runs a child agent
(``delegate``, `Agent.as_tool`), its result, its usage in the parent's limits, the parent's abort
reaching it, and a session log cut inside the child's run, each predicted and played."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Literal

import pytest
from hypothesis import event, given, settings

from statemachine_agent.testing import (
    Anchor,
    Call,
    Child,
    Cut,
    RunSpec,
    Scenario,
    Step,
    check_scenario,
    compare,
    play,
)
from statemachine_agent.testing._oracle.subagent import ABORTED_CHILD
from statemachine_agent.testing.strategies import Limits, scenarios

DELEGATE = Step("tool_use", (Call("delegate"),))


@settings(max_examples=settings.default.max_examples)
@given(scenario=scenarios(families=("subagent",)))
def test_the_engine_matches_the_oracle_on_sub_agent_scenarios(scenario: Scenario) -> None:
    """The sub-agent family alone (in the main comparison it is one family of several): a
    child that answers, fails or hits its cap, aborted at a tool start inside it, under limits
    it reaches, the log cut inside it or reopened."""
    prediction = check_scenario(scenario)
    for label in sorted(prediction.labels):
        event(label)


ONE_BATCH = Child((Step("tool_use", (Call("job"),)), Step("end_turn")))
"""A child that runs one ``job`` call, then answers (its answer: the parent call's text)."""


def _played(scenario: Scenario, tmp_path: Path) -> tuple[dict[str, tuple[str, str]], list[str]]:
    """Play ``scenario``; (the first run's result texts by call id, the comparison's problems)."""
    obs = asyncio.run(play(scenario, tmp_path))
    problems, _ = compare(scenario, obs)
    return obs.runs[0].texts, problems


@pytest.mark.parametrize("mode", ["parallel", "sequential"])
def test_a_sub_agent_call_is_answered_with_the_childs_final_text(
    mode: Literal["parallel", "sequential"], tmp_path: Path
) -> None:
    scenario = Scenario(
        (RunSpec((Step("tool_use", (Call("job"), Call("delegate"))), Step())),),
        mode=mode,
        child=ONE_BATCH,
    )
    prediction = check_scenario(scenario)
    run = prediction.runs[0]
    assert run is not None
    assert run.results == {"r1_1": {"ok[out-r11]"}, "r1_2": {"ok[out-r12]"}}
    assert run.states == {"done"} and run.requests == {2}
    assert run.tree_requests == 4  # the parent's two requests and the child's two
    assert {"subagent", "subagent_done"} <= prediction.labels
    texts, problems = _played(scenario, tmp_path)
    assert problems == [] and texts["r1_2"] == ("ok[out-r12]", "out-r12")


@pytest.mark.parametrize(
    ("child", "kind", "why"),
    [
        (
            Child((Step("invalid_request"),)),
            "child_failed",
            "Sub-agent 'delegate' ended in state 'failed': Model request failed "
            "(invalid_request_error) after 1 attempt(s): scripted invalid",
        ),
        (
            Child((Step("tool_use", (Call("job"),)), Step("tool_use", (Call("job"),))), 1),
            "child_max_turns",
            "Sub-agent 'delegate' ended in state 'max_turns': Stopped after 1 turn(s): the "
            "max_turns limit (1) was reached.",
        ),
    ],
    ids=["failed", "max_turns"],
)
def test_a_sub_agent_that_fails_or_hits_its_max_turns_gives_an_error_result_naming_its_state(
    child: Child, kind: str, why: str, tmp_path: Path
) -> None:
    scenario = Scenario((RunSpec((DELEGATE, Step())),), child=child)
    prediction = check_scenario(scenario)
    run = prediction.runs[0]
    assert run is not None
    assert run.results == {"r1_1": {kind}} and run.states == {"done"} and run.requests == {2}
    must, must_not = run.fragments["r1_1"][kind]
    assert must[0] == f"Sub-agent 'delegate' ended in state '{kind.removeprefix('child_')}': "
    assert must_not == ["the parent run's limit"]  # no limit of the parent's is reached
    texts, problems = _played(scenario, tmp_path)
    assert problems == []
    assert texts["r1_1"][0] == kind and texts["r1_1"][1].startswith(why)


@pytest.mark.parametrize(
    ("limits", "named"),
    [
        (Limits(max_requests=2), "max_requests=2"),
        (Limits(max_output_tokens=15), "max_output_tokens=15"),
    ],
    ids=["requests", "tokens"],
)
def test_a_limit_reached_inside_the_sub_agent_stops_both_and_says_where(
    limits: Limits, named: str, tmp_path: Path
) -> None:
    # The parent's first response (1 request, 10 output tokens) calls the sub-agent; its
    # first response takes the tree to 2 requests and 20 tokens, and its batch runs (the
    # token limit is exceeded before it: none runs); its next request is over the limit.
    two_batches = Child((Step("tool_use", (Call("job"),)), Step("tool_use", (Call("job"),))))
    scenario = Scenario((RunSpec((DELEGATE, Step())),), limits=limits, child=two_batches)
    prediction = check_scenario(scenario)
    run = prediction.runs[0]
    assert run is not None
    assert run.results == {"r1_1": {"child_max_turns"}}
    # The parent stops at its next check: its second request is never sent.
    assert run.states == {"max_turns"} and run.requests == {1}
    assert {"subagent_limit", "limits"} <= prediction.labels
    texts, problems = _played(scenario, tmp_path)
    assert problems == []
    text = texts["r1_1"][1]
    assert text.startswith("Sub-agent 'delegate' ended in state 'max_turns': Stopped after 1 turn")
    assert f"the usage limit {named} was reached" in text
    assert f"(the parent run's limit: the usage limit {named} was reached" in text
    assert text.endswith("; it stops the parent too)")


@pytest.mark.parametrize("behaviour", ["sleep", "cooperate", "return"])
def test_the_parents_abort_reaches_the_sub_agent_and_every_call_is_answered(
    behaviour: Literal["sleep", "cooperate", "return"], tmp_path: Path
) -> None:
    # The parent is aborted as the child's tool starts: the child ends aborted (its call
    # answered in its own history, checked from its RunEnd), the parent's call says so.
    child = Child((Step("tool_use", (Call("job", behaviour),)), Step("end_turn")))
    scenario = Scenario(
        (RunSpec((DELEGATE, Step()), abort=Anchor("child_tool_start", 1)),),
        grace="realistic",
        child=child,
    )
    prediction = check_scenario(scenario)
    run = prediction.runs[0]
    assert run is not None
    assert run.results == {"r1_1": {"child_aborted", "interrupted"}}
    assert run.states == {"aborted"} and run.requests == {1}
    assert "subagent_abort" in prediction.labels
    obs = asyncio.run(play(scenario, tmp_path))
    assert obs.runs[0].results == [("r1_1", "child_aborted")]
    assert obs.runs[0].texts["r1_1"][1] == ABORTED_CHILD
    assert obs.runs[0].child_problems == [] and obs.runs[0].state == "aborted"


@pytest.mark.parametrize("lines", [10, 6, 14])
def test_a_log_cut_inside_a_sub_agent_run_resumes_with_the_call_answered_at_both_levels(
    lines: int, tmp_path: Path
) -> None:
    # The first run's log has 23 lines, the child's records lines 7-17 (its run_start ... its
    # run_end): cutting 10, 6 or 14 keeps the log up to the child's tool_start, run_end or
    # first message. The resumed parent answers the open call and goes on.
    scenario = Scenario(
        (RunSpec((DELEGATE, Step())), RunSpec((DELEGATE, Step()))),
        cut=Cut(lines),
        child=ONE_BATCH,
    )
    prediction = check_scenario(scenario, tmp_path)
    second = prediction.runs[1]
    assert second is not None
    assert second.results == {"r2_1": {"ok[out-r21]"}} and second.states == {"done"}
    assert {"subagent", "subagent_resume", "resume"} <= prediction.labels
    obs = asyncio.run(play(scenario, tmp_path))
    assert obs.resumed == [
        ("user",),
        ("assistant", "tool_use", ("r1_1",)),
        ("result", "r1_1", "no_result"),
    ]
    assert obs.resumed_state == "aborted"
    assert obs.runs[1].results == [("r2_1", "ok[out-r21]")]


def test_a_log_reopened_after_a_run_with_a_sub_agent_holds_the_parents_history(
    tmp_path: Path,
) -> None:
    # The child's records are inline in the parent's log: reopened whole, the parent holds its
    # own history (the child's run is not part of it) and goes on.
    scenario = Scenario(
        (RunSpec((DELEGATE, Step())), RunSpec((DELEGATE, Step()))), reopen=True, child=ONE_BATCH
    )
    prediction = check_scenario(scenario, tmp_path)
    assert [run.results if run else None for run in prediction.runs] == [
        {"r1_1": {"ok[out-r11]"}},
        {"r2_1": {"ok[out-r21]"}},
    ]
    assert {"subagent", "subagent_reopen", "reopen"} <= prediction.labels
    obs = asyncio.run(play(scenario, tmp_path))
    assert obs.reopen_problems == []
    assert [m.role for m in obs.histories[-1]] == [
        "user",
        "assistant",
        "tool_result",
        "assistant",
    ] * 2
