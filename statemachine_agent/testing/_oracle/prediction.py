"""The predictor (`Oracle`): a scenario's runs, a run's cancellation, and the world a resumed
agent starts from. A run itself is predicted trigger by trigger (`RunRules`, the ``turns``
module) after the transition table's labels."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from .kinds import Token
from .scenario import RunSpec, Scenario
from .turns import RunRules
from .world import Prediction, RunPrediction, World, ends_paused, last_of


class Oracle(RunRules):
    """The reference model. ``Oracle(...).predict(scenario)``, or `predict_run` run by run.

    Args:
        max_turns: the agent's ``max_turns``.
        max_continuations: the agent's ``max_continuations``.
        max_tokens_policy: the agent's ``max_tokens_policy``.
        mode: the agent's ``tool_execution``.
        model_retries: retries of a retryable model failure (the kit uses 1).
        declared: the user's hooks (`Declared`), for kit runs.
    """

    # -- runs -----------------------------------------------------------------------------

    def predict(self, scenario: Scenario, ids: Sequence[Sequence[Sequence[str]]]) -> Prediction:
        """Predict every run of ``scenario`` (``ids[run][step]`` are the call ids used)."""
        world = self.world
        if scenario.history == "clean":
            world.last, world.dangling = "answer", []
        elif scenario.history == "mid_batch":
            world.last, world.dangling = "open", ["h2"]
        runs: list[RunPrediction | None] = []
        labels: set[str] = set()
        fuzzy = False
        for n, run in enumerate(scenario.runs):
            if n and scenario.cut is not None:
                runs.append(None)  # predicted after the log exists (`predict_resume`)
                labels.add("resume")
                continue
            if fuzzy or self.world.uncertain:
                runs.append(None)
                continue
            pred = self.predict_run(run, ids[n])
            labels |= pred.labels | scenario_classes(scenario, run, pred)
            runs.append(pred)
            fuzzy = not pred.exact and run.abort is not None and run.abort.how == "cancel"
            if n and not run.prompt:
                labels.add("continue")
        return Prediction(runs, labels)

    def predict_run(self, spec: RunSpec, ids: Sequence[Sequence[str]]) -> RunPrediction:
        """Predict one run from the current world; updates the world to its end."""
        if spec.abort is not None and spec.abort.how == "cancel":
            prediction = self._predict_cancel(spec, ids)
        else:
            prediction = self.simulate(spec, ids)
        # A call approved in this run finished with its decided result (`_decided`).
        prediction.finished = {**self._finished(spec, ids), **prediction.finished}
        return prediction

    def _predict_cancel(self, spec: RunSpec, ids: Sequence[Sequence[str]]) -> RunPrediction:
        # A cancellation lands at the task's next suspension, which may be later than the anchor
        # (or never, when the rest of the run does not suspend): every outcome between "aborted
        # at the anchor" and "not cancelled at all" is allowed. Where it landed is read from the
        # run itself (`compare_run`): a call that finished before it keeps its own result
        # (`RunPrediction.finished`), one it caught running is interrupted, one it kept from
        # starting is not run.
        start = replace(self.world, dangling=list(self.world.dangling))
        assert spec.abort is not None
        aborted = self.simulate(replace(spec, abort=replace(spec.abort, how="abort")), ids)
        end_aborted = self.world
        if "anchor_fired" not in aborted.labels:
            if "anchor_maybe" in aborted.labels:
                # The run was aborting already when the event may have come: a cancellation may
                # have landed too (the run ends aborted either way).
                aborted.cancelled = {False, True}
                aborted.exact = False
                self.world.uncertain = True
            return aborted  # the anchor never came: nothing was cancelled
        self.world = replace(start, dangling=list(start.dangling))
        free = self.simulate(replace(spec, abort=None), ids)
        self.world = end_aborted
        out = RunPrediction(
            states=aborted.states | free.states,
            cancelled={True},
            turns=set(range(min(aborted.turns), max(free.turns | aborted.turns) + 1)),
            requests=set(range(min(aborted.requests), max(free.requests | aborted.requests) + 1)),
            exact=False,
            labels=aborted.labels
            | {"cancel"}
            | ({"cancel_inside_batch"} if "abort_inside_batch" in aborted.labels else set()),
        )
        for call_id in set(aborted.results) | set(free.results):
            out.results[call_id] = (
                aborted.results.get(call_id, set())
                | free.results.get(call_id, set())
                | aborted.loose.get(call_id, set())
                | {"interrupted", "not_run"}
            )
        out.order = free.order if len(free.order) >= len(aborted.order) else aborted.order
        out.ran_must = aborted.ran_must - aborted.ran_may_after
        out.ran_may = aborted.ran_may | free.ran_may | free.ran_must | aborted.ran_must
        out.users = None
        out.results_optional = set(free.results) - set(aborted.results)
        return out

    def world_from(self, tokens: Sequence[Token], state: str, turns: int = 0) -> None:
        """Set the world from a history (a resumed agent starts from it, with the ``turns`` the
        last run counted: a run continued without a prompt goes on counting)."""
        last, dangling = last_of(tokens)
        self.world = World(turns=turns, last=last, dangling=dangling, paused=ends_paused(tokens))


def scenario_classes(scenario: Scenario, run: RunSpec, pred: RunPrediction) -> set[str]:
    """The classes a run adds to its scenario's (`hypothesis.event`): a session log reopened
    after it (``reopen``; ``reopen_awaiting_approval`` when it stopped holding a batch), a
    compacting agent (``compaction``), a ``pause_turn`` continuation followed by a further
    request (``request_after_pause``: its requests carry the paused content)."""
    out: set[str] = set()
    if scenario.reopen:
        out.add("reopen")
        if "awaiting_approval" in pred.states:
            out.add("reopen_awaiting_approval")
    if scenario.compaction:
        out.add("compaction")
    if scenario.child is not None and "subagent" in pred.labels:
        # A crash at both levels: the log cut (at times inside the child's records) and
        # resumed, or reopened whole after a run with a sub-agent call.
        if scenario.cut is not None:
            out.add("subagent_resume")
        if scenario.reopen:
            out.add("subagent_reopen")
    kinds = [step.kind for step in run.steps]
    if (
        "pause_turn" in kinds[:-2]
        and max(pred.requests, default=0) >= kinds.index("pause_turn") + 3
    ):
        out.add("request_after_pause")
    return out
