"""The predictor's rules for one call (what its result is), usage limits and queued input: the
base of `Oracle`."""

from __future__ import annotations

from collections.abc import Sequence

from .scenario import Call, Child, Limits, RunSpec, Step
from .subagent import ChildOutcome, child_kind
from .texts import TRUNCATING
from .tools import call_block, job_behaviour, limited_behaviour, tag_of
from .world import Declared, RunPrediction, World


class CallRules:
    """The options the predictor reads, its `World`, and the rules for one call, usage limits and
    queued input (`Oracle` adds the batch and the run).

    Args:
        max_turns, max_continuations, max_tokens_policy, mode: the agent's options.
        model_retries: retries of a retryable model failure (the kit uses 1).
        declared: the user's hooks (`Declared`), for kit runs.
    """

    def __init__(
        self,
        *,
        max_turns: int = 50,
        max_continuations: int = 3,
        max_tokens_policy: str = "continue",
        mode: str = "parallel",
        model_retries: int = 1,
        declared: Declared | None = None,
        should_continue: str = "none",
        transform: str = "none",
        steering_mode: str = "all",
        follow_up_mode: str = "one_at_a_time",
        limits: Limits | None = None,
        child: Child | None = None,
        usage: bool = False,
    ) -> None:
        self.limits = limits
        self.child = child
        self.usage = usage  # each response reports its usage (limits or compaction)
        # The child run of each ``delegate`` call of the batch being predicted, and the calls
        # an anchor inside their child run aborted (`BatchRules`).
        self.child_outcomes: dict[str, ChildOutcome] = {}
        self.child_aborted: set[str] = set()
        self.steering_mode = steering_mode
        self.follow_up_mode = follow_up_mode
        self.should_continue = should_continue
        self.transform = transform
        self.max_turns = max_turns
        self.max_continuations = max_continuations
        self.policy = max_tokens_policy
        self.mode = mode
        self.model_retries = model_retries
        self.declared = declared or Declared()
        self.world = World()

    # -- per call -------------------------------------------------------------------------

    def _before(self, call: Call, call_id: str) -> str:
        if call.before != "allow":
            return call.before
        name, args = call.tool, call_block(call, call_id)["input"]
        decision = self.declared.before_of(name, args)
        return "user_rewrite" if decision == "rewrite" else decision

    def _after(self, call: Call, call_id: str) -> str:
        if call.after != "keep":
            return call.after
        decision = self.declared.after_of(call.tool, call_block(call, call_id)["input"])
        return "user_rewrite" if decision == "rewrite" else decision

    def static(self, call: Call, call_id: str, truncated: bool) -> str | None:
        """The result of a call that never reaches its tool, or None when it would run."""
        if truncated:
            return "truncated"
        if call.tool == "nope":
            return "unknown_tool"
        if call.args != "valid":
            return "invalid"
        before = self._before(call, call_id)
        if before in ("deny", "terminate"):
            return "denied"
        if before == "raise":
            return "before_failed"
        return None

    def _tag_of(self, call: Call, call_id: str) -> str:
        before = self._before(call, call_id)
        if before == "rewrite":
            return "out-rw"
        if before == "user_rewrite":
            return "*"
        return tag_of(call_id)

    def executed(self, call: Call, call_id: str) -> str:
        """What the tool itself gives when it runs undisturbed."""
        tag = self._tag_of(call, call_id)
        if call.tool == "limited":
            behaviour = limited_behaviour(call)
            if behaviour == "slow":
                return "timeout"
            return f"error[{tag}]" if behaviour == "raise" else f"ok[{tag}]"
        if call.tool == "write":
            return f"ok[{tag}]"
        if call.tool == "delegate":
            outcome = self.child_outcomes.get(call_id)
            return "child_failed" if outcome is None else child_kind(outcome, tag)
        behaviour = job_behaviour(call)
        if behaviour == "cancel_itself":
            return "own_cancel"
        if behaviour == "raise":
            return f"error[{tag}]"
        if behaviour == "tool_error":
            return f"tool_error[{tag}]"
        return f"ok[{tag}]"

    def graceful(self, call: Call, call_id: str) -> set[str]:
        """What the tool may give when the run is aborted while it runs (it sees the signal and
        gets the grace period, then is cancelled: interrupted)."""
        normal = self.executed(call, call_id)
        out = {normal, "interrupted"}
        if call.tool == "job" and call.behaviour == "sleep":
            out.add("stopped")
        if call.tool == "delegate":
            out.add("child_aborted")  # the parent's abort reaches the child run
        return out

    def finished_kinds(self, call: Call, call_id: str, *, signalled: bool) -> set[str]:
        """The kinds of a call whose tool ran to its end and whose ``after_tool_call`` hook
        returned: what it gives undisturbed. With ``signalled`` (the run's abort signal may have
        been set while it ran) also what a tool that sees the signal gives: the sleeping job stops
        early, a tool's own `asyncio.CancelledError` counts as interrupted."""
        kinds = {self.executed(call, call_id)}
        if signalled and call.tool == "delegate":
            kinds.add("child_aborted")
        if signalled and call.tool == "job":
            if call.behaviour == "sleep":
                kinds.add("stopped")
            if call.behaviour in ("cancel_itself", "cooperate"):
                kinds.add("interrupted")  # it raised CancelledError once the run was aborted
        return {self._after_kind(call, call_id, kind) for kind in kinds}

    def _finished(self, spec: RunSpec, ids: Sequence[Sequence[str]]) -> dict[str, set[str]]:
        """`finished_kinds` of every call of ``spec`` that reaches its tool when it runs. The
        signal can be set only by an ``abort`` anchor or a before hook that aborts (a
        cancellation of the task does not set it)."""
        signalled = (spec.abort is not None and spec.abort.how == "abort") or any(
            call.before == "abort" for step in spec.steps for call in step.calls
        )
        out: dict[str, set[str]] = {}
        for step, call_ids in zip(spec.steps, ids, strict=False):
            n = len(step.calls)
            for i, (call, call_id) in enumerate(zip(step.calls, call_ids, strict=True)):
                truncated = step.kind in TRUNCATING and i == n - 1
                if self.static(call, call_id, truncated) is None:
                    out[call_id] = self.finished_kinds(call, call_id, signalled=signalled)
        return out

    def _after_kind(self, call: Call, call_id: str, result: str) -> str:
        after = self._after(call, call_id)
        if after in ("rewrite", "readdress"):
            return "rewritten"  # addressed to this call whatever id the hook's message had
        if after == "user_rewrite":
            return "ok[*]" if not result.startswith("ok[") else result.split("[")[0] + "[*]"
        if after == "raise":
            return "after_failed"
        return result

    def normal(self, call: Call, call_id: str, truncated: bool) -> str:
        """A call's result when nothing stops the batch."""
        static = self.static(call, call_id, truncated)
        if static is not None:
            return static
        return self._after_kind(call, call_id, self.executed(call, call_id))

    def _after_set(self, call: Call, call_id: str, kinds: set[str]) -> set[str]:
        # The after hook sees whatever the call produced, an abort's result included; a call
        # cancelled after the grace period never reaches it.
        return kinds | {self._after_kind(call, call_id, k) for k in kinds}

    # -- usage limits (the `UsageLimits` docstring: when each is checked, what it counts) ------

    def _token_hit(self) -> tuple[str, int, int, int] | None:
        # A token limit is exceeded (used > value), counted after each response.
        w, limits = self.world, self.limits
        if limits is None:
            return None
        for name, used in (
            ("max_output_tokens", w.output_tokens),
            ("max_total_tokens", w.input_tokens + w.output_tokens),
        ):
            value = getattr(limits, name)
            if value is not None and used > value:
                return name, value, used, 0
        return None

    def _request_hit(self) -> tuple[str, int, int, int] | None:
        # Before a request: max_requests reached (one more wanted), or a token limit exceeded.
        w, limits = self.world, self.limits
        if limits is None:
            return None
        if limits.max_requests is not None and w.requests + 1 > limits.max_requests:
            return "max_requests", limits.max_requests, w.requests, 1
        return self._token_hit()

    def _calls_hit(self, wanted: int) -> tuple[str, int, int, int] | None:
        # Before a batch runs: a token limit exceeded, or the whole batch would take the run
        # past max_tool_calls (checked per batch, not per call).
        w, limits = self.world, self.limits
        if limits is None:
            return None
        hit = self._token_hit()
        if hit is not None:
            return hit
        value = limits.max_tool_calls
        if value is not None and w.tool_calls + wanted > value:
            return "max_tool_calls", value, w.tool_calls, wanted
        return None

    def _limit_stop(self, p: RunPrediction, hit: tuple[str, int, int, int]) -> None:
        name, value, used, _wanted = hit
        p.labels.add("limit_tokens" if name.endswith("_tokens") else f"limit_{name}")
        if name == "max_tool_calls" and used < value:
            p.labels.add("limit_batch_crossing")  # room was left, the batch would cross it

    def _finishes(self, step: Step, call_ids: Sequence[str]) -> str:
        """Whether a batch that ran undisturbed has a result marked ``terminate=True``: "yes",
        "maybe" (a user's after hook rewrote it: its own return decides) or ""."""
        out = ""
        n = len(step.calls)
        for i, (call, call_id) in enumerate(zip(step.calls, call_ids, strict=True)):
            if call.tool != "job" or call.behaviour != "finish":
                continue
            if self.static(call, call_id, step.kind in TRUNCATING and i == n - 1) is not None:
                continue
            after = self._after(call, call_id)
            if after in (
                "keep",
                "rewrite",
                "readdress",
            ):  # a ToolResultMessage keeps the tool's choice
                return "yes"
            if after == "user_rewrite":
                out = "maybe"
        return out

    def _inject(self, p: RunPrediction, *, follow_too: bool) -> int:
        # Steering lands whole after a batch (or a response without calls); one follow-up lands
        # when the model would otherwise stop.
        w = self.world
        if w.steer:
            n = w.steer if self.steering_mode == "all" else 1
            if w.follow:
                p.labels.add("steer_and_follow_up_queued")  # steering goes first
            w.steer -= n
            w.last = "user"
            w.paused = False
            p.labels.add("steer_injected")
            if p.deliveries is not None:
                p.deliveries += ["steer"] * n
            return n
        if follow_too and w.follow:
            n = w.follow if self.follow_up_mode == "all" else 1
            w.follow -= n
            w.last = "user"
            w.paused = False
            p.labels.add("follow_up_injected")
            if p.deliveries is not None:
                p.deliveries += ["follow_up"] * n
            return n
        return 0
