"""The ``run_command`` tool: a shell command in the workspace, with a timeout and an output cap.

The command runs in a new session (its own process group), so on abort, timeout or cancellation
the whole group is killed: background children included. Its standard input is empty, so it never
reads the terminal the agent runs in.

With an active `SandboxStatus` the shell runs inside bubblewrap (see `._sandbox`): ``bwrap`` is the
group leader, the command runs in a new PID namespace under it, and ``--die-with-parent`` ends
the namespace (every process in it, even one that left the group) when ``bwrap`` is killed.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from .._tools import Tool, ToolContext, ToolResult, tool
from ._paths import Workspace
from ._sandbox import SandboxStatus, bwrap_arguments, sandbox_environment

DEFAULT_TIMEOUT_SECONDS = 120.0
MAX_TIMEOUT_SECONDS = 600.0
MIN_TIMEOUT_SECONDS = 0.1
MAX_OUTPUT_CHARS = 30_000
"""Output shown to the model: the first third and the last two thirds of this are kept."""
TERM_GRACE_SECONDS = 0.5
"""After SIGTERM to the group, how long to wait before SIGKILL."""
DRAIN_SECONDS = 1.0
"""After the shell exits, how long background children may keep its output open."""
_READ_CHUNK = 65536


@dataclass
class _Output:
    """Head and tail of a stream of bytes, never more than ``keep`` bytes of each."""

    keep: int
    head: bytearray = field(default_factory=bytearray)
    tail: bytearray = field(default_factory=bytearray)
    total: int = 0

    def add(self, chunk: bytes) -> None:
        self.total += len(chunk)
        room = self.keep - len(self.head)
        if room > 0:
            self.head += chunk[:room]
            chunk = chunk[room:]
        if chunk:
            self.tail += chunk
            del self.tail[: max(len(self.tail) - self.keep, 0)]

    def text(self) -> str:
        """The output, cut in the middle (with a note) when longer than ``MAX_OUTPUT_CHARS``."""
        first = MAX_OUTPUT_CHARS // 3
        last = MAX_OUTPUT_CHARS - first
        if self.total == len(self.head) + len(self.tail):
            whole = bytes(self.head + self.tail).decode("utf-8", errors="replace")
            if len(whole) <= MAX_OUTPUT_CHARS:
                return whole
            head, tail = whole[:first], whole[-last:]
        else:
            head = bytes(self.head).decode("utf-8", errors="replace")[:first]
            tail = bytes(self.tail).decode("utf-8", errors="replace")[-last:]
        omitted = max(self.total - len(head.encode()) - len(tail.encode()), 0)
        return (
            f"{head}\n[... output cut: {omitted} of {self.total} bytes omitted. Redirect the "
            f"output to a file and read parts of it to see more ...]\n{tail}"
        )


async def _pump(stream: asyncio.StreamReader, output: _Output) -> None:
    while chunk := await stream.read(_READ_CHUNK):
        output.add(chunk)


def _signal_group(pgid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signum)


class _Protocol(asyncio.subprocess.SubprocessStreamProtocol):
    """Also tells when the shell itself exited: ``Process.wait`` waits for the pipes to close
    too, which background children holding the output can delay forever."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__(limit=2**16, loop=loop)
        self.exited: asyncio.Future[None] = loop.create_future()

    def process_exited(self) -> None:
        super().process_exited()
        if not self.exited.done():
            self.exited.set_result(None)


async def _kill_group(pgid: int, exited: asyncio.Future[None]) -> None:
    """SIGTERM the command's group, give it a moment, then SIGKILL whatever is left."""
    _signal_group(pgid, signal.SIGTERM)
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(asyncio.shield(exited), TERM_GRACE_SECONDS)
    _signal_group(pgid, signal.SIGKILL)
    await asyncio.shield(exited)


READ_ONLY_NOTE = (
    "\n[Sandbox: only the workspace{extra} and a private /tmp are writable; everything else is "
    "read-only.]"
)


async def run_shell(
    command: str,
    cwd: str,
    ctx: ToolContext | None,
    timeout_seconds: float,
    *,
    sandbox: SandboxStatus | None = None,
) -> ToolResult:
    """Run ``command`` with ``sh`` in ``cwd``; see the module docstring.

    Args:
        sandbox: run inside bubblewrap when it is active (`check_sandbox`); None or inactive
            runs the shell directly, with the parent's environment.

    Returns:
        A `ToolResult` whose text holds the (capped) output and the exit code; ``details`` has
        ``exit_code``, ``pid`` (= the process group id, ``bwrap``'s when sandboxed),
        ``sandboxed``, ``timed_out``, ``aborted``, ``summary``.
    """
    output = _Output(keep=MAX_OUTPUT_CHARS * 4)
    loop = asyncio.get_running_loop()
    config = sandbox.config if sandbox is not None else None
    bwrap = sandbox.bwrap if sandbox is not None else None
    shell = ["/bin/sh", "-c", command]  # what asyncio's subprocess_shell runs on POSIX
    if config is not None and bwrap is not None:
        argv = [bwrap, *bwrap_arguments(config, Path(cwd)), "--chdir", cwd, "--", *shell]
        env: dict[str, str] | None = sandbox_environment(config, os.environ)
    else:
        argv, env = shell, None  # the parent's environment
    transport, protocol = await loop.subprocess_exec(
        lambda: _Protocol(loop),
        *argv,
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    pgid = transport.get_pid()
    assert protocol.stdout is not None
    reader = asyncio.ensure_future(_pump(protocol.stdout, output))
    exited = protocol.exited
    abort = ctx.signal.future() if ctx is not None else loop.create_future()
    outcome = "exited"
    try:
        done, _ = await asyncio.wait(
            (exited, abort), timeout=timeout_seconds, return_when=asyncio.FIRST_COMPLETED
        )
        if exited in done and ctx is not None and ctx.signal.aborted:
            # Ctrl-C reaching the command while it was being started ends it as well.
            outcome = "aborted"
            await _kill_group(pgid, exited)
        elif exited in done:
            # Background children may still hold the output open: give them a moment.
            _, pending = await asyncio.wait((reader,), timeout=DRAIN_SECONDS)
            if pending:
                outcome = "lingering"
                await _kill_group(pgid, exited)
        else:
            outcome = "aborted" if abort in done else "timed_out"
            await _kill_group(pgid, exited)
        # The group is gone: what is left in the pipe is read at once.
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(reader), DRAIN_SECONDS)
    finally:
        # Cancelled: no time to be polite. Otherwise: background processes the command left
        # behind (e.g. `server &`) die with it, so no run leaves processes running.
        _signal_group(pgid, signal.SIGKILL)
        reader.cancel()
        abort.cancel()
        transport.close()
    code = transport.get_returncode()
    text = output.text().rstrip("\n") or "(no output)"
    details: dict[str, object] = {
        "exit_code": code,
        "pid": pgid,
        "sandboxed": bwrap is not None,
        "timed_out": outcome == "timed_out",
        "aborted": outcome == "aborted",
    }
    if outcome == "aborted":
        details["summary"] = "interrupted, process group killed"
        return ToolResult(
            f"{text}\n[Interrupted: the run was aborted; the command's whole process group was "
            "killed. It may have partly completed.]",
            is_error=True,
            details=details,
        )
    if outcome == "timed_out":
        details["summary"] = f"timed out after {timeout_seconds:g} s"
        return ToolResult(
            f"{text}\n[Timed out after {timeout_seconds:g} s: the command's whole process group "
            "was killed. Run long tasks with a larger timeout_seconds, or in smaller steps.]",
            is_error=True,
            details=details,
        )
    note = ""
    if outcome == "lingering":
        note = (
            "\n[Background processes still held the output open after the command exited; "
            "they were stopped.]"
        )
    if bwrap is not None and config is not None and code != 0:
        if text.startswith("bwrap: "):
            note += (
                "\n[The sandbox (bubblewrap) could not start the command; the command did not run.]"
            )
        elif "Read-only file system" in text:
            extra = "".join(f", {p}" for p in config.writable)
            note += READ_ONLY_NOTE.format(extra=extra)
    details["summary"] = f"exit code {code}"
    return ToolResult(f"{text}{note}\n[exit code {code}]", details=details)


def _sandbox_sentence(sandbox: SandboxStatus | None) -> str:
    """What the model is told about the sandbox, in the tool's description."""
    if sandbox is None or not sandbox.active:
        return ""
    config = sandbox.config
    writable = "".join(f", {p}" for p in config.writable)
    network = "is available" if config.allow_network else "is off (no internet, no localhost)"
    return (
        f"\n\nIt runs in a sandbox: only the workspace{writable} and a private /tmp are "
        f"writable, the rest of the file system is read-only, the network {network}, and "
        "only a few environment variables are set."
    )


def command_tool(workspace: Workspace, sandbox: SandboxStatus | None = None) -> Tool:
    """The ``run_command`` tool bound to ``workspace``, sandboxed as ``sandbox`` says (see
    `run_shell`)."""

    @tool(name="run_command")
    async def run_command(
        command: str, ctx: ToolContext, timeout_seconds: float = DEFAULT_TIMEOUT_SECONDS
    ) -> ToolResult:
        """Run a shell command (sh) in the workspace root and return its output and exit code.

        Standard output and error are merged; long output is cut in the middle. The command
        cannot read input. It is stopped, with everything it started, after timeout_seconds.

        Args:
            command: the shell command line, e.g. "python3 -m unittest -v".
            timeout_seconds: stop the command after this long (0.1 to 600; a value outside is
                brought into that range, and the result says so).
        """
        timeout = min(max(timeout_seconds, MIN_TIMEOUT_SECONDS), MAX_TIMEOUT_SECONDS)
        result = await run_shell(command, str(workspace.root), ctx, timeout, sandbox=sandbox)
        if timeout == timeout_seconds:
            return result
        # Say so: a model that asked for more time must not believe it got it.
        limit = "above the cap" if timeout_seconds > timeout else "below the minimum"
        note = (
            f"[timeout_seconds {timeout_seconds:g} is {limit}: the command ran with "
            f"timeout_seconds {timeout:g} (allowed: {MIN_TIMEOUT_SECONDS:g} to "
            f"{MAX_TIMEOUT_SECONDS:g}).]"
        )
        assert isinstance(result.content, str)
        details = {**result.details, "timeout_capped": timeout} if result.details else None
        return ToolResult(f"{result.content}\n{note}", is_error=result.is_error, details=details)

    run_command.description += _sandbox_sentence(sandbox)
    return run_command
