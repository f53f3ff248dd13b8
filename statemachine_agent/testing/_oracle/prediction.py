"""The predictor."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import replace

# Public names only (the engine's internals may change under it): the oracle sees the loop as a
# user does.
from .batch import BatchRules
from .kinds import Token
from .scenario import AnchorEvent, RunSpec, Scenario, Step
from .texts import (
    CONTEXT_WINDOW,
    INPUT_TOKENS,
    KNOWN_STOPS,
    OUTPUT_TOKENS,
    PAUSE_TURN,
    REFUSAL,
    RETRYABLE,
    TRUNCATING,
    limit_text,
)
from .world import Prediction, RunPrediction, World, after_answer, ends_paused, last_of


class Oracle(BatchRules):
    """The reference model. ``Oracle(...).predict(scenario)``, or `predict_run` run by run.

    Args:
        max_turns, max_continuations, max_tokens_policy, mode: the agent's options.
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
            labels |= pred.labels
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
            prediction = self._simulate(spec, ids)
        # A call approved in this run finished with its decided result (`_decide`).
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
        aborted = self._simulate(replace(spec, abort=replace(spec.abort, how="abort")), ids)
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
        free = self._simulate(replace(spec, abort=None), ids)
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

    def _simulate(self, spec: RunSpec, ids: Sequence[Sequence[str]]) -> RunPrediction:
        w = self.world
        p = RunPrediction(deliveries=[])
        anchor = spec.abort
        counters: Counter[str] = Counter()
        inputs = list(spec.inputs)

        def fire(event: AnchorEvent) -> bool:
            """Count an event; queue inputs anchored to it; True when the abort fires."""
            counters[event] += 1
            for item in inputs:
                if item.event == event and item.k == counters[event]:
                    if item.kind == "steer":
                        w.steer += 1
                        p.labels.add("steer_during_run")
                    else:
                        w.follow += 1
                        p.labels.add("follow_up_during_run")
            if anchor is not None and anchor.event == event and anchor.k == counters[event]:
                p.labels.add("anchor_fired")
                return True
            return False

        def maybe(event: AnchorEvent) -> None:
            """An event that may or may not happen (a start announced for a call that never runs,
            after an abort): input anchored to it may or may not be queued."""
            counters[event] += 1
            if any(i.event == event and i.k == counters[event] for i in inputs):
                w.uncertain = True
            if anchor is not None and anchor.event == event and anchor.k == counters[event]:
                p.labels.add("anchor_maybe")  # the run is aborting already

        for item in inputs:
            if item.event is None:
                if item.kind == "steer":
                    w.steer += 1
                else:
                    w.follow += 1
        # run(max_turns=N) caps this run only; a later run without it has the agent's cap
        cap = self.max_turns if spec.max_turns is None else spec.max_turns
        if not spec.prompt and not (w.steer or w.follow) and w.last in ("answer", "none"):
            p.started = False
            p.states, p.turns, p.requests = set(), set(), {0}
            return p
        if spec.prompt:  # a prompt starts a new run: its limits count from zero
            w.requests = w.tool_calls = w.input_tokens = w.output_tokens = 0
        if self.limits is not None:
            p.labels.add("limits")
        if spec.decisions is not None and self._decide(p, spec.decisions):
            # Calls still wait for a decision: nothing runs or is sent.
            p.states, p.turns, p.requests, p.users = {"awaiting_approval"}, {w.turns}, {0}, {0}
            return p
        users = 0
        for call_id in w.dangling:  # a given history that ended mid-batch is answered first
            p.results[call_id] = {"no_result"}
            p.labels.add("dangling_repair")
        if w.dangling:
            p.order.append(list(w.dangling))
            w.last = "result"
        w.dangling = []
        if spec.prompt and w.paused:
            # The paused response is continued first; the prompt waits at the head of the
            # steering queue and is delivered when the model has finished that turn.
            w.turns = 0
            w.steer += 1
            p.labels.add("prompt_after_pause")
            p.deliveries = None  # the prompt is delivered as steering: not predicted
        elif spec.prompt:
            w.turns = 0
            users += 1
            w.last = "user"
            w.paused = False
            users += self._inject(p, follow_too=False)  # steering left queued: after the prompt
        elif w.paused:
            p.labels.add("continue_pause")  # the paused response goes back first, input waits
        elif w.last == "cut":
            # Continuing a cut answer: a user message asks the model to go on (as the run would
            # have), then queued steering follows it.
            p.labels.add("continue_cut")
            users += 1
            w.last = "user"
            users += self._inject(p, follow_too=False)
        else:
            users += self._inject(p, follow_too=True)
        continuations = 0
        requests = 0
        request_slack = 0
        aborted = False
        state = ""
        step_i = 0
        steps = spec.steps
        at_cap = not spec.prompt and w.turns >= cap
        start_hit = None if spec.decisions is not None else self._request_hit()
        if start_hit is not None:
            # A usage limit keeps the first request from being sent (``start [usage_limit]``).
            self._limit_stop(p, start_hit)
            p.labels.add("limit_at_start")
            at_cap, state = True, "max_turns"
        elif at_cap:
            # A run continued without a prompt keeps counting its turns: at its cap it stops
            # before any request (``start [turn_limit_reached]``).
            p.labels.add("max_turns_at_start")
            state = "max_turns"
        while not at_cap:
            if aborted:
                state = "aborted"
                break
            if fire("turn_start"):
                # Aborted before its request: nothing more is sent (it may already be in flight).
                request_slack = 1
                p.labels.add("abort_before_request")
                state = "aborted"
                if self.transform == "raise":
                    p.states.add("failed")  # building the request and the abort race
                    p.exact = False
                break
            if self.transform == "raise":
                # The request is never sent: the run fails saying the hook failed.
                p.labels.add("raising_transform")
                state = "failed"
                w.last = "open"
                break
            attempt = 0
            failed = False
            step: Step | None = None
            while True:
                attempt += 1
                step = steps[step_i] if step_i < len(steps) else None
                step_i += 1
                requests += 1
                if attempt == 1:
                    w.requests += 1  # a request retried after a transient failure counts once
                if step is None:
                    p.labels.add("script_exhausted")
                    failed = True
                    break
                if step.kind in RETRYABLE:
                    p.labels.add("retryable_error")
                    if attempt <= self.model_retries:
                        continue
                    failed = True
                    break
                if step.kind in ("invalid_request", "reused_id"):
                    p.labels.add(step.kind)
                    failed = True
                    break
                break
            if failed or step is None:
                state = "failed"
                w.last = "open"
                break
            call_ids = list(ids[step_i - 1])
            w.turns += 1
            if self.limits is not None:  # each response reports its usage
                w.input_tokens += INPUT_TOKENS
                w.output_tokens += OUTPUT_TOKENS
            stop = step.kind
            has_calls = bool(step.calls)
            w.last = "open" if has_calls else after_answer(stop)
            w.paused = stop == PAUSE_TURN and not has_calls
            if fire("response"):
                aborted = True
                p.labels.add("abort_at_response")
            queued = bool(w.steer or w.follow)
            if aborted and not has_calls:
                state = "aborted"
                break
            if stop == REFUSAL:
                p.labels.add("refusal_with_calls" if has_calls else "refusal")
                for call_id in call_ids:
                    p.results[call_id] = {"refused"}
                if has_calls:
                    p.order.append(call_ids)
                    w.last = "result"
                state = "done"
                break
            unknown_with_calls = has_calls and stop not in KNOWN_STOPS  # answered first
            if self.limits is not None and not aborted and not unknown_with_calls:
                # After the refusal and unknown-stop rules, before any other: a batch that a
                # limit keeps from running (each call answered with the limit's text), or a
                # continuation or queued input whose request a limit forbids.
                hit = None
                acting = has_calls and not (stop in TRUNCATING and self.policy == "stop")
                if acting:
                    hit = self._calls_hit(len(call_ids))
                    if hit is not None:
                        for call_id in call_ids:
                            p.results[call_id] = {"limit"}
                            p.texts[call_id] = limit_text(hit)
                elif (
                    (stop == PAUSE_TURN and continuations < self.max_continuations)
                    or (
                        stop in TRUNCATING
                        and self.policy == "continue"
                        and continuations < self.max_continuations
                    )
                    or queued
                ):
                    hit = self._request_hit()
                    if hit is not None and has_calls:  # cut, policy stop: answered as not run
                        n = len(call_ids)
                        for i, call_id in enumerate(call_ids):
                            p.results[call_id] = {"truncated" if i == n - 1 else "stopped_not_run"}
                if hit is not None:
                    if has_calls:
                        p.order.append(call_ids)
                        w.last = "result"
                    self._limit_stop(p, hit)
                    state = "max_turns"
                    break
            if stop == CONTEXT_WINDOW:
                # Cut by the context window (automatic compaction off): never continued like a
                # token-limit cut; its calls are answered as not run (a trailing cut one as cut
                # by the window) and the run ends done with an error saying how to go on.
                p.labels.add("context_window_with_calls" if has_calls else "context_window")
                n = len(call_ids)
                for i, call_id in enumerate(call_ids):
                    p.results[call_id] = {"window_cut" if i == n - 1 else "window_not_run"}
                if has_calls:
                    p.order.append(call_ids)
                    w.last = "result"
                state = "done"
                break
            if has_calls and stop not in KNOWN_STOPS:
                # An unknown stop reason: nothing says its calls are complete, none runs; each is
                # answered "not run" and the run ends done (an abort as it came changes nothing).
                p.labels.add("unknown_stop_with_calls")
                for call_id in call_ids:
                    p.results[call_id] = {"unknown_stop"}
                p.order.append(call_ids)
                w.last = "result"
                state = "done"
                break
            if has_calls and stop in TRUNCATING and self.policy == "stop":
                # max_tokens_policy="stop": a cut response is not acted on. Its calls are answered
                # as not run (the cut one as truncated); then it is a response without calls.
                p.labels.add("max_tokens_stop_with_calls")
                p.labels.add("truncated_call")
                n = len(call_ids)
                for i, call_id in enumerate(call_ids):
                    p.results[call_id] = {"truncated" if i == n - 1 else "stopped_not_run"}
                p.order.append(call_ids)
                w.last = "result"
                has_calls = False
                if aborted:
                    # An abort as it came: the transitions after the response still decide (the
                    # turn cap with queued input, queued input whose delivery the abort stops, a
                    # final answer).
                    if w.turns >= cap and queued:
                        state = "max_turns"
                    else:
                        state = "aborted" if queued else "done"
                    break
            if has_calls:
                if stop != "tool_use":
                    p.labels.add(f"calls_with_{stop}")
                if not aborted:
                    w.tool_calls += len(call_ids)  # every call of a batch that runs counts
                terminate, aborted = self._batch(
                    p, step, call_ids, fire, maybe, aborted_before=aborted
                )
                if w.pending is not None:
                    # Deferred calls wait for a person: the batch's results wait with them.
                    state = "awaiting_approval"
                    break
                w.last = "result"
                if aborted:
                    state = "aborted"
                    break
                if not terminate:
                    finish = self._finishes(step, call_ids)
                    if finish:
                        # A result marked terminate=True ends the run done, before the turn cap
                        # and should_continue are read (a terminating denial would have won).
                        p.labels.add("terminating_result")
                        if finish == "maybe":
                            p.exact = False
                            p.states.add("done")
                        else:
                            state = "done"
                            break
                keep_going = True
                if self.should_continue == "stop":
                    keep_going = False
                    p.labels.add("should_continue_stop")
                if not keep_going:
                    state = "max_turns"
                    break
                if w.turns >= cap:
                    p.labels.add("max_turns_after_batch")
                    state = "max_turns"
                    break
                if terminate:
                    state = "aborted"
                    break
                if self.should_continue == "raise":
                    # A failing hook ends a run that would have gone on in failed.
                    p.labels.add("raising_should_continue")
                    state = "failed"
                    break
                hit = self._request_hit()
                if hit is not None:  # the next request is not sent
                    self._limit_stop(p, hit)
                    state = "max_turns"
                    break
                users += self._inject(p, follow_too=False)
                continue
            can_pause = stop == PAUSE_TURN and continuations < self.max_continuations
            can_more = (
                stop in TRUNCATING
                and self.policy == "continue"
                and continuations < self.max_continuations
            )
            if stop == PAUSE_TURN:
                p.labels.add("pause_turn" if can_pause else "pause_turn_past_cap")
            if stop in TRUNCATING:
                p.labels.add(f"max_tokens_{self.policy}" if can_more else "max_tokens_past_cap")
            if w.turns >= cap and (can_pause or can_more or queued):
                p.labels.add("max_turns_before_continuing")
                state = "max_turns"
                break
            if can_pause:
                continuations += 1
                continue
            if stop == PAUSE_TURN:
                # Past max_continuations the model is still working: max_turns, not an answer.
                state = "max_turns"
                break
            if can_more:
                continuations += 1
                users += 1
                w.last = "user"
                continue
            if queued:
                users += self._inject(p, follow_too=True)
                continue
            if stop not in ("end_turn", "stop_sequence", "tool_use", "pause_turn", *TRUNCATING):
                p.labels.add("unknown_stop_reason")
            state = "done"
            break
        p.states.add(state)
        p.turns = {w.turns}
        p.requests = {requests, requests + request_slack}
        p.users = {users}
        if w.turns >= cap:
            p.labels.add("hit_max_turns")
        if state == "max_turns":
            p.labels.add("state_max_turns")
        return p

    def world_from(self, tokens: Sequence[Token], state: str, turns: int = 0) -> None:
        """Set the world from a history (a resumed agent starts from it, with the ``turns`` the
        last run counted: a run continued without a prompt goes on counting)."""
        last, dangling = last_of(tokens)
        self.world = World(turns=turns, last=last, dangling=dangling, paused=ends_paused(tokens))
