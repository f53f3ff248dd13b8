"""The session log beyond the issue's cases: format, round trip, torn and corrupt lines, misuse,
compaction with a log."""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

import pytest

from statemachine_agent import (
    Agent,
    AgentError,
    State,
    ToolResultMessage,
    UsageError,
    UserMessage,
    tool,
)
from statemachine_agent.models import ModelRequest, ScriptedModel, StreamEvent
from statemachine_agent.session import (
    FORMAT,
    VERSION,
    SessionCorruptError,
    SessionLog,
    compact,
    find_cut_points,
    load_history,
    read_session,
)
from statemachine_agent.session._check import check_session
from statemachine_agent.testing import assert_valid_history
from statemachine_agent.testing.steps import call, text_response, tool_response

SECRET = "sk-ant-api03-THIS-MUST-NEVER-BE-LOGGED"


@tool
def echo(text: str) -> str:
    """Echo the text."""
    return text


def script() -> ScriptedModel:
    return ScriptedModel(
        [
            tool_response(
                call("echo", {"text": "a"}, id="e1"), call("echo", {"text": "b"}, id="e2")
            ),
            text_response("said a and b", usage={"input_tokens": 10, "output_tokens": 3}),
        ]
    )


def lines(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def close(agent: Agent) -> None:
    """Close the agent's log: a log has one writer at a time (its lock)."""
    assert agent.session is not None
    agent.session.close()


async def run_logged(path: Path) -> Agent:
    agent = Agent(script(), tools=[echo], session=path)
    result = await agent.run("say a and b")
    assert result.state is State.DONE
    return agent


async def test_a_run_is_logged_line_by_line_and_reads_back_unchanged(tmp_path: Path) -> None:
    log = tmp_path / "s.jsonl"
    agent = await run_logged(log)
    body = lines(log)
    header = body[0]
    assert header["type"] == "header" and header["format"] == FORMAT
    assert header["version"] == VERSION and header["model"] == "scripted"
    assert header["tools"] == ["echo"] and "created_at" in header
    types = [b["type"] for b in body[1:]]
    assert types[0] == "run_start" and types[-1] == "run_end"
    assert all("time" in b for b in body[1:])
    # Each result is logged once, when its call finished; not again when appended.
    results = [b["message"] for b in body if b["type"] in ("message", "tool_result")]
    ids = [m["tool_call_id"] for m in results if m["role"] == "tool_result"]  # type: ignore[index]
    assert sorted(ids) == ["e1", "e2"]
    data = read_session(log)
    assert data.messages == agent.messages and data.repairs == []
    assert data.state is State.DONE and not data.run_open
    assert data.state_path == [
        "idle",
        "awaiting_model",
        "executing_tools",
        "awaiting_model",
        "done",
    ]
    assert data.usage.input_tokens == 10
    assert body[-1]["state"] == "done" and body[-1]["turns"] == 2


async def test_fsync_option_writes_the_same_log(tmp_path: Path) -> None:
    log = tmp_path / "s.jsonl"
    logged = Agent(script(), tools=[echo], session=SessionLog(log, fsync=True))
    await logged.run("say a and b")
    assert load_history(log) == logged.messages


class KeyedModel:
    """A model holding a key, the way a provider client does."""

    name = "keyed-model"

    def __init__(self) -> None:
        self.api_key = SECRET
        self.inner = ScriptedModel([text_response("hi")])

    def __repr__(self) -> str:
        return f"KeyedModel(api_key={self.api_key!r})"

    def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        return self.inner.stream(request)


async def test_the_api_key_is_never_written(tmp_path: Path) -> None:
    log = tmp_path / "s.jsonl"
    agent = Agent(KeyedModel(), session=log)  # type: ignore[arg-type]
    await agent.run("hello")
    text = log.read_text()
    assert SECRET not in text
    assert lines(log)[0]["model"] == "keyed-model"


async def test_resume_continues_a_finished_session_in_its_state(tmp_path: Path) -> None:
    log = tmp_path / "s.jsonl"
    first = await run_logged(log)
    size = log.stat().st_size
    close(first)
    resumed = Agent.resume(log, model=ScriptedModel([text_response("again")]), tools=[echo])
    assert resumed.messages == first.messages and resumed.state is State.DONE
    assert log.stat().st_size == size  # nothing to repair: nothing written
    result = await resumed.run("once more")
    assert result.state is State.DONE
    assert load_history(log) == resumed.messages


async def test_a_torn_last_line_is_dropped_with_a_warning_and_cut_on_open(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    log = tmp_path / "s.jsonl"
    agent = await run_logged(log)
    close(agent)
    raw = log.read_bytes()
    log.write_bytes(raw + b'{"type":"message","message":{"role":"us')  # crash mid-write
    with caplog.at_level(logging.WARNING, logger="statemachine_agent.session"):
        data = read_session(log)
    assert data.messages == agent.messages
    assert data.torn_tail and data.torn_tail[0][0] == len(raw.splitlines()) + 1
    assert "dropped 1 unreadable line" in caplog.text
    resumed = Agent.resume(log, model=ScriptedModel([text_response("ok")]), tools=[echo])
    assert log.read_bytes() == raw  # the torn tail was cut, so the next line starts clean
    await resumed.run("next")
    assert read_session(log).torn_tail == []
    assert load_history(log) == resumed.messages


async def test_a_complete_last_line_missing_its_newline_is_kept(tmp_path: Path) -> None:
    log = tmp_path / "s.jsonl"
    agent = await run_logged(log)
    close(agent)
    log.write_bytes(log.read_bytes().rstrip(b"\n"))
    assert read_session(log).messages == agent.messages
    resumed = Agent.resume(log, model=ScriptedModel([text_response("ok")]), tools=[echo])
    await resumed.run("next")
    assert load_history(log) == resumed.messages


async def test_a_corrupt_middle_line_is_an_error_naming_it_and_nothing_else_is_lost(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    log = tmp_path / "s.jsonl"
    agent = await run_logged(log)
    close(agent)
    raw = log.read_text().splitlines()
    # Line 3 is the prompt message; make line 4 (a state change) unreadable.
    raw[3] = "{not json"
    log.write_text("\n".join(raw) + "\n")
    with pytest.raises(SessionCorruptError) as caught:
        read_session(log)
    assert caught.value.problems[0][0] == 4
    assert "line 4" in str(caught.value)
    assert caught.value.data.messages == agent.messages  # a state line lost, no message
    with pytest.raises(SessionCorruptError):
        Agent.resume(log, model=ScriptedModel([]), tools=[echo])
    with caplog.at_level(logging.WARNING, logger="statemachine_agent.session"):
        data = read_session(log, strict=False)
    assert data.messages == agent.messages and data.corrupt == caught.value.problems
    assert "line 4 skipped" in caplog.text


async def test_a_message_line_that_fails_validation_is_reported_with_its_line(
    tmp_path: Path,
) -> None:
    log = tmp_path / "s.jsonl"
    await run_logged(log)
    raw = log.read_text().splitlines()
    raw[2] = json.dumps({"type": "message", "message": {"role": "user", "content": 5}})
    log.write_text("\n".join(raw) + "\n")
    with pytest.raises(SessionCorruptError, match="line 3: not a valid 'message' line"):
        read_session(log)


def test_not_a_session_log_and_newer_versions_are_refused(tmp_path: Path) -> None:
    other = tmp_path / "other.jsonl"
    other.write_text('{"type": "message", "message": {"role": "user", "content": "x"}}\n')
    with pytest.raises(AgentError, match="not a session log"):
        read_session(other)
    newer = tmp_path / "newer.jsonl"
    newer.write_text(
        json.dumps({"type": "header", "format": FORMAT, "version": VERSION + 1}) + "\n"
    )
    with pytest.raises(AgentError, match="version"):
        read_session(newer)


async def test_a_torn_header_is_a_new_log(tmp_path: Path) -> None:
    log = tmp_path / "s.jsonl"
    log.write_bytes(b'{"type":"header","form')
    agent = Agent.resume(log, model=ScriptedModel([text_response("hi")]))
    assert agent.messages == [] and agent.state is State.IDLE
    await agent.run("hello")
    assert lines(log)[0]["type"] == "header"
    assert load_history(log) == agent.messages


async def test_a_new_log_on_an_existing_file_is_refused(tmp_path: Path) -> None:
    log = tmp_path / "s.jsonl"
    await run_logged(log)
    with pytest.raises(UsageError, match=r"Agent\.resume"):
        Agent(script(), tools=[echo], session=log)


async def test_a_starting_history_is_logged(tmp_path: Path) -> None:
    log = tmp_path / "s.jsonl"
    agent = Agent(
        ScriptedModel([text_response("hi")]), messages=[UserMessage("earlier")], session=log
    )
    assert [b["type"] for b in lines(log)] == ["header", "history"]
    await agent.run("now")
    assert load_history(log) == agent.messages


async def test_compaction_replaces_the_history_and_is_logged(tmp_path: Path) -> None:
    log = tmp_path / "s.jsonl"
    agent = await run_logged(log)
    agent.model = ScriptedModel([text_response("second answer")])
    await agent.run("second question")
    seen: list[Sequence[object]] = []

    def summarize(old: Sequence[object]) -> str:
        seen.append(old)
        return "the user asked to say a and b; it was said"

    assert await compact(agent, summarize, keep_last=2)
    assert [m.role for m in agent.messages] == ["user", "user", "assistant"]
    assert agent.messages[1] == UserMessage("second question")
    assert "say a and b" in agent.messages[0].text  # type: ignore[union-attr]
    assert len(seen[0]) == 5
    assert_valid_history(agent.messages)
    assert lines(log)[-1]["type"] == "history"
    close(agent)
    resumed = Agent.resume(log, model=ScriptedModel([text_response("third")]), tools=[echo])
    assert resumed.messages == agent.messages
    await resumed.run("third question")
    assert load_history(log) == resumed.messages
    assert_valid_history(resumed.messages)
    # The results logged before the compaction belong to the replaced messages: not violations.
    _data, problems = check_session(log)
    assert problems == []


async def test_compaction_does_nothing_when_nothing_would_be_dropped(tmp_path: Path) -> None:
    agent = await run_logged(tmp_path / "s.jsonl")
    assert not await compact(agent, lambda old: "x", keep_last=100)
    assert not await compact(agent, lambda old: None, keep_last=1)


def test_cut_points_are_user_messages_only() -> None:
    assert find_cut_points([UserMessage("q")]) == [0]
    result = ToolResultMessage(tool_call_id="x", tool_name="t")
    assert find_cut_points([result, UserMessage("a")]) == [1]
