"""`FakeMessagesAPI`: a local stand-in for the Anthropic Messages API, for tests through the real SDK.

It listens on 127.0.0.1 (a free port) in a thread and answers each POST with the next step of a
script, the steps `ScriptedModel` takes, on the API's own wire: a response as an SSE stream
(``message_start``, content block deltas, ``message_delta``, ``message_stop``, sent with chunked
transfer encoding), an error with a status as a JSON error body, an error without one as an
``error`` event inside a 200 stream. Every request is recorded.
"""

from __future__ import annotations

import json
import sys
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import TYPE_CHECKING, Any, Self

from .._errors import UsageError
from .._messages import (
    AssistantMessage,
    ProviderBlock,
    TextBlock,
    ThinkingBlock,
    ToolCallBlock,
)
from ..models._offline import Step, checked_step, script_steps

if TYPE_CHECKING:
    from ..models.anthropic import AnthropicModel

__all__ = ["FakeMessagesAPI", "RecordedRequest", "Reply", "message_to_sse", "sse"]

_WIRE_KEYS = ("headers", "cut_after_events")


@dataclass
class Reply:
    """One HTTP answer, as sent.

    Attributes:
        status: the HTTP status.
        body: the body bytes (with ``chunks`` None).
        content_type: its content type.
        headers: more headers (e.g. ``retry-after``).
        declared_length: a ``content-length`` larger than ``body``: the server closes the
            connection mid-body (a cut stream).
        delay_seconds: wait this long before answering (a slow server).
        chunks: send these with chunked transfer encoding, one chunk each, instead of ``body``
            (how the API streams).
        cut: with ``chunks``: close the connection after them, the body left unfinished.
    """

    status: int = 200
    body: bytes = b""
    content_type: str = "text/event-stream"
    headers: dict[str, str] = field(default_factory=dict)
    declared_length: int | None = None
    delay_seconds: float = 0.0
    chunks: list[bytes] | None = None
    cut: bool = False


@dataclass
class RecordedRequest:
    """A request the server received.

    Attributes:
        path: the request path (``/v1/messages``).
        headers: its headers, names in lower case.
        body: its JSON body, parsed (the model, messages, tools, ... the SDK sent).
        raw: the body's bytes as sent (to check, say, that it is strict JSON: ``json.loads``
            accepts ``NaN`` and ``Infinity``, which the API refuses).
    """

    path: str
    headers: dict[str, str]
    body: dict[str, Any]
    raw: bytes = b""


def sse_event(event: dict[str, Any]) -> bytes:
    """One SSE event (``event:`` named after its ``type``)."""
    return f"event: {event['type']}\ndata: {json.dumps(event)}\n\n".encode()


def sse(events: Sequence[dict[str, Any]]) -> bytes:
    """Events as one SSE body."""
    return b"".join(sse_event(e) for e in events)


def _chunks(text: str, n: int = 2) -> list[str]:
    size = max(1, -(-len(text) // n))
    return [text[i : i + size] for i in range(0, len(text), size)] or [""]


def message_to_sse(message: dict[str, Any]) -> list[dict[str, Any]]:
    """The SSE events the API streams for a ``message`` response dict: text in two deltas,
    thinking in two deltas and its signature, tool input as ``input_json_delta`` fragments (an
    ``input`` given as a string is sent as that argument text, parsed or not), other blocks whole.
    """
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
            first: dict[str, Any] = {"type": "text", "text": ""}
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
            deltas.append({"type": "signature_delta", "signature": block.get("signature", "")})
        elif kind in ("tool_use", "server_tool_use", "mcp_tool_use"):
            first = {**block, "input": {}}
            raw = block.get("input", {})
            text = raw if isinstance(raw, str) else json.dumps(raw)
            deltas += [
                {"type": "input_json_delta", "partial_json": t} for t in ["", *_chunks(text, 3)]
            ]
        else:
            first = block
        events.append({"type": "content_block_start", "index": index, "content_block": first})
        events += [{"type": "content_block_delta", "index": index, "delta": d} for d in deltas]
        events.append({"type": "content_block_stop", "index": index})
    delta: dict[str, Any] = {
        "stop_reason": message.get("stop_reason"),
        "stop_sequence": message.get("stop_sequence"),
    }
    if "stop_details" in message:
        delta["stop_details"] = message["stop_details"]
    events.append({"type": "message_delta", "delta": delta, "usage": usage})
    events.append({"type": "message_stop"})
    return events


def _error_body(error: dict[str, Any]) -> dict[str, Any]:
    return {"type": "error", "error": {"type": "api_error", "message": "error", **error}}


def json_reply(status: int, body: dict[str, Any], headers: dict[str, str] | None = None) -> Reply:
    """A JSON answer with ``status``."""
    return Reply(
        status=status,
        body=json.dumps(body).encode(),
        content_type="application/json",
        headers=dict(headers or {}),
    )


def _assistant_dict(message: AssistantMessage) -> dict[str, Any]:
    """An `AssistantMessage` as the API's response dict (a call's unparsed argument text as a
    string ``input``, so it streams as the model sent it)."""
    content: list[dict[str, Any]] = []
    for block in message.content:
        if isinstance(block, TextBlock):
            content.append({"type": "text", "text": block.text})
        elif isinstance(block, ThinkingBlock):
            content.append(
                {"type": "thinking", "thinking": block.thinking, "signature": block.signature or ""}
            )
        elif isinstance(block, ToolCallBlock):
            arguments = block.raw_arguments if block.raw_arguments is not None else block.input
            content.append(
                {"type": "tool_use", "id": block.id, "name": block.name, "input": arguments or {}}
            )
        elif isinstance(block, ProviderBlock):
            content.append(dict(block.data))
    usage = message.usage
    out: dict[str, Any] = {
        "content": content,
        "stop_reason": None if message.stop_reason is None else str(message.stop_reason),
        "stop_sequence": message.stop_sequence,
        "usage": {"input_tokens": usage.input_tokens, "output_tokens": usage.output_tokens},
    }
    if message.model:
        out["model"] = message.model
    if message.stop_details is not None:
        out["stop_details"] = message.stop_details
    return out


@dataclass
class _Planned:
    """A checked step: what to answer, made into a `Reply` when its request arrives."""

    number: int
    delay: float
    outcome: AssistantMessage | dict[str, Any]
    headers: dict[str, str]
    cut_after_events: int | None
    source: dict[str, Any]  # a response's dict (empty for an error)

    def reply(self, request: dict[str, Any]) -> Reply:
        outcome = self.outcome
        if isinstance(outcome, dict):  # an error step
            error = dict(outcome["error"])
            status = outcome.get("status_code")
            if status is None:  # inside a 200 stream: the API's mid-stream `error` event
                return Reply(
                    chunks=[sse_event(_error_body(error))],
                    headers=self.headers,
                    delay_seconds=self.delay,
                )
            reply = json_reply(int(status), _error_body(error), self.headers)
            reply.delay_seconds = self.delay
            return reply
        response = {
            "id": f"msg_fake_{self.number}",
            "type": "message",
            "role": "assistant",
            "model": str(request.get("model") or "fake"),
            "stop_sequence": None,
            **self.source,
        }
        response["usage"] = {"input_tokens": 0, "output_tokens": 0, **(response.get("usage") or {})}
        events = [sse_event(e) for e in message_to_sse(response)]
        cut = self.cut_after_events is not None
        if cut:
            events = events[: self.cut_after_events]
        return Reply(chunks=events, cut=cut, headers=self.headers, delay_seconds=self.delay)


def _plan(number: int, step: Step) -> _Planned:
    """Check one step (as `ScriptedModel` does, plus the wire's own keys)."""
    where = f"FakeMessagesAPI step {number}"
    wire: dict[str, Any] = {}
    source: dict[str, Any] = {}
    if isinstance(step, dict):
        wire = {k: step[k] for k in _WIRE_KEYS if k in step}
        step = {k: v for k, v in step.items() if k not in _WIRE_KEYS}
    delay, outcome = checked_step(number, step, "FakeMessagesAPI", _WIRE_KEYS)
    headers = wire.get("headers", {})
    if not isinstance(headers, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in headers.items()
    ):
        raise UsageError(
            f"{where}: headers must map names to strings, e.g. {{'retry-after': '1'}}; "
            f"got {headers!r}"
        )
    cut = wire.get("cut_after_events")
    if cut is not None:
        if not isinstance(cut, int) or isinstance(cut, bool) or cut < 0:
            raise UsageError(f"{where}: cut_after_events must be an integer >= 0, got {cut!r}")
        if not isinstance(outcome, AssistantMessage):
            raise UsageError(f"{where}: cut_after_events applies to a response, not an error")
    if isinstance(outcome, AssistantMessage):
        source = _assistant_dict(outcome) if not isinstance(step, dict) else dict(step)
        for key in ("delay_seconds", "delay", "status_code"):
            source.pop(key, None)
    elif outcome.get("status_code") is not None:
        status = outcome["status_code"]
        if not isinstance(status, int) or isinstance(status, bool) or not 400 <= status <= 599:
            raise UsageError(f"{where}: status_code must be an HTTP error status, got {status!r}")
    return _Planned(number, delay, outcome, dict(headers), cut, source)


class _QuietServer(ThreadingHTTPServer):
    """A server that does not print a traceback when a client resets or drops its connection
    (a client closed without closing its kept-alive connections, a client timeout): that is the
    client's business, and the printing, on a server thread, can interleave with the test's."""

    def handle_error(self, request: Any, client_address: Any) -> None:
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


class FakeMessagesAPI:
    """A fake Anthropic Messages API on 127.0.0.1 that plays a script, for testing an agent
    through `AnthropicModel` and the real ``anthropic`` SDK.

    Each POST (``/v1/messages``) takes the next step, answered on the API's wire:

    - a response (``{"content": [...], "stop_reason": ..., "usage": {...}}``, or an
      `AssistantMessage`): a 200 SSE stream, text and tool input in several deltas;
    - an error with ``"status_code"`` (``{"error": {"type": "overloaded_error", "message": ...},
      "status_code": 529}``): that status with the API's JSON error body. The SDK retries 408,
      409, 429 and 5xx itself (``max_retries``, honouring ``retry-after``): each retry takes the
      next step;
    - an error without a status: a 200 stream whose first event is an ``error`` event (a
      mid-stream error; the engine retries a retryable one).

    A dict step may also hold ``"delay_seconds"`` (wait before answering), ``"headers"`` (more
    response headers, e.g. ``{"retry-after-ms": "1"}``) and, on a response,
    ``"cut_after_events": n`` (send its first ``n`` SSE events, then drop the connection). Any
    other key that is not a field of the API's response object or error body is refused (a typo
    such as ``cut_after_event`` would otherwise be ignored). The SDK waits as long as a
    ``retry-after`` header says (seconds; ``retry-after-ms``: milliseconds) before it retries:
    keep it small in tests (``{"retry-after-ms": "1"}``).

    A response without ``stop_reason`` is sent with a null stop reason (the API always sends
    one): the loop goes on by its content, as with `ScriptedModel`.

    Once the script is spent, a request is answered 500 with ``x-should-retry: false`` and a
    message saying how many steps the script held.

    Use it as a context manager, which starts and stops the server::

        with FakeMessagesAPI(steps) as api:
            model = api.model("claude-sonnet-4-6")

    or call `start` and `close` yourself (a pytest fixture: ``api = FakeMessagesAPI(steps);
    api.start(); yield api; api.close()``). Until it is started, `url`, `model` and
    `wait_for_requests` raise `UsageError` (a request could not be answered).

    Args:
        steps: the script: a list of the steps `ScriptedModel` takes, plus the keys above, or a
            script file's object ``{"steps": [...]}``.

    Attributes:
        requests: every request received (`RecordedRequest`: path, headers, parsed JSON body).

    Raises:
        UsageError: a malformed step, named by its number from 1 (the checks of
            `ScriptedModel`, and of the wire keys above), or ``steps`` is not a list of steps.
    """

    def __init__(self, steps: Sequence[Step | Reply] | dict[str, Any] = ()) -> None:
        self.requests: list[RecordedRequest] = []
        self._queue: list[_Planned | Reply] = []
        self._steps = 0
        self._lock = threading.Condition()
        self._closing = threading.Event()
        self._started = False
        self._httpd: _QuietServer | None = None  # bound by start(): no socket before
        self._thread: threading.Thread | None = None
        self.add(*script_steps(steps, "FakeMessagesAPI"))

    def start(self) -> Self:
        """Start serving (in a daemon thread); `close` stops. ``with`` does both.

        Returns:
            This server, so ``api = FakeMessagesAPI(steps).start()`` reads in one line.

        Raises:
            UsageError: it was started before, or closed (a closed server cannot start again:
                make a new one).
        """
        if self._closing.is_set():
            raise UsageError("FakeMessagesAPI.start: it is closed: make a new FakeMessagesAPI")
        if self._started:
            raise UsageError("FakeMessagesAPI.start: already started (by start() or `with`)")
        self._started = True
        self._httpd = _QuietServer(("127.0.0.1", 0), _handler(self))
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(
            target=self._httpd.serve_forever,
            kwargs={"poll_interval": 0.01},
            name="FakeMessagesAPI",
            daemon=True,
        )
        self._thread.start()
        return self

    def close(self) -> None:
        """Stop serving and free the port; answers still waiting out a ``delay_seconds`` are
        dropped. Safe to call more than once, or on a server never started (which holds no
        port: `start` binds it)."""
        if self._closing.is_set():
            return
        self._closing.set()  # wakes answers still waiting out their delay
        if self._httpd is not None and self._thread is not None:
            self._httpd.shutdown()
            self._thread.join()
            self._httpd.server_close()

    def _check_running(self, what: str) -> None:
        if self._closing.is_set():
            raise UsageError(
                f"FakeMessagesAPI.{what}: the server is closed (its `with` block ended, or "
                "close() was called): use it inside `with FakeMessagesAPI(...) as api:`"
            )
        if not self._started:
            raise UsageError(
                f"FakeMessagesAPI.{what}: the server is not started, so no request would be "
                "answered: use `with FakeMessagesAPI(steps) as api:`, or call `api.start()` "
                "(and `api.close()` when done)"
            )

    @property
    def url(self) -> str:
        """The base URL to give the SDK (``http://127.0.0.1:<port>``).

        Raises:
            UsageError: the server is not started, or closed.
        """
        self._check_running("url")
        assert self._httpd is not None  # started
        host, port = self._httpd.server_address[:2]
        return f"http://{host!s}:{port}"

    @property
    def remaining(self) -> int:
        """Steps not yet answered."""
        with self._lock:
            return len(self._queue)

    def add(self, *steps: Step | Reply) -> None:
        """Append steps to the script (checked as in the constructor); a `Reply` is sent as it is.

        Raises:
            UsageError: a malformed step.
        """
        planned: list[_Planned | Reply] = []
        with self._lock:
            number = self._steps
            for step in steps:
                number += 1
                planned.append(step if isinstance(step, Reply) else _plan(number, step))
            self._steps = number
            self._queue.extend(planned)

    def wait_for_requests(self, count: int, timeout_seconds: float = 30.0) -> bool:
        """Block until ``count`` requests have arrived (e.g. to abort a run mid-request).

        Args:
            count: how many requests to wait for, counted from the first.
            timeout_seconds: the longest wait.

        Returns:
            True once they have arrived; False when ``timeout_seconds`` passed first.

        Raises:
            UsageError: the server was never started (no request could arrive).
        """
        if not self._started:
            self._check_running("wait_for_requests")
        with self._lock:
            return self._lock.wait_for(lambda: len(self.requests) >= count, timeout_seconds)

    def model(self, name: str = "claude-sonnet-4-6", **options: Any) -> AnthropicModel:
        """An `AnthropicModel` that talks to this server (``base_url=url``, ``api_key="test"``).

        Args:
            name: the model name sent.
            **options: more `AnthropicModel` options (``max_retries``, ``timeout_seconds``, ...).

        Close it as any `AnthropicModel` (``async with`` or ``await model.aclose()``).

        Raises:
            UsageError: the server is not started, or closed.
        """
        from ..models.anthropic import AnthropicModel

        return AnthropicModel(name, base_url=self.url, api_key="test", **options)

    def _next(self, request: RecordedRequest) -> Reply:
        with self._lock:
            self.requests.append(request)
            self._lock.notify_all()
            if self._queue:
                planned = self._queue.pop(0)
                return planned if isinstance(planned, Reply) else planned.reply(request.body)
            held, number = self._steps, len(self.requests)
        return json_reply(
            500,
            _error_body(
                {
                    "type": "api_error",
                    "message": f"FakeMessagesAPI has no step left for request "
                    f"{number}: the script holds {held} step(s). Add a step (for "
                    "example a final end_turn answer).",
                }
            ),
            {"x-should-retry": "false"},
        )

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()


def _handler(api: FakeMessagesAPI) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:  # quiet
            pass

        def do_POST(self) -> None:
            length = int(self.headers.get("content-length") or 0)
            raw = self.rfile.read(length)
            try:
                body = json.loads(raw or b"{}")
            except ValueError:
                body = {"_unparsable": raw.decode("utf-8", "replace")}
            reply = api._next(
                RecordedRequest(
                    self.path, {k.lower(): v for k, v in self.headers.items()}, body, raw
                )
            )
            if reply.delay_seconds and api._closing.wait(reply.delay_seconds):
                self.close_connection = True
                return
            try:
                self._send(reply)
            except (BrokenPipeError, ConnectionResetError):
                self.close_connection = True  # the client gave up (its timeout, an abort)

        def _send(self, reply: Reply) -> None:
            self.send_response(reply.status)
            self.send_header("content-type", reply.content_type)
            self.send_header("request-id", "req_fake")
            for key, value in reply.headers.items():
                self.send_header(key, value)
            if reply.chunks is not None:
                self.send_header("transfer-encoding", "chunked")
                self.end_headers()
                for chunk in reply.chunks:
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                    self.wfile.flush()
                if reply.cut:
                    self.close_connection = True  # no closing chunk: the body is unfinished
                    return
                self.wfile.write(b"0\r\n\r\n")
                self.wfile.flush()
                return
            length = reply.declared_length or len(reply.body)
            self.send_header("content-length", str(length))
            if reply.declared_length:
                self.send_header("connection", "close")
            self.end_headers()
            self.wfile.write(reply.body)
            self.wfile.flush()
            if reply.declared_length:
                self.close_connection = True

    return Handler
