"""Issue 32 follow-up: what the docs say about limits and turn caps is what the objects do.

`LimitHit`'s documented attributes are its fields plus its derived ``excess``; ``run(max_turns=N)``
caps that call only; the README states ``.usage`` (per call) against ``.counts`` (per run) and the
CLI's ``--max-turns N`` (N more turns) against Python's ``run(max_turns=N)`` (the run's total)."""

from __future__ import annotations

import dataclasses
import inspect
import re
from typing import Any

import pytest
from docs.blocks import documentation_text

from statemachine_agent import Agent, LimitHit, State, UsageError, tool
from statemachine_agent.models import FunctionModel
from statemachine_agent.testing.steps import call, tool_response

README = documentation_text()  # the README and the site's pages


def documented_attributes(cls: type) -> dict[str, str]:
    """The ``Attributes:`` section of a Google-style class docstring: name -> its text."""
    doc = inspect.getdoc(cls) or ""
    section = doc.split("Attributes:", 1)[1]
    found: dict[str, str] = {}
    name = None
    for line in section.splitlines():
        match = re.match(r"^    (\w+): (.*)$", line)
        if match:
            name = match.group(1)
            found[name] = match.group(2)
        elif name is not None and line.startswith("        "):
            found[name] += " " + line.strip()
        elif line.strip():
            break
    return found


# -- LimitHit: docs and object agree -------------------------------------------------------------


def test_limit_hit_documents_its_fields_wanted_included_and_excess_as_derived() -> None:
    fields = [f.name for f in dataclasses.fields(LimitHit)]
    assert fields == ["name", "value", "used", "wanted"]
    documented = documented_attributes(LimitHit)
    assert list(documented) == [*fields, "excess"]
    assert isinstance(inspect.getattr_static(LimitHit, "excess"), property)
    assert "derived" in documented["excess"]
    hit = LimitHit("max_tool_calls", 3, 3, 1)
    assert repr(hit) == "LimitHit(name='max_tool_calls', value=3, used=3, wanted=1)"
    assert LimitHit("max_total_tokens", 1000, 1200).excess == 200


def test_limit_hit_docstring_covers_a_limit_that_did_not_stop_the_run() -> None:
    """`RunResult.limit_exceeded` is a `LimitHit` on a run that ended ``done``: the class does
    not claim every hit stops the run."""
    doc = inspect.getdoc(LimitHit) or ""
    summary = doc.splitlines()[0]
    assert "stops the run" not in summary
    assert "limit_exceeded" in doc and "done" in doc


def test_readme_lists_limit_hits_fields_and_its_derived_excess() -> None:
    match = re.search(r"a `LimitHit`: (.*?)\) and `error` say so", README, re.S)
    assert match is not None
    text = " ".join(match.group(1).split())
    names = re.findall(r"`(\w+)`", text)
    fields = [f.name for f in dataclasses.fields(LimitHit)]
    assert [n for n in names if n in (*fields, "excess")] == [*fields, "excess"]
    assert re.search(r"`excess`, derived", text)


# -- run(max_turns=N) caps that call only ----------------------------------------------------------


def endless_reader(requests: list[int]) -> tuple[FunctionModel, Any]:
    @tool
    def read(path: str) -> str:
        """Read a file."""
        return f"contents of {path}"

    def model(messages: list[Any], request: Any) -> Any:
        requests.append(len(messages))
        return tool_response(call("read", {"path": f"p{len(requests)}"}))

    return FunctionModel(model), read


def test_a_per_call_max_turns_does_not_stick_for_a_later_plain_run() -> None:
    requests: list[int] = []
    model, read = endless_reader(requests)
    agent = Agent(model, tools=[read], max_turns=2)
    first = agent.run_sync("Read everything", max_turns=3)
    assert (first.state, first.turns, len(requests)) == (State.MAX_TURNS, 3, 3)
    assert agent.max_turns == 2  # the agent's cap is unchanged
    assert first.error is not None
    assert first.error.startswith("Stopped after 3 turn(s): the max_turns limit (3) was reached")

    again = agent.run_sync()  # continued with the agent's cap (2), which 3 turns passed
    assert (again.state, again.turns, len(requests)) == (State.MAX_TURNS, 3, 3)
    assert again.error is not None
    # True of the numbers it names: never "the limit (2) was reached" after 3 turns.
    assert again.error.startswith(
        "Stopped before any new turn: this run has already made 3 turn(s) (under a higher "
        "limit given to an earlier call), more than this call's max_turns limit of 2"
    )

    fresh = agent.run_sync("Start over")  # a new run: the agent's cap, 2 turns
    assert (fresh.state, fresh.turns, len(requests)) == (State.MAX_TURNS, 2, 5)


async def test_a_per_call_max_turns_of_start_does_not_stick_either() -> None:
    requests: list[int] = []
    model, read = endless_reader(requests)
    agent = Agent(model, tools=[read], max_turns=2)
    result = await agent.start("Read everything", max_turns=1)
    assert (result.state, result.turns, agent.max_turns) == (State.MAX_TURNS, 1, 2)


@pytest.mark.parametrize("bad", [0, -1, True, 2.5, "3"])
def test_run_refuses_a_max_turns_that_is_not_a_positive_integer(bad: Any) -> None:
    requests: list[int] = []
    model, read = endless_reader(requests)
    agent = Agent(model, tools=[read])
    with pytest.raises(UsageError, match=r"max_turns=\.\.\.\) must be a positive integer"):
        agent.run_sync("go", max_turns=bad)
    assert requests == [] and not agent.is_running


# -- README: usage vs counts, and the two ways to give more turns ----------------------------------


def test_usage_is_the_calls_and_counts_are_the_runs_across_continuations() -> None:
    """A run stopped at its cap after 2 turns, continued with ``run(max_turns=3)``: the second
    result's ``usage`` is its one response's, its ``counts`` the run's three."""

    @tool
    def read(path: str) -> str:
        """Read a file."""
        return f"contents of {path}"

    made = 0

    def model(messages: list[Any], request: Any) -> Any:
        nonlocal made
        made += 1
        usage = {"input_tokens": 10 * made, "output_tokens": made}
        return tool_response(call("read", {"path": f"p{made}"}), usage=usage)

    agent = Agent(FunctionModel(model), tools=[read], max_turns=2)
    first = agent.run_sync("Read everything")
    assert (first.usage.input_tokens, first.usage.output_tokens) == (30, 3)  # R1 + R2
    second = agent.run_sync(max_turns=3)
    assert (second.state, second.turns, second.counts.turns) == (State.MAX_TURNS, 3, 3)
    assert (second.usage.input_tokens, second.usage.output_tokens) == (30, 3)  # R3 only
    assert (second.counts.usage.input_tokens, second.counts.usage.output_tokens) == (60, 6)
    assert (second.counts.requests, second.counts.tool_calls) == (3, 3)


def test_readme_says_usage_is_per_call_and_counts_per_run() -> None:
    text = " ".join(README.split())
    assert "`RunResult.usage` is this call's" in text
    assert "`RunResult.counts` is the run's" in text


def test_readme_sets_cli_max_turns_beside_pythons() -> None:
    text = " ".join(README.split())
    assert "`--max-turns N` gives N more turns" in text
    assert "`run(max_turns=N)` caps the run's total turns" in text
    assert "for that call only" in text
