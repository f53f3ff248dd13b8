"""What the predictor produces (`RunPrediction`, `Prediction`), the state it keeps between runs
(`World`) and the user's hooks described to it (`Declared`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from .kinds import Token
from .scenario import Call, DecisionKind
from .texts import PAUSE_TURN, TRUNCATING

# -- the reference model -----------------------------------------------------------------------


@dataclass
class RunPrediction:
    """What the rules say one run does.

    Attributes:
        started: False when ``run()`` refuses (nothing to continue).
        states: the allowed final states.
        cancelled: the allowed values of "the task was cancelled".
        turns: the allowed ``RunResult.turns``.
        requests: the allowed numbers of model requests.
        results: per call answered in the run, the allowed result kinds.
        order: the calls of each answered batch, in declaration order.
        ran_must, ran_may: calls whose tool must run / may run (no other may).
        ran_order: sequences of call ids whose tools must start in that order.
        users: the allowed numbers of user messages the run adds (prompt, steering, follow-ups,
            continue prompts), None when not predicted.
        exact: no timing-dependent outcome (an example the exhaustive mode can pin down).
        labels: what the scenario exercised (for `hypothesis.event` and coverage).
        finished: per call that may run, the kinds its result may have when the runner saw its
            tool and its ``after_tool_call`` hook return (the call finished): a finished call's
            result is kept whenever the run stops, by an abort or a cancellation. A call whose
            tool started and never finished is "interrupted".
        texts: per call a usage limit kept from running, the limit's exact text.
        deliveries: the queued input the run delivers, in order (``steer``, ``follow_up``),
            None when not predicted.
        approved: per call a decision of this run approved, how (approve or edit).
        fragments: per ``delegate`` call, by the kind of its error result, what it must say
            (the child's state and why) and must not say.
        tree_requests: the requests of the whole run tree (the parent's and its child runs',
            ``RunResult.counts.requests``), None when not predicted.
    """

    started: bool = True
    states: set[str] = field(default_factory=set)
    cancelled: set[bool] = field(default_factory=lambda: {False})
    turns: set[int] = field(default_factory=set)
    requests: set[int] = field(default_factory=set)
    results: dict[str, set[str]] = field(default_factory=dict)
    order: list[list[str]] = field(default_factory=list)
    ran_must: set[str] = field(default_factory=set)
    ran_may: set[str] = field(default_factory=set)
    ran_order: list[list[str]] = field(default_factory=list)
    users: set[int] | None = None
    exact: bool = True
    labels: set[str] = field(default_factory=set)
    loose: dict[str, set[str]] = field(default_factory=dict)
    ran_may_after: set[str] = field(default_factory=set)
    results_optional: set[str] = field(default_factory=set)
    finished: dict[str, set[str]] = field(default_factory=dict)
    texts: dict[str, str] = field(default_factory=dict)
    deliveries: list[str] | None = None
    approved: dict[str, DecisionKind] = field(default_factory=dict)
    fragments: dict[str, dict[str, tuple[list[str], list[str]]]] = field(default_factory=dict)
    tree_requests: int | None = None


@dataclass
class Prediction:
    """The oracle's answer for a scenario: one `RunPrediction` per run. None for a run after a
    cancellation (the first run's end is timing-dependent: checked by the invariants only) and, until
    `compare` fills it in, for the run after a session-log cut (what `Agent.resume` rebuilds is
    predicted from the log's lines once they exist, `predict_resume`)."""

    runs: list[RunPrediction | None]
    labels: set[str] = field(default_factory=set)


@dataclass
class World:
    """The model's state between runs."""

    turns: int = 0
    last: str = "none"  # none, user, result, answer (cannot continue), open (can continue),
    # cut (an answer cut by the token limit or the context window: continued with a prompt to go on)
    dangling: list[str] = field(default_factory=list)
    steer: int = 0
    follow: int = 0
    uncertain: bool = False  # input may have been queued at an event the rules do not fix
    paused: bool = False  # the last complete response paused: the next request continues it
    # What the run counted toward its usage limits (a prompt starts again from zero).
    requests: int = 0
    tool_calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    # A batch held for decisions: (its calls, their ids, the held kinds by id, the waiting ids).
    pending: tuple[tuple[Call, ...], list[str], dict[str, str], list[str]] | None = None


def last_of(tokens: Sequence[Token]) -> tuple[str, list[str]]:
    """(the last message's status, calls of the last assistant message without a result)."""
    if not tokens:
        return "none", []
    answered: set[str] = set()
    for token in reversed(tokens):
        if token[0] == "result":
            answered.add(token[1])
        elif token[0] == "assistant":
            stop, ids = token[1], token[2]
            if stop in ("aborted", "error"):
                return ("open" if tokens[-1] is token else "result"), []
            dangling = [i for i in ids if i not in answered]
            if tokens[-1] is token:
                return ("open", dangling) if ids else (after_answer(stop), [])
            return "result", dangling
        else:
            return ("user" if tokens[-1] is token else "result"), []
    return "result", []


def after_answer(stop: str) -> str:
    """The world's ``last`` after a response without calls that stopped with ``stop``: ``open``
    (paused: sent back as it is), ``cut`` (the token limit or the context window cut it: a run
    without a prompt asks the model to go on) or ``answer`` (complete: nothing to continue)."""
    if stop == PAUSE_TURN:
        return "open"
    return "cut" if stop in TRUNCATING else "answer"


def ends_paused(tokens: Sequence[Token]) -> bool:
    # The engine's `Run.awaits_continuation`: the last complete response (partial ones skipped)
    # paused without calls, and nothing came after it.
    for token in reversed(tokens):
        if token[0] != "assistant":
            return False
        if token[1] not in ("aborted", "error"):
            return bool(token[1] == PAUSE_TURN and not token[2])
    return False


@dataclass(frozen=True, slots=True)
class Declared:
    """The user's own hooks, described to the oracle (`agent_state_machine(declared=...)`).

    Each is a constant or a function of ``(tool_name, arguments)``; the scenario's own hook
    behaviour for a call is applied first, the declared one only to calls it allows (``before``) or
    keeps (``after``). A ``rewrite`` by a user hook is checked as "some ok result".

    Attributes:
        before: allow, deny, terminate, raise or rewrite.
        after: keep, rewrite or raise.
        max_continuations, max_tokens_policy: the agent's options (not readable from an `Agent`).
    """

    before: str | Callable[[str, dict[str, Any]], str] = "allow"
    after: str | Callable[[str, dict[str, Any]], str] = "keep"
    max_continuations: int = 3
    max_tokens_policy: Literal["continue", "stop"] = "continue"

    def before_of(self, name: str, arguments: dict[str, Any]) -> str:
        """The declared before decision for a call."""
        return self.before(name, arguments) if callable(self.before) else self.before

    def after_of(self, name: str, arguments: dict[str, Any]) -> str:
        """The declared after decision for a call."""
        return self.after(name, arguments) if callable(self.after) else self.after
