"""Regressions from review 2: what a resume may cut (only a torn last line), text UTF-8 cannot
encode, one writer per log, a crash between a run's last state and its end."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import pytest

from statemachine_agent import (
    Agent,
    AgentError,
    State,
    TextBlock,
    ToolResultMessage,
    UsageError,
    tool,
)
from statemachine_agent.models import ScriptedModel
from statemachine_agent.session import SessionCorruptError, SessionLog, load_history, read_session
from statemachine_agent.session._check import check_session
from statemachine_agent.testing import assert_valid_history
from statemachine_agent.testing.steps import call, text_response, tool_response

NAME = "caf\udce9.txt"  # how os.scandir names a Latin-1 file name (surrogateescape)


@tool
def echo(text: str) -> str:
    """Echo the text."""
    return text


@tool
def list_names() -> str:
    """List file names, one that is not UTF-8."""
    return f"{NAME}\nb.txt"


def finished_log(path: Path) -> list[bytes]:
    agent = Agent(ScriptedModel([text_response("answer one")]), session=path)
    assert agent.run_sync("first").state is State.DONE
    assert agent.session is not None
    agent.session.close()
    return path.read_bytes().splitlines(keepends=True)


# -- 1: only a torn last line is cut -----------------------------------------------------------


def test_two_complete_unreadable_lines_at_the_end_are_corruption_and_nothing_is_cut(
    tmp_path: Path,
) -> None:
    log = tmp_path / "s.jsonl"
    lines = finished_log(log)
    # Two complete lines at the end made unreadable (bit rot, an editor): not a crash mid-write.
    lines[-2] = b'{"type":"message","message":{"role":"assistant","content":[]}\xff}\n'
    lines[-1] = b'{"type":"run_end" oops}\n'
    log.write_bytes(b"".join(lines))
    before = log.read_bytes()
    with pytest.raises(SessionCorruptError) as caught:
        Agent.resume(log, model=ScriptedModel([]))
    assert [n for n, _ in caught.value.problems] == [len(lines) - 1, len(lines)]
    assert f"line {len(lines)}:" in str(caught.value)
    assert log.read_bytes() == before
    # Resuming leniently skips them but still keeps them in the file.
    agent = Agent.resume(log, model=ScriptedModel([text_response("two")]), strict=False)
    assert agent.run_sync("second").state is State.DONE
    assert agent.session is not None
    agent.session.close()
    assert log.read_bytes().startswith(before)
    data = read_session(log, strict=False)
    assert data.torn_tail == [] and [n for n, _ in data.corrupt] == [len(lines) - 1, len(lines)]


def test_a_file_that_is_not_a_session_log_is_refused_and_left_unchanged(tmp_path: Path) -> None:
    notes = tmp_path / "notes.md"
    notes.write_text("# Notes\n\nthings to do\n- resume the session\n")
    before = notes.read_bytes()
    with pytest.raises(AgentError, match=r"not a session log: line 1"):
        Agent.resume(notes, model=ScriptedModel([]))
    assert notes.read_bytes() == before
    with pytest.raises(AgentError, match="not a session log"):
        check_session(notes)
    # One line without a newline that is no torn header is not one either.
    notes.write_bytes(b"just a note")
    with pytest.raises(AgentError, match="not a session log"):
        Agent.resume(notes, model=ScriptedModel([]))
    assert notes.read_bytes() == b"just a note"


def test_a_corrupt_header_line_is_refused_not_cut(tmp_path: Path) -> None:
    log = tmp_path / "s.jsonl"
    lines = finished_log(log)
    lines[0] = b'{"type":"header","format":\xff}\n'
    log.write_bytes(b"".join(lines))
    before = log.read_bytes()
    with pytest.raises(AgentError, match="line 1"):
        Agent.resume(log, model=ScriptedModel([]))
    assert log.read_bytes() == before


def test_an_unreadable_last_line_without_newline_not_written_by_a_log_is_kept(
    tmp_path: Path,
) -> None:
    log = tmp_path / "s.jsonl"
    lines = finished_log(log)
    log.write_bytes(b"".join(lines) + b"some pasted text")
    before = log.read_bytes()
    with pytest.raises(SessionCorruptError, match=f"line {len(lines) + 1}"):
        Agent.resume(log, model=ScriptedModel([]))
    assert log.read_bytes() == before


# -- 2: text UTF-8 cannot encode is logged, and a failed write is never silent -------------------


def test_a_result_with_a_lone_surrogate_is_logged_and_reads_back(tmp_path: Path) -> None:
    log = tmp_path / "s.jsonl"
    model = ScriptedModel([tool_response(call("list_names", {}, id="c1")), text_response("ok")])
    agent = Agent(model, tools=[list_names], session=log)
    assert agent.run_sync("list").state is State.DONE
    assert agent.session is not None
    assert agent.session.errors == []
    agent.session.close()
    data = read_session(log)
    assert data.repairs == []
    results = [m for m in data.messages if isinstance(m, ToolResultMessage)]
    assert [r.text for r in results] == [f"{NAME}\nb.txt"]
    assert data.messages == agent.messages
    assert check_session(log)[1] == []


def test_a_direct_surrogate_tool_result_message_round_trips(tmp_path: Path) -> None:
    log = tmp_path / "s.jsonl"
    agent = Agent(ScriptedModel([]), session=log)
    assert agent.session is not None
    result = ToolResultMessage(
        tool_call_id="c1", tool_name="list_files", content=[TextBlock(text=NAME)]
    )
    agent.session.record_history([result], reason="replaced")
    agent.session.close()
    raw = log.read_bytes()
    raw.decode()  # valid UTF-8: the surrogate is escaped
    body = json.loads(raw.splitlines()[-1])
    assert body["messages"][0]["content"][0]["text"] == NAME


def test_a_line_that_cannot_be_written_is_logged_as_an_error_and_counted(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    log = SessionLog(tmp_path / "s.jsonl")
    Agent(ScriptedModel([]), session=log)
    with caplog.at_level(logging.ERROR, logger="statemachine_agent.session"):
        log._write({"type": "state", "source": object()})
    assert len(log.errors) == 1 and "state line was not written" in log.errors[0]
    assert any(r.levelno == logging.ERROR and "NOT written" in r.message for r in caplog.records)
    log.close()


# -- 3: one writer per log -------------------------------------------------------------------


def test_a_second_agent_on_an_open_log_is_refused_until_the_first_closes(tmp_path: Path) -> None:
    log = tmp_path / "s.jsonl"
    finished_log(log)
    first = Agent.resume(log, model=ScriptedModel([text_response("A")]))
    before = log.read_bytes()
    with pytest.raises(UsageError, match="in use by another agent"):
        Agent.resume(log, model=ScriptedModel([text_response("B")]))
    with pytest.raises(UsageError, match="in use by another agent"):
        SessionLog.open(log)
    assert log.read_bytes() == before
    assert first.run_sync("from A").state is State.DONE
    assert first.session is not None
    first.session.close()
    second = Agent.resume(log, model=ScriptedModel([text_response("B")]))
    assert second.run_sync("from B").state is State.DONE
    assert second.session is not None
    second.session.close()
    data, problems = check_session(log)
    assert problems == []
    assert_valid_history(data.messages)


def test_a_new_log_holds_its_lock_too(tmp_path: Path) -> None:
    log = tmp_path / "s.jsonl"
    agent = Agent(ScriptedModel([]), session=log)
    with pytest.raises(UsageError):
        SessionLog.open(log)
    assert agent.session is not None
    agent.session.close()
    SessionLog.open(log).close()


# -- 4: a crash between a run's last state change and its end ---------------------------------


def test_a_crash_after_the_terminal_state_closes_the_run_in_that_state(tmp_path: Path) -> None:
    log = tmp_path / "s.jsonl"
    lines = finished_log(log)
    assert json.loads(lines[-1])["type"] == "run_end"
    last_state = json.loads(lines[-2])
    assert (last_state["type"], last_state["dest"]) == ("state", "done")
    log.write_bytes(b"".join(lines[:-1]))  # died before writing run_end
    agent = Agent.resume(log, model=ScriptedModel([text_response("again")]))
    assert agent.state is State.DONE
    written = [json.loads(line) for line in log.read_bytes().splitlines()[len(lines) - 1 :]]
    assert [(w["type"], w["state"]) for w in written] == [("run_end", "done")]
    assert agent.run_sync("next").state is State.DONE
    assert agent.session is not None
    agent.session.close()
    data, problems = check_session(log)
    assert problems == []
    assert "aborted" not in data.state_path
    assert load_history(log) == agent.messages


def test_a_crash_mid_run_is_still_recorded_as_aborted(tmp_path: Path) -> None:
    log = tmp_path / "s.jsonl"
    lines = finished_log(log)
    # Cut after the first awaiting_model state change: the process died waiting for the model.
    keep = next(
        i for i, line in enumerate(lines) if json.loads(line).get("dest") == "awaiting_model"
    )
    log.write_bytes(b"".join(lines[: keep + 1]))
    agent = Agent.resume(log, model=ScriptedModel([]))
    assert agent.state is State.ABORTED
    assert agent.session is not None
    agent.session.close()
    assert check_session(log)[1] == []


def test_lock_is_per_log_file(tmp_path: Path) -> None:
    one = SessionLog.open(tmp_path / "one.jsonl")
    two = SessionLog.open(tmp_path / "two.jsonl")
    one.close()
    two.close()
    assert not os.path.getsize(tmp_path / "one.jsonl")
