"""The engine against the reference model (issue 23): every generated scenario ends as the oracle
predicts (calls run, result kinds, final state, turns, requests), on top of the invariants; the
generators reach every scenario class often enough; case 1 of the issue."""

from __future__ import annotations

import asyncio
import re
from collections import Counter
from typing import Literal

import pytest
from docs.blocks import documentation_text
from hypothesis import HealthCheck, Phase, event, given, seed, settings
from hypothesis import strategies as st

from statemachine_agent import Agent, ToolResultMessage, tool
from statemachine_agent.models import ScriptedModel
from statemachine_agent.testing import (
    Anchor,
    Call,
    RunSpec,
    Scenario,
    Step,
    check_scenario,
    compare,
    play,
    scenario_ids,
)
from statemachine_agent.testing._oracle import oracle_for
from statemachine_agent.testing.strategies import FAMILIES, scenarios

# The comparison is cheap (a few ms per example): five times the profile's examples.
MANY = settings(max_examples=settings.default.max_examples * 5)


@MANY
@given(scenario=scenarios())
def test_the_engine_matches_the_oracle(scenario: Scenario) -> None:
    prediction = check_scenario(scenario)
    for label in sorted(prediction.labels):
        event(label)


@pytest.mark.parametrize("family", sorted(set(FAMILIES) - {"subagent"}))  # its own file
@settings(max_examples=settings.default.max_examples)
@given(data=st.data())
def test_the_engine_matches_the_oracle_family_by_family(family: str, data: st.DataObject) -> None:
    """Each scenario family alone, with the profile's examples: a family the mixed draw above
    reaches rarely (approval decisions, a cooperative tool) is compared on its own examples too,
    not only counted in the seeded share draw below."""
    scenario = data.draw(scenarios(families=(family,)), label="scenario")
    prediction = check_scenario(scenario)
    for label in sorted(prediction.labels):
        event(label)


# Each class at least this share of the generated scenarios (issue 23, deliverable 3).
MINIMUM_SHARES = {
    "abort_inside_batch": 0.10,  # an abort or cancellation landing inside a tool batch
    "truncated_call": 0.10,  # a trailing call cut off by max_tokens
    "raising_hook": 0.10,  # a before_tool_call or after_tool_call hook that raises
    "resume": 0.10,  # a session log cut, resumed, continued
    # Others, with a margin under what the generators reach:
    "timeout": 0.03,
    "cancel": 0.03,
    "cancel_inside_batch": 0.015,  # a task cancellation inside a tool batch (about 2.2% reached)
    "hit_max_turns": 0.05,
    "refusal_with_calls": 0.02,
    "terminating_denial": 0.02,
    "dangling_repair": 0.05,
    "continue": 0.05,
    "terminating_result": 0.02,  # a result marked terminate=True ends the run
    "unknown_stop_with_calls": 0.02,
    "max_tokens_stop_with_calls": 0.03,  # max_tokens_policy="stop" answers the calls
    "steer_injected": 0.05,
    # Issue 40: what each result says, in the scenarios the suite missed.
    "limits": 0.08,  # a scenario with UsageLimits
    "limit_max_requests": 0.01,  # max_requests stopped the run
    "limit_max_tool_calls": 0.02,  # a batch the max_tool_calls limit kept from running
    "limit_batch_crossing": 0.01,  # ... that would cross it with room left (checked per batch)
    "limit_tokens": 0.005,  # a token limit (output or total) stopped the run
    "cooperative_tool": 0.03,  # a tool that stops through ctx.signal.raise_if_aborted()
    "cooperative_aborted": 0.005,  # ... in a batch an abort landed in
    "steer_and_follow_up_queued": 0.05,  # both queued together: steering goes first
    "approval_deferred": 0.04,  # a batch held in awaiting_approval
    "approval_approve": 0.01,
    "approval_edit": 0.01,
    "approval_deny": 0.01,
    "approval_partial": 0.005,  # some decided, the rest still waiting
    "context_window_with_calls": 0.004,  # a context-window stop, its calls answered not run
    # Issue 40, the fresh list's survivors, by kind:
    "readdressed_result": 0.05,  # a tool or after hook returns a result built for another id
    "request_after_pause": 0.005,  # a pause_turn continuation, then a further request
    "compaction": 0.02,  # an agent that compacts mid-run (RunResult checked)
    "reopen": 0.06,  # the session log reopened whole after each run
    "reopen_awaiting_approval": 0.015,  # ... while a batch waits for decisions
    # Issue 37: a tool that runs a child agent (Agent.as_tool), at both levels.
    "subagent": 0.08,  # a delegate call ran its child run
    "subagent_done": 0.03,  # ... which answered: the call's result is its final text
    "subagent_failed": 0.005,  # ... which failed: an error result naming the state and why
    "subagent_max_turns": 0.02,  # ... which hit its own max_turns or a limit
    "subagent_abort": 0.008,  # the parent aborted at a tool start inside the child run
    "subagent_limit": 0.005,  # a usage limit reached inside the child (stops both)
    "subagent_resume": 0.005,  # the log cut (at times inside the child's records), resumed
    "subagent_reopen": 0.004,  # the log reopened whole after a run with a child run
}


def test_every_scenario_class_reaches_its_minimum_share() -> None:
    seen: Counter[str] = Counter()
    total = 0

    # Fixed seeds rather than derandomize=True: derandomized generation repeats near-identical
    # examples in runs, so a share measured on it swings by the strategy's unrelated edits; and
    # three draws pooled, as one draw's examples are not independent either (a class drawn at
    # 3% came out at 1% under one seed after an unrelated edit). `seed` wins over pytest's
    # --hypothesis-seed, so the explore pass draws this same table under any seed: it cannot fail
    # there by chance. A new seed (as after an edit of the strategies) moves the shares far more
    # than independent draws would (hypothesis mutates earlier examples: 1,500 of them spread as
    # 160 to 780 independent ones would, by class): of the 220 triples of 12 random 1,500-example
    # draws, 19 put a class under its minimum (request_after_pause 11, subagent 6, subagent_done 4).
    for draw_seed in (40, 41, 42):

        @seed(draw_seed)
        @settings(
            max_examples=1500,
            database=None,
            phases=[Phase.generate],
            suppress_health_check=list(HealthCheck),
        )
        @given(scenario=scenarios())
        def draw(scenario: Scenario) -> None:
            nonlocal total
            total += 1
            seen.update(oracle_for(scenario).predict(scenario, scenario_ids(scenario)).labels)

        draw()
    shares = {name: seen[name] / total for name in MINIMUM_SHARES}
    print("scenario classes (share, minimum):")
    for name, share in shares.items():
        print(f"  {name:28} {share:6.1%}  >= {MINIMUM_SHARES[name]:.1%}")
    low = {name: f"{share:.0%}" for name, share in shares.items() if share < MINIMUM_SHARES[name]}
    assert not low, f"scenario classes under their minimum share: {low} (all: {shares})"


# -- case 1: a raising call next to a call that times out ---------------------------------------


@tool
def bad() -> str:
    """Raise a ValueError."""
    raise ValueError("bad input: 42")


@tool(timeout_seconds=0.01)
async def slow() -> str:
    """Sleep far longer than the timeout."""
    await asyncio.sleep(5)
    return "never"


@pytest.mark.parametrize("mode", ["parallel", "sequential"])
def test_a_raising_call_next_to_a_timed_out_call_keeps_both_results(
    mode: Literal["parallel", "sequential"],
) -> None:
    model = ScriptedModel(
        [
            {
                "content": [
                    {"type": "tool_use", "id": "v1", "name": "bad", "input": {}},
                    {"type": "tool_use", "id": "t1", "name": "slow", "input": {}},
                ],
                "stop_reason": "tool_use",
            },
            {"content": [{"type": "text", "text": "noted"}], "stop_reason": "end_turn"},
        ]
    )
    agent = Agent(model, tools=[bad, slow], tool_execution=mode)
    result = agent.run_sync("go")
    results = [m for m in result.new_messages if isinstance(m, ToolResultMessage)]
    assert [(r.tool_call_id, r.is_error, r.text) for r in results] == [
        ("v1", True, "ValueError: bad input: 42"),
        (
            "t1",
            True,
            "Timed out: tool 'slow' ran longer than 0.01 s and was cancelled; it may have partly "
            "completed.",
        ),
    ]
    assert result.state.value == "done"


@pytest.mark.parametrize("mode", ["parallel", "sequential"])
def test_the_oracle_predicts_case_1(mode: Literal["parallel", "sequential"]) -> None:
    scenario = Scenario(
        (RunSpec((Step("tool_use", (Call("limited", "raise"), Call("limited", "slow"))), Step())),),
        mode=mode,
    )
    prediction = check_scenario(scenario)
    run = prediction.runs[0]
    assert run is not None
    assert run.results == {"r1_1": {"error[out-r11]"}, "r1_2": {"timeout"}}
    assert run.states == {"done"} and run.turns == {2} and run.requests == {2}


def test_the_oracle_predicts_a_context_window_stop_and_its_continuation() -> None:
    """A response cut by the context window (compaction off) is not continued: its calls are
    answered as not run (the trailing cut one as cut by the window), the run ends done; a second
    run without a prompt after a cut answer asks the model to go on (one user message)."""
    window = "model_context_window_exceeded"
    scenario = Scenario(
        (
            RunSpec((Step(window, (Call(), Call())),)),
            RunSpec((Step(window),)),
            RunSpec((Step(),), prompt=False),
        ),
    )
    prediction = check_scenario(scenario)
    first, second, third = prediction.runs
    assert first is not None and second is not None and third is not None
    assert first.results == {"r1_1": {"window_not_run"}, "r1_2": {"window_cut"}}
    assert first.states == {"done"} and first.requests == {1} and first.ran_must == set()
    assert second.states == {"done"} and second.requests == {1}
    assert third.states == {"done"} and third.requests == {1} and third.users == {1}
    assert {"context_window_with_calls", "context_window", "continue_cut"} <= prediction.labels


def test_an_abort_at_the_second_tool_start_of_a_sequential_batch() -> None:
    scenario = Scenario(
        (
            RunSpec(
                (Step("tool_use", (Call(), Call(), Call())), Step()),
                abort=Anchor("tool_start", 2),
            ),
        ),
        mode="sequential",
    )
    prediction = check_scenario(scenario)
    run = prediction.runs[0]
    assert run is not None
    assert run.results["r1_1"] == {"ok[out-r11]"}
    assert run.results["r1_3"] == {"not_run"}
    assert run.states == {"aborted"} and run.turns == {1} and run.requests == {1}


@pytest.mark.parametrize("mode", ["parallel", "sequential"])
def test_a_call_that_finished_before_a_cancellation_keeps_its_result(
    mode: Literal["parallel", "sequential"],
) -> None:
    # Case 2, bug 11: the task is cancelled as the first call starts. That call returns without
    # suspending, so it finishes before the cancellation lands; the second one is caught running
    # (it sleeps) or, in a sequential batch, kept from starting.
    scenario = Scenario(
        (
            RunSpec(
                (Step("tool_use", (Call(), Call("job", "sleep"))), Step()),
                abort=Anchor("tool_start", 1, how="cancel"),
            ),
        ),
        mode=mode,
    )
    obs = asyncio.run(play(scenario))
    run = obs.runs[0]
    second = "interrupted" if "r1_2" in run.ran else "not_run"
    assert run.results == [("r1_1", "ok[out-r11]"), ("r1_2", second)]
    assert run.finished == ["r1_1"] and run.ran[0] == "r1_1"
    assert second == "interrupted" or mode == "sequential"
    assert run.cancelled and run.state == "aborted"
    problems, prediction = compare(scenario, obs)
    assert problems == []
    assert prediction.runs[0] is not None and prediction.runs[0].finished["r1_1"] == {"ok[out-r11]"}
    # The oracle rejects the finished call's result lost, and the running call's called "not run".
    run.results = [("r1_1", "interrupted"), ("r1_2", "interrupted")]
    problems, _ = compare(scenario, obs)
    assert problems == [
        "run 1: call r1_1 finished (its tool and after hook returned) but its result is "
        "'interrupted', allowed ['ok[out-r11]']"
    ]
    run.results, run.ran = [("r1_1", "ok[out-r11]"), ("r1_2", "not_run")], ["r1_1", "r1_2"]
    problems, _ = compare(scenario, obs)
    assert problems == [
        "run 1: call r1_2: its tool started and never finished, yet its result is 'not_run', "
        "not 'interrupted'"
    ]


def test_a_call_caught_running_by_a_cancellation_must_not_report_its_own_result() -> None:
    # The oracle's cancellation model: a call whose tool started and never finished (r1_2, caught
    # sleeping) is interrupted; an ordinary result for it is a lost cancellation.
    scenario = Scenario(
        (
            RunSpec(
                (Step("tool_use", (Call(), Call("job", "sleep"))), Step()),
                abort=Anchor("tool_start", 1, how="cancel"),
            ),
        ),
        mode="parallel",
    )
    obs = asyncio.run(play(scenario))
    run = obs.runs[0]
    assert run.results == [("r1_1", "ok[out-r11]"), ("r1_2", "interrupted")]
    assert run.ran == ["r1_1", "r1_2"] and run.finished == ["r1_1"]
    run.results = [("r1_1", "ok[out-r11]"), ("r1_2", "ok[out-r12]")]
    problems, _ = compare(scenario, obs)
    assert problems == [
        "run 1: call r1_2: its tool started and never finished, yet its result is "
        "'ok[out-r12]', not 'interrupted'"
    ]


def test_a_sleeping_job_that_stops_early_on_an_abort_finished_with_its_stopped_result() -> None:
    # An abort at the second tool start of a parallel batch: the sleeping job sees the signal and
    # returns "stopped" (its tool and after hook returned: finished); the second call never runs.
    scenario = Scenario(
        (
            RunSpec(
                (Step("tool_use", (Call("job", "sleep"), Call())), Step()),
                abort=Anchor("tool_start", 2, how="abort"),
            ),
        ),
        mode="parallel",
    )
    obs = asyncio.run(play(scenario))
    run = obs.runs[0]
    assert run.results == [("r1_1", "stopped"), ("r1_2", "not_run")]
    assert run.ran == ["r1_1"] and run.finished == ["r1_1"] and run.state == "aborted"
    problems, prediction = compare(scenario, obs)
    assert problems == []
    assert prediction.runs[0] is not None
    assert prediction.runs[0].finished == {
        "r1_1": {"ok[out-r11]", "stopped"},
        "r1_2": {"ok[out-r12]"},
    }


def test_the_readme_oracle_examples_run(capsys: pytest.CaptureFixture[str]) -> None:
    readme = documentation_text()
    blocks = re.findall(r"```python\n(.*?)```", readme, re.S)
    ours = [b for b in blocks if "check_scenario" in b or "Declared(" in b]
    assert len(ours) == 3  # the oracle page's two, and its sub-agent scenario
    for block in ours:
        exec(compile(block, "README.md", "exec"), {"__name__": "readme_example"})
    out = capsys.readouterr().out
    assert "{'r1_1': {'error[out-r11]'}, 'r1_2': {'timeout'}, 'r1_3': {'ok[out-r13]'}}" in out
    assert "['aborted']" in out
    assert "{'r1_1': {'ok[out-r11]'}}" in out
