"""Helpers to drive the workspace tools through a real agent run."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from statemachine_agent import Agent, RunResult, ToolResultMessage
from statemachine_agent.models import ScriptedModel
from statemachine_agent.testing import assert_valid_history
from statemachine_agent.workspace import (
    Permissions,
    Sandbox,
    SandboxMode,
    SandboxUnavailableError,
    check_sandbox,
    workspace_tools,
)


def script_for(calls: list[tuple[str, dict[str, Any]]]) -> list[dict[str, Any]]:
    """One response with ``calls`` as a tool batch, then a final answer."""
    batch = [
        {"type": "tool_use", "id": f"call_{i}", "name": name, "input": args}
        for i, (name, args) in enumerate(calls)
    ]
    return [
        {"content": batch, "stop_reason": "tool_use"},
        {"content": [{"type": "text", "text": "ok"}], "stop_reason": "end_turn"},
    ]


def run_calls(
    root: Path,
    calls: list[tuple[str, dict[str, Any]]],
    *,
    sandbox: Sandbox | SandboxMode = "auto",
    **agent_kwargs: Any,
) -> tuple[RunResult, list[ToolResultMessage]]:
    """Run one batch of real tool calls in ``root``; returns the result and the tool results."""
    agent_kwargs.setdefault("before_tool_call", Permissions(allow_all=True))
    tools = workspace_tools(root, sandbox=sandbox)
    agent = Agent(ScriptedModel(script_for(calls)), tools=tools, **agent_kwargs)
    result = agent.run_sync("go")
    assert_valid_history(result.messages)
    results = [m for m in result.messages if isinstance(m, ToolResultMessage)]
    return result, results


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    """A workspace folder inside tmp_path (so tmp_path/outside.txt is outside it)."""
    root = tmp_path / "ws"
    (root / "src").mkdir(parents=True)
    (root / "src" / "math.py").write_text("def add(a, b):\n    return a + b\n")
    (root / "README.md").write_text("# demo\n")
    return root


def bwrap_problem() -> str | None:
    """Why bubblewrap cannot sandbox commands on this machine (None: it can)."""
    try:
        check_sandbox(Sandbox(mode="require"))
    except SandboxUnavailableError as exc:
        return str(exc)
    return None


needs_bwrap = pytest.mark.skipif(
    bwrap_problem() is not None,
    reason=f"bubblewrap is unavailable here (.ci/run installs it): {bwrap_problem()}",
)


@pytest.fixture(params=["off", pytest.param("require", marks=needs_bwrap)], ids=["plain", "bwrap"])
def mode(request: pytest.FixtureRequest) -> SandboxMode:
    """Run a command test both unsandboxed and inside bubblewrap."""
    mode: SandboxMode = request.param
    return mode
