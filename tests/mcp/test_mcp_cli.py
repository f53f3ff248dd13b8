"""``statemachine-agent run --mcp NAME=COMMAND`` as a process, against the real demo server:
its calls are guarded by the permission rules like ``run_command``'s, and the server runs under
the ``--sandbox`` settings."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from mcp_servers import SERVER

from statemachine_agent.workspace import Sandbox, check_sandbox

SPEC = f"demo={shlex.quote(sys.executable)} {shlex.quote(str(SERVER))}"
NO_BWRAP = check_sandbox(Sandbox(mode="auto"), warn=False).bwrap is None


def write_script(tmp_path: Path, path: Path) -> Path:
    """A script: the model calls the demo server's ``write`` on ``path``, then answers."""
    script = tmp_path / "script.json"
    call = {"type": "tool_use", "id": "toolu_w", "name": "demo_write"}
    steps = [
        {
            "content": [{**call, "input": {"path": str(path), "text": "hi"}}],
            "stop_reason": "tool_use",
        },
        {"content": [{"type": "text", "text": "ok"}], "stop_reason": "end_turn"},
    ]
    script.write_text(json.dumps({"steps": steps}))
    return script


def run_cli(tmp_path: Path, script: Path, *options: str) -> subprocess.CompletedProcess[str]:
    """``run --json --mcp demo=... OPTIONS "go"`` in the workspace tmp_path/ws (no terminal),
    started in tmp_path."""
    workspace = tmp_path / "ws"
    workspace.mkdir(exist_ok=True)
    command = [sys.executable, "-m", "statemachine_agent", "run", "--json", "-w", str(workspace)]
    command += ["-m", f"script:{script}", "--mcp", SPEC, *options, "go"]
    return subprocess.run(
        command, cwd=tmp_path, capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=120
    )


def tool_results(done: subprocess.CompletedProcess[str]) -> list[dict[str, Any]]:
    events = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    return [e for e in events if e.get("type") == "tool_execution_end"]


def test_cli_run_with_mcp_calls_the_servers_tool_like_a_local_one(tmp_path: Path) -> None:
    script = tmp_path / "script.json"
    steps = [
        {
            "content": [
                {
                    "type": "tool_use",
                    "id": "toolu_1",
                    "name": "demo_add",
                    "input": {"a": 20, "b": 22},
                }
            ],
            "stop_reason": "tool_use",
        },
        {"content": [{"type": "text", "text": "42 it is"}], "stop_reason": "end_turn"},
    ]
    script.write_text(json.dumps({"steps": steps}))
    done = run_cli(tmp_path, script, "--allow", "demo_add")
    assert done.returncode == 0, done.stderr
    ends = tool_results(done)
    assert len(ends) == 1
    assert "42" in json.dumps(ends[0])
    assert '"demo_add"' in done.stdout


def test_cli_refuses_an_mcp_spec_without_a_name(tmp_path: Path) -> None:
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"steps": [{"content": [{"type": "text", "text": "x"}]}]}))
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "statemachine_agent",
            "run",
            "-w",
            str(tmp_path),
            "-m",
            f"script:{script}",
            "--mcp",
            "python server.py",
            "go",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2
    assert "expected NAME=COMMAND" in done.stderr


def test_cli_denies_an_mcp_call_no_rule_allows_without_a_terminal(tmp_path: Path) -> None:
    target = tmp_path / "ws" / "new.txt"
    done = run_cli(tmp_path, write_script(tmp_path, target))
    assert done.returncode == 0, done.stderr
    (end,) = tool_results(done)
    assert end["result"]["is_error"] is True
    assert "Permission needed to call demo_write" in json.dumps(end)
    assert "--allow demo_write" in json.dumps(end)
    assert not target.exists()  # the call never reached the server


@pytest.mark.parametrize(
    "options", [["--allow", "demo_write"], ["--allow", "demo_*"], ["--yes"]], ids=str
)
def test_cli_allow_rules_and_yes_let_mcp_calls_run(tmp_path: Path, options: list[str]) -> None:
    target = tmp_path / "ws" / "new.txt"
    done = run_cli(tmp_path, write_script(tmp_path, target), *options)
    assert done.returncode == 0, done.stderr
    (end,) = tool_results(done)
    assert end["result"]["is_error"] is False
    assert target.read_text() == "hi"


def test_cli_allow_rule_for_workspace_tools_does_not_let_mcp_calls_run(tmp_path: Path) -> None:
    target = tmp_path / "ws" / "new.txt"
    done = run_cli(tmp_path, write_script(tmp_path, target), "--allow", "writes")
    (end,) = tool_results(done)
    assert end["result"]["is_error"] is True
    assert not target.exists()


def test_cli_refuses_an_allow_rule_that_names_no_mcp_servers_tool(tmp_path: Path) -> None:
    done = run_cli(tmp_path, write_script(tmp_path, tmp_path / "x"), "--allow", "demo2_write")
    assert done.returncode == 2
    assert "unknown allow rule 'demo2_write'" in done.stderr
    assert "demo_tool or 'demo_*'" in done.stderr


def test_cli_with_a_session_defers_an_mcp_call_and_approve_runs_it(tmp_path: Path) -> None:
    target = tmp_path / "ws" / "new.txt"
    script = write_script(tmp_path, target)
    session = tmp_path / "run.jsonl"
    done = run_cli(tmp_path, script, "--session", str(session))
    assert done.returncode == 4, done.stderr  # awaiting approval
    assert not target.exists()
    answer = tmp_path / "answer.json"
    answer.write_text(json.dumps({"steps": [{"content": [{"type": "text", "text": "ok"}]}]}))
    approve = [sys.executable, "-m", "statemachine_agent", "approve", str(session), "--all"]
    approved = subprocess.run(
        [*approve, "--json", "-w", str(tmp_path / "ws"), "-m", f"script:{answer}", "--mcp", SPEC],
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=120,
    )
    assert approved.returncode == 0, approved.stderr
    assert target.read_text() == "hi"


@pytest.mark.skipif(
    NO_BWRAP, reason="bubblewrap cannot run here (not installed or no user namespaces)"
)
def test_cli_runs_mcp_servers_under_the_sandbox_settings(tmp_path: Path) -> None:
    outside = tmp_path / "outside.txt"
    done = run_cli(tmp_path, write_script(tmp_path, outside), "--yes", "--sandbox=require")
    assert done.returncode == 0, done.stderr
    (end,) = tool_results(done)
    assert end["result"]["is_error"] is True
    assert "Read-only file system" in json.dumps(end)
    assert not outside.exists()


def test_cli_without_a_sandbox_lets_an_mcp_server_write_anywhere(tmp_path: Path) -> None:
    outside = tmp_path / "outside.txt"
    done = run_cli(tmp_path, write_script(tmp_path, outside), "--yes", "--no-sandbox")
    assert done.returncode == 0, done.stderr
    assert outside.read_text() == "hi"


def test_cli_asks_at_a_terminal_before_an_mcp_call_and_runs_it_after_yes(tmp_path: Path) -> None:
    pexpect = pytest.importorskip(
        "pexpect", reason="pexpect is not installed (a dev dependency: pip install -e '.[dev]')"
    )
    target = tmp_path / "ws" / "new.txt"
    script = write_script(tmp_path, target)
    (tmp_path / "ws").mkdir()
    args = ["run", "-w", str(tmp_path / "ws"), "-m", f"script:{script}", "--mcp", SPEC, "go"]
    code = "from statemachine_agent.cli import main; main()"
    env = {**os.environ, "TERM": "xterm-256color", "COLUMNS": "100", "LINES": "30"}
    child = pexpect.spawn(
        sys.executable, ["-c", code, *args], env=env, encoding="utf-8", timeout=60
    )
    child.expect("Allow the agent to call demo_write with")
    assert not target.exists()  # asked before the call reached the server
    child.sendline("y")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0
    assert target.read_text() == "hi"


def test_cli_mcp_url_with_a_name_prefixes_the_http_servers_tools(
    tmp_path: Path, http_url: str
) -> None:
    script = tmp_path / "script.json"
    call = {"type": "tool_use", "id": "toolu_h", "name": "web_add", "input": {"a": 1, "b": 2}}
    steps = [
        {"content": [call], "stop_reason": "tool_use"},
        {"content": [{"type": "text", "text": "ok"}], "stop_reason": "end_turn"},
    ]
    script.write_text(json.dumps({"steps": steps}))
    command = [sys.executable, "-m", "statemachine_agent", "run", "--json", "-w", str(tmp_path)]
    command += ["-m", f"script:{script}", "--mcp-url", f"web={http_url}", "--allow", "web_add"]
    done = subprocess.run(
        [*command, "go"], capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=120
    )
    assert done.returncode == 0, done.stderr
    (end,) = tool_results(done)
    assert (end["result"]["is_error"], end["result"]["content"][0]["text"]) == (False, "3")


def test_cli_run_with_mcp_url_calls_the_http_servers_tool(tmp_path: Path, http_url: str) -> None:
    script = tmp_path / "script.json"
    steps = [
        {
            "content": [
                {"type": "tool_use", "id": "toolu_1", "name": "add", "input": {"a": 40, "b": 2}}
            ],
            "stop_reason": "tool_use",
        },
        {"content": [{"type": "text", "text": "42 it is"}], "stop_reason": "end_turn"},
    ]
    script.write_text(json.dumps({"steps": steps}))
    workspace = tmp_path / "ws"
    workspace.mkdir()
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "statemachine_agent",
            "run",
            "--json",
            "-w",
            str(workspace),
            "-m",
            f"script:{script}",
            "--mcp-url",
            http_url,
            "--allow",
            "add",  # the CLI guards MCP tools as it does run_command
            "add them",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    events = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    (end,) = [e for e in events if e.get("type") == "tool_execution_end"]
    assert end["call"]["name"] == "add"  # a URL server's tools keep their names (no prefix)
    assert end["result"]["is_error"] is False
    assert end["result"]["content"][0]["text"] == "42"


def test_cli_starts_an_mcp_server_in_the_workspace_folder(tmp_path: Path) -> None:
    script = tmp_path / "script.json"
    call = {"path": "note.txt", "text": "hello"}  # relative: the server's working folder
    steps = [
        {
            "content": [{"type": "tool_use", "id": "toolu_1", "name": "demo_write", "input": call}],
            "stop_reason": "tool_use",
        },
        {"content": [{"type": "text", "text": "written"}], "stop_reason": "end_turn"},
    ]
    script.write_text(json.dumps({"steps": steps}))
    done = run_cli(tmp_path, script, "--allow", "demo_write")
    workspace = tmp_path / "ws"
    assert done.returncode == 0, done.stderr
    assert (workspace / "note.txt").read_text() == "hello"
    assert not (tmp_path / "note.txt").exists()
