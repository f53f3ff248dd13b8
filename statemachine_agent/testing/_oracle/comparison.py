"""Comparing a prediction with what the engine did (`compare`, `compare_run`, the exact texts
of results) and `check_scenario`, which plays, checks and compares."""

from __future__ import annotations

import asyncio
import copy
from collections import Counter
from pathlib import Path
from typing import Any

from ..._protocol import (
    find_violations,
)
from .kinds import matches
from .play import RunObservation, ScenarioObservation, play
from .prediction import Oracle
from .requests import request_problems
from .resume import predict_resume, predict_resumed_turns
from .scenario import Call, Scenario, scenario_ids
from .texts import FIXED_TEXTS, HOOK_DENIES, HOOK_TERMINATES, REWRITTEN
from .world import Prediction, RunPrediction


def expected_text(kind: str, call: Call, call_id: str, pred: RunPrediction) -> str | None:
    """What a result of class ``kind`` for ``call`` (id ``call_id``) says, exactly: the tool's
    value (``ok``), an error naming the exception, the denial's reason (naming the call it
    answers), "interrupted while running", "not run" with its cause, a limit's text, an after
    hook's replacement (naming its call), an approval's outcome. None where only the class is
    known (invalid arguments: the validator's wording; a user's own hooks)."""
    if call_id in pred.texts:  # a limit's text, a person's denial
        return pred.texts[call_id]
    if kind in FIXED_TEXTS:
        return FIXED_TEXTS[kind]
    tag = kind[kind.find("[") + 1 : -1] if kind.endswith("]") else ""
    if tag in ("*", "?"):
        return None
    if kind.startswith("ok["):
        return tag  # the tool's value: the text it was given
    if kind.startswith("error["):
        return (
            f"ValueError: {tag}" if call.tool == "limited" else f"RuntimeError: job raised: {tag}"
        )
    if kind.startswith("tool_error["):
        return f"job failed: {tag}"
    if kind == "denied" and call.before in ("deny", "terminate"):
        reason = HOOK_DENIES if call.before == "deny" else HOOK_TERMINATES
        return f"Denied: {reason} {call_id}"
    if kind == "rewritten":
        return f"{REWRITTEN} {call_id}"
    return None


def text_problems(
    scenario: Scenario, prediction: Prediction, obs: ScenarioObservation
) -> list[str]:
    """Every result whose text is not what its class says for its call (`expected_text`),
    run by run: a reason dropped, a replacement or a denial addressed to another call, a
    "not run" with the wrong cause."""
    calls: dict[str, Call] = {}
    for run, run_ids_ in zip(scenario.runs, scenario_ids(scenario), strict=True):
        for step, ids in zip(run.steps, run_ids_, strict=True):
            calls.update(zip(ids, step.calls, strict=True))
    problems: list[str] = []
    for n, (pred, got) in enumerate(zip(prediction.runs, obs.runs, strict=False), 1):
        if pred is None:
            continue
        for call_id, kind in got.results:
            call = calls.get(call_id)
            if call is None:
                continue
            seen_kind, text = got.texts.get(call_id, ("", ""))
            if seen_kind != kind:
                continue  # not the result this text came with (its class is compared already)
            want = expected_text(kind, call, call_id, pred)
            if kind in pred.fragments.get(call_id, {}):
                must, must_not = pred.fragments[call_id][kind]
                problems += [
                    f"run {n}: call {call_id} ({kind}) says {text!r}, without {m!r}"
                    for m in must
                    if m not in text
                ]
                problems += [
                    f"run {n}: call {call_id} ({kind}) says {text!r}, with {m!r}"
                    for m in must_not
                    if m in text
                ]
            elif kind == "invalid":
                if not text.startswith(f"Invalid arguments for tool {call.tool!r}"):
                    problems.append(f"run {n}: call {call_id}: {text!r} does not name its tool")
            elif want is not None and text != want:
                problems.append(f"run {n}: call {call_id} ({kind}) says {text!r}, not {want!r}")
    return problems


# -- comparing ---------------------------------------------------------------------------------


def compare_run(pred: RunPrediction, obs: RunObservation) -> list[str]:
    """Every difference between a run's prediction and what the engine did."""
    problems: list[str] = []
    if pred.started != obs.started:
        return [f"run started={obs.started}, the oracle says started={pred.started}"]
    if not obs.started:
        return problems
    if obs.state not in pred.states:
        problems.append(f"final state {obs.state!r}, allowed {sorted(pred.states)}")
    if obs.cancelled not in pred.cancelled:
        problems.append(f"cancelled={obs.cancelled}, allowed {sorted(pred.cancelled)}")
    if obs.turns not in pred.turns:
        problems.append(f"turns {obs.turns}, allowed {sorted(pred.turns)}")
    if obs.requests not in pred.requests:
        problems.append(f"requests {obs.requests}, allowed {sorted(pred.requests)}")
    if pred.tree_requests is not None and obs.tree_requests != pred.tree_requests:
        problems.append(
            f"RunResult.counts.requests {obs.tree_requests}, the run tree sent "
            f"{pred.tree_requests} (its sub-agent runs' included)"
        )
    if pred.users is not None and obs.users not in pred.users:
        problems.append(f"{obs.users} user messages added, expected {sorted(pred.users)}")
    if pred.deliveries is not None and pred.users is not None:
        got = [t.removeprefix("queued ") for t in obs.user_texts if t.startswith("queued ")]
        if got != pred.deliveries:
            problems.append(f"queued input delivered as {got}, the rules say {pred.deliveries}")
    seen: dict[str, list[str]] = {}
    for call_id, kind in obs.results:
        seen.setdefault(call_id, []).append(kind)
    optional = pred.results_optional
    for call_id, allowed in pred.results.items():
        kinds = seen.get(call_id, [])
        if not kinds:
            if call_id not in optional:
                problems.append(f"call {call_id}: no result, allowed {sorted(allowed)}")
            continue
        if len(kinds) > 1:
            problems.append(f"call {call_id}: {len(kinds)} results {kinds}")
        if not matches(kinds[0], allowed):
            problems.append(f"call {call_id}: result {kinds[0]!r}, allowed {sorted(allowed)}")
    for call_id in seen:
        if call_id not in pred.results:
            problems.append(f"call {call_id}: a result the oracle did not expect ({seen[call_id]})")
    if obs.finished is not None:
        # Where an abort or a cancellation landed, read from the run: a call that finished keeps
        # its own result; one whose tool started and never finished was interrupted.
        finished = set(obs.finished)
        for call_id, kinds in seen.items():
            if call_id in finished:
                allowed = pred.finished.get(call_id, set())
                if not matches(kinds[0], allowed):
                    problems.append(
                        f"call {call_id} finished (its tool and after hook returned) but its "
                        f"result is {kinds[0]!r}, allowed {sorted(allowed)}"
                    )
            elif call_id in obs.ran and kinds[0] != "interrupted":
                problems.append(
                    f"call {call_id}: its tool started and never finished, yet its result is "
                    f"{kinds[0]!r}, not 'interrupted'"
                )
    result_order = [c for c, _ in obs.results]
    for batch in pred.order:
        got = [c for c in result_order if c in batch]
        if got and got != batch[: len(got)] and sorted(got) == sorted(batch):
            problems.append(f"results {got} not in declaration order {batch}")
    ran = obs.ran
    counts = Counter(ran)
    for call_id, count in counts.items():
        if count > 1:
            problems.append(f"tool of call {call_id} ran {count} times")
    allowed_ran = pred.ran_must | pred.ran_may
    for call_id in counts:
        if call_id not in allowed_ran:
            problems.append(f"tool of call {call_id} ran; the oracle says it must not")
    for call_id in sorted(pred.ran_must - set(counts)):
        problems.append(f"tool of call {call_id} never ran; the oracle says it must")
    for sequence in pred.ran_order:
        got = [c for c in ran if c in sequence]
        if got != [c for c in sequence if c in got]:
            problems.append(f"tools ran in order {got}, the rules fix {sequence}")
    return problems


def compare(
    scenario: Scenario, obs: ScenarioObservation, oracle: Oracle | None = None
) -> tuple[list[str], Prediction]:
    """Predict ``scenario`` and list every difference from ``obs`` (run by run)."""
    oracle = oracle or oracle_for(scenario)
    ids = scenario_ids(scenario)
    prediction = oracle.predict(scenario, ids)
    problems: list[str] = []
    note = "a note from transform_context" if scenario.transform == "rewrite" else None
    for n, got in enumerate(obs.runs, 1):
        # Every request carries the projection of the history it was sent with; the run's
        # RunResult says what the run added, its history and its usage.
        problems += [f"run {n}: {p}" for p in request_problems(got.sent, note)]
        problems += [f"run {n}: {p}" for p in got.result_problems]
        problems += [f"run {n}: {p}" for p in got.child_problems]
    problems += obs.reopen_problems
    for n, (pred, got) in enumerate(zip(prediction.runs, obs.runs, strict=False), 1):
        if pred is None and scenario.cut is not None and n > 1 and obs.log_lines is not None:
            tokens, state = predict_resume(obs.log_lines)
            if obs.resumed != tokens:
                problems.append(
                    f"resume rebuilt {obs.resumed}, the oracle says {tokens} (state {state})"
                )
            if obs.resumed_state != state:
                problems.append(
                    f"resumed in state {obs.resumed_state!r}, the oracle says {state!r}"
                )
            resumed = copy.copy(oracle)  # the same options and declared hooks, a world of its own
            resumed.world_from(tokens, state, predict_resumed_turns(obs.log_lines))
            pred = resumed.predict_run(scenario.runs[n - 1], ids[n - 1])
            prediction.runs[n - 1] = pred
            earlier = {t[1] for t in tokens if t[0] == "result"}
            again = sorted(set(got.ran) & earlier)
            if again:
                problems.append(f"resumed calls ran again: {again}")
        if pred is None:
            continue
        problems += [f"run {n}: {p}" for p in compare_run(pred, got)]
    problems += text_problems(scenario, prediction, obs)
    return problems, prediction


def oracle_for(scenario: Scenario) -> Oracle:
    """An `Oracle` with the scenario's agent options."""
    return Oracle(
        max_turns=scenario.max_turns,
        max_continuations=scenario.max_continuations,
        max_tokens_policy=scenario.max_tokens_policy,
        mode=scenario.mode,
        model_retries=1,
        should_continue=scenario.should_continue,
        transform=scenario.transform,
        steering_mode=scenario.steering_mode,
        follow_up_mode=scenario.follow_up_mode,
        limits=scenario.limits,
        child=scenario.child,
        usage=scenario.limits is not None or scenario.compaction,
    )


def check_scenario(
    scenario: Scenario,
    workdir: Path | None = None,
    *,
    loop: asyncio.AbstractEventLoop | None = None,
    model: Any = None,
    sync_runs: bool = False,
) -> Prediction:
    """Play ``scenario`` (in ``loop``, else a new event loop), check the invariants and
    compare with the oracle. ``model`` and ``sync_runs`` are `play`'s.

    Raises:
        AssertionError: listing every difference and broken invariant.
    """
    if loop is not None:
        obs = loop.run_until_complete(play(scenario, workdir, model=model, sync_runs=sync_runs))
    else:
        # A plain loop, not asyncio.run: its SIGINT handling costs more than a short run.
        own = asyncio.new_event_loop()
        try:
            obs = own.run_until_complete(play(scenario, workdir, model=model, sync_runs=sync_runs))
            own.run_until_complete(own.shutdown_asyncgens())
        finally:
            own.close()
    problems, prediction = compare(scenario, obs)
    for n, (history, run) in enumerate(zip(obs.histories, obs.runs, strict=True), 1):
        if run.state == "awaiting_approval":
            continue  # the held batch's calls wait for their decisions (and results)
        problems += [f"history after run {n}: {p}" for p in find_violations(history)]
    if obs.agent is not None and obs.agent.is_running:
        problems.append("the agent still says it is running")
    if problems:
        raise AssertionError("the engine and the oracle disagree:\n  " + "\n  ".join(problems))
    return prediction
