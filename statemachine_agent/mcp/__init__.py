"""Tools from Model Context Protocol servers, on the official ``mcp`` SDK (the ``mcp`` extra:
``pip install 'statemachine-agent[mcp]'``).

``Agent(tools=[MCPServer.stdio("python", ["server.py"]), MCPServer.http(url)])``: see
`MCPServer` for what a call becomes and how servers start, die and stop.
"""

from __future__ import annotations

try:
    import mcp as _mcp  # noqa: F401
except ImportError as exc:  # pragma: no cover - the extra is missing
    raise ImportError(
        "statemachine_agent.mcp needs the mcp package: pip install 'statemachine-agent[mcp]'"
    ) from exc

from ._convert import MCPTool
from ._server import STARTUP_TIMEOUT_SECONDS, MCPServer, MCPServerError

__all__ = ["STARTUP_TIMEOUT_SECONDS", "MCPServer", "MCPServerError", "MCPTool"]
