"""The predictor's run (`RunRules`): one method per trigger of the transition table.

`_machine`'s table beside this module: each branch is marked
``trigger [label] -> dest`` with the label of the transition it predicts (``start``,
``model_replied``, ``tools_finished``, ``abort``, ``fail``; ``decided`` is `BatchRules._decided`).
The rules come from the README and the public docstrings, not from the engine's code.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from .batch import BatchRules
from .scenario import AnchorEvent, RunSpec, Step
from .subagent import ABORTED_CHILD, child_fragments, predict_child
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
from .world import RunPrediction, after_answer


@dataclass
class Turns:
    """The loop data of one predicted run: its spec and call ids, the prediction it fills, its
    turn cap, the events counted (anchors) and the counts so far."""

    spec: RunSpec
    ids: Sequence[Sequence[str]]
    p: RunPrediction
    cap: int
    counters: Counter[str] = field(default_factory=Counter)
    users: int = 0
    continuations: int = 0
    requests: int = 0
    request_slack: int = 0
    aborted: bool = False
    step_i: int = 0
    tree_unknown: bool = False


class RunRules(BatchRules):
    """One run of the predictor, trigger by trigger (`Oracle` adds the scenario and
    cancellations)."""

    # -- one run: a method per trigger of the table, a branch per transition ---------------
    #
    # Each branch is marked ``trigger [label] -> dest`` after `_machine`'s
    # table; a method returns the terminal state the run ends in, or None to go on (the next
    # request: ``awaiting_model``).

    def simulate(self, spec: RunSpec, ids: Sequence[Sequence[str]]) -> RunPrediction:
        w = self.world
        # run(max_turns=N) caps this run only; a later run without it has the agent's cap
        cap = self.max_turns if spec.max_turns is None else spec.max_turns
        t = Turns(spec, ids, RunPrediction(deliveries=[]), cap)
        p = t.p
        for item in spec.inputs:
            if item.event is None:
                if item.kind == "steer":
                    w.steer += 1
                else:
                    w.follow += 1
        if not spec.prompt and not (w.steer or w.follow) and w.last in ("answer", "none"):
            # run() refuses: nothing to continue (a UsageError, no transition).
            p.started = False
            p.states, p.turns, p.requests = set(), set(), {0}
            return p
        if spec.prompt:  # a prompt starts a new run: its limits count from zero
            w.requests = w.tool_calls = w.input_tokens = w.output_tokens = 0
        if self.limits is not None:
            p.labels.add("limits")
        if spec.decisions is not None and self._decided(p, spec.decisions):
            # Calls still wait for a decision: nothing runs or is sent.
            p.states, p.turns, p.requests, p.users = {"awaiting_approval"}, {w.turns}, {0}, {0}
            return p
        self._claim(t)
        state = self._start(t)
        while state is None:
            state = self._awaiting_model(t)
        p.states.add(state)
        p.turns = {w.turns}
        p.requests = {t.requests, t.requests + t.request_slack}
        p.users = {t.users}
        if w.turns >= cap:
            p.labels.add("hit_max_turns")
        if state == "max_turns":
            p.labels.add("state_max_turns")
        if "subagent" in p.labels and spec.prompt and spec.abort is None and not t.tree_unknown:
            p.tree_requests = w.requests  # the child runs' requests count in the parent's
        return p

    def _fire(self, t: Turns, event: AnchorEvent) -> bool:
        """Count an event; queue inputs anchored to it; True when the abort fires."""
        w, p, anchor = self.world, t.p, t.spec.abort
        t.counters[event] += 1
        for item in t.spec.inputs:
            if item.event == event and item.k == t.counters[event]:
                if item.kind == "steer":
                    w.steer += 1
                    p.labels.add("steer_during_run")
                else:
                    w.follow += 1
                    p.labels.add("follow_up_during_run")
        if anchor is not None and anchor.event == event and anchor.k == t.counters[event]:
            p.labels.add("anchor_fired")
            return True
        return False

    def _maybe(self, t: Turns, event: AnchorEvent) -> None:
        """An event that may or may not happen (a start announced for a call that never runs,
        after an abort): input anchored to it may or may not be queued."""
        anchor = t.spec.abort
        t.counters[event] += 1
        if any(i.event == event and i.k == t.counters[event] for i in t.spec.inputs):
            self.world.uncertain = True
        if anchor is not None and anchor.event == event and anchor.k == t.counters[event]:
            t.p.labels.add("anchor_maybe")  # the run is aborting already

    def _claim(self, t: Turns) -> None:
        """What a run does as it is claimed, before ``start``: a given history that ended
        mid-batch is answered, then the prompt (or a continuation) and queued input."""
        w, p, spec = self.world, t.p, t.spec
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
            t.users += 1
            w.last = "user"
            w.paused = False
            t.users += self._inject(p, follow_too=False)  # steering left queued: after the prompt
        elif w.paused:
            p.labels.add("continue_pause")  # the paused response goes back first, input waits
        elif w.last == "cut":
            # Continuing a cut answer: a user message asks the model to go on (as the run would
            # have), then queued steering follows it.
            p.labels.add("continue_cut")
            t.users += 1
            w.last = "user"
            t.users += self._inject(p, follow_too=False)
        else:
            t.users += self._inject(p, follow_too=True)

    def _start(self, t: Turns) -> str | None:
        """The ``start`` trigger."""
        p = t.p
        hit = None if t.spec.decisions is not None else self._request_hit()
        if hit is not None:
            # start [usage_limit] -> max_turns: a usage limit keeps the first request from
            # being sent.
            self._limit_stop(p, hit)
            p.labels.add("limit_at_start")
            return "max_turns"
        if not t.spec.prompt and self.world.turns >= t.cap:
            # start [turn_limit] -> max_turns: a run continued without a prompt keeps counting
            # its turns: at its cap it stops before any request.
            p.labels.add("max_turns_at_start")
            return "max_turns"
        return None  # start [start] -> awaiting_model

    def _awaiting_model(self, t: Turns) -> str | None:
        """The ``awaiting_model`` state's effect (``request_model``): one request, retried after a
        transient failure, then ``model_replied``; ``abort`` and ``fail`` leave it."""
        w, p, steps = self.world, t.p, t.spec.steps
        if t.aborted:
            return "aborted"  # abort [abort] -> aborted
        if self._fire(t, "turn_start"):
            # abort [abort] -> aborted: aborted before its request, nothing more is sent (it
            # may already be in flight).
            t.request_slack = 1
            p.labels.add("abort_before_request")
            if self.transform == "raise":
                p.states.add("failed")  # building the request and the abort race
                p.exact = False
            return "aborted"
        if self.transform == "raise":
            # fail [fail] -> failed: the request is never sent, the run fails saying the
            # transform_context hook failed.
            p.labels.add("raising_transform")
            w.last = "open"
            return "failed"
        attempt = 0
        failed = False
        step: Step | None = None
        while True:
            attempt += 1
            step = steps[t.step_i] if t.step_i < len(steps) else None
            t.step_i += 1
            t.requests += 1
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
            w.last = "open"
            return "failed"  # fail [fail] -> failed: a provider failure
        call_ids = list(t.ids[t.step_i - 1])
        w.turns += 1
        if self.limits is not None:  # each response reports its usage
            w.input_tokens += INPUT_TOKENS
            w.output_tokens += OUTPUT_TOKENS
        w.last = "open" if step.calls else after_answer(step.kind)
        w.paused = step.kind == PAUSE_TURN and not step.calls
        if self._fire(t, "response"):
            t.aborted = True
            p.labels.add("abort_at_response")
        return self._model_replied(t, step, call_ids)

    def _model_replied(self, t: Turns, step: Step, call_ids: list[str]) -> str | None:
        """The ``model_replied`` trigger: its branches, in the table's order where the rules
        fix one."""
        w, p = self.world, t.p
        stop = step.kind
        has_calls = bool(step.calls)
        queued = bool(w.steer or w.follow)
        if t.aborted and not has_calls:
            return "aborted"  # abort [abort] -> aborted: the abort came with an answer
        if stop == REFUSAL:
            # model_replied [refusal] -> done: the refusal's calls are answered, never run.
            p.labels.add("refusal_with_calls" if has_calls else "refusal")
            for call_id in call_ids:
                p.results[call_id] = {"refused"}
            if has_calls:
                p.order.append(call_ids)
                w.last = "result"
            return "done"
        unknown_with_calls = has_calls and stop not in KNOWN_STOPS  # answered first
        if self.limits is not None and not t.aborted and not unknown_with_calls:
            # model_replied [usage_limit] -> max_turns. After the refusal and unknown-stop
            # rules, before any other: a batch that a limit keeps from running (each call
            # answered with the limit's text), or a continuation or queued input whose request
            # a limit forbids.
            hit = None
            acting = has_calls and not (stop in TRUNCATING and self.policy == "stop")
            if acting:
                hit = self._calls_hit(calls_that_run(stop, len(call_ids)))
                if hit is not None:
                    for call_id in call_ids:
                        p.results[call_id] = {"limit"}
                        p.texts[call_id] = limit_text(hit)
            elif (
                (stop == PAUSE_TURN and t.continuations < self.max_continuations)
                or (
                    stop in TRUNCATING
                    and self.policy == "continue"
                    and t.continuations < self.max_continuations
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
                return "max_turns"
        if stop == CONTEXT_WINDOW:
            # model_replied [context_window] -> done. Cut by the context window (automatic
            # compaction off): never continued like a token-limit cut; its calls are answered as
            # not run (a trailing cut one as cut by the window) and the run ends done with an
            # error saying how to go on.
            p.labels.add("context_window_with_calls" if has_calls else "context_window")
            n = len(call_ids)
            for i, call_id in enumerate(call_ids):
                p.results[call_id] = {"window_cut" if i == n - 1 else "window_not_run"}
            if has_calls:
                p.order.append(call_ids)
                w.last = "result"
            return "done"
        if has_calls and stop not in KNOWN_STOPS:
            # model_replied [unknown_stop_reason] -> done: nothing says its calls are complete,
            # none runs; each is answered "not run" (an abort as it came changes nothing).
            p.labels.add("unknown_stop_with_calls")
            for call_id in call_ids:
                p.results[call_id] = {"unknown_stop"}
            p.order.append(call_ids)
            w.last = "result"
            return "done"
        if has_calls and stop in TRUNCATING and self.policy == "stop":
            # max_tokens_policy="stop": a cut response is not acted on (no ``tool_calls``). Its
            # calls are answered as not run (the cut one as truncated); then it is a response
            # without calls.
            p.labels.add("max_tokens_stop_with_calls")
            p.labels.add("truncated_call")
            n = len(call_ids)
            for i, call_id in enumerate(call_ids):
                p.results[call_id] = {"truncated" if i == n - 1 else "stopped_not_run"}
            p.order.append(call_ids)
            w.last = "result"
            has_calls = False
            if t.aborted:
                # An abort as it came: the branches after the response still decide
                # (``turn_limit`` with queued input, ``abort`` of queued input's delivery,
                # ``final_answer``).
                if w.turns >= t.cap and queued:
                    return "max_turns"
                return "aborted" if queued else "done"
        if has_calls:
            # model_replied [tool_calls] -> executing_tools
            if stop != "tool_use":
                p.labels.add(f"calls_with_{stop}")
            return self._executing_tools(t, step, call_ids)
        return self._answer_replied(t, stop, queued)

    def _answer_replied(self, t: Turns, stop: str, queued: bool) -> str | None:
        """The ``model_replied`` branches of a response without calls to run."""
        w, p = self.world, t.p
        can_pause = stop == PAUSE_TURN and t.continuations < self.max_continuations
        can_more = (
            stop in TRUNCATING
            and self.policy == "continue"
            and t.continuations < self.max_continuations
        )
        if stop == PAUSE_TURN:
            p.labels.add("pause_turn" if can_pause else "pause_turn_past_cap")
        if stop in TRUNCATING:
            p.labels.add(f"max_tokens_{self.policy}" if can_more else "max_tokens_past_cap")
        if w.turns >= t.cap and (can_pause or can_more or queued):
            # model_replied [turn_limit] -> max_turns (turn_limit_before_continuing)
            p.labels.add("max_turns_before_continuing")
            return "max_turns"
        if can_pause:
            t.continuations += 1
            return None  # model_replied [pause_turn] -> awaiting_model
        if stop == PAUSE_TURN:
            # model_replied [continuation_limit] -> max_turns: past max_continuations the model
            # is still working, not an answer.
            return "max_turns"
        if can_more:
            # model_replied [max_tokens] -> awaiting_model: a user message asks it to go on.
            t.continuations += 1
            t.users += 1
            w.last = "user"
            return None
        if queued:
            # model_replied [queued_input] -> awaiting_model
            t.users += self._inject(p, follow_too=True)
            return None
        if stop not in ("end_turn", "stop_sequence", "tool_use", "pause_turn", *TRUNCATING):
            p.labels.add("unknown_stop_reason")
        return "done"  # model_replied [final_answer] -> done

    def _executing_tools(self, t: Turns, step: Step, call_ids: list[str]) -> str | None:
        """The ``executing_tools`` state's effect (``run_tools``, `_run_tools`), then the
        ``tools_finished`` trigger."""
        w, p = self.world, t.p
        if not t.aborted:
            w.tool_calls += calls_that_run(step.kind, len(call_ids))  # as run_tools counts
        counts = self._plan_children(t, step, call_ids)
        terminate, t.aborted = self._run_tools(
            p,
            step,
            call_ids,
            lambda event: self._fire(t, event),
            lambda event: self._maybe(t, event),
            aborted_before=t.aborted,
        )
        if set(self.child_outcomes) - p.ran_must:
            t.tree_unknown = True  # a planned child run may not have run
        if counts is not None and not t.aborted:
            # What the child runs used is added to the parent's counts as each call ends.
            w.requests, w.tool_calls, w.input_tokens, w.output_tokens = counts
        if w.pending is not None:
            # tools_finished [deferred] -> awaiting_approval: deferred calls wait for a person,
            # the batch's results wait with them.
            return "awaiting_approval"
        w.last = "result"
        if t.aborted:
            return "aborted"  # abort [abort] -> aborted: an abort inside the batch
        return self._tools_finished(t, step, call_ids, terminate=terminate)

    def _plan_children(
        self, t: Turns, step: Step, call_ids: list[str]
    ) -> tuple[int, int, int, int] | None:
        """Predict the child run of each ``delegate`` call of a batch that would run it, one
        after the other (a sub-agent's calls are serialized), each counting from the counts
        the one before left; the counts after the last, None without such a call."""
        self.child_outcomes, self.child_aborted = {}, set()
        if self.child is None:
            return None
        w, p = self.world, t.p
        counts = (w.requests, w.tool_calls, w.input_tokens, w.output_tokens)
        signalled = t.spec.abort is not None and t.spec.abort.how == "abort"
        n = len(step.calls)
        ran = False
        for i, (call, call_id) in enumerate(zip(step.calls, call_ids, strict=True)):
            truncated = step.kind in TRUNCATING and i == n - 1
            if call.tool != "delegate" or self.static(call, call_id, truncated) is not None:
                continue
            if self._before(call, call_id) != "allow":
                continue
            outcome = predict_child(self.child, self.limits, counts, usage=self.usage)
            self.child_outcomes[call_id] = outcome
            counts = (
                outcome.requests,
                outcome.tool_calls,
                outcome.input_tokens,
                outcome.output_tokens,
            )
            ran = True
            p.labels.add("subagent")
            p.labels.add(f"subagent_{outcome.state}")
            if outcome.hit is not None:
                p.labels.add("subagent_limit")  # a limit reached inside the child stops it
            p.fragments[call_id] = {
                f"child_{outcome.state}": child_fragments(outcome),
                "child_aborted": ([ABORTED_CHILD], []),  # the parent's abort, its reason
            }
            p.finished[call_id] = self.finished_kinds(call, call_id, signalled=signalled)
        return counts if ran else None

    def _tools_finished(
        self, t: Turns, step: Step, call_ids: list[str], *, terminate: bool
    ) -> str | None:
        """The ``tools_finished`` trigger's branches after a batch that was not aborted."""
        p = t.p
        if not terminate:
            finish = self._finishes(step, call_ids)
            if finish:
                # tools_finished [terminating_result] -> done: a result marked terminate=True
                # ends the run, before the turn cap and should_continue are read (a terminating
                # denial would have won).
                p.labels.add("terminating_result")
                if finish == "maybe":
                    p.exact = False
                    p.states.add("done")
                else:
                    return "done"
        if self.should_continue == "stop":
            # tools_finished [turn_limit] -> max_turns: should_continue said stop.
            p.labels.add("should_continue_stop")
            return "max_turns"
        if self.world.turns >= t.cap:
            # tools_finished [turn_limit] -> max_turns: the turn cap.
            p.labels.add("max_turns_after_batch")
            return "max_turns"
        if terminate:
            return "aborted"  # tools_finished [terminated] -> aborted: a terminating denial
        if self.should_continue == "raise":
            # tools_finished [hook_failed] -> failed: a failing should_continue hook ends a run
            # that would have gone on.
            p.labels.add("raising_should_continue")
            return "failed"
        hit = self._request_hit()
        if hit is not None:
            # tools_finished [usage_limit] -> max_turns: the next request is not sent.
            self._limit_stop(p, hit)
            return "max_turns"
        # tools_finished [next_turn] -> awaiting_model: steering is delivered.
        t.users += self._inject(p, follow_too=False)
        return None


def calls_that_run(stop: str, calls: int) -> int:
    """How many of a response's ``calls`` count toward ``max_tool_calls``: the calls that run.
    None of a response cut by the context window runs (each is answered as not run), nor the
    trailing call a token-limit cut truncated."""
    if stop == CONTEXT_WINDOW:
        return 0
    return calls - 1 if stop in TRUNCATING and calls else calls
