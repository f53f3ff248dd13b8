"""Issue 40, item 1: the oracle predicts what each result says (by class, naming its call), in the
scenarios the suite missed: usage limits, cooperative tools aborted with a realistic grace,
steering queued with a follow-up, approval decisions, context-window stops."""

from __future__ import annotations

import asyncio

from statemachine_agent.testing import (
    Anchor,
    Call,
    Input,
    RunSpec,
    Scenario,
    Step,
    check_scenario,
    compare,
    play,
)
from statemachine_agent.testing._oracle import Limits

INTERRUPTED = (
    "Interrupted while running: the run was aborted. The call may have partly completed; "
    "check its effects before retrying."
)


def test_a_batch_crossing_max_tool_calls_is_not_run_and_each_call_says_the_limit() -> None:
    scenario = Scenario(
        (RunSpec((Step("tool_use", (Call(),)), Step("tool_use", (Call(), Call())), Step())),),
        limits=Limits(max_tool_calls=2),
    )
    obs = asyncio.run(play(scenario))
    run = obs.runs[0]
    text = "Not run: the usage limit max_tool_calls=2 was reached: 1 used, 2 more wanted."
    assert run.results == [("r1_1", "ok[out-r11]"), ("r1_2", "limit"), ("r1_3", "limit")]
    assert run.texts["r1_2"] == ("limit", text) and run.texts["r1_3"] == ("limit", text)
    assert run.ran == ["r1_1"] and run.state == "max_turns" and run.requests == 2
    problems, prediction = compare(scenario, obs)
    assert problems == []
    assert {"limit_max_tool_calls", "limit_batch_crossing"} <= prediction.labels
    # Checked per batch: a run that let the first call of the batch through is reported.
    run.results[1] = ("r1_2", "ok[out-r12]")
    run.ran.append("r1_2")
    problems, _ = compare(scenario, obs)
    assert "run 1: call r1_2: result 'ok[out-r12]', allowed ['limit']" in problems
    assert "run 1: tool of call r1_2 ran; the oracle says it must not" in problems


def test_max_requests_stops_the_run_before_the_request_it_would_exceed() -> None:
    scenario = Scenario(
        (RunSpec((Step("tool_use", (Call(),)), Step())),), limits=Limits(max_requests=1)
    )
    prediction = check_scenario(scenario)
    run = prediction.runs[0]
    assert run is not None
    assert run.states == {"max_turns"} and run.requests == {1} and run.turns == {1}
    assert run.results == {"r1_1": {"ok[out-r11]"}} and "limit_max_requests" in prediction.labels


def test_a_token_limit_passed_keeps_the_next_batch_from_running_saying_so() -> None:
    # Each response reports 10 output tokens: past max_output_tokens=5 after the first.
    scenario = Scenario(
        (RunSpec((Step("tool_use", (Call(),)), Step())),), limits=Limits(max_output_tokens=5)
    )
    prediction = check_scenario(scenario)
    run = prediction.runs[0]
    assert run is not None
    assert run.texts == {
        "r1_1": "Not run: the usage limit max_output_tokens=5 was reached: 10 used."
    }
    assert run.states == {"max_turns"} and "limit_tokens" in prediction.labels


def test_a_tool_stopping_through_raise_if_aborted_is_interrupted_not_its_own_cancellation() -> None:
    scenario = Scenario(
        (
            RunSpec(
                (Step("tool_use", (Call("job", "cooperate"), Call())), Step()),
                abort=Anchor("tool_start", 2),
            ),
        ),
        grace="realistic",
    )
    obs = asyncio.run(play(scenario))
    run = obs.runs[0]
    assert run.results[0] == ("r1_1", "interrupted")
    assert run.texts["r1_1"] == ("interrupted", INTERRUPTED)
    assert run.state == "aborted"
    problems, prediction = compare(scenario, obs)
    assert problems == [] and "cooperative_aborted" in prediction.labels
    run.results[0] = ("r1_1", "own_cancel")  # "the tool raised asyncio.CancelledError itself"
    problems, _ = compare(scenario, obs)
    assert any("call r1_1: result 'own_cancel'" in p for p in problems)


def test_steering_queued_with_a_follow_up_is_delivered_first() -> None:
    scenario = Scenario(
        (
            RunSpec(
                (Step("tool_use", (Call(),)), Step(), Step()),
                inputs=(Input("follow_up"), Input("steer")),
            ),
        )
    )
    obs = asyncio.run(play(scenario))
    run = obs.runs[0]
    assert run.user_texts == ["do the task", "queued steer", "queued follow_up"]
    problems, prediction = compare(scenario, obs)
    assert problems == [] and "steer_and_follow_up_queued" in prediction.labels
    run.user_texts = ["do the task", "queued follow_up", "queued steer"]
    problems, _ = compare(scenario, obs)
    assert problems == [
        "run 1: queued input delivered as ['follow_up', 'steer'], the rules say "
        "['steer', 'follow_up']"
    ]


def test_approval_decisions_approve_edit_deny_and_partial_say_their_outcome() -> None:
    deferred = Call(before="defer")
    scenario = Scenario(
        (
            RunSpec((Step("tool_use", (deferred, deferred, deferred)),)),
            RunSpec((), prompt=False, decisions=(("r1_2", "edit"),)),  # partial: still waiting
            RunSpec((Step(),), prompt=False, decisions=(("r1_1", "approve"), ("r1_3", "deny"))),
        )
    )
    obs = asyncio.run(play(scenario))
    first, partial, last = obs.runs
    assert first.state == partial.state == "awaiting_approval"
    assert first.results == partial.results == [] and partial.ran == ["r1_2"]
    assert last.results == [("r1_1", "ok[out-r11]"), ("r1_2", "ok[out-edited]"), ("r1_3", "denied")]
    assert last.texts["r1_3"] == ("denied", "Denied: a person denies call r1_3")
    assert last.state == "done"
    problems, prediction = compare(scenario, obs)
    assert problems == []
    assert {"approval_approve", "approval_edit", "approval_deny", "approval_partial"} <= (
        prediction.labels
    )
    # A decision applied to the wrong call: the denial names another call.
    last.texts["r1_3"] = ("denied", "Denied: a person denies call r1_1")
    problems, _ = compare(scenario, obs)
    assert problems == [
        "run 3: call r1_3 (denied) says 'Denied: a person denies call r1_1', not "
        "'Denied: a person denies call r1_3'"
    ]


def test_compare_reports_a_denial_reason_dropped_and_a_replacement_for_another_call() -> None:
    scenario = Scenario(
        (RunSpec((Step("tool_use", (Call(before="deny"), Call(after="rewrite"))), Step())),)
    )
    obs = asyncio.run(play(scenario))
    run = obs.runs[0]
    assert run.texts == {
        "r1_1": ("denied", "Denied: the oracle's hook denies call r1_1"),
        "r1_2": ("rewritten", "after-rewritten r1_2"),
    }
    assert compare(scenario, obs)[0] == []
    run.texts = {"r1_1": ("denied", "Denied."), "r1_2": ("rewritten", "after-rewritten r1_1")}
    problems, _ = compare(scenario, obs)
    assert problems == [
        "run 1: call r1_1 (denied) says 'Denied.', not \"Denied: the oracle's hook denies call "
        'r1_1"',
        "run 1: call r1_2 (rewritten) says 'after-rewritten r1_1', not 'after-rewritten r1_2'",
    ]


def test_a_context_window_stop_with_calls_says_why_each_was_not_run() -> None:
    scenario = Scenario((RunSpec((Step("model_context_window_exceeded", (Call(), Call())),)),))
    obs = asyncio.run(play(scenario))
    run = obs.runs[0]
    assert [kind for _, (kind, _text) in sorted(run.texts.items())] == [
        "window_not_run",
        "window_cut",
    ]
    assert run.texts["r1_2"][1].endswith("its arguments are incomplete.")
    assert compare(scenario, obs)[0] == [] and run.state == "done"


def test_a_cut_response_under_policy_continue_stopped_by_a_limit_says_the_limit() -> None:
    # Found by this suite: the calls were answered 'max_tokens_policy is "stop"' under "continue".
    for kind in ("max_tokens", "model_context_window_exceeded"):
        scenario = Scenario(
            (RunSpec((Step(kind, (Call(), Call())), Step())),), limits=Limits(max_output_tokens=5)
        )
        obs = asyncio.run(play(scenario))
        text = "Not run: the usage limit max_output_tokens=5 was reached: 10 used."
        assert obs.runs[0].texts == {"r1_1": ("limit", text), "r1_2": ("limit", text)}
        assert obs.runs[0].state == "max_turns" and compare(scenario, obs)[0] == []
