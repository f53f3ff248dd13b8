"""MCP servers as tool sources, against real servers (tests/mcp/servers/demo_server.py) run as
subprocesses (stdio) and on 127.0.0.1 (streamable HTTP)."""

from __future__ import annotations

import asyncio
import json
import os
import select
import sys
from typing import Any

import pytest
from mcp_servers import DONE, SERVER, calls, results, stdio_server, text

from statemachine_agent import (
    AbortSignal,
    Agent,
    ImageBlock,
    State,
    ToolCallInfo,
    ToolContext,
    ToolDefinitionError,
    ToolExecutionUpdate,
    ToolResultMessage,
    tool,
)
from statemachine_agent.mcp import MCPServer, MCPServerError
from statemachine_agent.models import ScriptedModel


async def run_calls(server: MCPServer, *items: tuple[str, dict[str, Any]], **agent_options: Any):
    model = ScriptedModel([calls(*items), DONE])
    async with Agent(model, tools=[server], **agent_options) as agent:
        result = await agent.run("go")
    return result, model


async def test_tools_are_listed_with_the_servers_json_schema() -> None:
    model = ScriptedModel([DONE])
    async with Agent(model, tools=[stdio_server()]) as agent:
        await agent.run("hi")
        assert agent.tool_table is not None
        assert {"add", "echo"} <= set(agent.tool_table.tools)
    sent = {t.name: t for t in model.requests[0].tools}
    assert sent["add"].input_schema["required"] == ["a", "b"]
    assert sent["add"].input_schema["properties"]["a"]["type"] == "integer"
    assert sent["echo"].input_schema["properties"]["times"]["default"] == 1
    assert sent["add"].description == "Add two integers."


async def test_arguments_are_validated_against_the_schema_with_every_error() -> None:
    result, _ = await run_calls(stdio_server(), ("add", {"a": "x"}))
    (answer,) = results(result)
    assert answer.is_error
    body = text(answer)
    assert "2 error(s)" in body
    assert "'b' is a required property" in body
    assert "a: 'x' is not of type 'integer'" in body


@pytest.mark.parametrize("transport", ["stdio", "http"])
async def test_text_structured_and_image_results(transport: str, request: Any) -> None:
    server = (
        stdio_server()
        if transport == "stdio"
        else MCPServer.http(request.getfixturevalue("http_url"), name="demo")
    )
    result, _ = await run_calls(
        server, ("add", {"a": 2, "b": 3}), ("point", {"x": 1, "y": 2}), ("image", {}), ("link", {})
    )
    add, point, image, link = results(result)
    assert (text(add), add.details, add.is_error) == ("5", {"result": 5}, False)
    assert point.details == {"x": 1, "y": 2}
    assert json.loads(text(point)) == {"x": 1, "y": 2}
    assert text(image).startswith("a red dot")
    assert any(isinstance(b, ImageBlock) and b.media_type == "image/png" for b in image.content)
    assert text(link) == "[resource link] report <file:///tmp/report.txt>, text/plain"


async def test_is_error_becomes_an_error_result_with_the_servers_message() -> None:
    result, _ = await run_calls(stdio_server(), ("fail", {"message": "disk full"}))
    (answer,) = results(result)
    assert answer.is_error
    assert "disk full" in text(answer)
    assert result.state is State.DONE


async def test_progress_notifications_become_the_calls_progress_events() -> None:
    model = ScriptedModel([calls(("steps", {"n": 2})), DONE])
    updates: list[Any] = []
    async with Agent(model, tools=[stdio_server()]) as agent:
        agent.subscribe(
            lambda e: updates.append(e.update) if isinstance(e, ToolExecutionUpdate) else None
        )
        result = await agent.run("go")
    assert text(results(result)[0]) == "2 steps"
    assert updates == [
        {"progress": 1.0, "total": 2.0, "message": "step 1"},
        {"progress": 2.0, "total": 2.0, "message": "step 2"},
    ]


async def test_a_server_that_crashes_mid_call_gives_an_error_and_the_next_call_restarts_it() -> (
    None
):
    server = stdio_server()
    model = ScriptedModel([calls(("crash", {})), calls(("add", {"a": 1, "b": 1})), DONE])
    async with Agent(model, tools=[server]) as agent:
        result = await agent.run("go")
    assert result.state is State.DONE, result.error
    crash, add = results(result)
    assert crash.is_error and "exited or dropped the connection" in text(crash)
    assert "started again for the next call" in text(crash)
    assert (add.is_error, text(add)) == (False, "2")
    assert server.connections == 2


async def test_a_hanging_call_times_out_and_the_server_is_told_to_cancel() -> None:
    server = stdio_server(timeout_seconds=0.5)
    model = ScriptedModel([calls(("hang", {})), calls(("was_cancelled", {})), DONE])
    async with Agent(model, tools=[server]) as agent:
        result = await agent.run("go")
    hang, cancelled = results(result)
    assert hang.is_error and "ran longer than 0.5 s" in text(hang)
    assert text(cancelled) == "cancelled"  # the server's handler saw notifications/cancelled


async def test_abort_cancels_the_in_flight_mcp_request_and_answers_it_as_aborted() -> None:
    server = stdio_server()
    model = ScriptedModel([calls(("hang", {}))])
    async with Agent(model, tools=[server], abort_grace_seconds=600) as agent:
        started = asyncio.Event()
        agent.subscribe(lambda e: started.set() if isinstance(e, ToolExecutionUpdate) else None)
        task = asyncio.ensure_future(agent.run("go"))
        await started.wait()  # the server reported progress: the call is in flight
        agent.abort()
        result = await task
        assert result.state is State.ABORTED
        (hang,) = results(result)
        assert hang.is_error and "nterrupted" in text(hang)
        # The server's handler was cancelled (it answers once its cancellation is recorded).
        (was,) = [t for t in await server.tools() if t.name == "was_cancelled"]
        done = await was.call({}, ToolContext("c", "was_cancelled", AbortSignal(), print))
        assert done.content == "cancelled"


async def test_list_changed_is_honoured_before_the_next_request() -> None:
    server = stdio_server()
    notified = asyncio.Event()
    record = server._changed

    def changed() -> None:  # the server's notification arrived (and was recorded)
        record()
        notified.set()

    server._changed = changed  # type: ignore[method-assign]

    async def after(info: ToolCallInfo, result: ToolResultMessage) -> None:
        if info.tool.name == "grow":  # the run goes on once the notification is in
            await notified.wait()

    model = ScriptedModel([calls(("grow", {})), DONE])
    async with Agent(model, tools=[server], after_tool_call=after) as agent:
        result = await agent.run("go")
    assert result.state is State.DONE
    assert "late" not in {t.name for t in model.requests[0].tools}
    assert server.list_changes >= 1
    assert "late" in {t.name for t in model.requests[1].tools}


async def test_a_name_clash_without_prefix_names_both_and_a_prefix_avoids_it() -> None:
    @tool
    def add(a: int, b: int) -> int:
        """Local add."""
        return a + b

    with pytest.raises(ToolDefinitionError) as caught:
        async with Agent(ScriptedModel([DONE]), tools=[add, stdio_server()]):
            pass
    message = str(caught.value)
    assert "MCP server 'demo'" in message and "a tool given to the agent" in message
    assert "'add'" in message and "prefix" in message
    async with Agent(ScriptedModel([DONE]), tools=[add, stdio_server(prefix="demo_")]) as agent:
        assert agent.tool_table is not None
        assert {"add", "demo_add"} <= set(agent.tool_table.tools)


async def test_two_servers_with_the_same_tools_clash_naming_both() -> None:
    with pytest.raises(ToolDefinitionError, match=r"MCP server 'other'.*MCP server 'demo'"):
        async with Agent(
            ScriptedModel([DONE]),
            tools=[stdio_server(), MCPServer.stdio(*stdio_server_argv(), name="other")],
        ):
            pass


def stdio_server_argv() -> tuple[str, list[str]]:
    return sys.executable, [str(SERVER)]


async def test_a_parallel_batch_of_mcp_and_local_tools_answers_in_declaration_order() -> None:
    gate = asyncio.Event()

    @tool
    async def local(x: int) -> int:
        """Waits until the MCP calls ran, so they finish first."""
        await gate.wait()
        return x * 10

    model = ScriptedModel(
        [calls(("local", {"x": 1}), ("add", {"a": 1, "b": 2}), ("echo", {"text": "hi"})), DONE]
    )
    async with Agent(model, tools=[local, stdio_server()]) as agent:
        done = 0

        def on_event(event: Any) -> None:
            nonlocal done
            if getattr(event, "type", "") == "tool_execution_end":
                done += 1
                if done == 2:
                    gate.set()

        agent.subscribe(on_event)
        result = await agent.run("go")
    answers = results(result)
    assert [a.tool_name for a in answers] == ["local", "add", "echo"]
    assert [text(a) for a in answers] == ["10", "3", "hi"]


async def test_a_server_that_lists_no_tools_is_a_clear_error_naming_it() -> None:
    with pytest.raises(MCPServerError, match="MCP server 'demo' lists no tools"):
        async with Agent(ScriptedModel([DONE]), tools=[stdio_server("--no-tools")]):
            pass


async def test_a_server_slow_to_start_is_a_clear_error_naming_it() -> None:
    server = stdio_server("--hang-on-start", startup_timeout_seconds=1)
    with pytest.raises(MCPServerError, match="MCP server 'demo' did not start within 1 s"):
        async with Agent(ScriptedModel([DONE]), tools=[server]):
            pass


async def test_a_run_whose_server_cannot_start_ends_in_error_naming_it() -> None:
    server = MCPServer.stdio("/nonexistent/mcp-server", name="ghost")
    agent = Agent(ScriptedModel([DONE]), tools=[server])
    result = await agent.run("go")
    await agent.aclose()
    assert result.state is State.FAILED
    assert "MCP server 'ghost' could not be started" in (result.error or "")


def _gone(pid: int) -> bool:
    """Wait (on the pidfd, an event) for ``pid`` to exit; True once it has."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return True
    try:
        ready, _, _ = select.select([fd], [], [], 30)
        return bool(ready)
    finally:
        os.close(fd)


async def test_closing_the_agent_stops_the_server_and_its_process_group(tmp_path: Any) -> None:
    pids = tmp_path / "pids"
    result, _ = await run_calls(stdio_server(), ("spawn", {"pid_file": str(pids)}))
    assert text(results(result)[0]) == "spawned"
    server_pid, child_pid = map(int, pids.read_text().split())
    assert _gone(server_pid) and _gone(child_pid)


async def test_cancelling_the_agents_lifetime_kills_the_server_group(tmp_path: Any) -> None:
    pids = tmp_path / "pids"
    model = ScriptedModel([calls(("spawn", {"pid_file": str(pids)})), calls(("hang", {}))])
    started = asyncio.Event()

    async def lifetime() -> None:
        async with Agent(model, tools=[stdio_server()]) as agent:
            agent.subscribe(lambda e: started.set() if isinstance(e, ToolExecutionUpdate) else None)
            await agent.run("go")

    task = asyncio.ensure_future(lifetime())
    await started.wait()  # hang is in flight
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    server_pid, child_pid = map(int, pids.read_text().split())
    assert _gone(server_pid) and _gone(child_pid)


def _running(pid: int) -> bool:
    """``pid`` has not exited (its pidfd is not readable yet)."""
    fd = os.pidfd_open(pid)
    try:
        ready, _, _ = select.select([fd], [], [], 0)
        return not ready
    finally:
        os.close(fd)


async def test_closing_one_agent_leaves_another_server_of_the_same_command_running(
    tmp_path: Any,
) -> None:
    first_pids, second_pids = tmp_path / "first", tmp_path / "second"
    first_server, second_server = stdio_server(), stdio_server()  # one command, started at once
    first = Agent(
        ScriptedModel([calls(("spawn", {"pid_file": str(first_pids)})), DONE]),
        tools=[first_server],
    )
    second = Agent(
        ScriptedModel([calls(("spawn", {"pid_file": str(second_pids)})), DONE]),
        tools=[second_server],
    )
    await asyncio.gather(first.__aenter__(), second.__aenter__())
    try:
        assert (await first.run("go")).state is State.DONE
        assert (await second.run("go")).state is State.DONE
        await first.aclose()
        first_pid, first_child = map(int, first_pids.read_text().split())
        assert _gone(first_pid) and _gone(first_child)
        second_pid, second_child = map(int, second_pids.read_text().split())
        assert _running(second_pid) and _running(second_child)
        assert second_server.connections == 1  # still the same server process
    finally:
        await second.aclose()
    assert _gone(second_pid) and _gone(second_child)


@pytest.mark.parametrize(
    "option", [None, True, False], ids=["hints", "option-true", "option-false"]
)
async def test_idempotent_and_read_only_hints_make_a_tool_idempotent_unless_the_option_overrides(
    option: bool | None,
) -> None:
    async with stdio_server(idempotent=option) as server:
        tools = {t.name: t for t in await server.tools()}
    flags = {name: tools[name].idempotent for name in ("lookup", "peek", "mark")}
    if option is None:  # the server's annotations: idempotentHint, readOnlyHint, none
        assert flags == {"lookup": True, "peek": True, "mark": False}
    else:
        assert flags == dict.fromkeys(flags, option)


async def test_a_read_only_hint_does_not_free_an_mcp_tool_from_the_cli_permission_rules() -> None:
    from statemachine_agent.workspace import Permissions

    async with stdio_server(prefix="demo_") as server:
        names = {t.name for t in await server.tools()}
    rules = Permissions(guard_other_tools=True, allow=["demo_add"])
    assert {"demo_peek", "demo_lookup", "demo_write"} <= names
    assert rules.guards("demo_peek") and not rules.allows("demo_peek", {"key": "k"})
    assert rules.allows("demo_add", {"a": 1, "b": 2})
    assert not rules.guards("read_file") and not rules.guards("list_files")


async def test_an_http_servers_headers_are_sent_with_its_requests(http_url: str) -> None:
    server = MCPServer.http(http_url, name="demo", headers={"X-Team": "blue"})
    result, _ = await run_calls(server, ("header", {"name": "X-Team"}))
    (answer,) = results(result)
    assert (answer.is_error, text(answer)) == (False, "blue")
