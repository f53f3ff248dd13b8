"""Issue 32 follow-up: the recent history compaction keeps is capped relative to the threshold,
so a ``keep_recent`` as large as a small window does not make every turn compact again."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from statemachine_agent import (
    Agent,
    Compaction,
    CompactionEnd,
    Event,
    Message,
    MessageEnd,
    State,
    estimate_tokens,
)
from statemachine_agent._compacting import DEFAULT_KEEP_RECENT, KEEP_RECENT_SHARE
from statemachine_agent.models import FunctionModel
from statemachine_agent.models._base import ModelRequest
from statemachine_agent.testing import assert_valid_history
from statemachine_agent.testing.steps import call, tool_response

TURNS = 45
WINDOW = 15_000


def read_chunk(n: int) -> str:
    """Read one chunk of the big file.

    Args:
        n: the chunk's number.
    """
    return f"chunk {n}: " + "lorem ipsum " * 200  # about 2,400 characters


def chunk_reader() -> FunctionModel:
    """Calls ``read_chunk`` `TURNS` times, then answers; a request without tools (the default
    summarizer's) gets a short summary."""
    made = 0

    def respond(messages: Sequence[Message], request: ModelRequest) -> Any:
        nonlocal made
        if not request.tools:
            return "summary: the chunks read so far"
        if made >= TURNS:
            return f"All {TURNS} chunks read."
        made += 1
        return tool_response(call("read_chunk", {"n": made}, id=f"c{made}"))

    return FunctionModel(respond, context_window=WINDOW)


def test_kept_tokens_are_capped_at_half_the_threshold() -> None:
    assert KEEP_RECENT_SHARE == 0.5
    assert Compaction().kept_tokens(WINDOW) == 6_000  # 0.8 x 15,000 / 2, not 20,000
    assert Compaction().kept_tokens(200_000) == DEFAULT_KEEP_RECENT  # under the cap
    assert Compaction(threshold=12_000, keep_recent=9_000).kept_tokens(None) == 6_000
    assert Compaction(threshold=12_000, keep_recent=4_000).kept_tokens(None) == 4_000
    assert Compaction(threshold=0.8).kept_tokens(None) == DEFAULT_KEEP_RECENT  # no known cap
    assert Compaction(keep_recent_turns=3).kept_tokens(WINDOW) is None


async def test_default_compaction_in_a_small_window_compacts_a_handful_of_times() -> None:
    """A 45-turn task against a 15,000-token window with the default `Compaction()`: each
    compaction keeps at most half the 12,000-token threshold, so at least the other half of new
    turns comes before the next one; the run compacts a few times (not every turn) and ends
    ``done``."""
    compaction = Compaction()
    limit = compaction.limit(WINDOW)
    assert limit == 12_000
    agent = Agent(chunk_reader(), tools=[read_chunk], max_turns=100, compaction=compaction)
    ends: list[CompactionEnd] = []
    kept: list[int] = []
    added: list[int] = []

    def on_event(event: Event) -> None:
        if isinstance(event, CompactionEnd):
            ends.append(event)
            kept.append(estimate_tokens(agent.messages[1:]))  # after the summary
        elif isinstance(event, MessageEnd):
            added.append(estimate_tokens([event.message]))

    agent.subscribe(on_event)
    result = await agent.run("Read the big file, chunk by chunk.")
    assert result.state is State.DONE, result.error
    assert result.text == f"All {TURNS} chunks read."
    assert result.turns == TURNS + 1
    assert ends and all(e.messages_cut > 0 for e in ends)
    assert max(kept) <= limit * KEEP_RECENT_SHARE  # the rule: at most 6,000 tokens kept
    # From one compaction to the next the context grows from tokens_after to the threshold, so
    # the task's growth bounds how many there are.
    room = limit - max(e.tokens_after for e in ends)
    assert room >= limit // 2 - 200  # a summary of a few tokens, the kept half, no more
    assert len(ends) <= 1 + sum(added) // room
    assert len(ends) <= 5  # a handful (it was 26, three messages cut each)
    assert_valid_history(agent.messages)
