"""Real MCP servers for the tests: ``servers/demo_server.py`` as a stdio subprocess, or on
127.0.0.1 with a free port over streamable HTTP."""

from __future__ import annotations

import socket
import sys
from pathlib import Path
from typing import Any

SERVER = Path(__file__).parent / "servers" / "demo_server.py"


def stdio_server(*options: str, **kwargs: Any) -> Any:
    """The demo server as a stdio `MCPServer` named ``demo``."""
    from statemachine_agent.mcp import MCPServer

    return MCPServer.stdio(sys.executable, [str(SERVER), *options], name="demo", **kwargs)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
