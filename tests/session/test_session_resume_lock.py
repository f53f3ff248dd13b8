"""The session log's lock when a resume fails."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from statemachine_agent import (
    Agent,
    AgentError,
    State,
    ToolDefinitionError,
    UsageError,
    tool,
)
from statemachine_agent.models import ScriptedModel
from statemachine_agent.session import SessionCorruptError
from statemachine_agent.testing.steps import call, text_response, tool_response

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
