"""Bug reports filed against other agent loops about long runs, replayed against this one.

Issue 32 (long runs that stay right: resume keeps its counts, compaction always fits, limits and
traces tell the truth) named its own reports; these are five others on the same subjects:
approval and compaction, a result too large for any compaction, chained compactions rebuilt from
the log, a tool-call budget against a parallel batch across a resume, and the spans of a run
aborted while a tool ignores the abort. Each test reduces one public report to a small scripted
run and asserts what we expect instead.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from loop_helpers import file_tools, hello_then_read_a_and_write_b, review_writes

from statemachine_agent import (
    Agent,
    AgentBusyError,
    Approve,
    AssistantMessage,
    Compaction,
    CompactionEnd,
    Message,
    ModelError,
    State,
    ToolResultMessage,
    UsageError,
    UsageLimits,
    tool,
)
from statemachine_agent.models import FunctionModel, ScriptedModel
from statemachine_agent.models._base import ModelRequest
from statemachine_agent.session import SUMMARY_PREFIX, compact, read_session
from statemachine_agent.testing import assert_valid_history
from statemachine_agent.testing.steps import call, text_response, tool_response


def call_ids(messages: Sequence[Message]) -> list[str]:
    return [c.id for m in messages if isinstance(m, AssistantMessage) for c in m.tool_calls]


def result_ids(messages: Sequence[Message]) -> list[str]:
    return [m.tool_call_id for m in messages if isinstance(m, ToolResultMessage)]


# -- google/adk-python#4740: compaction must not summarize away a call awaiting approval ---------


async def test_compacting_between_runs_keeps_a_call_that_awaits_approval(tmp_path: Path) -> None:
    """google/adk-python#4740: with event compaction on, a pending ``adk_request_confirmation``
    call (no response yet) was summarized away; when the user later confirmed, the runner found
    no matching call and raised ``ValueError``. Here: a run stops in ``awaiting_approval`` with
    ``w1`` pending (its sibling ``r1`` ran, its result held), and the history is compacted
    between runs (`statemachine_agent.session.compact`, ``keep_last=1``). Expected: compaction
    never cuts the response whose calls are pending (it refuses, or keeps that response in the
    kept window), so approving ``w1`` runs it once and the history the next request carries is
    valid: every result follows its call."""
    ran: list[str] = []
    path = tmp_path / "run.jsonl"
    model = ScriptedModel(hello_then_read_a_and_write_b())
    agent = Agent(model, tools=file_tools(ran), before_tool_call=review_writes, session=path)
    assert (await agent.run("hi")).state is State.DONE
    paused = await agent.run("Read a, then write b")
    assert paused.state is State.AWAITING_APPROVAL
    assert [c.id for c in paused.pending] == ["w1"]
    assert ran == ["read a"]

    # Refusing to compact while calls are pending is one right answer.
    with contextlib.suppress(UsageError, AgentBusyError):
        await compact(agent, lambda old: "The user said hi; the assistant said hello.", keep_last=1)
    assert agent.state is State.AWAITING_APPROVAL
    assert {"r1", "w1"} <= set(call_ids(agent.messages)), agent.messages

    sent_before = len(model.requests)
    done = await agent.run(decisions={"w1": Approve()})
    agent.close()
    assert done.state is State.DONE, done.error
    assert done.text == "Read a, wrote b."
    assert ran == ["read a", "write b"]  # each call ran once
    [request] = model.requests[sent_before:]
    assert_valid_history(list(request.messages))  # r1 and w1 follow their calls
    assert_valid_history(agent.messages)
    assert read_session(path).records  # the log is readable after the compaction


# -- strands-agents/harness-sdk#981: an overflow no compaction can fix -------------------------

WINDOW_CHARS = 60_000
"""The model refuses any request whose messages (as JSON) are longer than this."""


@tool
def dump(table: str) -> str:
    """Dump a table.

    Args:
        table: the table's name.
    """
    return "row," * 30_000  # 120,000 characters: twice the window on its own


async def test_one_result_larger_than_the_window_fails_once_saying_what_to_shorten() -> None:
    """strands-agents/harness-sdk#981: when the context overflow came from the newest message
    itself (one large ``toolResult``), ``SummarizingConversationManager`` tried to summarize
    "all the messages" and failed with "insufficient messages for summarization", which does
    not say what to do. Here: the first tool result of a fresh conversation is twice the
    model's window. Expected: the run ends ``failed`` with a valid history, the identical
    request the provider refused is not sent again after a compaction that cut nothing, and
    the error says that compaction had nothing to cut (the newest turn alone is larger than
    the window) and to shorten what the tools return, not to keep less recent history."""
    sent: list[tuple[int, bool]] = []

    def respond(messages: Sequence[Message], request: ModelRequest) -> Any:
        size = sum(len(m.model_dump_json()) for m in messages)
        sent.append((size, bool(request.tools)))
        if size > WINDOW_CHARS:
            raise ModelError(
                f"prompt is too long: {size // 4} tokens > {WINDOW_CHARS // 4} maximum",
                kind="invalid_request_error",
                status_code=400,
            )
        if not request.tools:
            return "a summary"
        return tool_response(call("dump", {"table": "orders"}, id="d1"))

    agent = Agent(
        FunctionModel(respond, context_window=WINDOW_CHARS // 4),
        tools=[dump],
        compaction=Compaction(threshold=0.8, keep_recent=2_000),
    )
    ends: list[CompactionEnd] = []
    agent.subscribe(lambda e: ends.append(e) if isinstance(e, CompactionEnd) else None)
    result = await agent.run("Dump the orders table.")
    assert result.state is State.FAILED
    assert_valid_history(agent.messages)
    assert ends and all(e.messages_cut == 0 for e in ends)  # nothing could be cut
    assert result.error is not None
    error = result.error
    assert "nothing" in error and "to cut" in error, error
    assert "shorten what the tools return" in error, error
    assert "keep less recent history" not in error, error  # it cannot help: it is one turn
    refused = [size for size, _tools in sent if size > WINDOW_CHARS]
    assert len(refused) == 1, sent  # the refused request is not sent again unchanged


# -- earendil-works/pi#6832: chained compactions, then the history rebuilt from the log --------


@tool
def read_chunk(n: int) -> str:
    """Read one chunk of the big file.

    Args:
        n: the chunk's number.
    """
    return f"chunk {n}: " + "lorem ipsum " * 150


@pytest.mark.parametrize(
    "keep", [{"keep_recent_turns": 2}, {"keep_recent": 1_500}], ids=["by_turns", "by_tokens"]
)
async def test_chained_compactions_leave_no_orphan_result_live_or_rebuilt_from_the_log(
    tmp_path: Path, keep: dict[str, int]
) -> None:
    """earendil-works/pi#6832 (a regression of #4570 and #1764): after a session's 33rd
    compaction the kept window began with a ``toolResult`` whose call was in the summary; the
    live run went on, but every request after the conversation was rebuilt from the session
    file failed with "No tool call found for function call output". Here: a long task of
    parallel two-call batches compacts again and again (a summary of a summary). Expected:
    every request sent, the final history and the history `Agent.resume` rebuilds from the
    log are valid and equal, and the resumed agent's next request is valid too."""
    path = tmp_path / "run.jsonl"
    sent: list[list[Message]] = []
    turns = 24

    def respond(messages: Sequence[Message], request: ModelRequest) -> Any:
        sent.append(list(messages))
        done = sum(1 for m in messages if isinstance(m, AssistantMessage) and m.tool_calls)
        if isinstance(messages[-1], ToolResultMessage) and len(sent) > turns:
            return "Read every chunk."
        n = len(sent)
        return tool_response(
            call("read_chunk", {"n": 2 * n}, id=f"a{n}_{done}"),
            call("read_chunk", {"n": 2 * n + 1}, id=f"b{n}_{done}"),
        )

    summaries: list[int] = []

    def summarize(old: Sequence[Message]) -> str:
        summaries.append(len(old))
        chained = " (after an earlier summary)" if old[0].text.startswith(SUMMARY_PREFIX) else ""
        return f"{len(result_ids(old))} chunk(s) read{chained}."

    def new_agent(**kwargs: Any) -> Agent:
        return Agent(
            FunctionModel(respond, context_window=8_000),
            tools=[read_chunk],
            max_turns=100,
            compaction=Compaction(threshold=0.6, summarize=summarize, **keep),
            **kwargs,
        )

    agent = new_agent(session=path)
    result = await agent.run("Read the big file, two chunks at a time.")
    agent.close()
    assert result.state is State.DONE, result.error
    assert len(summaries) >= 3  # compacted again and again
    for request in sent:
        assert_valid_history(request)
    assert_valid_history(agent.messages)
    assert agent.messages[0].text.startswith(SUMMARY_PREFIX)

    resumed = Agent.resume(
        path,
        model=FunctionModel(respond, context_window=8_000),
        tools=[read_chunk],
        compaction=Compaction(threshold=0.6, summarize=summarize, **keep),
    )
    assert resumed.messages == agent.messages  # rebuilt from the log: the same history
    assert_valid_history(resumed.messages)
    before = len(sent)
    again = await resumed.run("One more chunk, please.")
    resumed.close()
    assert again.state is State.DONE, again.error
    for request in sent[before:]:
        assert_valid_history(request)


# -- pydantic/pydantic-ai#2978: a parallel batch and the tool-call budget, across a resume -----


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


# -- mastra-ai/mastra#21325: an abort ends the run's spans even when a tool ignores it ---------

GRACE = 0.2
IGNORES_FOR = 6.0
"""How long the stubborn tools go on after the abort (they stop by themselves then)."""


@pytest.mark.timeout(60)
@pytest.mark.parametrize("kind", ["sync", "async"])
async def test_an_abort_ends_the_runs_spans_even_when_a_tool_ignores_it(kind: str) -> None:
    """mastra-ai/mastra#21325: ``run.cancel()`` aborts the controller, but when a step does not
    honour ``abortSignal`` the step keeps running, ``execute()`` never returns and no span of
    the run is ever ended (exporters that act on span end see nothing). Here: two parallel
    calls of a tool that ignores the abort (a sync tool that does not read the signal; an async
    one that swallows its cancellation), ``abort_grace_seconds=0.2``. Expected: the run ends
    ``aborted`` within the grace period plus a margin, and by then its ``invoke_agent`` span
    and both ``execute_tool`` spans have ended with an error status; the calls are answered."""
    pytest.importorskip("opentelemetry.sdk", reason="the [otel] extra is not installed")
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from opentelemetry.trace import StatusCode

    from statemachine_agent.otel import instrument

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    entered = threading.Event()
    release = threading.Event()

    @tool
    def stubborn_sync(part: str) -> str:
        """Copy a part (does not read the abort signal).

        Args:
            part: the part.
        """
        entered.set()
        release.wait(IGNORES_FOR)
        return f"copied {part}"

    @tool
    async def stubborn_async(part: str) -> str:
        """Copy a part (swallows its cancellation).

        Args:
            part: the part.
        """
        entered.set()
        deadline = time.monotonic() + IGNORES_FOR
        while time.monotonic() < deadline and not release.is_set():
            with contextlib.suppress(asyncio.CancelledError):  # ignores the abort, as the
                await asyncio.sleep(0.02)  # report's step does
        return f"copied {part}"

    name = f"stubborn_{kind}"
    model = ScriptedModel(
        [tool_response(call(name, {"part": "1"}, id="p1"), call(name, {"part": "2"}, id="p2"))]
    )
    agent = Agent(
        model, tools=[stubborn_sync, stubborn_async], abort_grace_seconds=GRACE, max_turns=3
    )
    instrument(agent, tracer_provider=provider)
    handle = agent.start("Copy both parts.")
    waiter = asyncio.ensure_future(_result_of(handle))
    try:
        assert await asyncio.to_thread(entered.wait, 10)  # a failure guard, not a timing one
        aborted_at = time.monotonic()
        agent.abort("the user pressed stop")
        done, _ = await asyncio.wait({waiter}, timeout=GRACE + 1.5)
        took = time.monotonic() - aborted_at
        spans = exporter.get_finished_spans()
        runs = [s for s in spans if s.name == "invoke_agent"]
        tools = [s for s in spans if s.name.startswith("execute_tool")]
        assert done, (
            f"the run had not ended {took:.1f} s after the abort (grace {GRACE} s); finished "
            f"spans: {[s.name for s in spans]}"
        )
        assert len(runs) == 1 and runs[0].status.status_code is StatusCode.ERROR
        assert len(tools) == 2
        assert all(s.status.status_code is StatusCode.ERROR for s in tools)
        result = waiter.result()
        assert result.state is State.ABORTED
        assert result.error == "the user pressed stop"
        assert sorted(result_ids(agent.messages)) == ["p1", "p2"]  # every call answered
        assert_valid_history(agent.messages)
    finally:
        release.set()
        await asyncio.wait_for(waiter, IGNORES_FOR + 5)


async def _result_of(handle: Any) -> Any:
    return await handle
