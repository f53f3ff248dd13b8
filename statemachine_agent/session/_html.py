"""A session log as one self-contained HTML page: the state diagram lit step by step, a timeline of
turns with a bar per tool call, the transcript, token usage, and repairs, aborts and resumed runs
marked where they happened.

The page needs no network: its style and script (``html/page.css``, ``html/page.js``, written for
this project, no third-party code) and the diagram's SVG are inlined. Python turns the log into a
plain JSON model (`page_model`); the script builds the page from it with ``textContent`` only, so
no text from the log is ever parsed as HTML. The JSON sits in a ``<script type="application/json">``
with ``<``, ``>`` and ``&`` written as ``\\u003c``-style escapes, so ``</script>`` or ``<!--`` in a
log cannot end it. A lone surrogate in the log (``\\udcff``: a file name that is not UTF-8, as
``os.listdir`` decodes it) is shown as U+FFFD, the replacement character.

Time a call spent waiting for a person's decision (the log's ``decision`` line answering it, after a
``pending`` line or a ``[y/n]`` prompt) is drawn apart from the time it ran.
"""

from __future__ import annotations

import contextlib
import html
import json
import math
import os
import re
import tempfile
from importlib import resources
from pathlib import Path
from typing import Any

from .._diagram import (
    DiagramEdge,
    DiagramGraph,
    diagram_graph,
    element_id,
    render_image,
    to_dot,
)
from .._errors import GraphvizNotFoundError, UsageError
from .._machine import TERMINAL_STATES, LoopMachine, State
from .._messages import (
    AssistantMessage,
    ImageBlock,
    Message,
    TextBlock,
    ThinkingBlock,
    ToolCallBlock,
    ToolResultMessage,
    Usage,
    UserMessage,
)
from ._read import SessionData, read_session

_STATES = {s.value for s in State}
_RESTING = {State.IDLE.value, *(s.value for s in TERMINAL_STATES)}  # between runs


_LONE_SURROGATE = re.compile("[\ud800-\udfff]")
REPLACEMENT = "\ufffd"
"""What a lone surrogate of the log is shown as (U+FFFD); UTF-8 cannot encode it as it is."""


def read_log_to_render(path: str | os.PathLike[str]) -> SessionData:
    """Read the session log at ``path`` for a page (``strict=False``: unreadable lines are
    skipped and listed on the page). The one check `render_html`, `write_html` and
    ``statemachine-agent replay`` share.

    Raises:
        UsageError: there is no file at ``path`` (nothing to render: an empty page would look
            like a session with no runs), or it is a folder.
        AgentError: the file is not a session log, or a newer format version.
    """
    log = Path(path)
    if not log.exists():
        raise UsageError(
            f"no session log at {log}: the file does not exist (give the JSONL file a run "
            "wrote with --session, or Agent(session=...))"
        )
    if log.is_dir():
        raise UsageError(f"{log} is a folder, not a session log: give the JSONL file")
    return read_session(log, strict=False)


def render_html(source: str | os.PathLike[str] | SessionData, *, title: str | None = None) -> str:
    """Render a session log as one self-contained HTML page.

    Args:
        source: the JSONL log's path, or `SessionData` already read (`read_session`).
        title: the page title (default: ``session <file name>``).

    Returns:
        The page (text UTF-8 can encode: each lone surrogate of the log is U+FFFD). It opens
        offline: nothing is loaded from the network.

    Raises:
        UsageError: there is no file at ``source`` (see `read_log_to_render`).
        AgentError: the file is not a session log, or a newer format version. Unreadable lines
            are skipped and listed on the page (the log is read with ``strict=False``).
    """
    data = source if isinstance(source, SessionData) else read_log_to_render(source)
    model = page_model(data)
    page_title = title if title is not None else f"session {data.path.name}"
    template = _asset("page.html")
    parts = {
        "__TITLE__": html.escape(page_title),
        "__STYLE__": _asset("page.css"),
        "__DIAGRAM__": diagram_svg(model["extra_edges"]),
        "__DATA__": _script_json(model),
        "__SCRIPT__": _asset("page.js"),
    }
    for key, value in parts.items():
        head, found, tail = template.partition(key)
        if not found:  # pragma: no cover - the template is part of the package
            raise RuntimeError(f"page.html has no {key}")
        template = head + value + tail
    # Python keeps an undecodable byte of a file name as a lone surrogate (\\udcff), which
    # the log's JSON holds as an escape; UTF-8 has no encoding for it.
    return _LONE_SURROGATE.sub(REPLACEMENT, template)


def write_html(
    log_path: str | os.PathLike[str] | SessionData,
    out_path: str | os.PathLike[str],
    *,
    title: str | None = None,
) -> Path:
    """Render ``log_path`` (see `render_html`) and write the page to ``out_path`` (UTF-8).

    The page is written to a temporary file in ``out_path``'s folder, then renamed over
    ``out_path`` (``os.replace``): a render or write that fails leaves an earlier page there
    as it was, and a reader never sees half a page.

    Args:
        log_path: the JSONL log's path, or `SessionData` already read.
        out_path: where the page goes; its folder must exist.
        title: the page title (default: ``session <file name>``).

    Returns:
        ``out_path`` as a `Path`.

    Raises:
        UsageError: there is no file at ``log_path`` (the same check as
            ``statemachine-agent replay --html``: `read_log_to_render`).
        AgentError: ``log_path`` is not a session log.
        OSError: ``out_path`` cannot be written.
    """
    out = Path(out_path)
    page = render_html(log_path, title=title).encode("utf-8")
    _replace_atomically(out, page)
    return out


def _replace_atomically(out: Path, data: bytes) -> None:
    """Write ``data`` to a temporary file beside ``out``, then rename it over ``out``; on any
    failure the temporary file is removed and ``out`` is untouched."""
    handle, temporary = tempfile.mkstemp(
        prefix=f".{out.name}.", suffix=".tmp", dir=out.parent if str(out.parent) else "."
    )
    try:
        with os.fdopen(handle, "wb") as file:
            file.write(data)
        if out.exists():
            # mkstemp creates the file 0600; the page keeps the permissions the old one had.
            os.chmod(temporary, out.stat().st_mode & 0o7777)
        else:
            umask = os.umask(0)
            os.umask(umask)
            os.chmod(temporary, 0o666 & ~umask)
        os.replace(temporary, out)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise


# -- the JSON model the page is built from -----------------------------------------------------


def page_model(data: SessionData) -> dict[str, Any]:
    """The page's data: ``items`` (transcript entries in log order), ``steps`` (one per state
    change: the state entered, its diagram element ``node`` (`element_id`), the edge taken,
    the items and tool calls it highlights), ``turns`` (each model request with its tool calls'
    ``start``, ``run`` and ``end`` times in seconds from the first line, the ``wait`` for a
    person's decision between ``start`` and ``run``, and the turn's seconds ``waited``), the
    ``summary``, ``extra_edges`` (transitions
    the log took that the built-in machine does not draw, e.g. ``resume``) and ``end`` (the
    last line's seconds)."""
    return _Builder(data).build()


class _Builder:
    """One pass over the records; see `page_model`."""

    def __init__(self, data: SessionData) -> None:
        self.data = data
        self.items: list[dict[str, Any]] = []
        self.steps: list[dict[str, Any]] = []
        self.turns: list[dict[str, Any]] = []
        self.pending: list[int] = []  # items waiting for the next step (a prompt before `start`)
        self.state = State.IDLE.value
        self.run = 0
        self.run_open = False
        self.crashed = False  # a crash marker was placed for the open run
        self.crash_time: float | None = None  # seconds of the last line before that crash
        self.last_time: float | None = None
        self.origin: float | None = None
        self.calls: dict[str, dict[str, Any]] = {}  # call id -> its timeline entry
        self.reply: int | None = None  # the response logged since the last state change
        self.last_calls: list[tuple[str, str]] = []  # (id, name) of the newest response's calls
        self.edges = _edge_index()
        self.extra_edges: list[tuple[str, str, str]] = []

    def build(self) -> dict[str, Any]:
        for record in self.data.records:
            time = record.body.get("time")
            if isinstance(time, int | float) and math.isfinite(time):
                if self.origin is None:
                    self.origin = float(time)
                when: float | None = round(float(time) - self.origin, 6)  # the log's µs
            else:
                when = None
            self._record(record.type, record.body, record.message, record.messages, when)
            if when is not None:
                self.last_time = when
        for turn in self.turns:
            turn["waited"] = _waited(turn["calls"], self.last_time)
        if self.run_open and not self.crashed:
            self._item(
                {
                    "kind": "crash",
                    "text": "the log ends during this run (the process died, or is still running)",
                },
            )
        self._flush_pending()  # items after the last state change belong to the last step
        return {
            "summary": self._summary(),
            "items": self.items,
            "steps": self.steps,
            "turns": self.turns,
            "extra_edges": self.extra_edges,
            "end": self.last_time,
        }

    # -- records ---------------------------------------------------------------------------

    def _record(
        self,
        kind: str,
        body: dict[str, Any],
        message: Message | None,
        messages: tuple[Message, ...],
        when: float | None,
    ) -> None:
        if kind == "run_start":
            self.run += 1
            self.run_open, self.crashed = True, False
            self._item({"kind": "run_start", "run": self.run, "time": when}, pending=True)
        elif kind == "run_end":
            usage = Usage.model_validate(body.get("usage") or {})
            self._item(
                {
                    "kind": "run_end",
                    "run": self.run,
                    "state": str(body.get("state")),
                    "turns": body.get("turns"),
                    "usage": _usage(usage),
                    "error": body.get("error"),
                    "time": when,
                }
            )
            self.run_open = False
        elif kind == "tool_start":
            # Logged after the batch's state change: the call's own start, when it waited for
            # its resource or ran after the calls before it. A deferred call starts again once
            # a person approved it: it runs from there.
            entry = self.calls.get(str(body.get("call_id")))
            if entry is not None and when is not None and entry["end"] is None:
                if entry["wait"] is None:
                    entry["start"] = entry["run"] = when
                elif entry["wait"]["to"] is not None:
                    entry["run"] = when
        elif kind == "pending":
            self._pending(body, when)
        elif kind == "decision":
            self._decision(body, when)
        elif kind == "state":
            self._state(body, when)
        elif kind == "history":
            self._item(
                {
                    "kind": "history",
                    "reason": str(body.get("reason")),
                    "count": len(messages),
                    "summary": body.get("summary"),
                    "time": when,
                },
                pending=self.state in _RESTING,
            )
        elif message is not None:
            self._message(message, bool(body.get("repair")), when)

    def _message(self, message: Message, repair: bool, when: float | None) -> None:
        if isinstance(message, UserMessage):
            self._item(
                {"kind": "user", "text": _content_text(message), "time": when},
                pending=self.state in _RESTING,
            )
        elif isinstance(message, AssistantMessage):
            self.last_calls = [
                (b.id, b.name) for b in message.content if isinstance(b, ToolCallBlock)
            ]
            turn = self.turns[-1] if self.turns else None
            self.reply = self._item(
                {
                    "kind": "assistant",
                    "blocks": [_block(b) for b in message.content],
                    "stop": None if message.stop_reason is None else str(message.stop_reason),
                    "usage": _usage(message.usage),
                    "error": message.error,
                    "turn": None if turn is None else turn["n"],
                    "time": when,
                }
            )
            if turn is not None and turn["reply"] is None:
                turn["reply"] = when
                turn["usage"] = _usage(message.usage)
        else:
            self._result(message, repair, when)

    def _result(self, message: ToolResultMessage, repair: bool, when: float | None) -> None:
        entry = self.calls.get(message.tool_call_id)
        if repair and self.run_open and not self.crashed:
            self._crash()
        index = self._item(
            {
                "kind": "result",
                "call": message.tool_call_id,
                "name": message.tool_name,
                "text": _content_text(message),
                "error": message.is_error,
                "repair": repair,
                "time": when,
            },
            pending=repair,
        )
        if entry is not None and entry["end"] is None:
            entry["item"] = index
            entry["error"] = message.is_error
            entry["repair"] = repair
            # A repaired call never finished: its bar ends where the log stopped.
            entry["end"] = self.crash_time if repair and self.crashed else when

    def _pending(self, body: dict[str, Any], when: float | None) -> None:
        """Calls deferred for a person's decision (the run stopped in ``awaiting_approval``):
        each waits from its start (when its hook deferred it) until its ``decision`` line."""
        for call in body.get("calls") or []:
            if not isinstance(call, dict):
                continue
            call_id, name = str(call.get("id")), str(call.get("tool_name"))
            entry = self.calls.get(call_id)
            if entry is not None and entry["end"] is None and entry["wait"] is None:
                entry["wait"] = {"from": entry["start"], "to": None}
                entry["waiting"] = True
            self._item(
                {
                    "kind": "pending",
                    "call": call_id,
                    "name": name,
                    "text": str(call.get("reason") or ""),
                    "time": when,
                }
            )

    def _decision(self, body: dict[str, Any], when: float | None) -> None:
        """A person's decision on a call: on a deferred one (``approve``/``decide``), or at a
        ``[y/n]`` prompt while the call's hook waited for the answer. Until then the call was
        waiting, not running."""
        call_id = str(body.get("call_id"))
        decision = str(body.get("decision"))
        entry = self.calls.get(call_id)
        if entry is not None and entry["end"] is None:
            if entry["wait"] is None:  # a prompt: the hook asked from the call's start
                entry["wait"] = {"from": entry["start"], "to": None}
            entry["wait"]["to"] = when
            entry["run"] = when  # until a tool_start line says otherwise
            entry["waiting"] = False
            entry["decision"] = decision
        self._item(
            {
                "kind": "decision",
                "call": call_id,
                "name": None if entry is None else entry["name"],
                "decision": decision,
                "text": body.get("reason"),
                "time": when,
            }
        )

    def _state(self, body: dict[str, Any], when: float | None) -> None:
        source, dest = str(body.get("source")), str(body.get("dest"))
        trigger, label = str(body.get("trigger")), str(body.get("label"))
        recovered = trigger == "resume"
        if recovered and self.run_open and not self.crashed:
            self._crash()
        step: dict[str, Any] = {
            "source": source,
            "dest": dest,
            "node": element_id("state", dest),  # the diagram's element of ``dest``
            "trigger": trigger,
            "label": label,
            "edge": self._edge(source, dest, trigger, label),
            "time": when,
            "run": self.run,
            "items": [],
            "calls": [],
            "recovered": recovered,
        }
        if self.reply is not None and trigger == "model_replied" and dest != "executing_tools":
            step["items"].append(self.reply)  # the answer that ended the run (or looped)
        self.reply = None
        self.steps.append(step)
        number = len(self.steps) - 1
        turn = self.turns[-1] if self.turns else None
        if (
            turn is not None
            and source == State.AWAITING_APPROVAL.value
            and dest == (State.EXECUTING_TOOLS.value)
        ):
            turn["end"] = None  # decided: the batch goes on in its turn
        if turn is not None and turn["end"] is None:
            # A recovered run's turn ended where the log stopped, not when it was resumed.
            ended = self.crash_time if recovered and self.crashed else when
            if source == State.AWAITING_MODEL.value and turn["reply"] is None:
                turn["reply"] = ended
            if dest != State.EXECUTING_TOOLS.value:
                turn["end"] = ended
        if dest == State.AWAITING_MODEL.value:
            self.turns.append(
                {
                    "n": len(self.turns) + 1,
                    "run": self.run,
                    "step": number,
                    "start": when,
                    "reply": None,
                    "end": None,
                    "usage": None,
                    "calls": [],
                }
            )
        elif dest == State.EXECUTING_TOOLS.value and source == State.AWAITING_APPROVAL.value:
            # Decided: the batch's deferred calls go on; their entries are the ones it started.
            step["calls"] = [
                call_id
                for call_id, _ in self.last_calls
                if call_id in self.calls and self.calls[call_id]["end"] is None
            ]
        elif dest == State.EXECUTING_TOOLS.value:
            step["calls"] = [call_id for call_id, _ in self.last_calls]
            for call_id, name in self.last_calls:
                entry = {
                    "id": call_id,
                    "name": name,
                    "start": when,  # until its tool_start line says otherwise
                    "run": when,  # when it began to run: after any wait for a person
                    "end": None,
                    "wait": None,  # {"from", "to"}: waiting for a person's decision
                    "waiting": False,  # still waiting where the log ends
                    "decision": None,
                    "error": False,
                    "repair": False,
                    "item": None,
                }
                self.calls[call_id] = entry
                if turn is not None:
                    turn["calls"].append(entry)
                    turn["step_tools"] = number
        self.state = dest
        self._item({"kind": "state", "time": when})  # the page reads the rest from its step

    # -- helpers ---------------------------------------------------------------------------

    def _crash(self) -> None:
        """Mark where the process died: after the last line it logged in the open run."""
        self.crashed = True
        self.crash_time = self.last_time
        self._item(
            {
                "kind": "crash",
                "text": "the process ended here, during run "
                f"{self.run} (killed or crashed); the log was repaired when it was resumed",
                "time": self.last_time,
            },
            pending=True,
        )

    def _item(self, item: dict[str, Any], *, pending: bool = False) -> int:
        """Append a transcript item; it belongs to the current step, or with ``pending`` to the
        next one (a prompt logged before its run's first state change)."""
        index = len(self.items)
        item["step"] = None
        self.items.append(item)
        if pending:
            self.pending.append(index)
        else:
            self._flush_pending()
            if self.steps:
                self.steps[-1]["items"].append(index)
                item["step"] = len(self.steps) - 1
        return index

    def _flush_pending(self) -> None:
        if not self.steps or not self.pending:
            return
        # A step takes the items waiting for it once the next state change arrives.
        self.steps[-1]["items"].extend(self.pending)
        for index in self.pending:
            self.items[index]["step"] = len(self.steps) - 1
        self.pending = []

    def _edge(self, source: str, dest: str, trigger: str, label: str) -> str | None:
        if source not in _STATES or dest not in _STATES:
            return None
        exact = self.edges.get((source, dest, trigger, label))
        if exact is not None:
            return exact
        loose = self.edges.get((source, dest, trigger, ""))
        if loose is not None:
            return loose
        extra = (source, dest, _plain_name(trigger))
        if extra not in self.extra_edges:
            self.extra_edges.append(extra)
        return f"edge_x{self.extra_edges.index(extra)}"

    def _summary(self) -> dict[str, Any]:
        data = self.data
        header: dict[str, Any] = data.header or {}
        notes = [f"line {n}: unreadable (skipped): {why}" for n, why in data.corrupt]
        notes += [
            f"line {n}: torn at the end of the log (dropped): {why}" for n, why in data.torn_tail
        ]
        notes += data.notes
        return {
            "file": data.path.name,
            "model": header.get("model"),
            "tools": [str(t) for t in header.get("tools") or []],
            "created": header.get("created_at"),
            "runs": self.run,
            "turns": len(self.turns),
            "messages": len(data.messages),
            "state": self.state,
            "usage": _usage(data.usage),
            "repairs": sum(1 for item in self.items if item.get("repair")),
            "notes": notes,
        }


def _waited(calls: list[dict[str, Any]], log_end: float | None) -> float:
    """Seconds of a turn during which some call waited for a person (the union of the calls'
    waits; a wait still open ends where the log ends)."""
    spans = sorted(
        (c["wait"]["from"], c["wait"]["to"] if c["wait"]["to"] is not None else log_end)
        for c in calls
        if c["wait"] is not None and c["wait"]["from"] is not None
    )
    total, reach = 0.0, -math.inf
    for start, end in spans:
        if end is None:
            continue
        if end > reach:
            total += end - max(start, reach)
            reach = end
    return round(total, 6)


def _page_graph() -> DiagramGraph:
    """The built-in machine as the page draws it: the overview (one edge per (source, dest)
    pair, labelled with its branches' labels; ``active`` and ``ended`` as composites)."""
    return diagram_graph(None, detail="overview")


def _edge_index() -> dict[tuple[str, str, str, str], str]:
    """``(source, dest, trigger, label)`` -> the element id of the overview edge that draws the
    branch: the merged edge of its (source, dest) pair, or the edge from a group's composite for
    a branch written for the group (``abort`` from ``executing_tools`` lights ``active ->
    aborted``). The same edge also under an empty label (a label the machine no longer has
    still finds its pair's edge)."""
    machine = LoopMachine()
    graph = _page_graph()
    drawn = {group.name: set(group.members) for group in graph.groups}
    pairs: dict[tuple[str, str], str] = {}
    for number, edge in enumerate(graph.edges):
        pairs.setdefault((edge.source, edge.dest), f"edge_{number}")
    index: dict[tuple[str, str, str, str], str] = {}
    for spec in machine.specs:
        dest, trigger = str(spec.dest), str(spec.trigger)
        for source in map(str, spec.sources):
            group = next((g for g in spec.groups if source in drawn.get(g, ())), source)
            element = pairs[(group, dest)]
            index.setdefault((source, dest, trigger, spec.name), element)
            index.setdefault((source, dest, trigger, ""), element)
    return index


def _plain_name(text: str) -> str:
    """``text`` with every character but letters, digits, ``_`` and ``.`` as ``_`` (a log's
    trigger name goes into the diagram's DOT source)."""
    return "".join(ch if ch.isalnum() or ch in "_." else "_" for ch in text)[:60] or "_"


def _usage(usage: Usage) -> dict[str, int]:
    return {
        "input_tokens": usage.input_tokens,
        "output_tokens": usage.output_tokens,
        "cache_write_tokens": usage.cache_write_tokens,
        "cache_read_tokens": usage.cache_read_tokens,
    }


def _block(block: Any) -> dict[str, Any]:
    if isinstance(block, TextBlock):
        return {"type": "text", "text": block.text}
    if isinstance(block, ThinkingBlock):
        return {"type": "thinking", "text": block.thinking}
    if isinstance(block, ToolCallBlock):
        # The page indents ``input`` itself (JSON.stringify), when it shows the call; the raw
        # text of arguments that did not parse is shown as it came.
        return {
            "type": "call",
            "id": block.id,
            "name": block.name,
            "input": block.input,
            "raw": block.raw_arguments,
            "truncated": block.truncated,
        }
    return {"type": "other", "text": f"[{getattr(block, 'type', 'block')} block]"}


def _content_text(message: UserMessage | ToolResultMessage) -> str:
    return "".join(b.text if isinstance(b, TextBlock) else _image_text(b) for b in message.content)


def _image_text(block: Any) -> str:
    if isinstance(block, ImageBlock):
        return f"[image {block.media_type or block.url or ''}]".replace(" ]", "]")
    return f"[{getattr(block, 'type', 'block')}]"


def _script_json(model: dict[str, Any]) -> str:
    """JSON safe inside ``<script type="application/json">``: no ``<``, ``>`` or ``&`` appears
    literally (they only occur inside JSON strings, where ``\\u003c`` means the same)."""
    text = json.dumps(model, ensure_ascii=False, separators=(",", ":"))
    return text.replace("&", "\\u0026").replace("<", "\\u003c").replace(">", "\\u003e")


def _asset(name: str) -> str:
    return resources.files(__package__).joinpath("html", name).read_text(encoding="utf-8")


# -- the diagram -------------------------------------------------------------------------------


def diagram_svg(extra_edges: list[tuple[str, str, str]] | None = None) -> str:
    """The built-in machine's overview (`_page_graph`) as inline SVG, each state
    ``id="state_NAME"``, each group's composite ``id="group_NAME"`` (`element_id`: a name with
    other characters than letters, digits and ``_`` is encoded) and each edge ``id="edge_N"``
    (its index in the overview; ``edge_xN`` for ``extra_edges``: ``(source, dest, trigger)`` a log
    took that the machine does not draw). Graphviz's ``dot`` draws it; without Graphviz,
    `simple_svg`. The page's script pans and zooms it (``html/page.js``)."""
    builtin = len(_page_graph().edges)
    full = _with_extra(extra_edges or [])
    extra = full.edges[builtin:]
    try:
        svg = render_image(to_dot(full, element_ids=True), "svg").decode()
    except (GraphvizNotFoundError, UsageError, OSError):
        return simple_svg(full, builtin)
    start = svg.find("<svg")
    svg = svg[start:] if start >= 0 else svg
    # Graphviz names the extra edges edge_N after the built-in ones; the page calls them edge_xN.
    for number in range(len(extra)):
        svg = svg.replace(f'id="edge_{builtin + number}"', f'id="edge_x{number}"')
    return svg


def _with_extra(extra_edges: list[tuple[str, str, str]]) -> DiagramGraph:
    """The page's graph (`_page_graph`) with ``(source, dest, trigger)`` edges added at the end."""
    graph = _page_graph()
    extra = tuple(DiagramEdge(s, d, t) for s, d, t in extra_edges)
    return DiagramGraph(graph.name, graph.nodes, (*graph.edges, *extra), graph.groups, graph.detail)


def simple_svg(graph: DiagramGraph, builtin_edges: int | None = None) -> str:
    """A plain layered drawing of ``graph`` (no Graphviz): each group a dashed box around its
    states in one row (``id="group_NAME"``), rows in the order a run goes through them, edges as
    curves labelled with their label lines (a group's edges leave its box). Same element ids as
    `diagram_svg`; edges from ``builtin_edges`` on are the extra ones (``edge_xN``)."""
    builtin = len(graph.edges) if builtin_edges is None else builtin_edges
    members = {group.name: list(group.members) for group in graph.groups}
    unit = {m: g for g, names in members.items() for m in names}
    units: dict[str, list[str]] = {}  # a group, or a state in no group -> its states
    for node in graph.nodes:
        units.setdefault(unit.get(node.name, node.name), []).append(node.name)
    for group, names in members.items():
        units.setdefault(group, names)
    layer = _layers(graph, units, unit)
    rows: dict[int, list[str]] = {}
    for name in units:
        rows.setdefault(layer[name], []).append(name)
    width, row_height, box_w, box_h, gap = 760, 130, 130, 34, 20
    pos: dict[str, tuple[float, float, float, float]] = {}  # centre x, y, width, height
    for row, row_units in sorted(rows.items()):
        states = [s for u in row_units for s in units[u]]
        step = min(box_w + gap, (width - 40) / max(len(states), 1))
        left = (width - step * len(states)) / 2 + step / 2
        y = 50.0 + row * row_height
        for k, name in enumerate(states):
            pos[name] = (left + k * step, y, min(box_w, step - 8), box_h)
        for u in row_units:
            if u in members:
                xs = [pos[m][0] for m in units[u]]
                half = min(box_w, step - 8) / 2 + 10
                pos[u] = ((min(xs) + max(xs)) / 2, y - 8, max(xs) - min(xs) + 2 * half, box_h + 36)
    height = 50 + max(rows) * row_height + 80
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" '
        f'width="{width}pt" height="{height}pt" class="simple">',
        '<defs><marker id="arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="8" '
        'markerHeight="8" markerUnits="userSpaceOnUse" orient="auto-start-reverse"><path d="M0,0L10,5L0,10z"/></marker></defs>',
    ]
    for cluster in graph.groups:
        x, y, w, h = pos[cluster.name]
        out.append(
            f'<g id="{element_id("group", cluster.name)}" class="cluster"><rect x="{x - w / 2:.1f}" '
            f'y="{y - h / 2:.1f}" width="{w:.1f}" height="{h:.1f}" rx="10" fill="none" '
            f'stroke="#777777" stroke-dasharray="5,3"/><text x="{x - w / 2 + 8:.1f}" '
            f'y="{y - h / 2 + 14:.1f}" font-size="12" font-weight="bold" fill="#555555">'
            f"{html.escape(cluster.name)}</text></g>"
        )
    seen: dict[tuple[str, str], int] = {}
    for number, edge in enumerate(graph.edges):
        element = f"edge_{number}" if number < builtin else f"edge_x{number - builtin}"
        nth = seen.get((edge.source, edge.dest), 0)
        seen[(edge.source, edge.dest)] = nth + 1
        x1, y1, w1, h1 = pos[edge.source]
        x2, y2, w2, h2 = pos[edge.dest]
        if edge.source == edge.dest:
            r = 18 + 12 * nth
            sx, sy = x1 - w1 / 2, y1
            path = (
                f"M{sx},{sy - 8} C{sx - 3 * r},{sy - 2 * r} {sx - 3 * r},{sy + 2 * r} {sx},{sy + 8}"
            )
            lx, ly = sx - 2.3 * r, sy - 2 * r
        else:
            if edge.source in members and edge.dest in members[edge.source]:
                x1, y1, w1, h1 = x1 - w1 / 2 + 30, y1 - h1 / 2 + 10, 0.0, 0.0  # its title
            back = 1 if layer[_unit(edge.dest, unit)] < layer[_unit(edge.source, unit)] else -1
            bend = back * (30 + 26 * nth)
            dx, dy = x2 - x1, y2 - y1
            length = math.hypot(dx, dy) or 1.0
            cx, cy = (x1 + x2) / 2 - dy / length * bend, (y1 + y2) / 2 + dx / length * bend
            sx, sy = _border(x1, y1, cx, cy, w1, h1)
            ex, ey = _border(x2, y2, cx, cy, w2, h2)
            path = f"M{sx:.1f},{sy:.1f} Q{cx:.1f},{cy:.1f} {ex:.1f},{ey:.1f}"
            lx, ly = 0.25 * sx + 0.5 * cx + 0.25 * ex, 0.25 * sy + 0.5 * cy + 0.25 * ey
        lines = "".join(  # a text per line, as Graphviz writes them
            f'<text x="{lx:.1f}" y="{ly + 11 * k:.1f}" font-size="10" text-anchor="middle">'
            f"{html.escape(line)}</text>"
            for k, line in enumerate(edge.lines)
        )
        out.append(
            f'<g id="{element}" class="edge"><path d="{path}" fill="none" stroke="black" '
            f'marker-end="url(#arrow)"/>{lines}</g>'
        )
    for node in graph.nodes:
        x, y, w, h = pos[node.name]
        stroke = ' stroke-width="3"' if node.terminal else ""
        out.append(
            f'<g id="{element_id("state", node.name)}" class="node"><rect x="{x - w / 2:.1f}" '
            f'y="{y - h / 2}" width="{w:.1f}" height="{h}" rx="8" fill="white" '
            f'stroke="black"{stroke}/><text x="{x:.1f}" y="{y + 4}" font-size="13" '
            f'text-anchor="middle">{html.escape(node.name)}</text></g>'
        )
    out.append("</svg>")
    return "\n".join(out)


def _unit(name: str, unit: dict[str, str]) -> str:
    return unit.get(name, name)


def _layers(
    graph: DiagramGraph, units: dict[str, list[str]], unit: dict[str, str]
) -> dict[str, int]:
    """Each unit's row (a group with its states, or a state in no group): the longest path from
    the initial state's unit, the edges that close a cycle left out (found depth first, edges
    into the units holding terminal states tried last, so a run's end is drawn below it)."""
    terminal = {n.name for n in graph.nodes if n.terminal}
    ends = {u for u, names in units.items() if terminal & set(names)}
    out: dict[str, list[str]] = {u: [] for u in units}
    for edge in graph.edges:
        a, b = _unit(edge.source, unit), _unit(edge.dest, unit)
        if a != b and b not in out[a]:
            out[a].append(b)
    for targets in out.values():
        targets.sort(key=lambda u: u in ends)
    initial = _unit(_first_initial(graph), unit)
    order: list[str] = []  # reverse postorder: a topological order of the edges kept
    forward: dict[str, list[str]] = {u: [] for u in units}
    on_stack: set[str] = set()
    visited: set[str] = set()

    def visit(u: str) -> None:
        visited.add(u)
        on_stack.add(u)
        for v in out[u]:
            if v in on_stack:
                continue  # closes a cycle: drawn going back up
            forward[u].append(v)
            if v not in visited:
                visit(v)
        on_stack.discard(u)
        order.append(u)

    for u in [initial, *units]:
        if u not in visited:
            visit(u)
    layer = dict.fromkeys(units, 0)
    for u in reversed(order):
        for v in forward[u]:
            layer[v] = max(layer[v], layer[u] + 1)
    return layer


def _first_initial(graph: DiagramGraph) -> str:
    return next((n.name for n in graph.nodes if n.initial), graph.nodes[0].name)


def _border(
    x: float, y: float, toward_x: float, toward_y: float, box_w: float, box_h: float
) -> tuple[float, float]:
    """Where the line from a box's centre ``(x, y)`` toward a point leaves the box."""
    dx, dy = toward_x - x, toward_y - y
    if dx == 0 and dy == 0:
        return x, y
    scale = min(
        (box_w / 2) / abs(dx) if dx else math.inf, (box_h / 2) / abs(dy) if dy else math.inf
    )
    return x + dx * scale, y + dy * scale
