"""The predictor's rules for a tool batch (``executing_tools``) and decisions on a held batch."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

from .calls import CallRules
from .scenario import AnchorEvent, Call, DecisionKind, Step
from .texts import DENY_REASON, EDITED, TRUNCATING
from .tools import tag_of
from .world import RunPrediction


class BatchRules(CallRules):
    """The ``executing_tools`` state's effect (``run_tools``) and the ``decided`` trigger."""

    def _run_tools(
        self,
        p: RunPrediction,
        step: Step,
        call_ids: list[str],
        fire: Callable[[AnchorEvent], bool],
        maybe: Callable[[AnchorEvent], None],
        *,
        aborted_before: bool,
    ) -> tuple[bool, bool]:
        """Predict one batch into ``p``; returns (terminate requested, aborted)."""
        calls = step.calls
        n = len(calls)
        truncated = [step.kind in TRUNCATING and i == n - 1 for i in range(n)]
        p.order.append(list(call_ids))
        sequential = self.mode == "sequential" or n == 1
        if n >= 2:
            p.labels.add(f"batch_of_{min(n, 4)}")
        for i, call in enumerate(calls):
            if truncated[i]:
                p.labels.add("truncated_call")
            if call.tool == "limited" and call.behaviour == "slow" and call.args == "valid":
                p.labels.add("timeout")
            if call.before in ("raise",) or call.after == "raise":
                p.labels.add("raising_hook")
            if call.before in ("deny", "terminate"):
                p.labels.add(f"hook_{call.before}")
            if call.before == "rewrite" or call.after == "rewrite":
                p.labels.add("hook_rewrite")
            if call.tool == "job" and call.behaviour == "cooperate" and call.args == "valid":
                p.labels.add("cooperative_tool")
            if call.after == "readdress" or (
                call.tool == "job" and call.behaviour == "message" and call.args == "valid"
            ):
                p.labels.add("readdressed_result")  # a result message built for another id
        tools_names = [c.tool for c in calls]
        if len(set(tools_names)) < len(tools_names):
            p.labels.add("one_tool_twice")
        if aborted_before:
            # Aborted as the response completed: no call starts; each is answered "not run" (a
            # call that cannot run may get its own error first).
            for _ in calls:
                maybe("tool_start")
            for i, (call, call_id) in enumerate(zip(calls, call_ids, strict=True)):
                static = self.static(call, call_id, truncated[i])
                kinds = {"not_run"} | ({static} if static else set())
                if static is None:
                    kinds = self._after_set(call, call_id, kinds)
                p.results[call_id] = kinds
                p.loose[call_id] = kinds
            p.labels.add("abort_with_calls_at_response")
            p.exact = False
            return False, True
        abort_at: int | None = None
        terminate_at: int | None = None
        for i, (call, call_id) in enumerate(zip(calls, call_ids, strict=True)):
            if sequential and (abort_at is not None or terminate_at is not None):
                break  # a sequential batch starts nothing after an abort or a terminating denial
            if abort_at is not None:
                maybe("tool_start")  # whether a call that will not run is announced is open
            elif fire("tool_start"):
                abort_at = i
                p.labels.add("abort_inside_batch")
            static = self.static(call, call_id, truncated[i])
            if static is None and self._before(call, call_id) == "abort" and abort_at is None:
                abort_at = i
                p.labels.add("abort_in_hook")
                p.labels.add("abort_inside_batch")
            if static is None and abort_at is None and self._child_fires(call, call_id, fire):
                abort_at = i  # the parent's abort, at a tool start inside this call's child run
                self.child_aborted.add(call_id)
                p.labels.add("subagent_abort")
            terminating = static == "denied" and self._before(call, call_id) == "terminate"
            if terminating and terminate_at is None:
                terminate_at = i
        run_order: list[str] = []
        keys: dict[str, list[str]] = {}
        deferred: list[str] = []
        for i, (call, call_id) in enumerate(zip(calls, call_ids, strict=True)):
            static = self.static(call, call_id, truncated[i])
            if static is None and self._before(call, call_id) == "defer" and abort_at is None:
                deferred.append(call_id)  # held for a decision: its tool does not run now
                p.results[call_id] = set()
                continue
            runs = static is None
            normal = self.normal(call, call_id, truncated[i])
            if abort_at is None:
                if terminate_at is not None and i > terminate_at:
                    if sequential:
                        p.results[call_id] = {"after_termination"}
                        continue
                    p.results[call_id] = {normal, "after_termination"}
                    p.exact = False
                    if runs:
                        p.ran_may.add(call_id)
                    continue
                p.results[call_id] = {normal}
                if runs:
                    p.ran_must.add(call_id)
                    run_order.append(call_id)
                    if call.tool == "write":
                        keys.setdefault(call.key, []).append(call_id)
                continue
            p.exact = False
            if sequential:
                if i < abort_at:
                    p.results[call_id] = {normal}
                    if runs:
                        p.ran_must.add(call_id)
                        run_order.append(call_id)
                elif i == abort_at:
                    kinds = {"not_run"} | ({static} if static else set())
                    if runs:
                        kinds = self._after_set(call, call_id, kinds | self.graceful(call, call_id))
                        p.ran_may.add(call_id)
                    p.results[call_id] = kinds
                    p.loose[call_id] = kinds
                else:
                    p.results[call_id] = {"not_run"}
                    p.loose[call_id] = {"not_run"}
                continue
            # Parallel: every call before the abort was started; each may have finished, still
            # run (and see the abort), or wait on its resource (then it never starts).
            if static is not None:
                kinds = {static, "not_run"}
            elif i < abort_at:
                kinds = self._after_set(
                    call, call_id, {normal, "not_run"} | self.graceful(call, call_id)
                )
                p.ran_may.add(call_id)
            elif i == abort_at:
                kinds = self._after_set(call, call_id, {"not_run"} | self.graceful(call, call_id))
                p.ran_may.add(call_id)
            else:
                kinds = self._after_set(call, call_id, {"not_run"})
                p.ran_may_after.add(call_id)
            p.results[call_id] = kinds
            p.loose[call_id] = kinds
        for call_id in self.child_aborted & set(call_ids):
            # Its child run was under way: aborted (the parent's grace may cancel the call).
            call = calls[call_ids.index(call_id)]
            p.results[call_id] = p.loose[call_id] = self._after_set(
                call, call_id, {"child_aborted", "interrupted"}
            )
            p.ran_must.add(call_id)
        if sequential:
            if len(run_order) > 1:
                p.ran_order.append(run_order)
        else:
            for same_key in keys.values():
                if len(same_key) > 1:
                    p.ran_order.append(same_key)
                    p.labels.add("write_queue")
        if terminate_at is not None:
            p.labels.add("terminating_denial")
            for c in deferred:  # a denial ended the run: nothing waits for a decision
                p.results[c] = {"after_termination"}
        if abort_at is not None:
            if any(
                c.tool == "job" and c.behaviour == "cooperate" and "interrupted" in p.results[cid]
                for c, cid in zip(calls, call_ids, strict=True)
            ):
                p.labels.add("cooperative_aborted")  # it may stop through raise_if_aborted()
            return False, True
        if deferred and terminate_at is None:
            # The batch is held: the results of the calls that ran wait with the deferred ones
            # and are added, in declaration order, once every call is decided.
            held = {c: next(iter(p.results.pop(c))) for c in call_ids if c not in deferred}
            for c in deferred:
                p.results.pop(c)
            p.order.pop()
            self.world.pending = (tuple(calls), list(call_ids), held, deferred)
            p.labels.add("approval_deferred")
        return terminate_at is not None, False

    def _child_fires(self, call: Call, call_id: str, fire: Callable[[AnchorEvent], bool]) -> bool:
        """Count the tool starts of a ``delegate`` call's child run; True when the parent's
        abort anchored to one of them fires."""
        outcome = self.child_outcomes.get(call_id)
        if call.tool != "delegate" or outcome is None or self._before(call, call_id) != "allow":
            return False
        return any(fire("child_tool_start") for _ in range(outcome.tool_starts))

    def _decided(self, p: RunPrediction, decisions: Sequence[tuple[str, DecisionKind]]) -> bool:
        """A run with decisions on a held batch: approved calls run (the before hook skipped:
        a person approved them; an edit runs with its arguments), denied ones are answered
        ``Denied: <reason>``. True while a call still waits; else every result of the batch is
        added in declaration order."""
        w = self.world
        assert w.pending is not None, "decisions without a held batch"
        calls, call_ids, held, waiting = w.pending
        for call_id, decision in decisions:
            call = calls[call_ids.index(call_id)]
            waiting.remove(call_id)
            p.labels.add(f"approval_{decision}")
            if decision == "deny":
                held[call_id] = "denied"
                p.texts[call_id] = f"Denied: {DENY_REASON} {call_id}"
                continue
            tag = EDITED if decision == "edit" else tag_of(call_id)
            edited = replace(call, behaviour="return", before="allow")
            kind = self.executed(
                edited if decision == "edit" else replace(call, before="allow"), call_id
            )
            kind = kind.replace(f"[{tag_of(call_id)}]", f"[{tag}]")
            held[call_id] = self._after_kind(call, call_id, kind)
            p.finished[call_id] = {held[call_id]}
            p.ran_must.add(call_id)
            p.approved[call_id] = decision
        if waiting:
            p.labels.add("approval_partial")
            return True
        for call_id in call_ids:
            p.results[call_id] = {held[call_id]}
        p.order.append(list(call_ids))
        w.pending = None
        w.last = "result"
        return False
