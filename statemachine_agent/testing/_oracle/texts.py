"""The oracle's shared texts and figures: stop-reason sets, tool timings, hook texts and the
exact text of each fixed result kind."""

from __future__ import annotations

from ..._compacting import CUT_BY_WINDOW, NOT_RUN_WINDOW
from ..._execution import OWN_CANCELLATION
from ..._messages import StopReason
from ..._protocol import (
    AFTER_TERMINATION,
    INTERRUPTED,
    NO_RESULT,
    NOT_RUN,
    NOT_RUN_PENDING,
    REFUSED,
    STOPPED_NOT_RUN,
    TRUNCATED,
    unknown_stop_reason_text,
)

NO_RESULT_TEXT = NO_RESULT
"""The synthetic result the projection gives a call without one."""
CONTEXT_WINDOW = "model_context_window_exceeded"
TRUNCATING = frozenset({"max_tokens", CONTEXT_WINDOW})
PAUSE_TURN = StopReason.PAUSE_TURN.value
REFUSAL = StopReason.REFUSAL.value
KNOWN_STOPS = frozenset(
    {"end_turn", "tool_use", "stop_sequence", "pause_turn", "refusal", *TRUNCATING}
)
ERROR_STEPS = frozenset({"overloaded", "cut", "invalid_request"})
RETRYABLE = frozenset({"overloaded", "cut"})
TIMEOUT_SECONDS = 0.002
HANG_SECONDS = 0.02
COOPERATE_CHUNKS = 3
"""The cooperative job's chunks of work (1 ms each), with ``ctx.signal.raise_if_aborted()``
before each."""
GRACE_SECONDS = {"short": 0.002, "realistic": 1.0}
"""``abort_grace_seconds`` of a scenario's agent, by `Scenario.grace`."""
INPUT_TOKENS, OUTPUT_TOKENS = 20, 10
"""The usage each response reports in a scenario with `Limits` (tokens)."""
EDITED = "out-edited"
"""The text argument an ``edit`` decision gives the call (``Approve(arguments=...)``)."""
DENY_REASON = "a person denies call"
"""A ``deny`` decision's reason, followed by the call's id."""
HOOK_DENIES = "the oracle's hook denies call"
"""The scenario's before hook's denial reason (``deny``), followed by the call's id."""
HOOK_TERMINATES = "the oracle's hook ends the run at call"
"""The reason of its terminating denial (``terminate``), followed by the call's id."""
REWRITTEN = "after-rewritten"
"""The result text the scenario's after hook gives (``rewrite``), followed by the call's id."""


# -- what each result says --------------------------------------------------------------------

FIXED_TEXTS: dict[str, str] = {
    "truncated": TRUNCATED,
    "stopped_not_run": STOPPED_NOT_RUN,
    "window_cut": CUT_BY_WINDOW,
    "window_not_run": NOT_RUN_WINDOW,
    "unknown_stop": unknown_stop_reason_text("brand_new_reason"),
    "refused": REFUSED,
    "not_run": NOT_RUN,
    "after_termination": AFTER_TERMINATION,
    "not_run_pending": NOT_RUN_PENDING,
    "interrupted": INTERRUPTED,
    "own_cancel": f"CancelledError: {OWN_CANCELLATION}",
    "no_result": NO_RESULT,
    "stopped": "stopped early: the run was aborted",
    "timeout": (
        f"Timed out: tool 'limited' ran longer than {TIMEOUT_SECONDS:g} s and was cancelled; it "
        "may have partly completed."
    ),
    "before_failed": (
        "The before_tool_call hook failed (RuntimeError: the oracle's before hook raised); the "
        "call was not completed."
    ),
    "after_failed": (
        "The after_tool_call hook failed (RuntimeError: the oracle's after hook raised); the "
        "call was not completed."
    ),
    "unknown_tool": "Unknown tool 'nope'. Available tools: job, limited, write.",
}


def limit_text(hit: tuple[str, int, int, int]) -> str:
    """The result of a call a usage limit kept from running (`LimitHit.call_text`'s wording):
    ``Not run: the usage limit NAME=VALUE was reached: USED used[, WANTED more wanted].``"""
    name, value, used, wanted = hit
    more = f", {wanted} more wanted" if wanted else ""
    return f"Not run: the usage limit {name}={value} was reached: {used} used{more}."
