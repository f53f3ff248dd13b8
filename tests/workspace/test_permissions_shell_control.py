"""Issue 40: an allow rule ``run_command:PREFIX`` covers the command PREFIX with plain arguments,
never a second command chained after it. ``run_command`` runs its command with ``/bin/sh -c``, so
a newline, ``;``, ``&&``, ``||``, ``|``, a backtick, ``$(...)``, a ``>`` / ``<`` redirection or a
``&`` (background) after the allowed prefix would run (or redirect into) something else: such a
command is never allowed by a prefix rule, quoted or not (inside double quotes sh still runs
``$(...)`` and backticks)."""

from __future__ import annotations

import shlex
import string
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from statemachine_agent.workspace import Permissions

from .conftest import run_calls

PYTEST = Permissions(allow=["run_command:pytest"])

ATTACKS = {
    "newline": "pytest -q\nrm -rf ~",
    "carriage_return_newline": "pytest -q\r\nrm -rf ~",
    "semicolon": "pytest -q; rm -rf ~",
    "and": "pytest -q && rm -rf ~",
    "or": "pytest -q || rm -rf ~",
    "pipe": "pytest -q | sh",
    "pipe_stderr": "pytest -q |& sh",
    "backticks": "pytest `rm -rf ~`",
    "backticks_in_double_quotes": 'pytest -k "`rm -rf ~`"',
    "command_substitution": "pytest $(rm -rf ~)",
    "command_substitution_in_double_quotes": 'pytest -k "$(rm -rf ~)"',
    "arithmetic_substitution": "pytest $((1+1))",
    "redirect_out": "pytest -q > ~/.bashrc",
    "redirect_append": "pytest -q >> ~/.bashrc",
    "redirect_in": "pytest -q < /etc/passwd",
    "here_string": "pytest -q <<< x",
    "process_substitution": "pytest <(rm -rf ~)",
    "background": "pytest -q & rm -rf ~",
    "background_at_end": "pytest -q &",
    "newline_at_the_prefix": "pytest\nrm -rf ~",
    "semicolon_at_the_prefix": "pytest;rm -rf ~",
}


@pytest.mark.parametrize("command", list(ATTACKS.values()), ids=list(ATTACKS))
def test_an_allowed_prefix_does_not_allow_a_shell_control_sequence_after_it(command: str) -> None:
    assert not PYTEST.allows("run_command", {"command": command})


@pytest.mark.parametrize(
    "command",
    ["pytest", "pytest -q", "pytest -q tests/test_a.py::test_b", "pytest -k 'not slow' -x"],
)
def test_an_allowed_prefix_still_allows_plain_arguments(command: str) -> None:
    assert PYTEST.allows("run_command", {"command": command})


def test_an_allowed_prefix_does_not_allow_another_command_that_starts_like_it() -> None:
    assert not PYTEST.allows("run_command", {"command": "pytest-evil -q"})
    assert not PYTEST.allows("run_command", {"command": "pytestx"})


# Control sequences sh acts on, each of which starts a second command or redirects.
CONTROLS = ["\n", ";", "&&", "||", "|", "&", "`", "$(", ">", ">>", "<", "<<", "|&", "\r\n"]

# Plain argument text: what the arguments of an allowed command may hold.
PLAIN = string.ascii_letters + string.digits + "-_=./:,@+%~*?[]{}#'\" "
plain_text = st.text(alphabet=PLAIN, max_size=20)


@given(
    before=plain_text,
    control=st.sampled_from(CONTROLS),
    after=st.text(max_size=20),
    prefix=st.sampled_from(["pytest", "python3 -m unittest", "make test"]),
)
def test_a_control_sequence_inserted_after_an_allowed_prefix_is_never_allowed(
    before: str, control: str, after: str, prefix: str
) -> None:
    rules = Permissions(allow=[f"run_command:{prefix}"])
    command = f"{prefix} {before}{control}{after}"
    assert not rules.allows("run_command", {"command": command})


@given(
    arguments=st.lists(
        st.text(alphabet=string.ascii_letters + string.digits + "-_=./:,@+%"), max_size=5
    ),
    prefix=st.sampled_from(["pytest", "python3 -m unittest", "make test"]),
)
def test_plain_arguments_after_an_allowed_prefix_are_allowed(
    arguments: list[str], prefix: str
) -> None:
    rules = Permissions(allow=[f"run_command:{prefix}"])
    command = " ".join([prefix, *(shlex.quote(a) for a in arguments)])
    assert rules.allows("run_command", {"command": command})


def test_a_chained_command_after_an_allowed_prefix_is_denied_and_never_runs(
    workspace: Path,
) -> None:
    rules = Permissions(allow=["run_command:echo"])
    calls = [
        ("run_command", {"command": f"echo ok{control}touch pwned{i}"})
        for i, control in enumerate(["\n", "; ", " && ", " || ", " | ", " & "])
    ]
    calls += [
        ("run_command", {"command": "echo `touch pwned6`"}),
        ("run_command", {"command": 'echo "$(touch pwned7)"'}),
        ("run_command", {"command": "echo ok > pwned8"}),
        ("run_command", {"command": "echo ok"}),  # allowed: plain arguments
    ]
    _, results = run_calls(workspace, calls, before_tool_call=rules)
    assert [r.is_error for r in results] == [True] * 9 + [False]
    assert all(
        r.text.startswith("Denied: Permission needed to run the command: echo") for r in results[:9]
    )
    assert sorted(p.name for p in workspace.iterdir() if p.name.startswith("pwned")) == []
