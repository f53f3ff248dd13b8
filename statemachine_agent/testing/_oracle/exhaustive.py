"""The bounded exhaustive mode: every scenario over a small alphabet (`exhaustive_scenarios`)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Literal

from .scenario import Anchor, Call, RunSpec, Scenario, Step

# -- bounded exhaustive mode -------------------------------------------------------------------

EXHAUSTIVE_OUTCOMES: tuple[Call, ...] = (
    Call("job", "return"),
    Call("job", "raise"),
    Call("limited", "slow"),  # times out
    Call("job", "return", before="deny"),
)
"""The call outcomes of the exhaustive alphabet: returns, raises, times out, is denied."""


def _exhaustive_steps(outcomes: Sequence[Call]) -> tuple[list[Step], list[Step]]:
    going_on: list[Step] = [Step("pause_turn")]
    for a in outcomes:
        going_on.append(Step("tool_use", (a,)))
        going_on.append(Step("max_tokens", (a, Call())))  # the second call is truncated
        going_on += [Step("tool_use", (a, b)) for b in outcomes]
    final = [Step("end_turn"), Step("refusal", (Call(),))]
    return going_on, final


def exhaustive_scenarios(
    depth: int = 3,
    *,
    outcomes: Sequence[Call] = EXHAUSTIVE_OUTCOMES,
    modes: Sequence[Literal["parallel", "sequential"]] = ("parallel", "sequential"),
    max_abort: int = 3,
) -> Iterable[Scenario]:
    """Every scenario over a small abstract alphabet, up to ``depth`` responses: response kinds
    (a final answer, a refusal with a call, a pause, one or two calls, two calls the second of which
    is truncated) x call outcomes (``outcomes``) x abort position (none, or the k-th tool start for
    k up to ``max_abort``), in each tool-execution mode. The last response ends the run, the ones
    before go on."""
    going_on, final = _exhaustive_steps(outcomes)
    for n in range(1, depth + 1):
        for prefix in _product(going_on, n - 1):
            for last in final:
                steps = (*prefix, last)
                n_calls = sum(len(s.calls) for s in steps[:-1])
                anchors: list[Anchor | None] = [None]
                anchors += [Anchor("tool_start", k) for k in range(1, min(n_calls, max_abort) + 1)]
                for anchor in anchors:
                    for mode in modes:
                        yield Scenario((RunSpec(steps, abort=anchor),), mode=mode)


def _product(items: Sequence[Step], n: int) -> Iterable[tuple[Step, ...]]:
    if n == 0:
        yield ()
        return
    for head in items:
        for tail in _product(items, n - 1):
            yield (head, *tail)
