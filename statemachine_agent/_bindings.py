"""The functions the transition table's names stand for (`EffectName`, `ActionName`): the run
layer binds them (`_machine.bind_steps`) so the table, below the effects, names them as data."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from . import _compacting as cx
from . import _effects as fx
from ._definition import ActionName, EffectName

BUILTIN_STEPS: dict[str, Callable[..., Any]] = {
    EffectName.REQUEST_MODEL: fx.request_model,
    EffectName.RUN_TOOLS: fx.run_tools,
    EffectName.AWAIT_DECISIONS: fx.await_decisions,
    EffectName.COMPACT_CONTEXT: cx.compact_context,
    EffectName.SETTLE: fx.settle,
    ActionName.ANSWER_PENDING: fx.answer_pending,
    ActionName.ANSWER_REFUSED: fx.answer_refused,
    ActionName.ANSWER_UNKNOWN_STOP_REASON: fx.answer_unknown_stop_reason,
    ActionName.ASK_FOR_OUTPUT: fx.ask_for_output,
    ActionName.CONTINUE_PAUSED: fx.continue_paused,
    ActionName.CONTINUE_TRUNCATED: fx.continue_truncated,
    ActionName.DELIVER_QUEUED: fx.deliver_queued,
    ActionName.DELIVER_STEERING: fx.deliver_steering,
    ActionName.FINAL_TURN_AT_TURN_LIMIT: fx.final_turn_at_turn_limit,
    ActionName.FINAL_TURN_AT_USAGE_LIMIT: fx.final_turn_at_usage_limit,
    ActionName.NOTE_ABORT: fx.note_abort,
    ActionName.NOTE_CONTINUATION_LIMIT: fx.note_continuation_limit,
    ActionName.NOTE_FINAL_ANSWER: fx.note_final_answer,
    ActionName.NOTE_FINAL_TURN: fx.note_final_turn,
    ActionName.NOTE_HOOK_FAILED: fx.note_hook_failed,
    ActionName.NOTE_OUTPUT_INVALID: fx.note_output_invalid,
    ActionName.NOTE_TERMINATED: fx.note_terminated,
    ActionName.NOTE_TERMINATING_RESULT: fx.note_terminating_result,
    ActionName.NOTE_TURN_LIMIT: fx.note_turn_limit,
    ActionName.NOTE_TURN_LIMIT_AT_START: fx.note_turn_limit_at_start,
    ActionName.NOTE_USAGE_LIMIT: fx.note_usage_limit,
    ActionName.ANSWER_WINDOW_CUT: cx.answer_window_cut,
    ActionName.NOTE_CONTEXT_WINDOW: cx.note_context_window,
}
"""Each built-in effect's and action's function, by its name in the table."""
