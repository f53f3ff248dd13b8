"""Issue 15, bug 6: the kit's checker (`check_run`) reports a request that ends with an assistant
message and a call with two start and two end events. Each check is shown to fire on a run report
that breaks exactly that rule, after a clean report of the same run passes."""

from __future__ import annotations

import dataclasses

from statemachine_agent import (
    Agent,
    AssistantMessage,
    Event,
    RunStart,
    ToolExecutionEnd,
    ToolExecutionStart,
)
from statemachine_agent.models import ModelRequest
from statemachine_agent.testing import (
    AgentKit,
    RunReport,
    ScriptPlayer,
    check_run,
    drive_run,
)
from statemachine_agent.testing.steps import call, text_response, tool_response


async def clean_run() -> tuple[AgentKit, object, RunReport]:
    kit = AgentKit(ScriptPlayer())
    kit.model.load(
        [
            tool_response(call("act", {"behaviour": "return", "text": "hi"}, id="a")),
            text_response("done"),
        ]
    )
    agent = kit.agent()
    report = await drive_run(agent, "go")
    assert report.result is not None and report.result.text == "done"
    assert check_run(agent, report) == []  # the unbroken run passes
    return kit, agent, report


async def test_checker_reports_a_request_ending_with_an_assistant_message() -> None:
    _, agent, report = await clean_run()
    assert len(report.requests) == 2
    second = report.requests[1]
    last = second.messages[-1]
    assert last.role == "tool_result"
    answer = AssistantMessage.model_validate(
        {"content": [{"type": "text", "text": "prefilled"}], "stop_reason": "end_turn"}
    )
    broken = ModelRequest([*second.messages, answer], second.system, second.tools, second.settings)
    bad = dataclasses.replace(report, requests=[report.requests[0], broken])
    assert check_run(agent, bad) == [  # type: ignore[arg-type]
        "request 2: message 3: a request must end with a user message or tool results"
    ]


async def test_checker_reports_a_call_started_and_ended_twice() -> None:
    _, agent, report = await clean_run()
    starts = [e for e in report.events if isinstance(e, ToolExecutionStart)]
    ends = [e for e in report.events if isinstance(e, ToolExecutionEnd)]
    assert [e.call.id for e in starts] == ["a"] and [e.call.id for e in ends] == ["a"]
    doubled: list[Event] = []
    for event in report.events:
        doubled.append(event)
        if isinstance(event, ToolExecutionStart | ToolExecutionEnd):
            doubled.append(event)  # start, start, ..., end, end: balanced, but twice
    bad = dataclasses.replace(report, events=doubled)
    assert check_run(agent, bad) == [  # type: ignore[arg-type]
        "invariant 6: tool 'a' started 2x, ended 2x"
    ]


async def test_checker_reports_an_agent_left_in_a_non_terminal_state() -> None:
    kit, _, report = await clean_run()
    idle = kit.agent()  # never ran: idle, which is no terminal state
    assert check_run(idle, report) == [
        "invariant 5: the run ended in non-terminal state 'idle'",
        "invariant 5: RunResult.state 'done' != agent.state 'idle'",
    ]


async def one_clean_run(kit: AgentKit, agent: Agent, prompt: str = "go") -> RunReport:
    kit.model.load([text_response(f"answer to {prompt}")])
    report = await drive_run(agent, prompt)
    assert check_run(agent, report) == []
    return report


async def test_check_run_fails_a_report_that_holds_no_run() -> None:
    kit = AgentKit(ScriptPlayer())
    agent = kit.agent()
    report = await one_clean_run(kit, agent)
    empty = dataclasses.replace(report, events=[], requests=[])
    assert check_run(agent, empty) == [
        "invariant 5: the report holds no run: 0 run_start and 0 run_end events (expected "
        "exactly one of each, of one run)"
    ]


async def test_check_run_fails_a_report_that_holds_two_runs() -> None:
    kit = AgentKit(ScriptPlayer())
    agent = kit.agent()
    first = await one_clean_run(kit, agent, "one")
    second = await one_clean_run(kit, agent, "two")
    both = dataclasses.replace(
        second, events=[*first.events, *second.events], requests=[*first.requests, *second.requests]
    )
    assert check_run(agent, both) == [
        "invariant 5: the report holds 2 runs: 2 run_start and 2 run_end events (expected "
        "exactly one of each, of one run)"
    ]


async def test_check_run_fails_a_report_whose_start_and_end_belong_to_two_runs() -> None:
    kit = AgentKit(ScriptPlayer())
    agent = kit.agent()
    first = await one_clean_run(kit, agent, "one")
    second = await one_clean_run(kit, agent, "two")
    # The first run's start and the second run's end: one of each, but of two runs.
    spliced = [e for e in first.events if isinstance(e, RunStart)]
    spliced += [e for e in second.events if not isinstance(e, RunStart)]
    assert {e.run_id for e in spliced} == {first.events[0].run_id, second.events[0].run_id}
    bad = dataclasses.replace(second, events=spliced)
    assert check_run(agent, bad) == [
        "invariant 5: the report holds 2 runs: its events come from runs "
        f"{first.events[0].run_id}, {second.events[0].run_id} (expected one run)"
    ]
