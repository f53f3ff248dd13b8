"""Bug reports about MCP tools filed against peer agent frameworks and the mcp SDK itself,
replayed against ours with a real MCP server process (tests/mcp/servers/peer_server.py, built
with the mcp package's own server API): each test's docstring names the report and what went
wrong there."""

from __future__ import annotations

import asyncio
import itertools
import os
import select
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from mcp_servers import DONE, calls, free_port, results, text

from statemachine_agent import AbortSignal, Agent, State, ToolContext
from statemachine_agent.mcp import MCPServer
from statemachine_agent.models import ScriptedModel

PEER = Path(__file__).parent / "servers" / "peer_server.py"


def peer(*options: str, **kwargs: Any) -> MCPServer:
    """The peer server as a stdio `MCPServer` named ``peer``."""
    return MCPServer.stdio(sys.executable, [str(PEER), *options], name="peer", **kwargs)


_ids = itertools.count()


def context(name: str) -> ToolContext:
    return ToolContext(f"call-{next(_ids)}", name, AbortSignal(), lambda _update: None)


def gone(pid: int) -> bool:
    """Wait (on the pidfd, an event) for ``pid`` to exit; True once it has (False: still
    running after 30 s, i.e. left behind)."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return True
    try:
        ready, _, _ = select.select([fd], [], [], 30)
        return bool(ready)
    finally:
        os.close(fd)


class HTTPPeer:
    """The peer server on 127.0.0.1 over streamable HTTP, which a test can kill and start
    again on the same port (a server restart)."""

    def __init__(self, *options: str) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/mcp"
        self.options = options
        self.process: subprocess.Popen[str] | None = None

    def start(self) -> None:
        process = subprocess.Popen(
            [sys.executable, str(PEER), "--http", str(self.port), *self.options],
            stderr=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            text=True,
        )
        assert process.stderr is not None
        seen = []
        for line in process.stderr:  # wait for uvicorn's own "running" line
            seen.append(line)
            if "Uvicorn running on" in line:
                break
        else:
            process.wait()
            pytest.fail("the HTTP MCP server did not start: " + "".join(seen))
        self.process = process

    def kill(self) -> None:
        if self.process is not None:
            self.process.kill()
            self.process.wait()
            self.process = None


@pytest.fixture
def http_peer(request: pytest.FixtureRequest) -> Iterator[HTTPPeer]:
    server = HTTPPeer(*request.param)
    server.start()
    try:
        yield server
    finally:
        server.kill()


async def test_stray_bytes_that_are_not_utf8_on_a_servers_stdout_do_not_end_the_connection() -> (
    None
):
    """modelcontextprotocol/python-sdk#2454 (fix proposed in python-sdk PR #2456): the SDK's
    stdio client decodes the server's stdout with ``errors="strict"``, so one stray line that
    is not UTF-8 (a log line, a child process's output) raised UnicodeDecodeError in the
    transport's reader and killed the whole connection. Ours had it too: such a server never
    "started" (MCPServerError after startup_timeout_seconds). Now the line is a parse error
    the session skips, and the tools work."""
    model = ScriptedModel([calls(("add", {"a": 1, "b": 2})), DONE])
    server = peer("--noisy-start")
    async with Agent(model, tools=[server]) as agent:
        result = await agent.run("go")
    assert result.state is State.DONE, result.error
    (add,) = results(result)
    assert (add.is_error, text(add)) == (False, "3")
    assert server.connections == 1


async def test_parallel_calls_to_a_dead_stdio_server_share_one_restart_and_leave_no_process(
    tmp_path: Path,
) -> None:
    """bytedance/deer-flow#5256 (LangGraph, langchain-mcp-adapters): two tool calls to the same
    stdio MCP server in one step raced on creating its session (one cancelled the other's);
    NousResearch/hermes-agent#57228: reconnecting left the old server processes running. Ours
    had both: a server killed while idle was still taken as alive, so the next batch's calls
    were all sent to it and failed ("may have partly completed", though none was sent), and
    the calls after that each started a server of their own, all but one left running and
    owned by nobody. Now the dead server is noticed before a call (its pidfd), and parallel
    calls share one restart."""
    starts = tmp_path / "starts"
    server = peer("--pid-file", str(starts))
    tools = {t.name: t for t in await server.tools()}
    first = int((await tools["pid"].call({}, context("pid"))).content)
    os.kill(first, signal.SIGKILL)
    assert gone(first)

    answers = await asyncio.gather(*(tools["pid"].call({}, context("pid")) for _ in range(3)))

    assert [a.is_error for a in answers] == [False, False, False]
    assert len({a.content for a in answers}) == 1  # one server answered all three
    started = [int(line) for line in starts.read_text().split()]
    assert len(started) == 2 and server.connections == 2
    await server.aclose()
    assert all(gone(pid) for pid in started)


async def test_a_stdio_server_that_died_between_runs_is_started_again_for_the_next_batch() -> None:
    """The same fault in the loop (hermes-agent#57228, deer-flow#5256): a server that exited
    while the agent was idle answers the next batch, started once, not with errors."""
    server = peer()
    model = ScriptedModel(
        [calls(("pid", {})), DONE, calls(("pid", {}), ("add", {"a": 2, "b": 2})), DONE]
    )
    async with Agent(model, tools=[server]) as agent:
        first = await agent.run("go")
        old = int(text(results(first)[0]))
        os.kill(old, signal.SIGKILL)
        assert gone(old)
        second = await agent.run("again")
    assert second.state is State.DONE, second.error
    pid, add = results(second)
    assert (pid.is_error, add.is_error, text(add)) == (False, False, "4")
    assert int(text(pid)) != old
    assert server.connections == 2


@pytest.mark.parametrize("http_peer", [(), ("--legacy",)], ids=["2026", "legacy"], indirect=True)
async def test_an_http_server_restarted_between_calls_answers_the_next_call(
    http_peer: HTTPPeer,
) -> None:
    """openai/openai-agents-python#693: after the HTTP MCP server restarted, every call was
    refused for an unknown session id (HTTP 400/404) and the agent stopped working, with no
    way to recover. Ours had it with servers on the session protocol (before 2026-07-28):
    each later call was answered "Session not found", for the rest of the agent's life. The
    MCP streamable HTTP rule is that a 404 for the session means: start a new one. Now the
    refused call (never run by the server) is sent again on a new session."""
    server = MCPServer.http(http_peer.url, name="web")
    model = ScriptedModel([calls(("pid", {})), DONE, calls(("pid", {})), calls(("pid", {})), DONE])
    async with Agent(model, tools=[server]) as agent:
        first = await agent.run("go")
        before = int(text(results(first)[0]))
        http_peer.kill()  # the server restarts: same URL, a new process that knows no session
        http_peer.start()
        second = await agent.run("again")
    assert second.state is State.DONE, second.error
    answers = results(second)
    assert [a.is_error for a in answers] == [False, False], [text(a) for a in answers]
    after = {int(text(a)) for a in answers}
    assert len(after) == 1 and before not in after


async def test_a_protocol_error_from_a_tool_call_is_an_error_result_and_the_run_goes_on() -> None:
    """pydantic/pydantic-ai#1989 (and PR #6787): a server answering ``tools/call`` with a
    JSON-RPC error (an ``McpError``, e.g. INVALID_PARAMS) instead of an ``isError`` result
    escaped the tool and crashed the whole run, so the model could not correct itself. Ours:
    the call is answered with an error result carrying the server's message, the calls beside
    it in the batch are answered normally, and the model's retry succeeds."""
    model = ScriptedModel(
        [
            calls(("lookup", {"title": "Nothing"}), ("add", {"a": 1, "b": 2})),
            calls(("lookup", {"title": "Dune"})),
            DONE,
        ]
    )
    async with Agent(model, tools=[peer()]) as agent:
        result = await agent.run("go")
    assert result.state is State.DONE, result.error
    refused, add, found = results(result)
    assert refused.is_error
    assert "No book titled 'Nothing' in the catalog." in text(refused)
    assert "MCP server 'peer'" in text(refused)
    assert (add.is_error, text(add)) == (False, "3")
    assert (found.is_error, text(found)) == (False, "Frank Herbert")


async def test_mcp_calls_of_one_batch_run_at_the_same_time_on_one_server() -> None:
    """anthropics/claude-code#14353: several MCP tool calls in one model message ran one after
    another instead of in parallel (three long calls took the sum of their times). Ours: the
    server's ``meet`` returns only once 3 calls are in flight at once, so the batch is
    answered only if the calls overlap on the one connection (a serialized client would leave
    the first waiting: ``timeout_seconds`` turns that into error results, not a hang)."""
    server = peer(timeout_seconds=60)
    model = ScriptedModel([calls(*[("meet", {"n": 3})] * 3), DONE])
    async with Agent(model, tools=[server]) as agent:
        result = await agent.run("go")
    assert result.state is State.DONE, result.error
    assert [(a.is_error, text(a)) for a in results(result)] == [(False, "met 3")] * 3
    assert server.connections == 1
