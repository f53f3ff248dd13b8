"""Issue 32, cases 2, 3 and 4: a summary that always fits, compaction errors that say why, and an
abort during compaction.

Each case is a named test with the issue's values."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from statemachine_agent import (
    AbortSignal,
    Agent,
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
    UserMessage,
)
from statemachine_agent._compacting import MERGE_INSTRUCTIONS
from statemachine_agent.models import FunctionModel, ScriptedModel
from statemachine_agent.models._base import ModelRequest
from statemachine_agent.session import SUMMARY_PREFIX, read_session
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


# -- case 2: a summary that cannot fit -----------------------------------------------------------


async def test_case2_default_summarizer_never_sends_a_request_larger_than_the_window() -> None:
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


async def test_case2_a_summary_request_refused_as_too_long_is_split_and_sent_again() -> None:
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


async def test_case2_each_summary_request_holds_at_most_half_the_window() -> None:
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


# -- case 3: errors that say why -----------------------------------------------------------------


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


async def test_case3_compaction_that_cannot_succeed_names_the_sizes_the_engine_measured() -> None:
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


async def test_case3_nothing_left_to_cut_names_the_sizes_the_engine_measured() -> None:
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


async def test_case3_summarizer_answering_with_a_tool_call_names_stop_reason_tool_use() -> None:
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


class Invoice(BaseModel):
    """An invoice."""

    number: str
    total: float


async def test_case3_output_invalid_quotes_the_last_validation_error() -> None:
    model = ScriptedModel(
        [
            tool_response(call("final_result", {"number": "A-1", "total": "abc"}, id="o1")),
            tool_response(call("final_result", {"number": "A-1"}, id="o2")),
        ]
    )
    agent = Agent(model, output_type=Invoice, output_retries=1)
    result = await agent.run("Read the invoice.")
    assert result.state is State.FAILED
    assert result.error == (
        "The model gave no valid final result after 2 invalid attempt(s) (output_retries=1); "
        "the last validation error: Invalid arguments for tool 'final_result' (1 error(s)):\n"
        "- total: Field required\n"
        'Arguments received: {"number": "A-1"}\n'
        "Fix the arguments and call the tool again.. Raise output_retries, or check that the "
        "output type's schema is one the model can fill."
    )
    assert "the last error is in the history" not in result.error


async def test_case3_output_invalid_after_a_text_answer_quotes_it() -> None:
    model = ScriptedModel([text_response("The total is 12."), text_response("It is 12, really.")])
    agent = Agent(model, output_type=Invoice, output_retries=1)
    result = await agent.run("Read the invoice.")
    assert result.state is State.FAILED
    assert result.error is not None
    assert "the last answer was text, not a final_result call: 'It is 12, really.'" in result.error


def broken(q: str) -> str:
    """Always fail.

    Args:
        q: anything.
    """
    raise RuntimeError("broken tool says no")


async def test_case3_output_invalid_quotes_final_results_error_not_another_tools() -> None:
    """When ``final_result`` is called beside another tool that fails, ``output_invalid`` quotes
    the last ``final_result`` validation error, never the other tool's error."""
    model = ScriptedModel(
        [
            tool_response(
                call("final_result", {"number": f"A-{n}"}, id=f"o{n}"),
                call("broken", {"q": str(n)}, id=f"b{n}"),
            )
            for n in (1, 2)
        ]
    )
    agent = Agent(model, tools=[broken], output_type=Invoice, output_retries=1)
    result = await agent.run("Read the invoice.")
    assert result.state is State.FAILED, result
    assert result.error is not None
    assert "- total: Field required" in result.error
    assert 'Arguments received: {"number": "A-2"}' in result.error
    assert "broken tool says no" not in result.error


# -- case 4: abort during compaction -------------------------------------------------------------


@pytest.mark.timeout(60)
@pytest.mark.parametrize("takes_signal", [True, False])
async def test_case4_abort_during_a_custom_summarizer_ends_aborted_promptly(
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
async def test_case4_abort_cancels_the_custom_summarizer_it_interrupts() -> None:
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
