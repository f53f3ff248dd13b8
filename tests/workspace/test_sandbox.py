"""run_command in a bubblewrap sandbox (issue 18): the issue's cases 1-5 by name, and the rules
behind them (writes, network, hidden paths, environment, killing, the CLI's options)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import shlex
import socket
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner
from docs.blocks import documentation_text

from statemachine_agent import Agent, State, ToolExecutionStart, ToolResultMessage
from statemachine_agent.cli import main
from statemachine_agent.models import ScriptedModel
from statemachine_agent.testing import assert_valid_history
from statemachine_agent.workspace import (
    DEFAULT_HIDDEN,
    Permissions,
    Sandbox,
    SandboxUnavailableError,
    check_sandbox,
    workspace_tools,
)

from ._procs import cmdline, descendants, pids_running, still_alive_after_settling
from .conftest import needs_bwrap, run_calls, script_for

BASE_PYTHON = str(Path(sys.base_prefix) / "bin" / "python3")

SANDBOXED = Sandbox(mode="require")
API_KEY = "sk-ant-test-0123456789abcdefSECRET"


def cli(*args: str) -> object:
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def write_script(tmp_path: Path, commands: list[str]) -> str:
    """A scripted model running ``commands`` (one batch), then answering "ok"."""
    path = tmp_path / "script.json"
    path.write_text(json.dumps(script_for([("run_command", {"command": c}) for c in commands])))
    return f"script:{path}"


@contextlib.contextmanager
def listening() -> Iterator[socket.socket]:
    """A TCP server socket on 127.0.0.1 (connections wait in its backlog until accepted)."""
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    server.setblocking(False)
    try:
        yield server
    finally:
        server.close()


def received(server: socket.socket) -> bytes | None:
    """What a connection that reached ``server`` sent (None: no connection arrived)."""
    try:
        conn, _ = server.accept()
    except BlockingIOError:
        return None
    with conn:
        conn.settimeout(5)
        return conn.recv(100)


def connect_command(port: int) -> str:
    code = f"import socket; socket.create_connection(('127.0.0.1', {port}), 5).sendall(b'hello')"
    # The base interpreter, not the venv's: a checkout (and its venv) under /tmp is hidden by the
    # sandbox's private /tmp; the snippet needs only the standard library.
    return f"{shlex.quote(BASE_PYTHON)} -c {shlex.quote(code)}"


# -- case 1: writes -------------------------------------------------------------------------------


@needs_bwrap
def test_writes_outside_the_workspace_fail_inside_work(workspace: Path, tmp_path: Path) -> None:
    evil = Path("/usr/local/evil")
    if evil.exists():
        pytest.skip("/usr/local/evil exists already: cannot tell whether the sandbox made it")
    try:
        _, results = run_calls(
            workspace,
            [
                ("run_command", {"command": "echo x > ../outside.txt"}),
                ("run_command", {"command": "touch /usr/local/evil"}),
                ("run_command", {"command": "echo x > inside.txt"}),
            ],
            sandbox=SANDBOXED,
        )
        outside, usr_local, inside = results
        for failed in (outside, usr_local):
            assert failed.details["sandboxed"] is True
            assert failed.details["exit_code"] != 0
            assert "Read-only file system" in failed.text or "Permission denied" in failed.text
        assert "../outside.txt: Read-only file system" in outside.text
        assert "Sandbox: only the workspace and a private /tmp are writable" in outside.text
        assert inside.text == "(no output)\n[exit code 0]"
        assert (workspace / "inside.txt").read_text() == "x\n"
        assert not (tmp_path / "outside.txt").exists()
        assert not evil.exists()
    finally:
        if evil.exists():  # the sandbox failed: leave nothing behind
            evil.unlink()


@needs_bwrap
def test_tmp_is_private_and_writable(workspace: Path) -> None:
    name = f"/tmp/sandbox-private-{time.monotonic_ns()}.txt"
    command = f"echo scratch > {name} && cat {name} && ls /tmp | wc -l"
    _, results = run_calls(workspace, [("run_command", {"command": command})], sandbox=SANDBOXED)
    # Only the file and the read-only folder leading to the workspace are in the sandbox's /tmp.
    assert results[0].text == "scratch\n2\n[exit code 0]"
    assert not Path(name).exists()


@needs_bwrap
def test_writable_paths_are_added(workspace: Path, tmp_path: Path) -> None:
    extra = tmp_path / "extra"
    extra.mkdir()
    sandbox = Sandbox(mode="require", writable=(extra,))
    command = f"echo y > {extra}/made.txt && echo z > {tmp_path}/not-made.txt"
    _, results = run_calls(workspace, [("run_command", {"command": command})], sandbox=sandbox)
    assert (extra / "made.txt").read_text() == "y\n"
    assert "not-made.txt: Read-only file system" in results[0].text
    assert f"workspace, {extra} and a private /tmp are writable" in results[0].text
    assert not (tmp_path / "not-made.txt").exists()


@needs_bwrap
def test_a_sandbox_that_cannot_start_says_so(workspace: Path, tmp_path: Path) -> None:
    extra = tmp_path / "gone-later"
    extra.mkdir()
    tools = workspace_tools(workspace, sandbox=Sandbox(mode="require", writable=(extra,)))
    extra.rmdir()  # bwrap cannot bind what is gone
    agent = Agent(
        ScriptedModel(script_for([("run_command", {"command": "touch ran.txt"})])),
        tools=tools,
        before_tool_call=Permissions(allow_all=True),
    )
    result = agent.run_sync("go")
    (text,) = [m.text for m in result.messages if isinstance(m, ToolResultMessage)]
    assert text.startswith("bwrap: ")
    assert text.endswith(
        "[The sandbox (bubblewrap) could not start the command; the command did not run.]"
        "\n[exit code 1]"
    )
    assert not (workspace / "ran.txt").exists()


@needs_bwrap
def test_a_writable_path_that_is_missing_is_refused(tmp_path: Path) -> None:
    with pytest.raises(Exception, match="does not exist"):
        workspace_tools(tmp_path, sandbox=Sandbox(mode="require", writable=(tmp_path / "no",)))


@needs_bwrap
def test_no_capabilities_even_as_root(workspace: Path) -> None:
    """Without --cap-drop ALL a root command could remount / read-write."""
    command = "grep CapEff /proc/self/status; mount -o remount,rw / 2>/dev/null || echo refused"
    _, results = run_calls(workspace, [("run_command", {"command": command})], sandbox=SANDBOXED)
    assert results[0].text == "CapEff:\t0000000000000000\nrefused\n[exit code 0]"


# -- case 2: network ------------------------------------------------------------------------------


@needs_bwrap
def test_no_network_unless_allowed(workspace: Path) -> None:
    with listening() as server:
        port = server.getsockname()[1]
        _, results = run_calls(
            workspace, [("run_command", {"command": connect_command(port)})], sandbox=SANDBOXED
        )
        assert results[0].details["exit_code"] == 1
        assert "ConnectionRefusedError" in results[0].text
        assert received(server) is None

        allowed = Sandbox(mode="require", allow_network=True)
        _, results = run_calls(
            workspace, [("run_command", {"command": connect_command(port)})], sandbox=allowed
        )
        assert results[0].text == "(no output)\n[exit code 0]"
        assert received(server) == b"hello"


@needs_bwrap
def test_cli_allow_network(tmp_path: Path, workspace: Path) -> None:
    with listening() as server:
        model = write_script(tmp_path, [connect_command(server.getsockname()[1])])
        off = cli("run", "go", "-w", str(workspace), "-m", model, "--yes", "--sandbox=require")
        assert off.exit_code == 0  # type: ignore[attr-defined]
        assert received(server) is None
        on = cli("run", "go", "-w", str(workspace), "-m", model, "--yes", "--allow-network")
        assert on.exit_code == 0  # type: ignore[attr-defined]
        assert "network on" in " ".join(on.output.split())  # type: ignore[attr-defined]
        assert received(server) == b"hello"


# -- case 3: hidden paths and the environment -----------------------------------------------------


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A temporary HOME holding a fake SSH key and .netrc."""
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "id_rsa").write_text("FAKE PRIVATE KEY\n")
    (home / ".netrc").write_text("machine x password FAKE\n")
    monkeypatch.setenv("HOME", str(home))
    return home


@needs_bwrap
def test_ssh_key_hidden_and_api_key_not_in_env(
    workspace: Path, home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", API_KEY)
    monkeypatch.setenv("LC_SMUGGLED", API_KEY)  # an allowed name holding the key's value
    _, results = run_calls(
        workspace,
        [("run_command", {"command": "cat ~/.ssh/id_rsa"}), ("run_command", {"command": "env"})],
        sandbox=SANDBOXED,
    )
    key, env = results
    assert key.details["exit_code"] == 1
    assert key.text == f"cat: {home}/.ssh/id_rsa: No such file or directory\n[exit code 1]"
    assert API_KEY not in env.text and "ANTHROPIC_API_KEY" not in env.text
    assert "LC_SMUGGLED" not in env.text
    lines = set(env.text.splitlines())
    assert {f"HOME={home}", "TMPDIR=/tmp"} <= lines


@needs_bwrap
def test_hidden_paths_are_masked_where_they_would_be_visible(workspace: Path, home: Path) -> None:
    """HOME made visible (writable): the mask, not the private /tmp, is what hides the key."""
    commands = [("run_command", {"command": "cat ~/.ssh/id_rsa; cat ~/.netrc; ls -A ~/.ssh"})]
    shown = Sandbox(mode="require", writable=(home,), hidden=())
    _, results = run_calls(workspace, commands, sandbox=shown)
    assert results[0].text == "FAKE PRIVATE KEY\nmachine x password FAKE\nid_rsa\n[exit code 0]"

    hidden = Sandbox(mode="require", writable=(home,))  # the default hidden paths
    _, results = run_calls(workspace, commands, sandbox=hidden)
    # The folder is an empty tmpfs; the file is /dev/null on a no-device mount: unreadable.
    assert results[0].text == (
        f"cat: {home}/.ssh/id_rsa: No such file or directory\n"
        f"cat: {home}/.netrc: Permission denied\n[exit code 0]"
    )
    assert (home / ".ssh" / "id_rsa").read_text() == "FAKE PRIVATE KEY\n"


@needs_bwrap
def test_a_hidden_folder_around_the_workspace_keeps_the_workspace(tmp_path: Path) -> None:
    outer = tmp_path / "outer"
    (outer / "private" / "ws").mkdir(parents=True)
    (outer / "private" / "secret.txt").write_text("secret\n")
    workspace = outer / "private" / "ws"
    sandbox = Sandbox(mode="require", writable=(outer,), hidden=(outer / "private",))
    command = "ls -A ..; cat ../secret.txt; echo x > ../new.txt; echo y > mine.txt; cat mine.txt"
    _, results = run_calls(workspace, [("run_command", {"command": command})], sandbox=sandbox)
    text = results[0].text
    assert text.startswith("ws\ncat: ../secret.txt: No such file or directory\n")
    assert "../new.txt: Read-only file system" in text
    assert text.endswith("y\n[exit code 0]")
    assert not (outer / "private" / "new.txt").exists()


def test_hiding_the_workspace_itself_is_refused(tmp_path: Path) -> None:
    from statemachine_agent.workspace._sandbox import bwrap_arguments

    with pytest.raises(Exception, match="both hidden and writable"):
        bwrap_arguments(Sandbox(hidden=(tmp_path,)), tmp_path)


# -- case 4: abort kills everything ---------------------------------------------------------------


async def abort_when_running(
    workspace: Path, command: str, wanted: list[list[str]], grace: float = 2.0
) -> tuple[list[ToolResultMessage], dict[int, list[str]], float]:
    """Run ``command`` sandboxed; once the processes ``wanted`` run, note every process under
    this test (by PID) and abort. Returns the tool results, those PIDs with their command lines,
    and the seconds from the abort to the run's end."""
    agent = Agent(
        ScriptedModel(script_for([("run_command", {"command": command})])),
        tools=workspace_tools(workspace, sandbox=SANDBOXED),
        before_tool_call=Permissions(allow_all=True),
        abort_grace_seconds=grace,
    )
    started = asyncio.Event()
    agent.subscribe(lambda e: started.set() if isinstance(e, ToolExecutionStart) else None)
    task = asyncio.ensure_future(agent.run("go"))
    await started.wait()
    # Polling /proc: no event tells when the sandboxed processes have started.
    while sorted(cmdline(p) for p in descendants() if cmdline(p) in wanted) != sorted(wanted):  # noqa: ASYNC110
        await asyncio.sleep(0.02)
    pids = {pid: cmdline(pid) for pid in descendants()}
    begin = time.monotonic()
    agent.abort("test abort")
    result = await task
    elapsed = time.monotonic() - begin
    assert result.state is State.ABORTED
    assert_valid_history(result.messages)
    return [m for m in result.messages if isinstance(m, ToolResultMessage)], pids, elapsed


@needs_bwrap
async def test_abort_in_the_sandbox_leaves_no_process(workspace: Path) -> None:
    grace = 2.0
    sleeps = [["sleep", "100"], ["sleep", "100"]]
    results, pids, elapsed = await abort_when_running(
        workspace, "sh -c 'sleep 100 & sleep 100'", sleeps, grace
    )
    # bwrap, its PID-namespace init, sh -c, sh and the two sleeps.
    assert sorted(argv[0] for argv in pids.values()) == sorted(
        [*[check_sandbox(SANDBOXED).bwrap] * 2, "/bin/sh", "sh", "sleep", "sleep"]
    )
    assert results[0].details["sandboxed"] is True
    assert results[0].details["aborted"] is True
    assert results[0].text.startswith("(no output)\n[Interrupted: the run was aborted")
    assert elapsed <= grace + 1
    assert still_alive_after_settling(list(pids)) == []


@needs_bwrap
async def test_abort_kills_a_process_that_left_the_group(workspace: Path) -> None:
    """A new session escapes a process-group kill; the PID namespace still ends it."""
    command = "setsid sleep 100.5 & sleep 100"
    results, pids, _ = await abort_when_running(
        workspace, command, [["sleep", "100.5"], ["sleep", "100"]]
    )
    assert results[0].details["aborted"] is True
    assert still_alive_after_settling(list(pids)) == []
    assert pids_running("sleep", "100.5") == []


# -- case 5: the CLI without bubblewrap -----------------------------------------------------------


@pytest.fixture
def no_bwrap_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """PATH holding only an empty folder: no bwrap (nor anything else) on it."""
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    return empty


def test_require_without_bwrap_exits_2(
    no_bwrap_path: Path, workspace: Path, tmp_path: Path
) -> None:
    model = write_script(tmp_path, ["echo x > made.txt"])
    result = cli("run", "go", "-w", str(workspace), "-m", model, "--yes", "--sandbox=require")
    assert result.exit_code == 2  # type: ignore[attr-defined]
    output = " ".join(result.output.split())  # type: ignore[attr-defined]
    assert "bubblewrap (bwrap) is not on PATH" in output
    assert "Install bubblewrap: apt-get install bubblewrap (Debian, Ubuntu)" in output
    assert not (workspace / "made.txt").exists()


def test_python_api_require_without_bwrap_raises(no_bwrap_path: Path, workspace: Path) -> None:
    with pytest.raises(SandboxUnavailableError, match="apt-get install bubblewrap"):
        workspace_tools(workspace, sandbox="require")


def test_auto_without_bwrap_warns_once_and_runs_unsandboxed(
    no_bwrap_path: Path, workspace: Path, tmp_path: Path
) -> None:
    model = write_script(tmp_path, ["echo x > ../made-outside.txt", "echo y > ../second.txt"])
    result = cli("run", "go", "-w", str(workspace), "-m", model, "--yes")
    assert result.exit_code == 0  # type: ignore[attr-defined]
    output = " ".join(result.output.split())  # type: ignore[attr-defined]
    assert output.count("Warning: sandbox unavailable.") == 1
    assert "run_command is NOT sandboxed (bubblewrap (bwrap) is not on PATH)" in output
    assert (tmp_path / "made-outside.txt").read_text() == "x\n"  # unsandboxed, as warned


def test_bwrap_that_cannot_create_namespaces_is_reported(
    tmp_path: Path, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = tmp_path / "fake-bin"
    fake.mkdir()
    (fake / "bwrap").write_text(
        "#!/bin/sh\necho 'bwrap: No permissions to create new namespace' >&2\nexit 1\n"
    )
    (fake / "bwrap").chmod(0o755)
    monkeypatch.setenv("PATH", str(fake))
    model = write_script(tmp_path, ["true"])
    result = cli("run", "go", "-w", str(workspace), "-m", model, "--yes", "--sandbox=require")
    assert result.exit_code == 2  # type: ignore[attr-defined]
    output = " ".join(result.output.split())  # type: ignore[attr-defined]
    assert (
        f"bwrap ({fake}/bwrap) cannot create a sandbox here: bwrap: No permissions to create "
        "new namespace"
    ) in output


# -- the CLI states the mode ----------------------------------------------------------------------


def test_no_sandbox_is_stated_in_the_view_and_in_json(workspace: Path, tmp_path: Path) -> None:
    model = write_script(tmp_path, ["echo x > ../plain.txt"])
    view = cli("run", "go", "-w", str(workspace), "-m", model, "--yes", "--no-sandbox")
    assert view.exit_code == 0  # type: ignore[attr-defined]
    assert "Sandbox: OFF. run_command is NOT sandboxed (sandbox turned off)" in " ".join(
        view.output.split()  # type: ignore[attr-defined]
    )
    assert (tmp_path / "plain.txt").read_text() == "x\n"
    model = write_script(tmp_path, ["true"])
    lines = cli("run", "go", "-w", str(workspace), "-m", model, "--yes", "--no-sandbox", "--json")
    first = json.loads(lines.stdout.splitlines()[0])  # type: ignore[attr-defined]
    assert first["type"] == "run_start"
    assert first["sandbox"]["active"] is False and first["sandbox"]["mode"] == "off"
    assert first["sandbox"]["summary"].startswith("run_command is NOT sandboxed")


def test_no_sandbox_contradicting_require_is_a_usage_error(workspace: Path, tmp_path: Path) -> None:
    model = write_script(tmp_path, ["true"])
    args = ["run", "go", "-w", str(workspace), "-m", model, "--no-sandbox", "--sandbox=require"]
    result = cli(*args)
    assert result.exit_code == 2  # type: ignore[attr-defined]
    assert "--no-sandbox contradicts --sandbox=require" in result.output  # type: ignore[attr-defined]


@needs_bwrap
def test_json_run_start_states_an_active_sandbox(workspace: Path, tmp_path: Path) -> None:
    model = write_script(tmp_path, ["true"])
    extra = tmp_path / "extra"
    extra.mkdir()
    result = cli(
        "run", "go", "-w", str(workspace), "-m", model, "--json", "--yes",
        "--writable", str(extra), "--hide", "~/.kube",
    )  # fmt: skip
    first = json.loads(result.stdout.splitlines()[0])  # type: ignore[attr-defined]
    assert first["sandbox"] == {
        "active": True,
        "mode": "auto",
        "allow_network": False,
        "writable": [str(extra)],
        "hidden": [*DEFAULT_HIDDEN, "~/.kube"],
        "problem": None,
        "summary": check_sandbox(
            Sandbox(writable=(extra,), hidden=(*map(Path, DEFAULT_HIDDEN), Path("~/.kube")))
        ).describe(),
    }


def test_continue_hint_keeps_the_sandbox_options(workspace: Path, tmp_path: Path) -> None:
    model = write_script(tmp_path, ["true"])
    result = cli(
        "run", "go", "-w", str(workspace), "-m", model, "--yes", "--no-sandbox",
        "--max-turns", "1", "--session", str(tmp_path / "s.jsonl"),
    )  # fmt: skip
    assert result.exit_code == 3  # type: ignore[attr-defined]
    assert "--yes --no-sandbox" in result.output  # type: ignore[attr-defined]


@needs_bwrap
def test_demo_says_commands_are_sandboxed(tmp_path: Path) -> None:
    result = cli("demo", "--into", str(tmp_path / "demo"), "--delay", "0")
    assert result.exit_code == 0  # type: ignore[attr-defined]
    assert "Sandbox: on. run_command is sandboxed (bubblewrap)" in " ".join(
        result.output.split()  # type: ignore[attr-defined]
    )


def test_readme_sandbox_example_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    readme = documentation_text()
    blocks = [b.split("```", 1)[0] for b in readme.split("```python\n")[1:]]
    (example,) = [b for b in blocks if "Sandbox(" in b]
    monkeypatch.chdir(tmp_path)  # its workspace is "."
    exec(compile(example, "README.md", "exec"), {})
    assert capsys.readouterr().out.startswith("run_command is ")
