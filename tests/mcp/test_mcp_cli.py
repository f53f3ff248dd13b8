"""``statemachine-agent run --mcp NAME=COMMAND`` as a process, against the real demo server."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path

from mcp_servers import SERVER


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
    spec = f"demo={shlex.quote(sys.executable)} {shlex.quote(str(SERVER))}"
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
            "--mcp",
            spec,
            "add them",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    events = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    ends = [e for e in events if e.get("type") == "tool_execution_end"]
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
    spec = f"demo={shlex.quote(sys.executable)} {shlex.quote(str(SERVER))}"
    workspace = tmp_path / "ws"
    workspace.mkdir()
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "statemachine_agent",
            "run",
            "-w",
            str(workspace),
            "-m",
            f"script:{script}",
            "--mcp",
            spec,
            "write it",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert (workspace / "note.txt").read_text() == "hello"
    assert not (tmp_path / "note.txt").exists()
