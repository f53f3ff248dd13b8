"""Fixtures of the MCP tests (the servers: mcp_servers.py)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator

import pytest

pytest.importorskip("mcp", reason="the mcp extra is not installed (pip install '.[mcp]')")

from mcp_servers import SERVER, free_port


@pytest.fixture
def http_url() -> Iterator[str]:
    """The demo server on streamable HTTP; yields its URL once uvicorn says it serves."""
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, str(SERVER), "--http", str(port)],
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
    )
    assert process.stderr is not None
    seen = []
    for line in process.stderr:  # wait for the server's own "running" line
        seen.append(line)
        if "Uvicorn running on" in line:
            break
    else:
        process.wait()
        pytest.fail("the HTTP MCP server did not start: " + "".join(seen))
    try:
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        process.terminate()
        process.wait(timeout=30)
