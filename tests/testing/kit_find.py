"""What the tests of what the kit finds share: fixed hypothesis settings (the tests are about the
kit's findings, not about the profile in use), the pattern of one step in a shrunk example, and a
run of a kit state machine that must fail with a short example."""

from __future__ import annotations

import re

import pytest
from hypothesis import Phase, settings
from hypothesis.stateful import RuleBasedStateMachine, run_state_machine_as_test

FIND = settings(
    max_examples=100,
    stateful_step_count=4,
    derandomize=True,
    deadline=None,
    database=None,
    phases=[Phase.explicit, Phase.generate, Phase.shrink],
    report_multiple_bugs=False,  # a broken hook may fail by several routes: show the shortest
)
STEP = re.compile(
    r"^state\.(run|continue_run|oracle_run|queue_between_runs|run_deferring|decide"
    r"|resume_in_a_new_agent)\(",
    re.MULTILINE,
)


def kit_failure(machine: type[RuleBasedStateMachine], find: settings = FIND) -> tuple[str, str]:
    """Run ``machine``, expect it to fail with an example shrunk to 1-3 steps; return the
    failure's message and the example."""
    with pytest.raises(AssertionError) as caught:
        run_state_machine_as_test(machine, settings=find)
    example = "\n".join(getattr(caught.value, "__notes__", []))
    assert "Failing test case" in example, example
    assert 1 <= len(STEP.findall(example)) <= 3, f"not shrunk to a short script:\n{example}"
    return str(caught.value), example
