"""Issue 40, item 2: a named test for each kind of bug the whole suite let through.

Each test asserts the documented behaviour on its exact values; each was seen failing with its bug
put back by hand. The permission rule's shell-control case is in
``tests/workspace/test_permissions_shell_control.py``; the replay page's markup case in
``tests/session/test_html_issue33.py``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import subprocess
import sys
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

from statemachine_agent import (
    Agent,
    AgentError,
    AssistantMessage,
    Event,
    MessageEnd,
    ModelRetry,
    RunStart,
    State,
    ToolContext,
    ToolDefinitionError,
    ToolExecutionUpdate,
    ToolResultMessage,
    UsageError,
    UsageLimits,
    UserMessage,
    tool,
)
from statemachine_agent.models import FunctionModel, ScriptedModel
from statemachine_agent.session import SessionCorruptError
from statemachine_agent.testing import (
    AgentKit,
    FakeMessagesAPI,
    RunReport,
    ScriptPlayer,
    assert_valid_history,
    check_run,
    drive_run,
)
from statemachine_agent.testing.steps import call, error_step, text_response, tool_response

INTERRUPTED = (
    "Interrupted while running: the run was aborted. The call may have partly completed; "
    "check its effects before retrying."
)


def results_of(messages: list[Any]) -> list[ToolResultMessage]:
    return [m for m in messages if isinstance(m, ToolResultMessage)]


# -- (a) a tool that stops through ctx.signal.raise_if_aborted() is interrupted ------------------


@tool
async def waits_then_stops(ctx: ToolContext) -> str:
    """An async tool that stops cooperatively: it waits for the abort, then raises on it."""
    ctx.progress("waiting")  # the test aborts on this update: the call has started
    await ctx.signal.wait()
    ctx.signal.raise_if_aborted()
    return "finished"


@tool
def blocks_then_stops(ctx: ToolContext) -> str:
    """A sync tool (a worker thread) that stops cooperatively when the run is aborted."""
    aborted = threading.Event()
    ctx.signal.add_callback(aborted.set)
    ctx.progress("waiting")
    aborted.wait()
    ctx.signal.raise_if_aborted()
    return "finished"


@pytest.mark.parametrize(
    "names",
    [
        ["waits_then_stops"],  # a batch of one: run inline under the abort scope
        ["blocks_then_stops"],
        ["waits_then_stops", "blocks_then_stops"],  # parallel: tasks, the grace in _watch
    ],
)
@pytest.mark.parametrize("mode", ["parallel", "sequential"])
async def test_a_tool_stopping_through_raise_if_aborted_is_answered_interrupted_not_as_its_own_error(
    names: list[str], mode: str, caplog: pytest.LogCaptureFixture
) -> None:
    script = [
        tool_response(*(call(n, id=f"c{i}") for i, n in enumerate(names))),
        text_response("never requested"),
    ]
    agent = Agent(
        ScriptedModel(script),
        tools=[waits_then_stops, blocks_then_stops],
        tool_execution=mode,  # type: ignore[arg-type]
        abort_grace_seconds=60.0,  # a realistic grace: the tools stop well within it
    )
    waiting: set[str] = set()

    def abort_once_all_wait(event: Event) -> None:
        if isinstance(event, ToolExecutionUpdate):
            waiting.add(event.call_id)
            if mode == "sequential" or len(waiting) == len(names):
                agent.abort("stop now")

    agent.subscribe(abort_once_all_wait)
    with caplog.at_level(logging.DEBUG, logger="statemachine_agent"):
        result = await agent.run("go")
    assert result.state is State.ABORTED
    results = results_of(result.messages)
    assert [r.tool_call_id for r in results] == [f"c{i}" for i in range(len(names))]
    started = len(waiting)  # sequential: the calls after the first are not started
    assert [r.text for r in results[:started]] == [INTERRUPTED] * started
    assert all(r.is_error for r in results)
    assert [r.text for r in results[started:]] == [
        "Not run: the run was aborted before this call started."
    ] * (len(names) - started)
    assert len(agent.model.requests) == 1  # type: ignore[attr-defined]
    noisy = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert [r.getMessage() for r in noisy] == []
    assert_valid_history(result.messages)


# -- (b) steering and a follow-up queued together: steering first ----------------------------


def user_groups(agent: Agent, requests: list[list[Any]]) -> list[list[str]]:
    """For each request after the first (its messages as sent): the user messages after its
    last assistant message (what was delivered before it)."""
    groups = []
    for sent in requests[1:]:
        tail: list[str] = []
        for message in reversed(sent):
            if isinstance(message, AssistantMessage):
                break
            if isinstance(message, UserMessage):
                tail.insert(0, message.text)
        groups.append(tail)
    return groups


def expected_groups(steering_mode: str, follow_up_mode: str) -> list[list[str]]:
    steering = [["s1", "s2"]] if steering_mode == "all" else [["s1"], ["s2"]]
    follow_ups = [["f1", "f2"]] if follow_up_mode == "all" else [["f1"], ["f2"]]
    return steering + follow_ups  # README: steering, else follow-ups, each by its mode


MODES = [("all", "all"), ("all", "one_at_a_time"), ("one_at_a_time", "all")]
MODES += [("one_at_a_time", "one_at_a_time")]


def queue_follow_ups_then_steering(agent: Agent) -> None:
    agent.follow_up("f1")
    agent.follow_up("f2")  # queued first: the order of queueing is not the order of delivery
    agent.steer("s1")
    agent.steer("s2")


def recording_agent(
    steering_mode: str,
    follow_up_mode: str,
    answer: Callable[[int], Any] = lambda n: f"answer {n}",
    tools: Sequence[Any] = (),
) -> tuple[Agent, list[list[Any]]]:
    """An agent in the given modes whose model records the messages of each request as sent and
    replies ``answer(number of the request)``; and that record."""
    requests: list[list[Any]] = []

    def respond(messages: list[Any], request: Any) -> Any:
        requests.append(list(request.messages))  # as sent
        return answer(len(requests))

    agent = Agent(
        FunctionModel(respond),
        tools=list(tools),
        steering_mode=steering_mode,  # type: ignore[arg-type]
        follow_up_mode=follow_up_mode,  # type: ignore[arg-type]
    )
    return agent, requests


@pytest.mark.parametrize(("steering_mode", "follow_up_mode"), MODES)
async def test_steering_queued_with_a_follow_up_at_a_stop_is_delivered_first(
    steering_mode: str, follow_up_mode: str
) -> None:
    agent, requests = recording_agent(steering_mode, follow_up_mode)

    def on_first_answer(event: Event) -> None:
        first = len(requests) == 1 and not agent.has_queued_input()
        if first and isinstance(event, MessageEnd) and isinstance(event.message, AssistantMessage):
            queue_follow_ups_then_steering(agent)  # the model would stop here

    agent.subscribe(on_first_answer)
    result = await agent.run("go")
    assert result.state is State.DONE
    assert user_groups(agent, requests) == expected_groups(steering_mode, follow_up_mode)
    assert not agent.has_queued_input()


@pytest.mark.parametrize(("steering_mode", "follow_up_mode"), MODES)
async def test_steering_queued_with_a_follow_up_during_a_batch_lands_after_it_the_follow_up_at_the_stop(
    steering_mode: str, follow_up_mode: str
) -> None:
    @tool
    def work() -> str:
        """Work while the user queues both kinds of input."""
        queue_follow_ups_then_steering(agent)
        return "worked"

    agent, requests = recording_agent(
        steering_mode,
        follow_up_mode,
        lambda n: tool_response(call("work", id="w")) if n == 1 else f"a{n}",
        tools=[work],
    )
    result = await agent.run("go")
    assert result.state is State.DONE
    groups = user_groups(agent, requests)
    assert groups == expected_groups(steering_mode, follow_up_mode)
    # The first steering group follows the batch's result directly (README: after the batch).
    second = requests[1]
    assert isinstance(second[-1 - len(groups[0])], ToolResultMessage)


@pytest.mark.parametrize(("steering_mode", "follow_up_mode"), MODES)
async def test_steering_queued_with_a_follow_up_before_a_continued_run_goes_first(
    steering_mode: str, follow_up_mode: str
) -> None:
    agent, requests = recording_agent(steering_mode, follow_up_mode)
    await agent.run("go")
    queue_follow_ups_then_steering(agent)
    result = await agent.run()  # continue: the queued input is delivered
    assert result.state is State.DONE
    assert user_groups(agent, requests) == expected_groups(steering_mode, follow_up_mode)


# -- (c) max_tool_calls is checked per batch -------------------------------------------------


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


# -- (d) an abort during a retry backoff sends no more requests ------------------------------

HOUR = 3600.0  # a backoff the run could never wait out in a test: the abort must end it


def abort_on_retry(agent: Agent, *, later: bool) -> list[ModelRetry]:
    """Abort from a subscriber on the retry event: at once, or from the loop once the backoff
    has begun (``later``)."""
    retries: list[ModelRetry] = []

    def on_event(event: Event) -> None:
        if isinstance(event, ModelRetry):
            retries.append(event)
            if later:
                asyncio.get_running_loop().call_soon(agent.abort, "stop retrying")
            else:
                agent.abort("stop retrying")

    agent.subscribe(on_event)
    return retries


@pytest.mark.parametrize("later", [False, True], ids=["on_the_event", "during_the_sleep"])
async def test_an_abort_during_a_retry_backoff_sends_no_more_requests(later: bool) -> None:
    model = ScriptedModel([error_step(), text_response("paid for, never wanted")])
    agent = Agent(model, model_retries=3, retry_backoff_seconds=HOUR)
    retries = abort_on_retry(agent, later=later)
    result = await agent.run("go")
    assert result.state is State.ABORTED
    assert len(model.requests) == 1 and model.calls == 1
    assert [(r.attempt, r.delay_seconds) for r in retries] == [(1, HOUR)]
    assert_valid_history(result.messages)


@pytest.mark.parametrize("later", [False, True], ids=["on_the_event", "during_the_sleep"])
async def test_an_abort_during_a_retry_backoff_sends_no_more_http_requests(later: bool) -> None:
    # An error event inside a 200 stream: the SDK does not retry it, the engine does.
    with FakeMessagesAPI([error_step(), text_response("paid for, never wanted")]) as api:
        agent = Agent(api.model(), model_retries=3, retry_backoff_seconds=HOUR)
        retries = abort_on_retry(agent, later=later)
        result = await agent.run("go")
        await agent.aclose()
    assert result.state is State.ABORTED
    assert len(api.requests) == 1
    assert len(retries) == 1


# -- (e) a failed resume leaves the session log unlocked -------------------------------------

LOCK_PROBE = (
    "import fcntl, sys\n"
    "with open(sys.argv[1], 'a+b') as f:\n"
    "    try:\n"
    "        fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)\n"
    "    except BlockingIOError:\n"
    "        sys.exit(3)\n"
)


def another_process_can_lock(path: Path) -> bool:
    probe = subprocess.run([sys.executable, "-c", LOCK_PROBE, str(path)], check=False)
    return probe.returncode == 0


@tool
def deploy() -> str:
    """Deploy."""
    return "deployed"


def logged_session(path: Path) -> None:
    agent = Agent(
        ScriptedModel([tool_response(call("deploy", id="d1")), text_response("ok")]),
        tools=[deploy],
        session=path,
    )
    agent.run_sync("go")
    agent.close()


def corrupt(path: Path) -> None:
    lines = path.read_text().splitlines(keepends=True)
    lines.insert(1, "{this is not json}\n")
    path.write_text("".join(lines))


def not_a_log(path: Path) -> None:
    path.write_text('{"hello": "world"}\n')


FAILED_RESUMES: list[tuple[str, Callable[[Path], None], dict[str, Any], type[Exception]]] = [
    ("a_corrupt_log", corrupt, {}, SessionCorruptError),
    ("a_file_that_is_no_session_log", not_a_log, {}, AgentError),
    ("two_tools_with_one_name", lambda p: None, {"tools": [deploy, deploy]}, ToolDefinitionError),
    ("a_tool_that_is_not_a_tool", lambda p: None, {"tools": ["deploy"]}, ToolDefinitionError),
    ("an_unknown_option_value", lambda p: None, {"steering_mode": "sideways"}, UsageError),
]


@pytest.mark.parametrize(
    ("spoil", "options", "error"),
    [case[1:] for case in FAILED_RESUMES],
    ids=[case[0] for case in FAILED_RESUMES],
)
def test_a_failed_resume_leaves_the_session_log_unlocked(
    tmp_path: Path, spoil: Callable[[Path], None], options: dict[str, Any], error: type[Exception]
) -> None:
    path = tmp_path / "run.jsonl"
    logged_session(path)
    spoil(path)
    model = ScriptedModel([text_response("again")])
    options = {"tools": [deploy], **options}
    with pytest.raises(error) as failed:  # ``failed`` keeps the failed call's frames alive
        Agent.resume(path, model=model, **options)
    assert failed.value is not None
    assert another_process_can_lock(path)
    if error is not AgentError:  # the log itself is fine (or readable with strict=False)
        with Agent.resume(path, model=model, tools=[deploy], strict=False) as again:
            assert again.state is State.DONE
            assert not another_process_can_lock(path)  # the second resume holds it now
    assert another_process_can_lock(path)


# -- (f) Instrumentation.close() mid-run leaves no span unended ------------------------------


class Spans:
    """Every span started and ended under one tracer provider (a span processor's view)."""

    def __init__(self) -> None:
        otel_sdk = pytest.importorskip(
            "opentelemetry.sdk.trace", reason="the [otel] extra is not installed"
        )

        spans = self

        class Recorder(otel_sdk.SpanProcessor):  # type: ignore[name-defined,misc]
            def on_start(self, span: Any, parent_context: Any = None) -> None:
                spans.started.append(span)

            def on_end(self, span: Any) -> None:
                spans.ended.append(span)

        self.started: list[Any] = []
        self.ended: list[Any] = []
        self.provider = otel_sdk.TracerProvider()
        self.provider.add_span_processor(Recorder())

    def unended(self) -> list[str]:
        ended = {s.context.span_id for s in self.ended}  # on_end gets a copy: match by id
        return [s.name for s in self.started if s.context.span_id not in ended]


@tool
async def reports(ctx: ToolContext) -> str:
    """A tool that sends progress."""
    ctx.progress("half way")
    return "reported"


@tool
def looks_up(key: str) -> str:
    """A sync tool."""
    return f"value of {key}"


def traced_script() -> list[dict[str, Any]]:
    return [
        tool_response(call("reports", id="r1"), call("looks_up", {"key": "k"}, id="l1")),
        tool_response(call("looks_up", {"key": "j"}, id="l2")),
        text_response("done"),
    ]


async def traced_run(close_at: int | None) -> tuple[Spans, int, Agent]:
    from statemachine_agent.otel import instrument

    spans = Spans()
    agent = Agent(ScriptedModel(traced_script(), name="m"), tools=[reports, looks_up])
    tracing = instrument(agent, tracer_provider=spans.provider)
    seen = 0

    def count(event: Event) -> None:
        nonlocal seen
        seen += 1
        if seen == close_at:
            tracing.close()

    agent.subscribe(count)
    result = await agent.run("go")
    assert result.state is State.DONE
    return spans, seen, agent


async def test_instrumentation_closed_at_any_event_of_a_run_leaves_no_span_unended() -> None:
    full, events, _ = await traced_run(None)
    assert full.unended() == [] and len(full.started) == 7  # the run, 3 chats, 3 tool calls
    for close_at in range(1, events + 1):
        spans, _, _ = await traced_run(close_at)
        assert spans.unended() == [], f"closed at event {close_at}"
        assert len(spans.started) <= len(full.started)


async def test_instrumentation_closed_while_a_tool_runs_ends_its_spans_with_an_error() -> None:
    from opentelemetry.trace import StatusCode

    from statemachine_agent.otel import instrument

    started, release = asyncio.Event(), asyncio.Event()

    @tool
    async def slow() -> str:
        """Wait until the test lets it finish."""
        started.set()
        await release.wait()
        return "finished"

    spans = Spans()
    script = [tool_response(call("slow", id="s1")), text_response("done")]
    agent = Agent(ScriptedModel(script, name="m"), tools=[slow])
    tracing = instrument(agent, tracer_provider=spans.provider)
    run = asyncio.ensure_future(agent.run("go"))
    await started.wait()
    assert sorted(s.name for s in spans.started) == ["chat m", "execute_tool slow", "invoke_agent"]
    tracing.close()
    assert spans.unended() == []
    release.set()
    result = await run
    assert result.state is State.DONE
    assert spans.unended() == [] and len(spans.started) == 3  # nothing traced after close
    open_then = [s for s in spans.ended if s.name in ("execute_tool slow", "invoke_agent")]
    assert [(s.status.status_code, s.status.description) for s in open_then] == [
        (StatusCode.ERROR, "tracing was stopped")
    ] * 2


# -- (h) check_run fails a report with no run or with two runs --------------------------------


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
