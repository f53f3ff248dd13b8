"""Real MCP servers for the tests: ``servers/demo_server.py`` as a stdio subprocess, or on
127.0.0.1 with a free port over streamable HTTP; and the model steps and result readers the MCP tests
share."""

from __future__ import annotations

import itertools
import socket
import sys
from pathlib import Path
from typing import Any

from statemachine_agent import ToolResultMessage

SERVER = Path(__file__).parent / "servers" / "demo_server.py"


def stdio_server(*options: str, **kwargs: Any) -> Any:
    """The demo server as a stdio `MCPServer` named ``demo``."""
    from statemachine_agent.mcp import MCPServer

    return MCPServer.stdio(sys.executable, [str(SERVER), *options], name="demo", **kwargs)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


_ids = itertools.count()


def calls(*items: tuple[str, dict[str, Any]]) -> dict[str, Any]:
    """A model step calling each (name, input) in order (call ids unique in the process)."""
    content = [
        {"type": "tool_use", "id": f"toolu_{next(_ids)}", "name": name, "input": args}
        for name, args in items
    ]
    return {"content": content, "stop_reason": "tool_use"}


DONE = {"content": [{"type": "text", "text": "done"}], "stop_reason": "end_turn"}


def results(result: Any) -> list[ToolResultMessage]:
    """The tool results a run added to the history, in order."""
    return [m for m in result.new_messages if isinstance(m, ToolResultMessage)]


def text(message: ToolResultMessage) -> str:
    """A result's text blocks joined by newlines."""
    return "\n".join(getattr(b, "text", "") for b in message.content)
