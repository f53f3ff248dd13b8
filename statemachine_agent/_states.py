"""The names of the loop's states and triggers (a leaf module: the effects and the machine share it)."""

from __future__ import annotations

from enum import StrEnum


class State(StrEnum):
    """The built-in states of an agent.

    ``idle`` (constructed, no run yet) -> ``awaiting_model`` (a model request is in flight) ->
    ``executing_tools`` (the tool calls of the last response are running) -> ``awaiting_model`` ...
    until a terminal state ends the run. ``awaiting_approval`` (deferred calls wait for a person's
    decision) ends a run without ending its work: ``agent.run(decisions=...)`` continues it, in this
    process or another. ``compacting`` (automatic compaction) replaces the older history with a
    summary before a request, then goes back to ``awaiting_model``. Terminal states: ``done`` (the
    model answered and nothing is queued, a result marked ``terminate=True`` ended the run, tool
    calls came with an unknown stop reason, or a response was cut by the context window with
    compaction off), ``aborted`` (an abort, a cancelled task, a ``KeyboardInterrupt`` or ``SystemExit`` in a
    tool or a hook, or a terminating denial), ``max_turns`` (the turn cap, a usage limit, ``should_continue``, or the ``pause_turn``
    continuation cap), ``failed`` (the provider failed for good, or a bug escaped). A terminal
    state ends a run, not the agent: ``start`` leaves each of them.
    """

    IDLE = "idle"
    AWAITING_MODEL = "awaiting_model"
    EXECUTING_TOOLS = "executing_tools"
    AWAITING_APPROVAL = "awaiting_approval"
    COMPACTING = "compacting"
    DONE = "done"
    ABORTED = "aborted"
    MAX_TURNS = "max_turns"
    FAILED = "failed"


TERMINAL_STATES: frozenset[State] = frozenset(
    {State.DONE, State.ABORTED, State.MAX_TURNS, State.FAILED}
)
"""States that end a run (not the agent: ``start`` leaves each of them)."""

RUN_STOPS: frozenset[State] = frozenset({*TERMINAL_STATES, State.AWAITING_APPROVAL})
"""States a run returns in: the terminal ones and ``awaiting_approval``."""


class Trigger(StrEnum):
    """The built-in triggers. An effect returns the trigger to fire next."""

    START = "start"
    MODEL_REPLIED = "model_replied"
    TOOLS_FINISHED = "tools_finished"
    ABORT = "abort"
    FAIL = "fail"
    DECIDED = "decided"
    COMPACT = "compact"
    COMPACTED = "compacted"
