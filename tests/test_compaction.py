"""Issue 13: context accounting, automatic compaction as a state, context-window stops.

Each case of the issue is a named test with its exact expected values."""

from __future__ import annotations

import dataclasses
import pickle
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from statemachine_agent import (
    Agent,
    AssistantMessage,
    Compaction,
    CompactionEnd,
    CompactionStart,
    ContextUsage,
    Event,
    Message,
    ModelError,
    State,
    StateChanged,
    ToolResultMessage,
    TurnEnd,
    UsageError,
    UserMessage,
    estimate_tokens,
)
from statemachine_agent._compacting import CONTINUE_AFTER_COMPACTION, CUT_BY_WINDOW
from statemachine_agent.models import AnthropicModel, FunctionModel, ScriptedModel
from statemachine_agent.models._base import ModelRequest
from statemachine_agent.session import SUMMARY_PREFIX, compact
from statemachine_agent.testing import assert_valid_history
from statemachine_agent.testing.steps import call, text_response, tool_response

CUT_TEXT = "Here is the first half of the report"
WINDOW_STOP = "model_context_window_exceeded"


def lookup(q: str) -> str:
    """Look something up.

    Args:
        q: what to look up.
    """
    return f"found {q}"


# -- case 1: a context-window stop is its own outcome ------------------------------------------


async def test_context_window_stop_keeps_text_and_ends_with_an_error() -> None:
    model = ScriptedModel([text_response(CUT_TEXT, stop_reason=WINDOW_STOP)])
    agent = Agent(model)
    result = await agent.run("write the report")
    assert model.calls == 1  # no continuation request: it cannot fit
    assert result.text == CUT_TEXT
    assert result.error is not None and "context window" in result.error
    assert "compaction" in result.error.lower()  # says how to go on
    assert result.state == State.DONE
    assert result.state != State.FAILED


async def test_cut_trailing_tool_call_never_runs_and_is_answered_as_cut_by_the_window() -> None:
    ran: list[str] = []

    def record(q: str) -> str:
        """Record a call.

        Args:
            q: anything.
        """
        ran.append(q)
        return "ran"

    cut = call("record", '{"q": "par', id="cut1")
    model = ScriptedModel([tool_response(cut, text=CUT_TEXT, stop_reason=WINDOW_STOP)])
    agent = Agent(model, tools=[record])
    result = await agent.run("write the report")
    assert model.calls == 1
    assert ran == []
    answer = agent.messages[-1]
    assert isinstance(answer, ToolResultMessage) and answer.tool_call_id == "cut1"
    assert answer.text == CUT_BY_WINDOW
    assert "cut off by the model's context window" in answer.text
    assert "max_tokens" not in answer.text
    assert result.text == CUT_TEXT
    assert result.error is not None and "context window" in result.error
    assert result.state == State.DONE
    assert_valid_history(agent.messages)


# -- case 2: the same with compaction on -------------------------------------------------------


async def test_context_window_stop_with_compaction_compacts_and_continues() -> None:
    big = "x" * 2000  # turn 1's result: about 500 tokens, more than keep_recent
    model = ScriptedModel(
        [
            tool_response(call("lookup", {"q": big}, id="t1")),
            tool_response(call("lookup", {"q": "b"}, id="t2")),
            text_response(CUT_TEXT, stop_reason=WINDOW_STOP),
            text_response("And here is the second half."),
        ]
    )
    summaries: list[int] = []

    def summarize(old: Sequence[Message]) -> str:
        summaries.append(len(old))
        return "the user asked for a report; two lookups ran"

    states: list[str] = []
    agent = Agent(
        model,
        tools=[lookup],
        compaction=Compaction(threshold=10**9, keep_recent=300, summarize=summarize),
    )
    agent.subscribe(lambda e: states.append(str(e.dest)) if isinstance(e, StateChanged) else None)
    result = await agent.run("write the report")
    assert State.COMPACTING in states
    assert summaries == [3]  # prompt, turn 1's call and result
    last = model.requests[-1].messages
    assert isinstance(last[0], UserMessage)
    assert last[0].text == SUMMARY_PREFIX + "the user asked for a report; two lookups ran"
    kinds = [type(m).__name__ for m in last]
    assert kinds == [
        "UserMessage",
        "AssistantMessage",
        "ToolResultMessage",
        "AssistantMessage",
        "UserMessage",
    ]
    assert isinstance(last[1], AssistantMessage) and last[1].tool_calls[0].id == "t2"
    assert isinstance(last[3], AssistantMessage) and last[3].text == CUT_TEXT
    assert isinstance(last[4], UserMessage) and last[4].text == CONTINUE_AFTER_COMPACTION
    assert result.state == State.DONE
    assert result.error is None
    assert result.text == "And here is the second half."
    assert_valid_history(agent.messages)


# -- cases 3 and 4: one long task against a model that refuses a too-long prompt -----------------

LIMIT_CHARS = 60_000
TOOL_TURNS = 40


def _long_task_model(sizes: list[int]) -> FunctionModel:
    made = [0]

    def respond(messages: Sequence[Message], request: ModelRequest) -> Any:
        size = sum(len(m.model_dump_json()) for m in messages)
        sizes.append(size)
        if size > LIMIT_CHARS:
            raise ModelError(
                f"prompt is too long: {size // 4} tokens > 15000 maximum",
                kind="invalid_request_error",
                status_code=400,
            )
        if made[0] >= TOOL_TURNS:
            return "All 40 chunks read."
        made[0] += 1
        return tool_response(call("read_chunk", {"n": made[0]}, id=f"chunk_{made[0]}"))

    return FunctionModel(respond, context_window=20_000)


def _read_chunk_tool(calls: list[int]) -> Any:
    def read_chunk(n: int) -> str:
        """Read one chunk of the big file.

        Args:
            n: the chunk's number.
        """
        calls.append(n)
        return f"chunk {n}: " + "lorem ipsum " * 333  # about 4,000 characters

    return read_chunk


async def test_long_task_compacts_at_turn_boundaries_and_ends_done(tmp_path: Path) -> None:
    sizes: list[int] = []
    calls: list[int] = []
    path = tmp_path / "long.jsonl"
    agent = Agent(
        _long_task_model(sizes),
        tools=[_read_chunk_tool(calls)],
        max_turns=100,
        compaction=Compaction(
            threshold=12_000, keep_recent=4_000, summarize=lambda old: f"{len(old)} messages"
        ),
        session=path,
    )
    before: list[list[Message]] = []
    checked: list[int] = []

    def on_event(event: Event) -> None:
        if isinstance(event, CompactionStart):
            before.append(list(agent.messages))
        elif isinstance(event, CompactionEnd) and event.messages_cut:
            old, new = before[-1], agent.messages
            cut = event.messages_cut
            assert new[1:] == old[cut:]  # the kept window is the old tail, unchanged
            # a turn boundary: a prompt, or a response right after its previous batch's results
            assert isinstance(old[cut], UserMessage) or (
                isinstance(old[cut], AssistantMessage)
                and isinstance(old[cut - 1], ToolResultMessage)
            )
            assert len(new) > 1  # one long task keeps its recent turns, not only the summary
            assert_valid_history(new)
            assert event.tokens_after < event.tokens_before
            checked.append(cut)

    agent.subscribe(on_event)
    result = await agent.run("read the big file, chunk by chunk")
    assert result.state == State.DONE, result.error
    assert calls == list(range(1, TOOL_TURNS + 1))
    assert max(sizes) <= LIMIT_CHARS
    assert len(checked) >= 2
    assert result.text == "All 40 chunks read."
    agent.close()
    resumed = Agent.resume(path, model=_long_task_model([]), tools=[_read_chunk_tool([])])
    assert resumed.messages == agent.messages
    assert isinstance(resumed.messages[0], UserMessage)
    assert resumed.messages[0].text.startswith(SUMMARY_PREFIX)
    resumed.close()


async def test_long_task_without_compaction_fails_naming_compaction() -> None:
    sizes: list[int] = []
    calls: list[int] = []
    agent = Agent(_long_task_model(sizes), tools=[_read_chunk_tool(calls)], max_turns=100)
    result = await agent.run("read the big file, chunk by chunk")
    assert result.state == State.FAILED
    assert result.error is not None and "compaction" in result.error.lower()
    assert "prompt is too long" in result.error
    assert sizes[-1] > LIMIT_CHARS and all(s <= LIMIT_CHARS for s in sizes[:-1])
    assert len(calls) == len(sizes) - 1  # failed at the first too-long request
    assert_valid_history(agent.messages)


async def test_prompt_too_long_compacts_once_and_retries_once() -> None:
    sizes: list[int] = []
    calls: list[int] = []
    # The threshold is never reached by the estimate: only the 400 triggers compaction.
    agent = Agent(
        _long_task_model(sizes),
        tools=[_read_chunk_tool(calls)],
        max_turns=100,
        compaction=Compaction(threshold=10**9, keep_recent=4_000, summarize=lambda old: "s"),
    )
    ends: list[CompactionEnd] = []
    agent.subscribe(lambda e: ends.append(e) if isinstance(e, CompactionEnd) else None)
    result = await agent.run("read the big file, chunk by chunk")
    assert result.state == State.DONE, result.error
    assert len(calls) == TOOL_TURNS
    assert ends and all(e.reason == "prompt_too_long" for e in ends)
    too_long = [s for s in sizes if s > LIMIT_CHARS]
    assert len(too_long) == len(ends)  # each overflow: one compaction, one retry that fits


async def test_prompt_too_long_again_after_compaction_fails() -> None:
    def respond(messages: Sequence[Message], request: ModelRequest) -> Any:
        raise ModelError("prompt is too long: 300000 tokens > 200000 maximum", status_code=400)

    agent = Agent(
        FunctionModel(respond),
        messages=[UserMessage("old"), AssistantMessage(content=[]), UserMessage("older")],
        compaction=Compaction(threshold=10**9, keep_recent=0, summarize=lambda old: "s"),
    )
    result = await agent.run("go")
    assert result.state == State.FAILED
    assert result.error is not None and "even after automatic compaction" in result.error


# -- case 5: compact() by hand on one long task ------------------------------------------------


async def test_compact_by_hand_keeps_recent_turns_of_a_single_long_task() -> None:
    history: list[Message] = [UserMessage("one long task")]
    for n in range(10):
        history.append(AssistantMessage(content=[_tool_block(f"c{n}")], stop_reason="tool_use"))
        history.append(
            ToolResultMessage(
                tool_call_id=f"c{n}", tool_name="lookup", content=[_text(f"result {n}")]
            )
        )
    history.append(AssistantMessage(content=[_text("finished")], stop_reason="end_turn"))
    assert len(history) == 22
    agent = Agent(ScriptedModel([]), messages=history)
    assert await compact(agent, lambda old: "summary", keep_last=6)
    assert len(agent.messages) == 6  # the summary and the last two turns, not only the summary
    assert agent.messages[0] == UserMessage(SUMMARY_PREFIX + "summary")
    assert agent.messages[1:] == history[17:]
    assert_valid_history(agent.messages)


def _tool_block(call_id: str) -> Any:
    from statemachine_agent import ToolCallBlock

    return ToolCallBlock(id=call_id, name="lookup", input={"q": call_id})


def _text(text: str) -> Any:
    from statemachine_agent import TextBlock

    return TextBlock(text=text)


# -- summarizer failures -----------------------------------------------------------------------


def _compacting_agent(summarize: Any) -> tuple[Agent, list[Message]]:
    history: list[Message] = [UserMessage("task")]
    for n in range(3):
        history.append(AssistantMessage(content=[_tool_block(f"h{n}")], stop_reason="tool_use"))
        history.append(
            ToolResultMessage(tool_call_id=f"h{n}", tool_name="lookup", content=[_text("r" * 400)])
        )
    model = ScriptedModel([text_response("answer")])
    agent = Agent(
        model,
        tools=[lookup],
        messages=history,
        compaction=Compaction(threshold=50, keep_recent=0, summarize=summarize),
    )
    return agent, history


async def test_a_call_id_that_compaction_replaced_may_be_used_again() -> None:
    """No tool-call id twice in one history sent to a provider: once a compaction has replaced
    the call ``h0`` (and its result), a response using ``h0`` again is acted on, and the history
    holds the id once (found by the hypothesis explore pass, seed 4155387802)."""
    agent, _ = _compacting_agent(lambda old: "summary")
    agent.model = ScriptedModel(
        [tool_response(call("lookup", {"q": "again"}, id="h0")), text_response("answer")]
    )
    result = await agent.run("next")
    assert result.state == State.DONE
    assert [m.tool_call_id for m in agent.messages if isinstance(m, ToolResultMessage)] == ["h0"]
    assert [m.text for m in agent.messages if isinstance(m, ToolResultMessage)] == ["found again"]
    assert_valid_history(agent.messages)


async def test_a_call_id_still_in_the_history_may_not_be_used_again() -> None:
    """The same response without compaction: ``h0`` is still in the history, so the run fails
    naming it; the response is not kept (the run's error message ends the history)."""
    agent, history = _compacting_agent(lambda old: "summary")
    agent.compaction = None
    agent.model = ScriptedModel([tool_response(call("lookup", {"q": "again"}, id="h0"))])
    result = await agent.run("next")
    assert result.state == State.FAILED
    assert result.error is not None and "reuses tool-call id(s) h0" in result.error
    assert agent.messages[:-1] == [*history, UserMessage("next")]
    last = agent.messages[-1]
    assert isinstance(last, AssistantMessage) and last.tool_calls == []


async def test_summarizer_that_raises_ends_failed_with_its_error_history_intact() -> None:
    def summarize(old: Sequence[Message]) -> str:
        raise RuntimeError("summarizer is down")

    agent, history = _compacting_agent(summarize)
    result = await agent.run("next")
    assert result.state == State.FAILED
    assert (
        result.error == "Compaction failed: the summarizer raised RuntimeError: summarizer is down"
    )
    assert agent.messages == [*history, UserMessage("next")]


async def test_summarizer_that_returns_nothing_ends_failed_history_intact() -> None:
    async def summarize(old: Sequence[Message]) -> str:
        return "   "

    agent, history = _compacting_agent(summarize)
    result = await agent.run("next")
    assert result.state == State.FAILED
    assert result.error is not None and "returned no summary" in result.error
    assert agent.messages == [*history, UserMessage("next")]


async def test_default_summarizer_asks_the_agents_own_model() -> None:
    history: list[Message] = [UserMessage("task")]
    for n in range(3):
        history.append(AssistantMessage(content=[_tool_block(f"h{n}")], stop_reason="tool_use"))
        history.append(
            ToolResultMessage(tool_call_id=f"h{n}", tool_name="lookup", content=[_text("r" * 400)])
        )
    model = ScriptedModel([text_response("SUMMARY BY MODEL"), text_response("answer")])
    agent = Agent(
        model,
        tools=[lookup],
        messages=history,
        compaction=Compaction(threshold=50, keep_recent=0),
    )
    result = await agent.run("next")
    assert result.state == State.DONE
    summary_request = model.requests[0]
    assert summary_request.tools == [] and len(summary_request.messages) == 1
    assert "Summarize the conversation" in summary_request.messages[0].text  # type: ignore[union-attr]
    assert agent.messages[0] == UserMessage(SUMMARY_PREFIX + "SUMMARY BY MODEL")
    assert model.requests[1].messages[0] == agent.messages[0]


# -- accounting --------------------------------------------------------------------------------


async def _one_reported_turn() -> tuple[Agent, list[TurnEnd]]:
    """An agent after one answer whose request the provider counted as 175 tokens (100 input,
    50 cache read, 25 cache write), with a 1,000-token window; and its ``turn_end`` events."""
    usage = {"input_tokens": 100, "cache_read_input_tokens": 50, "cache_creation_input_tokens": 25}
    model = ScriptedModel([text_response("hi", usage=usage)], context_window=1_000)
    agent = Agent(model)
    ends: list[TurnEnd] = []
    agent.subscribe(lambda e: ends.append(e) if isinstance(e, TurnEnd) else None)
    await agent.run("hello")
    return agent, ends


async def test_context_usage_is_the_reported_count_plus_an_estimate_since() -> None:
    agent, ends = await _one_reported_turn()
    context = agent.context_usage
    assert context.reported == 175
    assert context.estimated == estimate_tokens(agent.messages[-1:])  # the response, since
    assert context.estimated == -(-(16 + len("hi")) // 4)
    assert context.tokens == 175 + context.estimated
    assert context.window == 1_000
    assert context.fraction == context.tokens / 1_000
    assert ends[-1].context == context


async def test_a_turn_end_context_compares_as_the_exact_context_usage_it_stands_for() -> None:
    """The lazily estimated ``TurnEnd.context`` equals, hashes, prints, copies and pickles as the
    `ContextUsage` of its moment, its window included."""
    _agent, ends = await _one_reported_turn()
    context = ends[-1].context
    estimated = -(-(16 + len("hi")) // 4)
    exact = ContextUsage(175 + estimated, 175, estimated, 1_000)
    assert context == exact and exact == context
    assert hash(context) == hash(exact)
    assert repr(context) == repr(exact)
    assert context != ContextUsage(175 + estimated, 175, estimated, None)
    assert context != ContextUsage(175 + estimated, 175, estimated, 2_000)
    assert context != ContextUsage(175 + estimated + 1, 175, estimated + 1, 1_000)
    copied = pickle.loads(pickle.dumps(context))
    assert type(copied) is ContextUsage and copied == exact
    assert dataclasses.replace(context, window=None) == ContextUsage(
        175 + estimated, 175, estimated, None
    )


@pytest.mark.parametrize("replaced_first", [False, True])
@pytest.mark.parametrize("compacting", [False, True])
async def test_turn_end_context_is_the_figure_of_its_moment_however_late_it_is_read(
    compacting: bool, replaced_first: bool
) -> None:
    """``TurnEnd.context`` is estimated only when read (issue 13: accounting costs nothing a
    turn for a subscriber that never looks), yet it is the figure of the moment the turn ended:
    the same as ``agent.context_usage`` then, even when read after later turns, after a
    compaction replaced the history, or after the history was replaced by hand."""
    usage = {"input_tokens": 100, "cache_read_input_tokens": 7}
    steps = [
        tool_response(
            call("echo", {"text": "x" * (40 * i)}),
            # The third response reports no usage: then the whole history is estimated.
            usage={**usage, "input_tokens": 100 + 50 * i} if i != 3 else {},
        )
        for i in range(1, 7)
    ]
    steps.append(text_response("done", usage=usage))

    def echo(text: str) -> str:
        """Echo."""
        return text * 3

    compaction = (
        Compaction(threshold=400, keep_recent_turns=1, summarize=lambda old: "S")
        if compacting
        else None
    )
    # Two agents play the same script: one's events are read only at the end; the other takes
    # the figure of each moment from ``agent.context_usage`` as its turns end.
    lazy = Agent(ScriptedModel(steps), tools=[echo], compaction=compaction)
    eager = Agent(ScriptedModel(steps), tools=[echo], compaction=compaction)
    ends: list[TurnEnd] = []
    at_the_time: list[ContextUsage] = []
    lazy.subscribe(lambda e: ends.append(e) if isinstance(e, TurnEnd) else None)
    eager.subscribe(
        lambda e: at_the_time.append(eager.context_usage) if isinstance(e, TurnEnd) else None
    )
    assert (await lazy.run("go")).state == State.DONE
    assert (await eager.run("go")).state == State.DONE
    summaries = [m for m in lazy.messages if m.text.startswith(SUMMARY_PREFIX)]
    assert bool(summaries) is compacting  # the history was replaced mid-run
    if replaced_first:
        lazy.messages = []  # and replaced again, by hand, before anything is read
    assert len(ends) == len(at_the_time) == 7
    read_late = [(c.tokens, c.reported, c.estimated, c.window) for c in (e.context for e in ends)]
    assert read_late == [(c.tokens, c.reported, c.estimated, c.window) for c in at_the_time]
    assert [e.context for e in ends] == at_the_time
    assert at_the_time[0].reported == 157 and at_the_time[0].estimated > 0
    if not replaced_first:  # reading old figures left the agent's own account as it was
        assert lazy.context_usage == eager.context_usage


def test_models_know_their_context_window() -> None:
    assert AnthropicModel("claude-sonnet-4-6", api_key="test").context_window == 200_000
    assert AnthropicModel("claude-x", api_key="k", context_window=1_000_000).context_window == (
        1_000_000
    )
    assert FunctionModel(lambda m, r: "x", context_window=8_000).context_window == 8_000
    assert ScriptedModel([]).context_window is None


def test_fractional_threshold_needs_a_context_window() -> None:
    with pytest.raises(UsageError, match="context_window"):
        Agent(ScriptedModel([]), compaction=Compaction(threshold=0.5))
    with pytest.raises(UsageError, match="threshold"):
        Compaction(threshold=0)
    Agent(ScriptedModel([], context_window=10_000), compaction=Compaction(threshold=0.5))


@pytest.mark.parametrize("threshold", [0, -1, 1.5, 2.0, True, "0.5"])
def test_a_threshold_that_is_neither_a_fraction_nor_a_token_count_is_refused(
    threshold: object,
) -> None:
    with pytest.raises(UsageError, match=r"fraction of the context window \(0 < t <= 1\)"):
        Compaction(threshold=threshold)  # type: ignore[arg-type]
    assert Compaction(threshold=1.0).limit(1_000) == 1_000  # a fraction: the whole window
    assert Compaction(threshold=2).limit(None) == 2  # an int above 1: tokens


async def test_an_abort_during_compaction_ends_aborted_with_the_history_intact() -> None:
    holder: list[Agent] = []

    async def summarize(old: Sequence[Message]) -> str:
        holder[0].abort("stop now")
        return "too late"

    agent, history = _compacting_agent(summarize)
    holder.append(agent)
    result = await agent.run("next")
    assert result.state == State.ABORTED
    assert result.error == "stop now"
    assert agent.messages == [*history, UserMessage("next")]


def test_a_durable_record_of_a_too_long_prompt_replays_as_too_long() -> None:
    """A durable run replays the recorded outcome: the flag that leads to compaction survives."""
    pytest.importorskip("dbos", reason="durable execution needs the dbos extra")
    from statemachine_agent._responses import RequestFailed
    from statemachine_agent.durable import _decode_outcome, _encode_outcome

    failed = RequestFailed("Model request failed: prompt is too long", prompt_too_long=True)
    assert _decode_outcome(_encode_outcome(failed)) == failed
    plain = RequestFailed("Model request failed: overloaded")
    assert _decode_outcome(_encode_outcome(plain)) == plain


async def test_count_context_without_a_counting_endpoint_is_the_estimate() -> None:
    agent = Agent(ScriptedModel([], context_window=500), messages=[UserMessage("hello")])
    context = await agent.count_context()
    assert context == agent.context_usage
    assert context.reported == 0
    assert context.tokens == estimate_tokens(agent.messages) == -(-(16 + 5) // 4)


def test_estimate_counts_text_arguments_overheads_and_images() -> None:
    from statemachine_agent import ImageBlock, ToolCallBlock

    call = ToolCallBlock(id="c1", name="lookup", input={"q": "ab"})
    response = AssistantMessage(content=[_text("x" * 100), call], stop_reason="tool_use")
    # 16 (message) + 100 (text) + 16 (call) + 6 ("lookup") + 11 ("{'q': 'ab'}") = 149 -> 38
    assert estimate_tokens([response]) == 38
    image = UserMessage([ImageBlock(media_type="image/png", data="AAAA")])
    assert estimate_tokens([image]) == 4 + 1_600  # 16 chars of framing, then the image
    lone = UserMessage("caf\udce9")  # a lone surrogate, kept as received, is still counted
    assert estimate_tokens([lone]) == 5


async def test_repeated_context_window_stops_with_compaction_are_bounded_by_max_turns() -> None:
    model = FunctionModel(
        lambda messages, request: {
            "content": [{"type": "text", "text": "again cut"}],
            "stop_reason": WINDOW_STOP,
        }
    )
    agent = Agent(
        model,
        max_turns=4,
        messages=[UserMessage("old"), AssistantMessage(content=[_text("old answer")])],
        compaction=Compaction(threshold=10**9, keep_recent=0, summarize=lambda old: "s"),
    )
    result = await agent.run("go")
    assert result.turns == 4
    assert result.state == State.DONE
    assert result.error is not None and "context window" in result.error


async def test_context_window_stop_with_nothing_left_to_compact_fails() -> None:
    # The first response of the run, cut in a tool call: prompt, response and result form one
    # turn with no boundary inside, so there is nothing to cut.
    cut = call("lookup", '{"q": "par', id="cut1")
    model = ScriptedModel([tool_response(cut, text=CUT_TEXT, stop_reason=WINDOW_STOP)])
    agent = Agent(
        model,
        tools=[lookup],
        compaction=Compaction(threshold=10**9, keep_recent=0, summarize=lambda old: "s"),
    )
    result = await agent.run("write the report")
    assert model.calls == 1
    assert result.state == State.FAILED
    assert result.error is not None and "nothing left to cut" in result.error
    assert result.text == CUT_TEXT


# -- keeping recent context by turns -----------------------------------------------------------


def _ten_tool_turns() -> list[Message]:
    """One prompt, then 10 tool turns (a call and its result each): 21 messages."""
    history: list[Message] = [UserMessage("one long task")]
    for n in range(1, 11):
        history.append(AssistantMessage(content=[_tool_block(f"c{n}")], stop_reason="tool_use"))
        history.append(
            ToolResultMessage(
                tool_call_id=f"c{n}", tool_name="lookup", content=[_text(f"result {n}")]
            )
        )
    return history


async def test_keep_recent_turns_keeps_exactly_the_last_turns_after_the_summary() -> None:
    history = _ten_tool_turns()
    summarized: list[list[Message]] = []

    def summarize(old: Sequence[Message]) -> str:
        summarized.append(list(old))
        return "seven calls ran"

    model = ScriptedModel([text_response("all done")])
    agent = Agent(
        model,
        tools=[lookup],
        messages=history,
        compaction=Compaction(threshold=50, keep_recent_turns=3, summarize=summarize),
    )
    ends: list[CompactionEnd] = []
    agent.subscribe(lambda e: ends.append(e) if isinstance(e, CompactionEnd) else None)
    result = await agent.run()  # continue: the next request follows turn 10's result
    assert result.state == State.DONE
    summary = UserMessage(SUMMARY_PREFIX + "seven calls ran")
    # the last 3 turns are c8, c9 and c10 (each a call and its result), from index 15
    assert summarized == [history[:15]]
    assert [e.messages_cut for e in ends] == [15]
    assert model.requests[0].messages == [summary, *history[15:]]
    assert agent.messages[:7] == [summary, *history[15:]]
    assert len(agent.messages) == 8 and agent.messages[7].text == "all done"
    assert_valid_history(agent.messages)


async def test_keep_recent_turns_during_one_long_task_compacts_to_the_last_three_turns() -> None:
    steps = [tool_response(call("lookup", {"q": f"q{n}"}, id=f"c{n}")) for n in range(1, 11)]
    model = ScriptedModel([*steps, text_response("all ten looked up")])
    count = [0]

    def summarize(old: Sequence[Message]) -> str:
        count[0] += 1
        return f"summary {count[0]}"

    agent = Agent(
        model,
        tools=[lookup],
        compaction=Compaction(threshold=2, keep_recent_turns=3, summarize=summarize),
    )
    cuts: list[int] = []
    agent.subscribe(
        lambda e: (
            cuts.append(e.messages_cut) if isinstance(e, CompactionEnd) and e.messages_cut else None
        )
    )
    result = await agent.run("look up ten things")
    assert result.state == State.DONE and result.text == "all ten looked up"
    # before requests 5..11 the history holds 4 turns: the oldest (the prompt's or the last
    # summary's) is cut, three messages each time
    assert cuts == [3] * 7
    last = model.requests[-1].messages
    assert last[0] == UserMessage(SUMMARY_PREFIX + "summary 7")
    ids = [
        m.tool_calls[0].id if isinstance(m, AssistantMessage) else getattr(m, "tool_call_id", "")
        for m in last[1:]
    ]
    assert ids == ["c8", "c8", "c9", "c9", "c10", "c10"]
    assert [type(m).__name__ for m in last[1:]] == ["AssistantMessage", "ToolResultMessage"] * 3
    assert_valid_history(agent.messages)


async def test_long_task_with_keep_recent_turns_ends_done_under_the_limit() -> None:
    sizes: list[int] = []
    calls: list[int] = []
    agent = Agent(
        _long_task_model(sizes),
        tools=[_read_chunk_tool(calls)],
        max_turns=100,
        compaction=Compaction(
            threshold=12_000, keep_recent_turns=2, summarize=lambda old: f"{len(old)} messages"
        ),
    )
    kept: list[list[Message]] = []
    agent.subscribe(
        lambda e: (
            kept.append(list(agent.messages[1:]))
            if isinstance(e, CompactionEnd) and e.messages_cut
            else None
        )
    )
    result = await agent.run("read the big file, chunk by chunk")
    assert result.state == State.DONE, result.error
    assert calls == list(range(1, TOOL_TURNS + 1))
    assert max(sizes) <= LIMIT_CHARS
    assert len(kept) >= 2
    for window in kept:  # two whole turns after every summary: a call and its result each
        assert [m.role for m in window] == ["assistant", "tool_result"] * 2
    assert_valid_history(agent.messages)


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"keep_recent": 1_000, "keep_recent_turns": 3}, "by tokens or by turns, not both"),
        ({"keep_recent_turns": 0}, "keep_recent_turns must be 1 or more"),
        ({"keep_recent_turns": True}, "keep_recent_turns must be 1 or more"),
        ({"keep_recent_turns": 2.5}, "keep_recent_turns must be 1 or more"),
        ({"keep_recent": -1}, "keep_recent must be 0 or more tokens"),
        ({"keep_recent": "many"}, "keep_recent must be 0 or more tokens"),
    ],
)
def test_compaction_refuses_an_unclear_amount_of_recent_context(
    options: dict[str, Any], match: str
) -> None:
    with pytest.raises(UsageError, match=match):
        Compaction(threshold=1_000, **options)


def test_compaction_keeps_20000_tokens_unless_told_otherwise() -> None:
    assert Compaction().keep_recent_tokens == 20_000
    assert Compaction(keep_recent=500).keep_recent_tokens == 500
    assert Compaction(keep_recent_turns=4).keep_recent_tokens is None
    history = _ten_tool_turns()
    assert Compaction(keep_recent_turns=3).kept_start(history) == 15
    assert Compaction(keep_recent_turns=9).kept_start(history) == 3
    assert Compaction(keep_recent_turns=10).kept_start(history) == 0  # all 10 turns: no cut
