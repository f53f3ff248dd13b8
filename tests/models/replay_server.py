"""A local HTTP server on 127.0.0.1 that replays recorded Anthropic traffic and records requests.

`ReplayServer` answers each POST with the next queued `Reply` and keeps every request it got
(headers and JSON body). `load_cassette` / `load_sse` read the recordings in
``../shared/fixtures/anthropic`` (see its README): a non-streaming JSON response is turned into the
equivalent SSE event stream (`message_to_sse`), since the adapter always streams.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, TypeVar

import yaml

_M = TypeVar("_M")


@dataclass
class Reply:
    """One HTTP response.

    Attributes:
        status: the HTTP status.
        body: the body bytes.
        content_type: its content type.
        headers: more headers.
        declared_length: a Content-Length larger than ``body`` makes the server drop the
            connection mid-body (a cut stream).
        delay_seconds: wait this long before answering (a slow server, for client timeouts).
    """

    status: int = 200
    body: bytes = b""
    content_type: str = "text/event-stream"
    headers: dict[str, str] = field(default_factory=dict)
    declared_length: int | None = None
    delay_seconds: float = 0.0


@dataclass
class Recorded:
    """A request the server received."""

    path: str
    headers: dict[str, str]
    body: dict[str, Any]
    raw: bytes = b""  # the body as sent (to check it is strict JSON)


def sse(events: list[dict[str, Any]]) -> bytes:
    """Events as an SSE body (``event:`` named after each event's ``type``)."""
    return "".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n" for e in events).encode()


def sse_reply(events: list[dict[str, Any]], **kwargs: Any) -> Reply:
    return Reply(body=sse(events), **kwargs)


def json_reply(status: int, body: dict[str, Any], headers: dict[str, str] | None = None) -> Reply:
    return Reply(
        status=status,
        body=json.dumps(body).encode(),
        content_type="application/json",
        headers=headers or {},
    )


def _chunks(text: str, n: int = 2) -> list[str]:
    size = max(1, -(-len(text) // n))
    return [text[i : i + size] for i in range(0, len(text), size)] or [""]


def message_to_sse(message: dict[str, Any]) -> list[dict[str, Any]]:
    """The SSE events the API streams for a non-streaming ``message`` (text in two deltas,
    tool input as ``input_json_delta`` fragments, other blocks whole)."""
    usage = dict(message.get("usage") or {})
    start = {
        **{k: v for k, v in message.items() if k not in ("content", "usage")},
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {**usage, "output_tokens": 1},
    }
    events: list[dict[str, Any]] = [{"type": "message_start", "message": start}]
    for index, block in enumerate(message.get("content") or []):
        kind = block["type"]
        deltas: list[dict[str, Any]] = []
        if kind == "text":
            first = {"type": "text", "text": ""}
            if "citations" in block:
                first["citations"] = []
                deltas += [
                    {"type": "citations_delta", "citation": c} for c in block["citations"] or []
                ]
            deltas += [{"type": "text_delta", "text": t} for t in _chunks(block["text"])]
        elif kind == "thinking":
            first = {"type": "thinking", "thinking": ""}
            deltas += [
                {"type": "thinking_delta", "thinking": t} for t in _chunks(block["thinking"])
            ]
            deltas.append({"type": "signature_delta", "signature": block["signature"]})
        elif kind in ("tool_use", "server_tool_use"):
            first = {**block, "input": {}}
            deltas += [
                {"type": "input_json_delta", "partial_json": t}
                for t in ["", *_chunks(json.dumps(block["input"]), 3)]
            ]
        else:
            first = block
        events.append({"type": "content_block_start", "index": index, "content_block": first})
        events += [{"type": "content_block_delta", "index": index, "delta": d} for d in deltas]
        events.append({"type": "content_block_stop", "index": index})
    events.append(
        {
            "type": "message_delta",
            "delta": {
                "stop_reason": message.get("stop_reason"),
                "stop_sequence": message.get("stop_sequence"),
                **({"stop_details": message["stop_details"]} if "stop_details" in message else {}),
            },
            "usage": usage,
        }
    )
    events.append({"type": "message_stop"})
    return events


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


class ReplayServer:
    """Serves queued replies on 127.0.0.1 and records every request (use as a context manager).

    ``url`` is the base URL to give the SDK; ``requests`` the recorded requests; ``queue`` the
    replies still to send (an exhausted queue answers 500 with a clear message); ``models`` the
    models registered with `closing`, which the ``server`` fixture closes (``aclose``) at teardown.
    """

    def __init__(self, replies: list[Reply] | None = None) -> None:
        self.queue: list[Reply] = list(replies or [])
        self.requests: list[Recorded] = []
        self.models: list[Any] = []
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:  # quiet
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                raw = self.rfile.read(length)
                with server._lock:
                    server.requests.append(
                        Recorded(
                            self.path, dict(self.headers.items()), json.loads(raw or b"{}"), raw
                        )
                    )
                    reply = (
                        server.queue.pop(0)
                        if server.queue
                        else json_reply(
                            500,
                            {
                                "type": "error",
                                "error": {"type": "api_error", "message": "no reply queued"},
                            },
                            {"x-should-retry": "false"},
                        )
                    )
                if reply.delay_seconds:
                    time.sleep(reply.delay_seconds)
                try:
                    self._send(reply)
                except (BrokenPipeError, ConnectionResetError):
                    self.close_connection = True  # the client gave up (e.g. its timeout)

            def _send(self, reply: Reply) -> None:
                self.send_response(reply.status)
                self.send_header("content-type", reply.content_type)
                length = reply.declared_length or len(reply.body)
                self.send_header("content-length", str(length))
                for key, value in reply.headers.items():
                    self.send_header(key, value)
                if reply.declared_length:
                    self.send_header("connection", "close")
                self.end_headers()
                self.wfile.write(reply.body)
                self.wfile.flush()
                if reply.declared_length:
                    self.close_connection = True

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True
        )

    @property
    def url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host!s}:{port}"

    def closing(self, model: _M) -> _M:
        """Register ``model`` (anything with ``async aclose()``) to be closed at teardown."""
        self.models.append(model)
        return model

    def add(self, *replies: Reply) -> None:
        with self._lock:
            self.queue.extend(replies)

    def __enter__(self) -> ReplayServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)
