"""Limits and the counts they are measured on: max turns (per call, continued, lowered), max
tool calls (a batch runs whole or not at all), token limits, usage per call and counts per run,
also across a resume in another process; and what the docs say about them."""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from docs.blocks import documentation_text
from loop_helpers import file_tools as side_tools
from loop_helpers import results_of, review_writes

from statemachine_agent import (
    Agent,
    Approve,
    AssistantMessage,
    LimitHit,
    RunCounts,
    RunResult,
    State,
    TextBlock,
    ToolCallBlock,
    ToolResultMessage,
    Usage,
    UsageError,
    UsageLimits,
    tool,
)
from statemachine_agent.models import FunctionModel, ScriptedModel
from statemachine_agent.session import read_session
from statemachine_agent.testing import (
    assert_valid_history,
)
from statemachine_agent.testing.steps import call, text_response, tool_response


async def test_max_turns_then_continue_with_a_higher_limit() -> None:
    runs: list[str] = []

    @tool
    def bash(command: str) -> str:
        """Run a command."""
        runs.append(command)
        return "noop"

    steps = [tool_response(call("bash", {"command": "echo noop"}, id=f"b{i}")) for i in range(20)]
    model = ScriptedModel(steps)
    agent = Agent(model, tools=[bash], max_turns=5)
    result = await agent.run("loop forever")
    assert model.calls == 5
    assert result.state is State.MAX_TURNS
    assert result.turns == 5
    assert len(results_of(result.messages)) == 5  # every call answered
    error = result.error or ""
    assert "the max_turns limit (5) was reached" in error  # the limit
    assert "Stopped after 5 turn(s)" in error  # turns used
    assert "tool batch (bash)" in error  # the last action
    assert "run() again without a prompt" in error  # how to continue
    assert_valid_history(result.messages)

    again = await agent.run(max_turns=7)
    assert model.calls == 7
    assert again.state is State.MAX_TURNS
    assert len(runs) == 7  # none of the first five re-ran
    ids = [r.tool_call_id for r in results_of(again.messages)]
    assert ids == [f"b{i}" for i in range(7)]
    assert_valid_history(again.messages)


async def test_the_history_at_max_turns_ends_with_the_answered_batch() -> None:
    @tool
    def bash(command: str) -> str:
        """Run a command."""
        return "noop"

    steps = [tool_response(call("bash", {"command": "echo noop"}, id=f"b{i}")) for i in range(9)]
    model = ScriptedModel(steps)
    result = await Agent(model, tools=[bash], max_turns=5).run("loop forever")
    assert len(model.requests) == 5
    assert [m.role for m in result.messages] == ["user"] + ["assistant", "tool_result"] * 5
    assert [(r.tool_call_id, r.is_error, r.text) for r in results_of(result.messages)] == [
        (f"b{i}", False, "noop") for i in range(5)
    ]
    assert (result.state, result.turns, result.stop_reason) == (State.MAX_TURNS, 5, "tool_use")
    assert result.error == (
        "Stopped after 5 turn(s): the max_turns limit (5) was reached. The last action was a tool "
        "batch (bash) whose results are recorded. To continue, call run() again without a prompt "
        "and a higher limit, e.g. await agent.run(max_turns=15)."
    )


# Found by a review: the turn cap bounds text-only turns driven by queued input too
async def test_the_turn_cap_stops_a_run_with_queued_follow_ups():
    agent = Agent(ScriptedModel([text_response(f"a{i}") for i in range(10)]), max_turns=2)
    for i in range(5):
        agent.follow_up(f"more {i}")
    r = await agent.run("go")
    assert r.state is State.MAX_TURNS and r.turns == 2
    assert "max_turns limit (2)" in (r.error or "")
    assert [(m.role, m.text) for m in r.messages] == [
        ("user", "go"),
        ("assistant", "a0"),
        ("user", "more 0"),
        ("assistant", "a1"),
    ]
    assert_valid_history(r.messages)


R1_USAGE = {"input_tokens": 40, "output_tokens": 7}


R2_USAGE = {"input_tokens": 90, "output_tokens": 12}


def script() -> list[dict[str, Any]]:
    """R1 reads a and asks to write b (deferred); R2 answers."""
    return [
        tool_response(
            call("read", {"path": "a"}, id="r_a"),
            call("write", {"path": "b"}, id="w_b"),
            usage=R1_USAGE,
        ),
        text_response("Read a, wrote b.", usage=R2_USAGE),
    ]


def approval_agent(model: ScriptedModel, limits: UsageLimits | None, **kwargs: Any) -> Agent:
    return Agent(
        model, tools=side_tools([]), before_tool_call=review_writes, limits=limits, **kwargs
    )


def one_process_flow(limits: UsageLimits | None) -> tuple[RunResult, RunResult, int]:
    """Defer, then approve, in one agent: both results and the requests the model got."""
    model = ScriptedModel(script())
    agent = approval_agent(model, limits)
    first = agent.run_sync("Read a, write b")
    second = agent.run_sync(decisions={"w_b": Approve()})
    return first, second, len(model.requests)


def resumed_flow(tmp_path: Path, limits: UsageLimits | None) -> tuple[RunResult, RunResult, int]:
    """Defer in "process 1" (an agent logging to a session), approve in "process 2" (a new
    agent resuming the log): both results and the requests each model got."""
    path = tmp_path / "run.jsonl"
    model1 = ScriptedModel(script())
    agent1 = approval_agent(model1, limits, session=path)
    first = agent1.run_sync("Read a, write b")
    agent1.close()
    model2 = ScriptedModel(script()[1:])
    agent2 = Agent.resume(
        path, model=model2, tools=side_tools([]), before_tool_call=review_writes, limits=limits
    )
    assert agent2.state is State.AWAITING_APPROVAL
    second = agent2.run_sync(decisions={"w_b": Approve()})
    agent2.close()
    return first, second, len(model1.requests) + len(model2.requests)


def outcome(result: RunResult) -> tuple[Any, ...]:
    return (result.state, result.turns, result.counts, result.usage, result.error, result.text)


def test_a_resumed_run_counts_its_turns_and_tokens_as_the_same_run_in_one_process(
    tmp_path: Path,
) -> None:
    _, one, one_requests = one_process_flow(None)
    _, resumed, resumed_requests = resumed_flow(tmp_path, None)
    assert outcome(resumed) == outcome(one)
    assert (resumed.state, resumed.turns) == (State.DONE, 2)
    assert resumed.counts == RunCounts(
        turns=2, requests=2, tool_calls=2, usage=Usage(input_tokens=130, output_tokens=19)
    )
    assert resumed_requests == one_requests == 2


def test_a_resumed_run_stops_at_max_requests_before_r2_as_in_one_process(tmp_path: Path) -> None:
    limits = UsageLimits(max_requests=1)
    one_first, one, one_requests = one_process_flow(limits)
    first, resumed, resumed_requests = resumed_flow(tmp_path, limits)
    assert first.state is one_first.state is State.AWAITING_APPROVAL
    assert outcome(resumed) == outcome(one)
    assert resumed.state is State.MAX_TURNS
    assert resumed_requests == one_requests == 1  # R2 is not sent: R1 used max_requests=1
    assert resumed.counts == RunCounts(
        turns=1, requests=1, tool_calls=2, usage=Usage(input_tokens=40, output_tokens=7)
    )
    assert resumed.error is not None
    assert "the usage limit max_requests=1 was reached: 1 used, 1 more wanted" in resumed.error
    assert_valid_history(resumed.messages)


PROCESS_1 = textwrap.dedent(
    """
    import sys
    from statemachine_agent import Agent, Defer, UsageLimits, tool
    from statemachine_agent.models import ScriptedModel
    from statemachine_agent.testing.steps import call, text_response, tool_response

    @tool
    def read(path: str) -> str:
        \"\"\"Read a file.\"\"\"
        return f"contents of {path}"

    @tool
    def write(path: str) -> str:
        \"\"\"Write a file.\"\"\"
        return f"wrote {path}"

    def review(info):
        return Defer("writes need review") if info.tool.name == "write" else None

    script = [
        tool_response(call("read", {"path": "a"}, id="r_a"), call("write", {"path": "b"}, id="w_b"),
                      usage={"input_tokens": 40, "output_tokens": 7}),
        text_response("unused"),
    ]
    agent = Agent(ScriptedModel(script), tools=[read, write], before_tool_call=review,
                  limits=UsageLimits(max_requests=1), session=sys.argv[1])
    result = agent.run_sync("Read a, write b")
    print(result.state.value, result.counts.requests)
    """
)


def test_a_second_process_resuming_the_log_does_not_send_r2_past_max_requests(
    tmp_path: Path,
) -> None:
    path, child = tmp_path / "run.jsonl", tmp_path / "process_1.py"
    child.write_text(PROCESS_1)
    done = subprocess.run(
        [sys.executable, str(child), str(path)],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["awaiting_approval", "1"]

    limits = UsageLimits(max_requests=1)
    model = ScriptedModel(script()[1:])
    agent = Agent.resume(
        path, model=model, tools=side_tools([]), before_tool_call=review_writes, limits=limits
    )
    resumed = agent.run_sync(decisions={"w_b": Approve()})
    agent.close()
    _, one, _ = one_process_flow(limits)
    assert model.requests == []  # R2 never sent
    assert outcome(resumed) == outcome(one)
    assert resumed.turns == 1


def test_a_run_the_process_died_in_resumes_with_the_counts_its_log_holds(tmp_path: Path) -> None:
    """The process dies after R2's response (a batch started, no run_end): the counts are
    rebuilt from the logged lines, so the resumed run continues them."""
    path = tmp_path / "run.jsonl"
    steps = [
        tool_response(call("read", {"path": f"p{i}"}, id=f"r{i}"), usage=R1_USAGE) for i in range(3)
    ]
    agent = Agent(ScriptedModel(steps), tools=side_tools([]), max_turns=2, session=path)
    stopped = agent.run_sync("Read everything")
    agent.close()
    assert (stopped.state, stopped.counts.turns, stopped.counts.requests) == (State.MAX_TURNS, 2, 2)
    lines = path.read_text().splitlines(keepends=True)
    dests = [json.loads(line).get("dest") for line in lines]
    cut = dests.index("max_turns")  # the process died after the batch, before the run ended
    path.write_text("".join(lines[:cut]))

    resumed = Agent.resume(path, model=ScriptedModel(steps[2:]), tools=side_tools([]))
    assert resumed.state is State.ABORTED  # a run the process died in
    assert resumed.session is not None and resumed.session.counts == stopped.counts
    result = resumed.run_sync(max_turns=3)  # the same run goes on: one more turn
    resumed.close()
    assert (result.state, result.turns, result.counts.requests) == (State.MAX_TURNS, 3, 3)
    assert result.counts.usage == Usage(input_tokens=120, output_tokens=21)
    assert read_session(path).counts == result.counts


def test_a_continued_run_the_process_died_in_is_rebuilt_from_the_earlier_runs_counts(
    tmp_path: Path,
) -> None:
    """A run continued without a prompt is the same run: when the process dies in it (no
    ``run_end`` line), the log's counts are rebuilt from the previous run's counts plus its
    own lines, not from zero (the ``continued`` flag on its ``run_start`` line says so)."""
    path = tmp_path / "run.jsonl"

    def model(messages: list[Any], request: Any) -> Any:
        return tool_response(call("read", {"path": str(len(messages))}, id=f"c{len(messages)}"))

    agent = Agent(FunctionModel(model), tools=side_tools([]), max_turns=2, session=path)
    assert agent.run_sync("Read everything").state is State.MAX_TURNS  # turns=2 logged
    second = agent.run_sync(max_turns=3)  # continued: one more turn
    agent.close()
    assert second.counts.turns == 3
    lines = path.read_text().splitlines(keepends=True)
    last_end = max(i for i, line in enumerate(lines) if json.loads(line).get("type") == "run_end")
    path.write_text("".join(lines[:last_end]))  # the process died in the continued run
    assert read_session(path).counts.turns == 3


def test_a_final_answer_past_max_total_tokens_ends_done_and_says_by_how_much(
    tmp_path: Path,
) -> None:
    def model(messages: list[Any], request: Any) -> Any:
        if len(messages) == 1:
            return tool_response(
                call("read", {"path": "a"}), usage={"input_tokens": 500, "output_tokens": 100}
            )
        return text_response(
            "a holds the answer.", usage={"input_tokens": 550, "output_tokens": 50}
        )

    agent = Agent(
        FunctionModel(model),
        tools=side_tools([]),
        limits=UsageLimits(max_total_tokens=1000),
        session=tmp_path / "run.jsonl",
    )
    result = agent.run_sync("What does a hold?")
    agent.close()
    assert result.state is State.DONE
    assert result.text == "a holds the answer."  # kept: it was paid for
    assert result.usage.total_tokens == 1200
    assert result.limit_exceeded == LimitHit("max_total_tokens", 1000, 1200)
    assert result.limit_exceeded.excess == 200
    assert result.error == (
        "The answer is kept (it was paid for), but the max_total_tokens limit (1000) was "
        "exceeded by 200 tokens (1200 used)."
    )
    run_end = [r.body for r in read_session(tmp_path / "run.jsonl").records if r.type == "run_end"]
    assert run_end[-1]["error"] == result.error  # the log says it too


def test_a_run_within_its_token_limits_reports_no_limit_exceeded() -> None:
    agent = Agent(
        ScriptedModel([text_response("ok", usage={"input_tokens": 900, "output_tokens": 100})]),
        limits=UsageLimits(max_total_tokens=1000),
    )
    result = agent.run_sync("hi")
    assert (result.state, result.error, result.limit_exceeded) == (State.DONE, None, None)


def test_a_limit_passed_in_a_continued_run_is_measured_on_the_whole_runs_usage() -> None:
    """``limit_exceeded`` compares the run's usage (every call that continued it), not this
    ``run()`` call's: 800 tokens in the first call and 400 in the continuation pass
    ``max_total_tokens=1000`` by 200."""

    def model(messages: list[Any], request: Any) -> Any:
        if len(messages) == 1:
            return tool_response(
                call("read", {"path": "a"}), usage={"input_tokens": 500, "output_tokens": 300}
            )
        return text_response("done.", usage={"input_tokens": 350, "output_tokens": 50})

    agent = Agent(
        FunctionModel(model),
        tools=side_tools([]),
        max_turns=1,
        limits=UsageLimits(max_total_tokens=1000),
    )
    assert agent.run_sync("What does a hold?").state is State.MAX_TURNS
    second = agent.run_sync(max_turns=2)
    assert second.state is State.DONE
    assert second.counts.usage.total_tokens == 1200
    assert second.limit_exceeded == LimitHit("max_total_tokens", 1000, 1200)
    assert second.limit_exceeded.excess == 200


def endless_reader(requests: list[int]) -> FunctionModel:
    def model(messages: list[Any], request: Any) -> Any:
        requests.append(len(messages))
        return tool_response(call("read", {"path": f"p{len(requests)}"}))

    return FunctionModel(model)


def test_a_run_continued_at_the_same_max_turns_stops_before_any_new_turn() -> None:
    requests: list[int] = []
    agent = Agent(endless_reader(requests), tools=side_tools([]), max_turns=2)
    first = agent.run_sync("Read everything")
    assert (first.state, first.turns, len(requests)) == (State.MAX_TURNS, 2, 2)

    again = agent.run_sync()  # the cap unchanged
    assert (again.state, again.turns, len(requests)) == (State.MAX_TURNS, 2, 2)
    assert again.new_messages == []
    assert again.error is not None
    assert again.error.startswith(
        "Stopped before any new turn: this run has made 2 turn(s) and its max_turns limit is 2"
    )
    assert "Stopped after 3 turn(s)" not in again.error

    more = agent.run_sync(max_turns=3)  # a higher cap: one more turn
    assert (more.state, more.turns, len(requests)) == (State.MAX_TURNS, 3, 3)
    assert more.error is not None
    assert more.error.startswith("Stopped after 3 turn(s): the max_turns limit (3) was reached")

    fresh = agent.run_sync("Start over")  # a prompt: a new run, counted from zero
    # run(max_turns=3) was that call's cap only: the agent's own cap (2) applies again
    assert (fresh.state, fresh.turns, len(requests)) == (State.MAX_TURNS, 2, 5)
    assert_valid_history(agent.messages)


def test_a_resumed_run_continued_at_the_same_max_turns_stops_before_any_new_turn(
    tmp_path: Path,
) -> None:
    path = tmp_path / "run.jsonl"
    requests: list[int] = []
    agent = Agent(endless_reader(requests), tools=side_tools([]), max_turns=2, session=path)
    agent.run_sync("Read everything")
    agent.close()
    resumed = Agent.resume(path, model=endless_reader(requests), tools=side_tools([]), max_turns=2)
    again = resumed.run_sync()
    resumed.close()
    assert (again.state, again.turns, len(requests)) == (State.MAX_TURNS, 2, 2)
    assert again.error is not None and again.error.startswith("Stopped before any new turn")


def test_a_run_deciding_its_calls_at_the_cap_stops_after_the_batch() -> None:
    """A continued run through decisions: the decided batch completes the turn the cap allows,
    and the run stops saying the turns it made, not more."""
    model = ScriptedModel(script())
    agent = approval_agent(model, None, max_turns=1)
    first = agent.run_sync("Read a, write b")
    assert (first.state, first.turns) == (State.AWAITING_APPROVAL, 1)
    second = agent.run_sync(decisions={"w_b": Approve()})
    assert (second.state, second.turns, len(model.requests)) == (State.MAX_TURNS, 1, 1)
    assert second.error is not None
    assert second.error.startswith("Stopped after 1 turn(s): the max_turns limit (1) was reached")


def test_a_turn_cap_lowered_during_a_run_applies_from_the_next_run_which_stops_at_once() -> None:
    """Configuration is read once per run (when it is claimed): a cap lowered during turn 3 does
    not stop that run, and the run continued after it stops at once, with no request, saying it
    has already made more turns than the cap allows (not that a cap of 2 was reached)."""
    requests: list[int] = []
    holder: list[Agent] = []

    @tool
    def read(path: str) -> str:
        """Read a file."""
        if path == "p3":
            holder[0].max_turns = 2  # lowered during turn 3
        return "more"

    agent = Agent(endless_reader(requests), tools=[read], max_turns=5)
    holder.append(agent)
    result = agent.run_sync("Read everything")
    assert (result.state, result.turns) == (State.MAX_TURNS, 5)
    assert result.error is not None
    assert result.error.startswith("Stopped after 5 turn(s): the max_turns limit (5) was reached")
    sent = len(requests)
    continued = agent.run_sync()
    assert (continued.state, continued.turns) == (State.MAX_TURNS, 5)
    assert len(requests) == sent  # no new request
    assert continued.error is not None
    assert continued.error.startswith(
        "Stopped before any new turn: this run has already made 5 turn(s) (under a higher limit"
    )


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


def endless_reader_and_its_tool(requests: list[int]) -> tuple[FunctionModel, Any]:
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
    model, read = endless_reader_and_its_tool(requests)
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
    model, read = endless_reader_and_its_tool(requests)
    agent = Agent(model, tools=[read], max_turns=2)
    result = await agent.start("Read everything", max_turns=1)
    assert (result.state, result.turns, agent.max_turns) == (State.MAX_TURNS, 1, 2)


@pytest.mark.parametrize("bad", [0, -1, True, 2.5, "3"])
def test_run_refuses_a_max_turns_that_is_not_a_positive_integer(bad: Any) -> None:
    requests: list[int] = []
    model, read = endless_reader_and_its_tool(requests)
    agent = Agent(model, tools=[read])
    with pytest.raises(UsageError, match=r"max_turns=\.\.\.\) must be a positive integer"):
        agent.run_sync("go", max_turns=bad)
    assert requests == [] and not agent.is_running


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


def limit_agent(batches: list[int], limit: int, mode: str) -> tuple[Agent, list[str]]:
    ran: list[str] = []

    @tool
    def ping(n: str) -> str:
        """Record a call."""
        ran.append(n)
        return f"pong {n}"

    script = [
        tool_response(*(call("ping", {"n": f"{b}.{i}"}, id=f"p{b}_{i}") for i in range(size)))
        for b, size in enumerate(batches, 1)
    ]
    agent = Agent(
        ScriptedModel([*script, text_response("done")]),
        tools=[ping],
        tool_execution=mode,  # type: ignore[arg-type]
        limits=UsageLimits(max_tool_calls=limit),
    )
    return agent, ran


@pytest.mark.parametrize("mode", ["parallel", "sequential"])
async def test_a_batch_that_would_pass_max_tool_calls_is_not_run_at_all(mode: str) -> None:
    agent, ran = limit_agent([2, 2], limit=3, mode=mode)
    result = await agent.run("go")
    assert ran == ["1.0", "1.1"]  # the second batch (2 + 2 > 3) runs none of its calls
    not_run = "Not run: the usage limit max_tool_calls=3 was reached: 2 used, 2 more wanted."
    assert [(r.tool_call_id, r.text, r.is_error) for r in results_of(result.messages)] == [
        ("p1_0", "pong 1.0", False),
        ("p1_1", "pong 1.1", False),
        ("p2_0", not_run, True),
        ("p2_1", not_run, True),
    ]
    assert result.state is State.MAX_TURNS
    assert result.counts.tool_calls == 2
    assert result.error == (
        "Stopped after 2 turn(s): the usage limit max_tool_calls=3 was reached: 2 used, 2 more "
        "wanted (2 request(s), 2 tool call(s), 0 token(s) so far). To continue, raise the limit "
        "(agent.limits = UsageLimits(...)) and call run() again without a prompt."
    )
    assert_valid_history(result.messages)


@pytest.mark.parametrize("mode", ["parallel", "sequential"])
async def test_a_batch_that_reaches_max_tool_calls_exactly_runs_in_full(mode: str) -> None:
    agent, ran = limit_agent([3, 1], limit=3, mode=mode)
    result = await agent.run("go")
    assert ran == ["1.0", "1.1", "1.2"]
    assert [r.text for r in results_of(result.messages)] == [
        "pong 1.0",
        "pong 1.1",
        "pong 1.2",
        "Not run: the usage limit max_tool_calls=3 was reached: 3 used, 1 more wanted.",
    ]
    assert result.state is State.MAX_TURNS and result.counts.tool_calls == 3


@pytest.mark.parametrize("mode", ["parallel", "sequential"])
async def test_a_first_batch_larger_than_max_tool_calls_runs_none_of_its_calls(mode: str) -> None:
    agent, ran = limit_agent([3], limit=2, mode=mode)
    result = await agent.run("go")
    assert ran == []
    assert [r.text for r in results_of(result.messages)] == [
        "Not run: the usage limit max_tool_calls=2 was reached: 0 used, 3 more wanted."
    ] * 3
    assert result.state is State.MAX_TURNS and result.counts.tool_calls == 0
    assert len(agent.model.requests) == 1  # type: ignore[attr-defined]


async def test_a_parallel_batch_past_max_tool_calls_starts_none_also_after_a_resume(
    tmp_path: Path,
) -> None:
    """pydantic/pydantic-ai#2978 (and #2593): with ``tool_calls_limit=6`` a response asking for 8
    parallel calls started all 8 before the limit was checked. Here: ``max_tool_calls=3``; the
    first batch of two runs, the second asks for two more in parallel. Expected: none of the
    second batch starts (each call is answered with the limit's text), the run stops in
    ``max_turns``; a second process resuming the log goes on from 2 tool calls, so the same
    batch asked again still starts none; raising the limit to 4 runs both, each once."""
    started: list[str] = []

    @tool
    async def fetch(url: str) -> str:
        """Fetch a page.

        Args:
            url: the page.
        """
        started.append(url)
        await asyncio.sleep(0)
        return f"page {url}"

    def batch(*urls: str) -> dict[str, Any]:
        return tool_response(*(call("fetch", {"url": u}, id=f"f_{u}") for u in urls))

    path = tmp_path / "run.jsonl"
    limits = UsageLimits(max_tool_calls=3)
    first = Agent(
        ScriptedModel([batch("a", "b"), batch("c", "d")]),
        tools=[fetch],
        limits=limits,
        session=path,
    )
    stopped = await first.run("Fetch a, b, c and d.")
    first.close()
    assert sorted(started) == ["a", "b"]  # c and d never started
    assert stopped.state is State.MAX_TURNS
    results = {m.tool_call_id: m.text for m in first.messages if isinstance(m, ToolResultMessage)}
    assert results["f_c"] == results["f_d"]
    assert "max_tool_calls=3" in results["f_c"] and results["f_c"].startswith("Not run")
    assert stopped.counts.tool_calls == 2
    assert stopped.error is not None and "max_tool_calls=3 was reached: 2 used, 2 more" in (
        stopped.error
    )

    model = ScriptedModel([batch("c2", "d2"), batch("c3", "d3"), text_response("All fetched.")])
    second = Agent.resume(path, model=model, tools=[fetch], limits=limits)
    assert second.session is not None and second.session.counts.tool_calls == 2
    again = await second.run()  # the same run goes on from 2 tool calls
    assert again.state is State.MAX_TURNS
    assert sorted(started) == ["a", "b"]  # still none of the batch of two
    assert again.counts.tool_calls == 2

    second.limits = UsageLimits(max_tool_calls=4)
    more = await second.run()
    second.close()
    assert more.state is State.DONE, more.error
    assert sorted(started) == ["a", "b", "c3", "d3"]  # both run, each once
    assert more.counts.tool_calls == 4
    assert_valid_history(second.messages)


def _call(i: int, name: str = "noop") -> AssistantMessage:
    return AssistantMessage(
        content=[ToolCallBlock(id=f"call_{i}", name=name, input={})], stop_reason="tool_use"
    )


def test_usage_adds_every_field_and_only_the_shared_zero_adds_as_nothing() -> None:
    """`Usage.__add__` returns the other operand only for ``NO_USAGE`` itself: a usage that reports
    only cache tokens (no input or output) is added field by field like any other."""
    from statemachine_agent import Usage
    from statemachine_agent._messages import NO_USAGE

    used = Usage(input_tokens=3, output_tokens=2)
    cached_only = Usage(cache_write_tokens=5, cache_read_tokens=7)
    assert used + cached_only == Usage(
        input_tokens=3, output_tokens=2, cache_write_tokens=5, cache_read_tokens=7
    )
    assert cached_only + used == used + cached_only
    assert used + NO_USAGE == used and NO_USAGE + used == used
    assert NO_USAGE + cached_only == cached_only and Usage() == NO_USAGE + NO_USAGE


async def test_a_run_counts_usage_from_the_shared_zero_until_a_response_reports_some() -> None:
    # No model of its own per run (two were built, each a tracked object with its field set,
    # alive for the whole run: garbage-collector work per running agent).
    from statemachine_agent._messages import NO_USAGE

    seen: list[tuple[object, object]] = []

    async def look() -> str:
        """Look at the run's usage."""
        run = agent.current_run
        assert run is not None
        seen.append((run._usage, run.data.usage))
        return "ok"

    answer = AssistantMessage(content=[TextBlock(text="done")], stop_reason="end_turn")
    agent = Agent(ScriptedModel([_call(1, "look"), answer]), tools=[look])
    result = await agent.run("go")
    assert result.state is State.DONE
    assert len(seen) == 1
    assert seen[0][0] is NO_USAGE and seen[0][1] is NO_USAGE  # the object itself, not an equal one


def _two_calls_cut_by(stop: str, limit: int) -> tuple[Agent, list[str]]:
    ran: list[str] = []

    @tool
    def ping(n: str) -> str:
        """Ping."""
        ran.append(n)
        return f"pong {n}"

    step = tool_response(call("ping", {"n": "1"}, id="a"), call("ping", {"n": "2"}, id="b"))
    step["stop_reason"] = stop  # the second call is the one the limit cut off
    agent = Agent(
        ScriptedModel([step, text_response("done")]),
        tools=[ping],
        limits=UsageLimits(max_tool_calls=limit),
    )
    return agent, ran


@pytest.mark.parametrize("limit", [1, 0])
async def test_a_response_cut_by_the_context_window_does_not_count_its_calls_for_max_tool_calls(
    limit: int,
) -> None:
    """None of the calls of a response cut by the context window runs (each is answered as not
    run), the complete ones included, so ``max_tool_calls`` does not stop the run, not even at
    0 (with 1, the truncated second call alone would hide a count of the complete one): it ends
    ``done`` with the context window's explanation, as it does without the limit, counting no
    call."""
    agent, ran = _two_calls_cut_by("model_context_window_exceeded", limit=limit)
    result = await agent.run("go")
    assert ran == []
    assert result.state is State.DONE and result.counts.tool_calls == 0
    assert result.error is not None
    assert result.error.startswith("The response was cut off by the model's context window")
    assert [r.tool_call_id for r in results_of(result.messages)] == ["a", "b"]
    assert all(
        r.is_error and r.text.startswith("Not run:") and "context window" in r.text
        for r in results_of(result.messages)
    )
    assert_valid_history(result.messages)


async def test_a_call_truncated_by_max_tokens_is_not_counted_for_max_tool_calls() -> None:
    """Under the default ``max_tokens_policy="continue"`` a response cut by ``max_tokens`` runs
    its complete calls and answers the truncated last one as not run: ``max_tool_calls=1``
    lets the one complete call run and counts one call, not two."""
    agent, ran = _two_calls_cut_by("max_tokens", limit=1)
    result = await agent.run("go")
    assert ran == ["1"]
    assert result.state is State.DONE and result.counts.tool_calls == 1
    texts = [r.text for r in results_of(result.messages)]
    assert texts[0] == "pong 1" and texts[1].startswith("Not run: the arguments of this call")
    assert result.text == "done"


async def test_max_tool_calls_names_only_the_calls_that_would_run_as_wanted() -> None:
    """With ``max_tool_calls=0`` the same cut response is stopped by the limit, which counts the
    one complete call as wanted (the truncated one would not run)."""
    agent, ran = _two_calls_cut_by("max_tokens", limit=0)
    result = await agent.run("go")
    assert ran == [] and result.state is State.MAX_TURNS
    assert result.error is not None
    assert "max_tool_calls=0 was reached: 0 used, 1 more wanted" in result.error


async def test_a_call_to_an_unknown_tool_counts_toward_max_tool_calls_as_documented() -> None:
    """``max_tool_calls`` counts each complete call a batch takes in, one answered with an error
    included: a call to an unknown tool uses the budget of 1, so the next batch (one call to a
    real tool) is stopped, naming 1 used and 1 more wanted."""

    @tool
    def real() -> str:
        """Answers ok."""
        return "ok"

    def calls(name: str, call_id: str) -> dict[str, Any]:
        block = {"type": "tool_use", "id": call_id, "name": name, "input": {}}
        return {"content": [block], "stop_reason": "tool_use"}

    model = ScriptedModel(
        [
            calls("nope", "u1"),
            calls("real", "r1"),
            {"content": [{"type": "text", "text": "done"}], "stop_reason": "end_turn"},
        ]
    )
    agent = Agent(model, tools=[real], limits=UsageLimits(max_tool_calls=1))
    result = await agent.run("go")
    assert result.state is State.MAX_TURNS and result.counts.tool_calls == 1
    assert result.error is not None
    assert "max_tool_calls=1 was reached: 1 used, 1 more wanted" in result.error
    texts = [r.text for r in results_of(result.messages)]
    assert "nope" in texts[0] and texts[1].startswith("Not run: the usage limit max_tool_calls=1")


async def test_max_requests_zero_stops_the_run_before_its_first_request() -> None:
    """``max_requests=0`` is a valid limit: the run sends no request at all (the limit holds
    before the first request too, not only once one was sent)."""
    model = ScriptedModel([text_response("never sent")])
    result = await Agent(model, limits=UsageLimits(max_requests=0)).run("go")
    assert model.calls == 0
    assert result.state is State.MAX_TURNS
    assert result.counts.requests == 0
    assert result.error is not None
    assert "the usage limit max_requests=0 was reached: 0 used, 1 more wanted" in result.error
