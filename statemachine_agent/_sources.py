"""Tool sources: objects that give the agent tools at run time (an MCP server's, for one).

The seam between the loop and anything whose tools are not known when the `Agent` is built:

- `Agent(tools=[...])` takes a `ToolSource` beside `Tool` objects and functions;
- the agent holds a `ToolTable` (its own tools and the sources), which the run's settings
  carry; before each model request (`Run.request`) and on ``async with agent`` the table asks
  each source for its current tools (`merge_tools`: the agent's own tools first, then each
  source's, in the order given; a name given twice is a `ToolDefinitionError` naming both
  owners);
- `Agent.aclose` closes every source (`ToolTable.aclose`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

from pydantic import BaseModel

from ._errors import ToolDefinitionError
from ._output import output_tool
from ._tools import Tool, ToolFunction, tool_from_function
from .models._base import ToolDefinition


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


class ToolTable:
    """The tools a run offers and executes: the agent's own, then its sources' current ones.

    The agent holds one table for its lifetime (so a run continued after decisions executes the
    calls against the tools the model saw); a run refreshes it before each model request
    (`refresh`), and the run's batches and requests read `tools` and `definitions`.

    Args:
        own: the agent's own tools by name (read again at each refresh).
        sources: the tool sources, in the order given to the agent.
        check: the provider's check of tool definitions (e.g. `AnthropicModel.check_tools`),
            run on each new table; None: no check.

    Attributes:
        tools: the current tools by name (the own tools until the first refresh).
        definitions: the tools as the model sees them, in declaration order.
    """

    def __init__(
        self,
        own: Mapping[str, Tool],
        sources: Sequence[ToolSource],
        check: Callable[[list[ToolDefinition]], object] | None = None,
    ) -> None:
        self.own = own
        self.sources = tuple(sources)
        self.check = check
        self.tools: dict[str, Tool] = dict(own)
        self.definitions = definitions_of(self.tools)

    async def refresh(self) -> None:
        """List the sources' current tools into `tools` and `definitions` (unchanged when the
        listing gives the same tools).

        Raises:
            ToolDefinitionError: two tools share a name (naming both owners); the provider
                refuses a name.
            AgentError: a source cannot give its tools (naming it).
        """
        tools = await merge_tools(self.own, self.sources)
        if list(tools.values()) == list(self.tools.values()):
            return
        definitions = definitions_of(tools)
        if self.check is not None:
            self.check(definitions)
        self.tools, self.definitions = tools, definitions

    async def aclose(self) -> None:
        """Close every source (`ToolSource.aclose`), each even when an earlier one failed.

        Raises:
            BaseException: the first error a source's ``aclose`` raised, after all were closed.
        """
        first: BaseException | None = None
        for source in self.sources:
            try:
                await source.aclose()
            except BaseException as exc:
                first = first or exc
        if first is not None:
            raise first


def definitions_of(tools: Mapping[str, Tool]) -> list[ToolDefinition]:
    """The tools as the model sees them (name, description, input schema), in order."""
    return [ToolDefinition(t.name, t.description, t.input_schema) for t in tools.values()]


def agent_tools(
    tools: Iterable[Tool | ToolFunction | ToolSource], output_type: type[Any] | None
) -> tuple[dict[str, Tool], list[ToolSource], type[BaseModel] | None]:
    """An agent's ``tools`` argument sorted out: its own tools by name (typed functions wrapped
    with `tool`; with an ``output_type`` model, the ``final_result`` tool last), its tool
    sources, and the output model (None for a text answer).

    Raises:
        ToolDefinitionError: an entry is neither a tool, a function nor a source, or two tools
            share a name (the final result tool's included).
    """
    own: dict[str, Tool] = {}
    sources: list[ToolSource] = []
    for item in tools:
        if isinstance(item, ToolSource) and not isinstance(item, Tool):
            sources.append(item)
            continue
        if not isinstance(item, Tool) and not callable(item):
            raise ToolDefinitionError(
                f"tools must be Tool objects or typed functions, got {item!r}"
            )
        t = item if isinstance(item, Tool) else tool_from_function(item)
        if t.name in own:
            raise ToolDefinitionError(f"two tools are named {t.name!r}")
        own[t.name] = t
    output_model: type[BaseModel] | None = None
    if output_type is not None and output_type is not str:
        final = output_tool(output_type)
        if final.name in own:
            raise ToolDefinitionError(
                f"a tool is named {final.name!r}: that name is the final result tool's "
                "when output_type is given"
            )
        own[final.name] = final
        output_model = final.args_model
    return own, sources, output_model
