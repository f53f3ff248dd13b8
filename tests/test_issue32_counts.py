"""Cases 1, 5 and 6 of issue 32: a resumed run keeps its counts, a limit a final answer passes is
said, and a run continued at the same turn cap follows one documented rule on every path."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

from loop_helpers import file_tools as side_tools
from loop_helpers import review_writes

from statemachine_agent import (
    Agent,
    Approve,
    LimitHit,
    RunCounts,
    RunResult,
    State,
    Usage,
    UsageLimits,
    tool,
)
from statemachine_agent.models import FunctionModel, ScriptedModel
from statemachine_agent.session import read_session
from statemachine_agent.testing import assert_valid_history
from statemachine_agent.testing.steps import call, text_response, tool_response

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


# -- case 1: a resumed run keeps its counts ------------------------------------------------------


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


# -- case 5: a limit a final answer passes is said -------------------------------------------------


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


# -- case 6: continuing at the same cap --------------------------------------------------------


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


def test_a_turn_cap_lowered_during_a_run_is_not_said_to_be_reached_at_more_turns() -> None:
    requests: list[int] = []
    holder: list[Agent] = []

    @tool
    def read(path: str) -> str:
        """Read a file."""
        if path == "p3":
            holder[0].max_turns = 2  # lowered during turn 3
        return "more"

    agent = Agent(endless_reader(requests), tools=[read], max_turns=10)
    holder.append(agent)
    result = agent.run_sync("Read everything")
    assert (result.state, result.turns) == (State.MAX_TURNS, 3)
    assert result.error is not None
    assert result.error.startswith(
        "Stopped after 3 turn(s): the max_turns limit was lowered to 2, below the run's turns"
    )
