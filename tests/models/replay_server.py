"""Recorded Anthropic traffic for the adapter tests, served by the public fake API.

`ReplayServer` is `statemachine_agent.testing.FakeMessagesAPI` (one server implementation) fed
raw `Reply` objects, plus ``closing`` for the ``server`` fixture (in ``tests/conftest.py``).
`message` / `reply` / `says` build a Messages API response and its streamed reply, and
`anthropic_model` / `closing_model` an `AnthropicModel` talking to a server: the one place the
adapter tests take them from. `load_cassette` / `load_sse`
read the recordings in ``../shared/fixtures/anthropic`` (see its README): a non-streaming JSON
response is turned into the equivalent SSE event stream (`message_to_sse`), since the adapter
always streams.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import yaml

from statemachine_agent.models import AnthropicModel
from statemachine_agent.testing import FakeMessagesAPI
from statemachine_agent.testing._fake_api import RecordedRequest as Recorded
from statemachine_agent.testing._fake_api import Reply, json_reply, message_to_sse, sse

__all__ = [
    "MODEL",
    "Interaction",
    "Recorded",
    "ReplayServer",
    "Reply",
    "anthropic_model",
    "closing_model",
    "json_reply",
    "load_cassette",
    "load_sse",
    "message",
    "message_to_sse",
    "reply",
    "says",
    "sse",
    "sse_reply",
]

_M = TypeVar("_M")

MODEL = "claude-replay-test"
"""The model name the adapter tests ask for and the replies name (no real model is called)."""


def sse_reply(events: list[dict[str, Any]], **kwargs: Any) -> Reply:
    return Reply(body=sse(events), **kwargs)


def message(
    content: list[dict[str, Any]],
    stop_reason: str | None = "end_turn",
    name: str = MODEL,
    **fields: Any,
) -> dict[str, Any]:
    """A Messages API response body (``id`` msg_1, usage 7 in / 4 out); ``fields`` override keys.

    ``stop_reason`` None is the body as ``message_start`` carries it, before the stop is known.
    """
    return {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": name,
        "content": content,
        "stop_reason": stop_reason,
        "stop_sequence": None,
        "usage": {"input_tokens": 7, "output_tokens": 4},
        **fields,
    }


def reply(
    content: list[dict[str, Any]], stop_reason: str = "end_turn", name: str = MODEL, **fields: Any
) -> Reply:
    """`message` as the API streams it (its SSE events)."""
    return sse_reply(message_to_sse(message(content, stop_reason, name, **fields)))


def says(text: str) -> Reply:
    """A streamed response of one text block, stop reason ``end_turn``."""
    return reply([{"type": "text", "text": text}])


def anthropic_model(server: ReplayServer, name: str = MODEL, **kwargs: Any) -> AnthropicModel:
    """An `AnthropicModel` talking to ``server`` through the real SDK, with no SDK retries (one
    reply per try) unless ``max_retries`` is given; ``kwargs`` go to `AnthropicModel`. Nothing
    closes it: see `closing_model`."""
    options: dict[str, Any] = {"base_url": server.url, "api_key": "test", "max_retries": 0}
    return AnthropicModel(name, **{**options, **kwargs})


def closing_model(server: ReplayServer, name: str = MODEL, **kwargs: Any) -> AnthropicModel:
    """`anthropic_model`, registered with ``server.closing`` (the ``server`` fixture closes it)."""
    return server.closing(anthropic_model(server, name, **kwargs))


@dataclass
class Interaction:
    """One recorded request and its reply (as the streaming adapter should get it)."""

    request: dict[str, Any]
    reply: Reply
    response: dict[str, Any] | None  # the recorded JSON body, when it was JSON


def load_cassette(path: Path) -> list[Interaction]:
    """The interactions of a vcrpy cassette, replies made streamable."""
    data = yaml.safe_load(path.read_text())
    out = []
    for item in data["interactions"]:
        req = item["request"]
        request = req.get("parsed_body")
        if request is None:
            request = json.loads(req["body"]) if req.get("body") else {}
        resp = item["response"]
        status = resp["status"]["code"]
        headers = {k.lower(): v[0] for k, v in (resp.get("headers") or {}).items()}
        text = json.dumps(resp["parsed_body"]) if "parsed_body" in resp else resp["body"]["string"]
        parsed: dict[str, Any] | None = None
        if "text/event-stream" in headers.get("content-type", ""):
            reply = Reply(status=status, body=text.encode())
        else:
            parsed = json.loads(text)
            if status == 200 and parsed.get("type") == "message":
                reply = sse_reply(message_to_sse(parsed))
            else:
                extra = {k: v for k, v in headers.items() if k.startswith("x-should-retry")}
                reply = json_reply(status, parsed, extra)
        out.append(Interaction(request, reply, parsed))
    return out


def load_sse(path: Path) -> Reply:
    """A raw ``.sse`` recording as a reply.

    The files end without the blank line that terminates the last SSE event (a storage artefact:
    the server sent it), so it is added: without it a decoder drops ``message_stop``.
    """
    return Reply(body=path.read_bytes().rstrip(b"\n") + b"\n\n")


class ReplayServer(FakeMessagesAPI):
    """Serves queued replies on 127.0.0.1 and records every request (use as a context manager).

    ``url`` is the base URL to give the SDK; ``requests`` the recorded requests; an exhausted
    queue answers 500 with a clear message; ``models`` the models registered with `closing`,
    which the ``server`` fixture closes (``aclose``) at teardown.
    """

    def __init__(self, replies: list[Reply] | None = None) -> None:
        super().__init__(replies or [])
        self.models: list[Any] = []

    def closing(self, model: _M) -> _M:
        """Register ``model`` (anything with ``async aclose()``) to be closed at teardown."""
        self.models.append(model)
        return model
