"""Tool sources: objects that give the agent tools at run time (an MCP server's, for one).

The seam between the loop and anything whose tools are not known when the `Agent` is built:

- `Agent(tools=[...])` takes a `ToolSource` beside `Tool` objects and functions;
- before each model request (`Run.request`) and on ``async with agent``, the agent asks each
  source for its current tools (`merge_tools`: the agent's own tools first, then each source's,
  in the order given; a name given twice is a `ToolDefinitionError` naming both owners);
- `Agent.aclose` closes every source (`ToolSource.aclose`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol, runtime_checkable

from ._errors import ToolDefinitionError
from ._tools import Tool


@runtime_checkable
class ToolSource(Protocol):
    """Anything that gives the agent tools at run time (e.g. `statemachine_agent.mcp.MCPServer`).

    Attributes:
        name: names the source in errors (e.g. ``"MCP server 'files'"``).
    """

    name: str

    async def tools(self) -> Sequence[Tool]:
        """The source's current tools (connecting on first use).

        Raises:
            AgentError: the source cannot give its tools; the message names the source.
        """
        ...

    async def aclose(self) -> None:
        """Release what the source holds (a server process, a connection). Idempotent."""
        ...


async def merge_tools(own: Mapping[str, Tool], sources: Sequence[ToolSource]) -> dict[str, Tool]:
    """The agent's tools by name: its own, then each source's current tools, in order.

    Raises:
        ToolDefinitionError: two tools share a name (the message names both owners).
        AgentError: a source cannot give its tools.
    """
    merged = dict(own)
    owners = dict.fromkeys(own, "a tool given to the agent")
    for source in sources:
        for item in await source.tools():
            if item.name in merged:
                raise ToolDefinitionError(
                    f"tool name {item.name!r} clash: {source.name} gives a tool named "
                    f"{item.name!r}, and so does {owners[item.name]}; give the server a "
                    "prefix (prefix='...') to tell them apart"
                )
            merged[item.name] = item
            owners[item.name] = source.name
    return merged
