"""``statemachine-agent run --model claude-...`` drives `AnthropicModel` when ANTHROPIC_API_KEY is
set: end to end through click's CliRunner and the real SDK, against the local replay server (the SDK
reads ANTHROPIC_BASE_URL itself)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner
from models.replay_server import ReplayServer, load_cassette

from statemachine_agent.cli import main

RECORDING = "01_pydantic-ai_nonstream_4_parallel_tool_use_roundtrip.yaml"
MODEL = "claude-haiku-4-5-20251001"  # the model of the recording


@pytest.fixture
def server() -> Iterator[ReplayServer]:
    with ReplayServer() as running:
        yield running


def test_run_with_a_claude_model_uses_the_anthropic_adapter(
    server: ReplayServer, anthropic_fixtures: Path, tmp_path: Path
) -> None:
    # The recorded text-only end_turn response (the second reply of recording 01).
    final = load_cassette(anthropic_fixtures / RECORDING)[1]
    assert final.response is not None and final.response["stop_reason"] == "end_turn"
    server.add(final.reply)
    env = {
        "ANTHROPIC_API_KEY": "test",
        "ANTHROPIC_BASE_URL": server.url,
        "ANTHROPIC_AUTH_TOKEN": None,
    }
    result = CliRunner().invoke(
        main,
        ["run", "Who is the youngest?", "--workspace", str(tmp_path), "--model", MODEL],
        env=env,
        catch_exceptions=False,
    )

    assert result.exit_code == 0, result.output
    assert "Daisy is the youngest" in " ".join(result.output.split())
    (request,) = server.requests
    assert request.path == "/v1/messages"
    headers = {k.lower(): v for k, v in request.headers.items()}
    # The key from the environment (the SDK sends it as x-api-key or as a bearer token).
    assert "test" in (
        headers.get("x-api-key"),
        headers.get("authorization", "").removeprefix("Bearer "),
    )
    assert request.body["model"] == MODEL
    assert request.body["stream"] is True
    assert request.body["messages"][0]["content"][0]["text"] == "Who is the youngest?"
    assert {"read_file", "list_files"} <= {t["name"] for t in request.body["tools"]}
