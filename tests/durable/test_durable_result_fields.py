"""A durable run's `RunResult` crosses the database whole (issue 32 leftovers): `encode_result` /
`decode_result` carry every field, ``counts`` and ``limit_exceeded`` included, and a record
written before a field was encoded still reads back."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("dbos", reason="the durable tests need the dbos extra")

from pydantic import BaseModel

from statemachine_agent import (
    Agent,
    AssistantMessage,
    LimitHit,
    PendingCall,
    RunCounts,
    RunResult,
    State,
    TextBlock,
    Usage,
    UsageLimits,
    UserMessage,
    tool,
)
from statemachine_agent.durable import Client, decode_result, encode_result, launch, run, shutdown
from statemachine_agent.models import FunctionModel
from statemachine_agent.testing.steps import call, text_response, tool_response


class Verdict(BaseModel):
    ok: bool
    reason: str


def every_field_set() -> RunResult:
    """A result whose every field differs from its default."""
    prompt = UserMessage(content=[TextBlock(text="Deploy?")])
    answer = AssistantMessage(content=[TextBlock(text="yes")], stop_reason="end_turn")
    return RunResult(
        state=State.AWAITING_APPROVAL,
        messages=[prompt, answer],
        new_messages=[answer],
        turns=3,
        usage=Usage(input_tokens=1000, output_tokens=200, cache_read_tokens=7),
        stop_reason="tool_use",
        error="an error text",
        refusal={"category": "cyber", "explanation": "no"},
        pending=(PendingCall("t1", "deploy", {"env": "prod"}, "needs review"),),
        final_text="the final text",
        run_id="run-7",
        output=Verdict(ok=True, reason="fine"),
        counts=RunCounts(3, 4, 5, Usage(input_tokens=1000, output_tokens=200)),
        limit_exceeded=LimitHit("max_total_tokens", 1000, 1200),
    )


def test_a_run_result_with_every_field_set_round_trips_equal() -> None:
    result = every_field_set()
    for field in dataclasses.fields(RunResult):
        assert getattr(result, field.name) != field.default, f"{field.name} is at its default"
    data = encode_result(result)
    assert set(data) == {field.name for field in dataclasses.fields(RunResult)}
    assert decode_result(data, output_type=Verdict) == result
    # without the output type, the typed output comes back as its JSON
    assert decode_result(data).output == {"ok": True, "reason": "fine"}


@pytest.mark.parametrize("tail", ["equal-length", "longer"])
def test_new_messages_that_are_not_the_historys_tail_round_trip_as_they_were(tail: str) -> None:
    """A run's new messages are usually the history's tail (the codec stores them once then);
    when they are not (the history was compacted or replaced during the run), they come back
    as they were, not as the history's last messages."""
    summary = UserMessage(content=[TextBlock(text="Summary: deploy was discussed.")])
    answer = AssistantMessage(content=[TextBlock(text="yes")], stop_reason="end_turn")
    gone = AssistantMessage(content=[TextBlock(text="compacted away")], stop_reason="end_turn")
    new = [gone] if tail == "equal-length" else [gone, summary, answer]
    result = dataclasses.replace(every_field_set(), messages=[summary, answer], new_messages=new)
    back = decode_result(encode_result(result), output_type=Verdict)
    assert back.new_messages == new
    assert back.messages == [summary, answer]
    assert back == result


def test_a_result_record_without_the_newer_fields_still_decodes() -> None:
    """A run recorded by an older release (no ``pending``, ``final_text``, ``run_id``,
    ``output``, ``counts``, ``limit_exceeded``) reads back with their defaults."""
    data = encode_result(every_field_set())
    old = {key: data[key] for key in ("state", "messages", "new_messages", "turns", "usage")}
    old |= {"stop_reason": "end_turn", "error": None, "refusal": None}
    result = decode_result(old)
    assert (result.pending, result.final_text, result.run_id, result.output) == ((), None, "", None)
    assert (result.counts, result.limit_exceeded) == (RunCounts(), None)


def read(path: str) -> str:
    """Read a file.

    Args:
        path: the file.
    """
    return f"{path} holds the answer"


def past_the_budget(messages: list[Any], request: Any) -> Any:
    """A tool turn (600 tokens), then a final answer that takes the run to 1,200 tokens."""
    if len(messages) == 1:
        return tool_response(
            call("read", {"path": "a"}, id="r1"), usage={"input_tokens": 500, "output_tokens": 100}
        )
    return text_response("a holds the answer.", usage={"input_tokens": 550, "output_tokens": 50})


def budget_agent() -> Agent:
    return Agent(
        FunctionModel(past_the_budget),
        tools=[tool(read)],
        limits=UsageLimits(max_total_tokens=1000),
    )


SPENT = RunCounts(
    turns=2, requests=2, tool_calls=1, usage=Usage(input_tokens=1050, output_tokens=150)
)


@pytest.fixture
async def db(tmp_path: Path) -> AsyncIterator[str]:
    url = f"sqlite:///{tmp_path / 'runs.sqlite'}"
    await launch(url, budget_agent, executor_id="result-fields")
    try:
        yield url
    finally:
        shutdown()


async def test_a_durable_run_past_max_total_tokens_says_so_when_read_back_by_the_client(
    db: str,
) -> None:
    expected = await budget_agent().run("What does a hold?")
    assert expected.limit_exceeded == LimitHit("max_total_tokens", 1000, 1200)

    got = await run("What does a hold?", run_id="past-the-budget")
    client = Client(db)
    try:
        status = client.status("past-the-budget")
        read_back = client.result("past-the-budget")
    finally:
        client.close()
    assert status.result is not None
    for result in (got, status.result, read_back):
        assert result.state is State.DONE
        assert result.text == "a holds the answer."  # kept: it was paid for
        assert result.limit_exceeded == LimitHit("max_total_tokens", 1000, 1200)
        assert result.limit_exceeded.excess == 200
        assert result.error == expected.error
        assert result.counts == expected.counts == SPENT
        assert result.run_id  # the engine run's id is carried, not dropped
