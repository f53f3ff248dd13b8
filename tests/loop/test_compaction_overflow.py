"""Compaction when the window overflows: summaries that always fit, errors that say the sizes,
aborting a summarizer, calls awaiting approval and orphan results across compactions."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from loop_helpers import file_tools, hello_then_read_a_and_write_b, review_writes

from statemachine_agent import (
    AbortSignal,
    Agent,
    AgentBusyError,
    Approve,
    AssistantMessage,
    Compaction,
    CompactionEnd,
    CompactionStart,
    Message,
    ModelError,
    RunResult,
    State,
    TextBlock,
    ToolCallBlock,
    ToolResultMessage,
    UsageError,
    UserMessage,
    tool,
)
from statemachine_agent._compacting import MERGE_INSTRUCTIONS
from statemachine_agent.models import FunctionModel, ScriptedModel
from statemachine_agent.models._base import ModelRequest
from statemachine_agent.session import SUMMARY_PREFIX, compact, read_session
from statemachine_agent.testing import assert_valid_history
from statemachine_agent.testing.steps import call, text_response, tool_response

LIMIT_CHARS = 60_000
"""The model refuses any request whose messages (as JSON) are longer than this."""


OLD_PART_CHARS = 118_348
"""The size of the old part the compaction summarizes, in the same characters."""


TURNS = 45


def size_of(messages: Sequence[Message]) -> int:
    """A request's size as the refusing model measures it: its messages' JSON characters."""
    return sum(len(m.model_dump_json()) for m in messages)


def lookup(q: str) -> str:
    """Look something up.

    Args:
        q: what to look up.
    """
    return f"found {q}"


def read_chunk(n: int) -> str:
    """Read one chunk of the big file.

    Args:
        n: the chunk's number.
    """
    return f"chunk {n}"


class Sent:
    """What the refusing model was sent: each request's size and messages, and which it refused."""

    def __init__(self) -> None:
        self.sizes: list[int] = []
        self.requests: list[ModelRequest] = []
        self.refused: list[int] = []

    def summaries(self) -> list[ModelRequest]:
        return [r for r in self.requests if not r.tools]


def refusing_model(sent: Sent, *, context_window: int | None) -> FunctionModel:
    """A model that refuses any request over `LIMIT_CHARS` as "prompt is too long", answers a
    request without tools (a summary request) with a short summary, and the task's requests
    with the final answer."""

    def respond(messages: Sequence[Message], request: ModelRequest) -> Any:
        size = size_of(messages)
        sent.sizes.append(size)
        sent.requests.append(request)
        if size > LIMIT_CHARS:
            sent.refused.append(len(sent.requests) - 1)
            raise ModelError(
                f"prompt is too long: {size // 4} tokens > {LIMIT_CHARS // 4} maximum",
                kind="invalid_request_error",
                status_code=400,
            )
        if not request.tools:
            return f"summary of {len(messages[0].text):,} characters"
        return f"All {TURNS} chunks read."

    return FunctionModel(respond, context_window=context_window)


def long_task(compaction: Compaction) -> tuple[list[Message], int]:
    """A prompt and `TURNS` tool turns whose old part (what ``compaction`` cuts) is exactly
    `OLD_PART_CHARS` characters; and where the kept window starts."""

    def build(first_filler: int) -> list[Message]:
        history: list[Message] = [UserMessage("Read the big file, chunk by chunk.")]
        for n in range(1, TURNS + 1):
            history.append(
                AssistantMessage(
                    content=[ToolCallBlock(id=f"c{n}", name="read_chunk", input={"n": n})],
                    stop_reason="tool_use",
                )
            )
            filler = first_filler if n == 1 else 2_500
            history.append(
                ToolResultMessage(
                    tool_call_id=f"c{n}",
                    tool_name="read_chunk",
                    content=[TextBlock(text=f"chunk {n}: " + "x" * filler)],
                )
            )
        return history

    history = build(2_500)
    start = compaction.kept_start(history)
    history = build(2_500 + OLD_PART_CHARS - size_of(history[:start]))
    assert compaction.kept_start(history) == start
    assert size_of(history[:start]) == OLD_PART_CHARS
    return history, start


async def test_the_default_summarizer_never_sends_a_request_larger_than_the_window() -> None:
    """A 45-turn task whose old part is 118,348 characters, against a model that refuses any
    request over 60,000 (its window: 15,000 tokens): the default summarizer summarizes in pieces
    and then the pieces, every request fits and is valid, and the run ends ``done``."""
    sent = Sent()
    compaction = Compaction(threshold=0.8, keep_recent=4_000)
    history, start = long_task(compaction)
    assert size_of(history) > LIMIT_CHARS
    agent = Agent(
        refusing_model(sent, context_window=LIMIT_CHARS // 4),
        tools=[read_chunk],
        messages=history,
        compaction=compaction,
    )
    starts: list[CompactionStart] = []
    ends: list[CompactionEnd] = []
    agent.subscribe(lambda e: starts.append(e) if isinstance(e, CompactionStart) else None)
    agent.subscribe(lambda e: ends.append(e) if isinstance(e, CompactionEnd) else None)
    result = await agent.run()  # continue the task: its last call has its result
    assert result.state is State.DONE, result.error
    assert result.error is None
    assert result.text == f"All {TURNS} chunks read."
    assert [s.messages for s in starts] == [start]  # the 118,348-character old part
    assert [e.messages_cut for e in ends] == [start]
    assert sent.refused == []
    assert max(sent.sizes) <= LIMIT_CHARS, sent.sizes
    for request in sent.requests:
        assert_valid_history(list(request.messages))
    summaries = sent.summaries()
    assert len(summaries) >= 3  # two pieces at least, then one summary of the pieces
    assert summaries[-1].messages[0].text.startswith(MERGE_INSTRUCTIONS)
    assert all("part" in r.messages[0].text for r in summaries[:-1])
    last = summaries[-1].messages[0].text
    assert agent.messages[0] == UserMessage(SUMMARY_PREFIX + f"summary of {len(last):,} characters")
    assert agent.messages[1:-1] == history[start:]
    assert_valid_history(agent.messages)


async def test_a_summary_request_refused_as_too_long_is_split_and_sent_again() -> None:
    """The same task against a model that does not say its window (the threshold is in tokens):
    the one whole-transcript request the provider refuses is split in halves until the pieces
    fit; the run compacts and ends ``done``."""
    sent = Sent()
    compaction = Compaction(threshold=12_000, keep_recent=4_000)
    history, start = long_task(compaction)
    agent = Agent(
        refusing_model(sent, context_window=None),
        tools=[read_chunk],
        messages=history,
        compaction=compaction,
    )
    result = await agent.run()
    assert result.state is State.DONE, result.error
    assert result.text == f"All {TURNS} chunks read."
    assert sent.refused == [0]  # only the first, whole-transcript summary request
    assert not sent.requests[0].tools
    fitted = [size for n, size in enumerate(sent.sizes) if n not in sent.refused]
    assert max(fitted) <= LIMIT_CHARS
    assert agent.messages[1:-1] == history[start:]
    assert_valid_history(agent.messages)


async def test_each_summary_request_holds_at_most_half_the_window() -> None:
    """The default summarizer cuts the transcript into pieces of at most half the model's
    context window (15,000 tokens: 30,000 characters), so the summary it asks for has the other
    half: no summary request's text is longer than half the window (plus its instructions)."""
    sent = Sent()
    compaction = Compaction(threshold=0.8, keep_recent=4_000)
    history, _start = long_task(compaction)
    agent = Agent(
        refusing_model(sent, context_window=LIMIT_CHARS // 4),
        tools=[read_chunk],
        messages=history,
        compaction=compaction,
    )
    result = await agent.run()
    assert result.state is State.DONE, result.error
    sizes = [len(r.messages[0].text) for r in sent.summaries()]
    assert len(sizes) >= 3
    assert max(sizes) <= LIMIT_CHARS // 2, sizes


def on_overflow_only() -> Compaction:
    """Compaction only when the history does not fit (never by threshold), everything old cut,
    the summary a constant."""
    return Compaction(threshold=10**9, keep_recent=0, summarize=lambda old: "s")


async def run_compacting_once(agent: Agent, prompt: str) -> tuple[RunResult, CompactionEnd]:
    """``agent.run(prompt)``'s result and the one compaction it went through (asserted one)."""
    ends: list[CompactionEnd] = []
    agent.subscribe(lambda e: ends.append(e) if isinstance(e, CompactionEnd) else None)
    result = await agent.run(prompt)
    [end] = ends
    return result, end


def _history(results: int = 3) -> list[Message]:
    history: list[Message] = [UserMessage("task")]
    for n in range(results):
        history.append(
            AssistantMessage(
                content=[ToolCallBlock(id=f"h{n}", name="lookup", input={"q": str(n)})],
                stop_reason="tool_use",
            )
        )
        history.append(
            ToolResultMessage(
                tool_call_id=f"h{n}", tool_name="lookup", content=[TextBlock(text="r" * 400)]
            )
        )
    return history


async def test_compaction_that_cannot_succeed_names_the_sizes_the_engine_measured() -> None:
    def respond(messages: Sequence[Message], request: ModelRequest) -> Any:
        raise ModelError("prompt is too long: 300000 tokens > 200000 maximum", status_code=400)

    agent = Agent(
        FunctionModel(respond, context_window=200_000),
        tools=[lookup],
        messages=_history(),
        compaction=on_overflow_only(),
    )
    result, end = await run_compacting_once(agent, "go")
    assert result.state is State.FAILED
    assert end.tokens_after < end.tokens_before
    assert result.error is not None
    assert "prompt is too long: 300000 tokens > 200000 maximum" in result.error  # the API's
    assert (
        f"the engine measured about {end.tokens_before:,} tokens before compaction and "
        f"{end.tokens_after:,} after, against a context window of 200,000 tokens"
    ) in result.error


async def test_nothing_left_to_cut_names_the_sizes_the_engine_measured() -> None:
    cut = call("lookup", '{"q": "par', id="cut1")
    stop = "model_context_window_exceeded"
    model = ScriptedModel([tool_response(cut, stop_reason=stop)], context_window=8_000)
    agent = Agent(
        model,
        tools=[lookup],
        compaction=on_overflow_only(),
    )
    result, end = await run_compacting_once(agent, "write the report")
    assert result.state is State.FAILED
    assert result.error is not None and "nothing left to cut" in result.error
    assert (
        f"the engine measured about {end.tokens_before:,} tokens before compaction and "
        f"{end.tokens_before:,} after, against a context window of 8,000 tokens"
    ) in result.error


async def test_a_summarizer_answering_with_a_tool_call_names_stop_reason_tool_use() -> None:
    history = _history()
    model = ScriptedModel(
        [tool_response(call("lookup", {"q": "more"}, id="s1")), text_response("unused")],
        context_window=10_000,
    )
    agent = Agent(
        model, tools=[lookup], messages=history, compaction=Compaction(threshold=50, keep_recent=0)
    )
    result = await agent.run("next")
    assert result.state is State.FAILED
    assert model.calls == 1  # the summary request only
    assert result.error is not None
    assert result.error.startswith(
        "Compaction failed: the summarizer's model answered with stop reason tool_use (a tool "
        "call, not a summary); the history was kept as it was (the engine measured about "
    )
    assert agent.messages == [*history, UserMessage("next")]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("takes_signal", [True, False])
async def test_an_abort_during_a_custom_summarizer_ends_aborted_promptly(
    tmp_path: Path, takes_signal: bool
) -> None:
    """``Compaction(summarize=my_fn)`` whose first call would wait 30 s (on an event nobody sets):
    ``agent.abort()`` ends the run ``aborted``, the history as before compaction, no ``history``
    record of a compaction in the log; the summarizer saw the run's signal; the next run works."""
    entered = asyncio.Event()
    never = asyncio.Event()  # the "30 s" the summarizer would take: nobody sets it
    signals: list[AbortSignal] = []
    calls = [0]

    async def wait_then_summarize(old: Sequence[Message]) -> str:
        calls[0] += 1
        if calls[0] == 1:
            entered.set()
            await never.wait()
        return "a summary"

    async def summarize_with_signal(old: Sequence[Message], signal: AbortSignal) -> str:
        signals.append(signal)
        return await wait_then_summarize(old)

    summarize = summarize_with_signal if takes_signal else wait_then_summarize
    history = _history()
    path = tmp_path / "session.jsonl"
    agent = Agent(
        ScriptedModel([text_response("answer")]),
        tools=[lookup],
        messages=history,
        compaction=Compaction(threshold=50, keep_recent=0, summarize=summarize),
        session=path,
    )
    states: list[str] = []
    agent.subscribe(lambda e: states.append(e.dest) if hasattr(e, "dest") else None)
    handle = agent.start("next")
    await asyncio.wait_for(entered.wait(), 10)  # a failure guard, not a timing assertion
    assert states[-1] == State.COMPACTING
    agent.abort("stop now")
    result = await asyncio.wait_for(handle, 10)
    assert result.state is State.ABORTED
    assert result.error == "stop now"
    assert agent.messages == [*history, UserMessage("next")]
    if takes_signal:
        assert [s.aborted for s in signals] == [True]  # the run's own signal
    compacted = [
        r
        for r in read_session(path).records
        if r.type == "history" and r.body.get("reason") == "compaction"
    ]
    assert compacted == []
    again = await asyncio.wait_for(agent.run("and now?"), 10)
    assert again.state is State.DONE and again.text == "answer"
    assert agent.messages[0] == UserMessage(SUMMARY_PREFIX + "a summary")
    agent.close()


@pytest.mark.timeout(60)
async def test_an_abort_cancels_the_custom_summarizer_it_interrupts() -> None:
    """An abort during compaction cancels the summarizer's task (``asyncio.CancelledError``
    reaches it): it does not go on in the background after the run ended ``aborted``."""
    entered, cancelled = asyncio.Event(), asyncio.Event()

    async def summarize(old: Sequence[Message]) -> str:
        entered.set()
        try:
            await asyncio.Event().wait()  # nobody sets it: only a cancellation ends the wait
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return "never"

    agent = Agent(
        ScriptedModel([text_response("answer")]),
        tools=[lookup],
        messages=_history(),
        compaction=Compaction(threshold=50, keep_recent=0, summarize=summarize),
    )
    handle = agent.start("next")
    await asyncio.wait_for(entered.wait(), 10)  # a failure guard, not a timing assertion
    agent.abort("stop")
    result = await asyncio.wait_for(handle, 10)
    assert result.state is State.ABORTED
    assert cancelled.is_set(), "the summarizer was not cancelled: it still runs in the background"


def call_ids(messages: Sequence[Message]) -> list[str]:
    return [c.id for m in messages if isinstance(m, AssistantMessage) for c in m.tool_calls]


def result_ids(messages: Sequence[Message]) -> list[str]:
    return [m.tool_call_id for m in messages if isinstance(m, ToolResultMessage)]


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


@tool
def read_long_chunk(n: int) -> str:
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
            call("read_long_chunk", {"n": 2 * n}, id=f"a{n}_{done}"),
            call("read_long_chunk", {"n": 2 * n + 1}, id=f"b{n}_{done}"),
        )

    summaries: list[int] = []

    def summarize(old: Sequence[Message]) -> str:
        summaries.append(len(old))
        chained = " (after an earlier summary)" if old[0].text.startswith(SUMMARY_PREFIX) else ""
        return f"{len(result_ids(old))} chunk(s) read{chained}."

    def new_agent(**kwargs: Any) -> Agent:
        return Agent(
            FunctionModel(respond, context_window=8_000),
            tools=[read_long_chunk],
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
        tools=[read_long_chunk],
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
