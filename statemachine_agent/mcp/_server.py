"""`MCPServer`: an MCP server (stdio subprocess or streamable HTTP) as a tool source of an
`Agent`, on the official ``mcp`` client (`mcp.Client`)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import select
import shlex
import shutil
import signal
import sys
import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import httpx2
import mcp.types as mt
from mcp import Client, MCPError, StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client

from .._errors import AgentError, ToolError
from .._tools import ResourceKey, ToolContext, ToolResult
from ..workspace._sandbox import Sandbox, bwrap_arguments, check_sandbox, sandbox_environment
from ._convert import MCPTool, mcp_tool, progress_update, to_tool_result
from ._helpers import cancel_task, describe, errlog, list_all

logger = logging.getLogger("statemachine_agent.mcp")

STARTUP_TIMEOUT_SECONDS = 30.0
"""How long a server may take to start and answer its first listing (the default)."""

LAUNCHER = Path(__file__).with_name("_launch.py")
"""The script a stdio server is started through (it reports the server's process group)."""

STOP_TIMEOUT_SECONDS = 5.0
"""How long closing waits for the client to shut a server down before cancelling it."""

_MODERN = "2026-07-28"


class MCPServerError(AgentError):
    """An MCP server could not be started, did not answer, or lists no tools; the message names
    the server."""


class MCPServer:
    """An MCP server whose tools an `Agent` can call: ``Agent(tools=[MCPServer.stdio(...)])``.

    Build one with `stdio` (a subprocess speaking MCP on its stdin/stdout) or `http`
    (streamable HTTP). It is a tool source (`statemachine_agent.ToolSource`): the agent
    connects it on ``async with agent`` (or its first model request), lists its tools before
    each model request (again only after the server said its list changed: a
    ``notifications/tools/list_changed`` or, on a 2026-07-28 connection, a ``subscriptions/listen``
    event), and closes it in `Agent.aclose` (a stdio server's process group is terminated, then
    killed). One `MCPServer` belongs to one agent at a time unless shared on purpose (it then
    lives until its last user closes it... or until `aclose`).

    Each server tool is a `Tool` (an `MCPTool`) named ``prefix + its name``: the server's JSON
    Schema is what the model sees and what arguments are validated against (every error
    reported); permission hooks, ``requires_approval``, the session log and durable runs (each
    call a step) treat it like a local tool. A call's text, images, structured content
    (``details``, and JSON text when there is no other content) and resource links become its
    result; ``isError`` and protocol errors become error results with the server's message;
    progress notifications become the call's progress events (``{"progress", "total",
    "message"}``); ``timeout_seconds`` cancels a call that runs longer; an abort cancels the
    request at once (the client sends ``notifications/cancelled``) and the call is answered as
    interrupted.

    A server that dies (or drops the connection) during a call gives that call an error result;
    the next listing or call starts (or reconnects to) the server again, once, calls made at
    the same time sharing the restart. A stdio server that exited between calls is noticed
    before the next call, which goes to the new server; an HTTP server that answers 404 for
    its session (it restarted) gets a new session, and the refused call (never run) is sent
    again once. Stray output on a stdio server's stdout (not JSON, not UTF-8) is skipped. A server that does not
    start within ``startup_timeout_seconds``, fails to start, or lists no tools raises
    `MCPServerError` naming it (on ``async with agent``; during a run the run ends in ``failed``
    with that message).

    Args:
        name: what errors call it (``MCP server 'NAME'``).
        connect: makes a new `mcp.Client` for one connection (`stdio` and `http` give it); a
            stdio server's launcher writes its process group's id to the path it is given.
        prefix: put before each tool's name (e.g. ``"fs_"``); without one, a tool named like
            another is a `ToolDefinitionError` naming both.
        timeout_seconds: each call's timeout (None: none).
        startup_timeout_seconds: how long starting and the first listing may take.
        requires_approval: every call of this server's tools waits for a person's decision.
        resource: the write queue of each of its tools, as `tool`'s ``resource``: the name of
            the argument naming what a call changes (calls of one tool on one value run one at
            a time, in declaration order), or a function of the arguments giving the key (e.g.
            ``lambda args: "db"``: every call of the server in turn).
        idempotent: its calls may run again safely: a durable run recovering from a worker
            killed mid-call runs such a call again; otherwise that call is answered "no result
            recorded" (the `tool` rule). None (default): each tool as the server annotates it:
            idempotent when its ``idempotentHint`` or ``readOnlyHint`` is true (MCP tool
            annotations: the server's description of its own tool; a wrong hint costs at most
            one repeated call after a crash). True or False overrides the hints for every tool
            of the server. The permission rules never read the hints.
    """

    def __init__(
        self,
        name: str,
        connect: Callable[[Path], Client],
        *,
        prefix: str = "",
        timeout_seconds: float | None = None,
        startup_timeout_seconds: float = STARTUP_TIMEOUT_SECONDS,
        requires_approval: bool = False,
        resource: str | ResourceKey | None = None,
        idempotent: bool | None = None,
    ) -> None:
        self.server_name = name
        self.name = f"MCP server {name!r}"
        self.prefix = prefix
        self.timeout_seconds = timeout_seconds
        self.startup_timeout_seconds = startup_timeout_seconds
        self.requires_approval = requires_approval
        self.resource = resource
        self.idempotent = idempotent
        self._connect = connect
        self.origin = ""  # how it is started, for errors (a stdio server's command and folder)
        self._connection: _Connection | None = None
        self._tools: list[MCPTool] | None = None
        self._lock: asyncio.Lock | None = None
        self.connections = 0  # how many times the server was started or connected to
        self.list_changes = 0  # list_changed notifications received

    @classmethod
    def stdio(
        cls,
        command: str,
        args: Sequence[str] = (),
        *,
        name: str | None = None,
        env: Mapping[str, str] | None = None,
        cwd: str | os.PathLike[str] | None = None,
        prefix: str = "",
        timeout_seconds: float | None = None,
        startup_timeout_seconds: float = STARTUP_TIMEOUT_SECONDS,
        requires_approval: bool = False,
        resource: str | ResourceKey | None = None,
        idempotent: bool | None = None,
        sandbox: Sandbox | None = None,
    ) -> MCPServer:
        """A server run as a subprocess (in its own process group), talking MCP over its
        stdin/stdout; its stderr is this process's.

        Args:
            command: the executable (looked up on PATH).
            args: its arguments.
            name: what errors call it (default: the command's file name).
            env: variables added to the few the ``mcp`` client passes (PATH, HOME, ...).
            cwd: its working folder (default: this process's).
            sandbox: run it under bubblewrap like ``run_command`` (`Sandbox`): writable only
                in ``cwd`` and ``sandbox.writable``, network off unless allowed, environment
                reduced. ``mode="auto"`` without bubblewrap runs it unsandboxed with a warning.
            prefix: see `MCPServer`.
            timeout_seconds: see `MCPServer`.
            startup_timeout_seconds: see `MCPServer`.
            requires_approval: see `MCPServer`.
            resource: see `MCPServer`.
            idempotent: see `MCPServer`.

        Raises:
            SandboxUnavailableError: ``sandbox.mode == "require"`` and bubblewrap cannot run.
        """
        argv = [command, *args]
        extra = dict(env or {})
        if sandbox is not None:
            status = check_sandbox(sandbox)
            if status.bwrap is not None:
                root = Path(cwd if cwd is not None else os.getcwd())
                exe = shutil.which(command) or command
                argv = [status.bwrap, *bwrap_arguments(sandbox, root), "--", exe, *args]
                extra = {**sandbox_environment(sandbox, os.environ), **extra}

        def connect(group_file: Path) -> Client:
            if shutil.which(argv[0]) is None:
                raise FileNotFoundError(f"no executable {argv[0]!r} (not found, or not on PATH)")
            # Through the launcher: it reports the server's process group, ended on close.
            params = StdioServerParameters(
                command=sys.executable,
                args=[str(LAUNCHER), str(group_file), *argv],
                env=extra or None,
                cwd=None if cwd is None else Path(cwd),
                # A stray byte that is not UTF-8 on the server's stdout (a log line, a child
                # process's output) becomes U+FFFD and that line a parse error the session
                # skips; "strict" (the SDK's default) ends the whole connection instead.
                encoding_error_handler="replace",
            )
            transport = stdio_client(params, errlog=errlog())
            return Client(transport, cache=None, message_handler=server._on_message)

        server = cls(
            name or Path(command).name,
            connect,
            prefix=prefix,
            timeout_seconds=timeout_seconds,
            startup_timeout_seconds=startup_timeout_seconds,
            requires_approval=requires_approval,
            resource=resource,
            idempotent=idempotent,
        )
        folder = Path(cwd) if cwd is not None else Path.cwd()
        server.origin = f" ({shlex.join([command, *args])}, started in {folder})"
        return server

    @classmethod
    def http(
        cls,
        url: str,
        *,
        name: str | None = None,
        headers: Mapping[str, str] | None = None,
        prefix: str = "",
        timeout_seconds: float | None = None,
        startup_timeout_seconds: float = STARTUP_TIMEOUT_SECONDS,
        requires_approval: bool = False,
        resource: str | ResourceKey | None = None,
        idempotent: bool | None = None,
    ) -> MCPServer:
        """A server reached over streamable HTTP at ``url`` (e.g. ``http://127.0.0.1:8000/mcp``).

        Args:
            url: the server's streamable HTTP endpoint.
            headers: sent with every HTTP request (e.g. ``{"Authorization": "Bearer ..."}``).
            name: what errors call it (default: the URL).
            prefix: see `MCPServer`.
            timeout_seconds: see `MCPServer`.
            startup_timeout_seconds: see `MCPServer`.
            requires_approval: see `MCPServer`.
            resource: see `MCPServer`.
            idempotent: see `MCPServer`.
        """
        fixed = dict(headers or {})

        def connect(_group_file: Path) -> Client:
            http = httpx2.AsyncClient(
                headers=fixed,
                timeout=httpx2.Timeout(30.0, read=300.0),
                event_hooks={"response": [server._on_http_response]},
            )
            transport = streamable_http_client(url, http_client=http)
            return Client(transport, cache=None, message_handler=server._on_message)

        server = cls(
            name or url,
            connect,
            prefix=prefix,
            timeout_seconds=timeout_seconds,
            startup_timeout_seconds=startup_timeout_seconds,
            requires_approval=requires_approval,
            resource=resource,
            idempotent=idempotent,
        )
        return server

    @classmethod
    def from_spec(cls, spec: str, **options: Any) -> MCPServer:
        """A stdio server from the CLI's ``NAME=COMMAND ARGS`` (shell-style words; the name
        becomes the prefix ``NAME_``).

        Raises:
            UsageError: no ``=`` or no command.
        """
        from .._errors import UsageError

        name, sep, command_line = spec.partition("=")
        words = shlex.split(command_line)
        if not sep or not name.strip() or not words:
            raise UsageError(
                f"--mcp {spec!r}: expected NAME=COMMAND [ARGS...], e.g. "
                "--mcp 'files=npx -y @modelcontextprotocol/server-filesystem .'"
            )
        name = name.strip()
        options.setdefault("prefix", f"{name}_")
        return cls.stdio(words[0], words[1:], name=name, **options)

    def __repr__(self) -> str:
        return f"MCPServer({self.server_name!r}, prefix={self.prefix!r})"

    # -- the tool source ----------------------------------------------------------------------

    async def tools(self) -> list[MCPTool]:
        """The server's tools (connecting first if needed; listed again after a list change).

        Raises:
            MCPServerError: the server did not start, did not answer, or lists no tools.
            ToolDefinitionError: a tool's prefixed name or schema is invalid.
        """
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            connection = await self._connected()
            if self._tools is None or connection.changed:
                connection.changed = False
                try:
                    async with asyncio.timeout(self.startup_timeout_seconds):
                        try:
                            listed = await list_all(connection.client)
                        except MCPError:
                            if not connection.session_lost:
                                raise
                            # The server forgot the session (restarted): list on a new one.
                            connection = await self._connected()
                            connection.changed = False
                            listed = await list_all(connection.client)
                except TimeoutError:
                    raise MCPServerError(
                        f"{self.name} did not list its tools within "
                        f"{self.startup_timeout_seconds:g} s"
                    ) from None
                except MCPError as exc:
                    raise MCPServerError(f"{self.name} refused to list its tools: {exc}") from exc
                if not listed:
                    raise MCPServerError(
                        f"{self.name} lists no tools: nothing to give the agent (check the "
                        "server's command and configuration)"
                    )
                self._tools = [mcp_tool(self, t, self.timeout_seconds) for t in listed]
                for t in self._tools:
                    t.requires_approval = self.requires_approval
                    t.resource = self.resource
                    if self.idempotent is not None:  # the server option overrides the hints
                        t.idempotent = self.idempotent
            return list(self._tools)

    async def aclose(self) -> None:
        """Stop the server (a stdio server's process group is terminated, then killed) or close
        the HTTP session. Idempotent; a later use starts it again."""
        connection, self._connection = self._connection, None
        if connection is not None:
            await connection.close()

    async def __aenter__(self) -> MCPServer:
        await self.tools()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    # -- connection ----------------------------------------------------------------------------

    async def _connected(self) -> _Connection:
        connection = self._connection
        if connection is not None and connection.alive():
            return connection
        if connection is not None:  # it died (or its loop is gone): start again
            self._connection = None
            with contextlib.suppress(Exception):
                await connection.close()
        try:
            connection = _Connection(self)
        except Exception as exc:  # no such executable, a bad parameter
            raise MCPServerError(
                f"{self.name} could not be started or reached{self.origin}: {describe(exc)}"
            ) from exc
        self.connections += 1
        try:
            async with asyncio.timeout(self.startup_timeout_seconds):
                await asyncio.shield(connection.ready)
        except TimeoutError:
            await connection.close()
            raise MCPServerError(
                f"{self.name} did not start within {self.startup_timeout_seconds:g} s "
                "(startup_timeout_seconds)"
            ) from None
        except BaseException as exc:
            await connection.close()
            if isinstance(exc, Exception):
                hint = (
                    " (the server exited before answering: its error output, above, says why)"
                    if self.origin
                    else ""
                )
                raise MCPServerError(
                    f"{self.name} could not be started or reached{self.origin}: "
                    f"{describe(exc)}{hint}"
                ) from exc
            raise
        self._connection = connection
        self._tools = None
        return connection

    async def _connected_once(self) -> _Connection:
        """`_connected` under the server's lock: calls that find the server gone at the same
        time (a parallel batch) share one restart instead of each starting a server, the
        others left running unowned."""
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            return await self._connected()

    async def _on_http_response(self, response: httpx2.Response) -> None:
        """The HTTP client's response hook: a 404 to a request that carried an
        ``Mcp-Session-Id`` says the server no longer knows the session (it restarted, or
        expired it). The MCP streamable HTTP transport rule: the client must then start a new
        session; the connection is marked so (`_Connection.session_lost`), the request that
        got the 404 (never run by the server) is sent again on a new session, and so are the
        ones after it."""
        request = response.request
        if (
            response.status_code == 404
            and request.method != "DELETE"  # closing a session the server already forgot
            and "mcp-session-id" in request.headers
            and self._connection is not None
        ):
            self._connection.session_lost = True

    async def _on_message(self, message: Any) -> None:
        """The client's message handler: a legacy ``tools/list_changed`` notification."""
        if isinstance(message, mt.ToolListChangedNotification):
            self._changed()

    def _changed(self) -> None:
        self.list_changes += 1
        if self._connection is not None:
            self._connection.changed = True

    async def _call(
        self, tool: MCPTool, arguments: dict[str, Any], ctx: ToolContext, *, resend: bool = True
    ) -> ToolResult:
        """One call: sent to the server, answered with its result (see the class docstring).
        A call the server refused because it no longer knows the session (``resend``) is sent
        once more on a new session: the server never ran it."""
        try:
            connection = await self._connected_once()
        except MCPServerError as exc:
            raise ToolError(str(exc)) from exc

        async def on_progress(progress: float, total: float | None, message: str | None) -> None:
            ctx.progress(progress_update(progress, total, message))

        call = asyncio.ensure_future(
            connection.client.call_tool(tool.remote_name, arguments, progress_callback=on_progress)
        )
        aborted = ctx.signal.future()
        try:
            waits: set[asyncio.Future[Any]] = {call, connection.task, aborted}
            await asyncio.wait(waits, return_when="FIRST_COMPLETED")
        except asyncio.CancelledError:  # a timeout, or the run's task: cancel the request
            await cancel_task(call)
            raise
        finally:
            aborted.cancel()
        if call.done():
            try:
                result = call.result()
            except MCPError as exc:
                if connection.session_lost and resend:  # refused unrun: again, on a new session
                    return await self._call(tool, arguments, ctx, resend=False)
                if exc.code == mt.CONNECTION_CLOSED:  # it died: the next call starts it again
                    connection.broken = True
                    raise ToolError(self._lost(tool)) from exc
                raise ToolError(
                    f"{self.name} answered tool {tool.remote_name!r} with an error: {exc}"
                ) from exc
            except Exception as exc:
                if connection.alive():
                    raise ToolError(f"{self.name}: the call failed: {describe(exc)}") from exc
                raise ToolError(self._lost(tool)) from exc
            return to_tool_result(result)
        await cancel_task(call)
        if ctx.signal.aborted:
            raise asyncio.CancelledError("aborted")  # answered like any aborted call
        raise ToolError(self._lost(tool))

    def _lost(self, tool: MCPTool) -> str:
        return (
            f"{self.name} exited or dropped the connection during the call of "
            f"{tool.remote_name!r}; the call may have partly completed. The server is started "
            "again for the next call."
        )


class _Connection:
    """A connected `mcp.Client`, held open by a task of its own (the client's anyio scopes are
    entered and left in that one task, whichever task uses the connection)."""

    def __init__(self, server: MCPServer) -> None:
        self.server = server
        self.loop = asyncio.get_running_loop()
        self.ready: asyncio.Future[None] = self.loop.create_future()
        self.stop = asyncio.Event()
        self.changed = True
        self.broken = False  # a call saw the connection closed, or the server process exited
        self._exit_fd: int | None = None  # a pidfd of the stdio server (`_watch_exit`)
        self.session_lost = False  # an HTTP server answered 404 for its session
        self.folder = Path(tempfile.mkdtemp(prefix="statemachine-agent-mcp-"))
        self.group_file = self.folder / "group"
        try:
            self.client: Client = server._connect(self.group_file)
        except BaseException:
            shutil.rmtree(self.folder, ignore_errors=True)
            raise
        self.task = asyncio.ensure_future(self._hold())

    def alive(self) -> bool:
        if self._exit_fd is not None and select.select([self._exit_fd], [], [], 0)[0]:
            self._exited()  # the stdio server process has exited (its pidfd is readable)
        return (
            not self.broken
            and not self.session_lost
            and not self.task.done()
            and self.loop is asyncio.get_running_loop()
        )

    def _watch_exit(self) -> None:
        """Hold a pidfd of the stdio server process, which `alive` polls: a server that exited
        between calls (killed, crashed while idle) is started again by the next call or
        listing instead of being sent a request it cannot answer (Linux; the launcher's
        process is the server's, it ``exec``s it). Nothing for an HTTP server."""
        try:
            pid = int(self.group_file.read_text(encoding="ascii"))
            self._exit_fd = os.pidfd_open(pid)
        except (OSError, ValueError, AttributeError):  # HTTP, gone already, or not Linux
            return

    def _exited(self) -> None:
        self.broken = True
        self._unwatch_exit()

    def _unwatch_exit(self) -> None:
        fd, self._exit_fd = self._exit_fd, None
        if fd is not None:
            os.close(fd)

    def _end_group(self) -> None:
        """SIGKILL the stdio server's process group (what it left running after it stopped),
        read from the file its launcher wrote; nothing for an HTTP server."""
        self._unwatch_exit()
        try:
            group = int(self.group_file.read_text(encoding="ascii"))
        except (OSError, ValueError):
            group = 0  # not launched (HTTP, or it failed before the launcher ran)
        shutil.rmtree(self.folder, ignore_errors=True)
        if group > 1:
            with contextlib.suppress(OSError):  # gone already: every member has exited
                os.killpg(group, signal.SIGKILL)

    async def _hold(self) -> None:
        try:
            async with self.client as client:
                listener = None
                if client.protocol_version >= _MODERN:  # list_changed only through listen
                    listener = asyncio.ensure_future(self._listen(client))
                self._watch_exit()
                self.ready.set_result(None)
                try:
                    await self.stop.wait()
                finally:
                    if listener is not None:
                        await cancel_task(listener)
            self._end_group()
        except BaseException as exc:
            self._end_group()
            if not self.ready.done():
                self.ready.set_exception(exc)
                return
            if not isinstance(exc, asyncio.CancelledError):
                logger.warning("%s: the connection ended: %s", self.server.name, describe(exc))
                return
            raise

    async def _listen(self, client: Client) -> None:
        try:
            async with client.listen(tools_list_changed=True) as subscription:
                async for _event in subscription:
                    self.server._changed()
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the server has no subscriptions, or the stream dropped
            logger.debug("%s: no list_changed stream: %s", self.server.name, describe(exc))

    async def close(self) -> None:
        self.stop.set()
        if self.loop is not asyncio.get_running_loop():
            return  # its loop is gone: the process went with it
        try:
            async with asyncio.timeout(STOP_TIMEOUT_SECONDS):
                await asyncio.shield(self.task)
        except TimeoutError:
            await cancel_task(self.task)
        except asyncio.CancelledError:
            await cancel_task(self.task)  # killed with its process group (the client's exit)
            raise
        except Exception:
            pass
