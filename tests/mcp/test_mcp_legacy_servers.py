"""MCP servers of the handshake era (before 2026-07-28) as tool sources, against a real server
process (tests/mcp/servers/legacy_server.py): a paged tool listing, the legacy
``notifications/tools/list_changed``, the order the model sees the tools in, and the content
kinds besides text, images and structured content."""

from __future__ import annotations

import asyncio
import itertools
import sys
from pathlib import Path
from typing import Any

import mcp.types as mt
from mcp_servers import DONE, results, text

from statemachine_agent import Agent, State, ToolCallInfo, ToolResultMessage, tool
from statemachine_agent.mcp import MCPServer
from statemachine_agent.models import ScriptedModel

LEGACY = Path(__file__).parent / "servers" / "legacy_server.py"
LISTED = ["zeta", "alpha", "mid", "beta", "grow", "contents"]  # the server's order, two a page

_ids = itertools.count()


def legacy_server() -> MCPServer:
    return MCPServer.stdio(sys.executable, [str(LEGACY)], name="legacy")


def calls(*names: str) -> dict[str, Any]:
    content = [
        {"type": "tool_use", "id": f"toolu_legacy{next(_ids)}", "name": name, "input": {}}
        for name in names
    ]
    return {"content": content, "stop_reason": "tool_use"}


async def test_a_paged_listing_gives_every_tool_in_declaration_order_after_the_agents_own() -> None:
    @tool
    def omega() -> str:
        """The agent's own tool (named to sort last)."""
        return "omega"

    model = ScriptedModel([DONE])
    async with Agent(model, tools=[omega, legacy_server()]) as agent:
        assert (await agent.run("hi")).state is State.DONE
    assert [t.name for t in model.requests[0].tools] == ["omega", *LISTED]


async def test_a_legacy_list_changed_notification_is_honoured_before_the_next_request() -> None:
    server = legacy_server()
    arrived = asyncio.Event()
    handle = server._on_message

    async def on_message(message: Any) -> None:
        await handle(message)
        if isinstance(message, mt.ToolListChangedNotification):  # it reached the client
            arrived.set()

    server._on_message = on_message  # type: ignore[method-assign]

    async def after(info: ToolCallInfo, result: ToolResultMessage) -> None:
        if info.tool.name == "grow":  # the run goes on once the notification is in
            await arrived.wait()

    model = ScriptedModel([calls("grow"), DONE])
    async with Agent(model, tools=[server], after_tool_call=after) as agent:
        result = await agent.run("go")
        assert agent.tool_table is not None
        assert agent.tool_table.sources[0] is server
    assert result.state is State.DONE
    assert text(results(result)[0]) == "grown"
    assert "late" not in {t.name for t in model.requests[0].tools}
    assert server.list_changes == 1
    assert [t.name for t in model.requests[1].tools] == [*LISTED, "late"]


async def test_resource_links_embedded_resources_and_audio_become_text_lines() -> None:
    model = ScriptedModel([calls("contents"), DONE])
    async with Agent(model, tools=[legacy_server()]) as agent:
        result = await agent.run("go")
    (contents,) = results(result)
    assert contents.is_error is False
    assert text(contents).splitlines() == [
        "[resource link] report <file:///tmp/report.txt>, text/plain: the weekly report",
        "[resource <file:///tmp/notes.md>]",
        "# Notes",
        "[resource <file:///tmp/data.bin>: application/octet-stream, 4 bytes, not shown]",
        "[audio: audio/wav, not shown]",
    ]
