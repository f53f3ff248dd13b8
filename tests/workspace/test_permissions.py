"""The permission hook: allow-all, allow rules, asking, and denial without a terminal."""

from __future__ import annotations

from pathlib import Path

import pytest

from statemachine_agent import UsageError
from statemachine_agent.workspace import Permissions

from .conftest import run_calls


def test_without_a_terminal_or_flag_commands_and_writes_are_denied(workspace: Path) -> None:
    calls = [
        ("read_file", {"path": "README.md"}),
        ("list_files", {}),
        ("run_command", {"command": "touch ran.txt"}),
        ("write_file", {"path": "new.txt", "content": "x"}),
        ("edit_file", {"path": "README.md", "old_text": "demo", "new_text": "x"}),
    ]
    cli_hint = "The user can allow it by running again with --yes or --allow {tool}."
    _, results = run_calls(workspace, calls, before_tool_call=Permissions(how_to_allow=cli_hint))
    assert [r.is_error for r in results] == [False, False, True, True, True]
    assert results[2].text == (
        "Denied: Permission needed to run the command: touch ran.txt, and there is no "
        "interactive terminal to ask. The user can allow it by running again with --yes or "
        "--allow run_command."
    )
    assert "--allow write_file" in results[3].text
    assert not (workspace / "ran.txt").exists()
    assert not (workspace / "new.txt").exists()
    assert (workspace / "README.md").read_text() == "# demo\n"


def test_library_denial_does_not_name_cli_flags(workspace: Path) -> None:
    _, results = run_calls(
        workspace, [("run_command", {"command": "true"})], before_tool_call=Permissions()
    )
    assert results[0].is_error and "--yes" not in results[0].text
    assert results[0].text.endswith("The user can allow it in the agent's permission settings.")


def test_allow_rules() -> None:
    permissions = Permissions(allow=["writes", "run_command:python3 -m unittest"])
    assert permissions.allows("write_file", {"path": "x"})
    assert permissions.allows("edit_file", {"path": "x"})
    assert permissions.allows("run_command", {"command": "python3 -m unittest"})
    assert permissions.allows("run_command", {"command": "python3 -m unittest -v"})
    assert not permissions.allows("run_command", {"command": "python3 -m unittestx"})
    assert not permissions.allows("run_command", {"command": "python3 -m unittest; rm -rf ."})
    assert not permissions.allows("run_command", {"command": "python3 -m unittest > out"})
    assert not permissions.allows("run_command", {"command": "ls"})
    assert Permissions(allow=["run_command"]).allows("run_command", {"command": "ls; pwd"})
    assert Permissions(allow_all=True).allows("run_command", {"command": "anything"})
    with pytest.raises(UsageError, match="unknown allow rule"):
        Permissions(allow=["delete_everything"])


def test_confirm_yes_and_no(workspace: Path) -> None:
    questions: list[str] = []
    answers = iter([True, False])

    def confirm(question: str) -> bool:
        questions.append(question)
        return next(answers)

    calls = [
        ("write_file", {"path": "yes.txt", "content": "a\nb\n"}),
        ("write_file", {"path": "no.txt", "content": "x"}),
    ]
    _, results = run_calls(
        workspace, calls, before_tool_call=Permissions(confirm=confirm), tool_execution="sequential"
    )
    assert questions == [
        "Allow the agent to write yes.txt (2 lines)?",
        "Allow the agent to write no.txt (1 line)?",
    ]
    assert not results[0].is_error and (workspace / "yes.txt").exists()
    assert results[1].is_error and results[1].text.startswith("Denied: The user declined")
    assert not (workspace / "no.txt").exists()
