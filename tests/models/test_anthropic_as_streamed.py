"""A response is stored as it was streamed (issue 21) and text citations are kept (issue 14, case
4): through `AnthropicModel` and the real SDK against the replay server, and as a recorded
non-streamed `ScriptedModel` step."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from statemachine_agent import Agent, AssistantMessage, Event, MessageDelta, State, TextBlock
from statemachine_agent.models import ScriptedModel
from statemachine_agent.session import read_session

from .replay_server import MODEL, ReplayServer, message_to_sse, sse_reply
from .replay_server import closing_model as model
from .test_anthropic_recordings import check_wire, end_turn, strip_cache

SF_CITATION: dict[str, Any] = {
    "type": "web_search_result_location",
    "url": "https://www.sfmta.com/fares",
    "title": "Fares | SFMTA",
    "cited_text": "Downtown San Francisco fares are increasing on January 1.",
    "encrypted_index": "EpABCioIBxgCIiQ4YjM0",
}
FARES_CITATION: dict[str, Any] = {
    "type": "web_search_result_location",
    "url": "https://www.bart.gov/tickets/fares",
    "title": "BART fares",
    "cited_text": "Fares are increasing by 5.5% ...",
    "encrypted_index": "EpEBCioIBxgCIiQ5ZDE1",
}
# The answer as the API streamed it: three text blocks, the middle one whitespace only.
ANSWER: dict[str, Any] = {
    "id": "msg_sf",
    "type": "message",
    "role": "assistant",
    "model": MODEL,
    "content": [
        {"type": "text", "text": "Downtown S.F.", "citations": [SF_CITATION]},
        {"type": "text", "text": " "},
        {"type": "text", "text": "Fares are increasing", "citations": [FARES_CITATION]},
    ],
    "stop_reason": "end_turn",
    "stop_sequence": None,
    "usage": {"input_tokens": 20, "output_tokens": 9},
}
EXPECTED_TEXT = "Downtown S.F. Fares are increasing"
EXPECTED_BLOCKS = [
    TextBlock(text="Downtown S.F.", citations=[SF_CITATION]),
    TextBlock(text=" "),
    TextBlock(text="Fares are increasing", citations=[FARES_CITATION]),
]
# What the next request sends back for that answer: no blank block, citations verbatim.
EXPECTED_SENT = [
    {"type": "text", "text": "Downtown S.F.", "citations": [SF_CITATION]},
    {"type": "text", "text": "Fares are increasing", "citations": [FARES_CITATION]},
]


def answer_reply() -> Any:
    return sse_reply(message_to_sse(ANSWER))


def test_the_replayed_stream_carries_citations_deltas_and_a_whitespace_block() -> None:
    # Guards the fixtures below: the citations really arrive as citations_delta events.
    events = message_to_sse(ANSWER)
    deltas = [e["delta"] for e in events if e["type"] == "content_block_delta"]
    assert [d["citation"] for d in deltas if d["type"] == "citations_delta"] == [
        SF_CITATION,
        FARES_CITATION,
    ]
    assert {"type": "text_delta", "text": " "} in deltas


async def test_streamed_whitespace_block_kept_and_not_sent(
    server: ReplayServer,
) -> None:
    server.add(answer_reply(), end_turn("Yes."))
    agent = Agent(model(server))
    result = await agent.run("What is changing in S.F.?")

    assert result.state is State.DONE
    assert result.text == EXPECTED_TEXT
    stored = result.messages[1]
    assert isinstance(stored, AssistantMessage)
    assert stored.content == EXPECTED_BLOCKS  # 3 text blocks, citations included

    follow = await agent.run("Are the fares increasing?")
    assert follow.state is State.DONE
    sent = server.requests[1].body
    check_wire(sent)  # no whitespace-only text block: the API accepts it
    assert strip_cache(sent["messages"][1]) == {"role": "assistant", "content": EXPECTED_SENT}


async def test_recorded_non_streamed_step_gives_the_same_text() -> None:
    scripted = ScriptedModel([ANSWER, {"content": [{"type": "text", "text": "Yes."}]}])
    agent = Agent(scripted)
    result = await agent.run("What is changing in S.F.?")

    assert result.state is State.DONE
    assert result.text == EXPECTED_TEXT
    stored = result.messages[1]
    assert isinstance(stored, AssistantMessage)
    assert stored.content == EXPECTED_BLOCKS
    await agent.run("Are the fares increasing?")
    # The request keeps the citations and drops only the blank block.
    sent = scripted.requests[1].messages[1]
    assert isinstance(sent, AssistantMessage)
    assert sent.content == [EXPECTED_BLOCKS[0], EXPECTED_BLOCKS[2]]


async def test_subscribed_text_events_join_to_result_text(
    server: ReplayServer,
) -> None:
    server.add(answer_reply())
    agent = Agent(model(server))
    seen: list[Event] = []
    agent.subscribe(seen.append)
    result = await agent.run("What is changing in S.F.?")

    streamed = "".join(e.delta for e in seen if isinstance(e, MessageDelta) and e.kind == "text")
    assert streamed == EXPECTED_TEXT
    assert result.text == streamed


async def test_citations_survive_the_log_and_a_resume_and_are_sent_back(
    server: ReplayServer, tmp_path: Path
) -> None:
    log = tmp_path / "run.jsonl"
    server.add(answer_reply())
    first = Agent(model(server), session=log)
    await first.run("What is changing in S.F.?")
    assert first.session is not None
    first.session.close()

    # Logged as streamed: the three blocks, citations verbatim.
    logged = read_session(log).messages[1]
    assert isinstance(logged, AssistantMessage)
    assert logged.content == EXPECTED_BLOCKS
    line = next(json.loads(x) for x in log.read_text().splitlines() if "Downtown" in x)
    assert line["message"]["content"][0]["citations"] == [SF_CITATION]  # in the file, verbatim
    assert line["message"]["content"][1]["text"] == " "

    # The next request after a resume is the same as without the resume.
    server.add(end_turn("Yes."))
    resumed = Agent.resume(log, model=model(server))
    await resumed.run("Are the fares increasing?")
    assert resumed.session is not None
    resumed.session.close()
    server.add(answer_reply(), end_turn("Yes."))
    straight = Agent(model(server))
    await straight.run("What is changing in S.F.?")
    await straight.run("Are the fares increasing?")

    after_resume, without_resume = server.requests[1].body, server.requests[3].body
    assert after_resume == without_resume
    assert after_resume["messages"][1]["content"][0]["citations"] == [SF_CITATION]
    assert strip_cache(after_resume["messages"][1]["content"]) == EXPECTED_SENT
