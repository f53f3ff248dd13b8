"""The data of a session's HTML page (`page_model`): a plain JSON model the page's script builds
the page from (``textContent`` only). The page itself is written by `render_html` (``_html``)."""

from __future__ import annotations

import math
from typing import Any

from .._diagram import element_id
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
from ._html_diagram import page_graph
from ._read import SessionData

_STATES = {s.value for s in State}
_RESTING = {State.IDLE.value, *(s.value for s in TERMINAL_STATES)}  # between runs


def page_model(data: SessionData) -> dict[str, Any]:
    """The page's data: ``items`` (transcript entries in log order), ``steps`` (one per state
    change: the state entered, its diagram element ``node`` (`element_id`), the edge taken,
    the items and tool calls it highlights), ``turns`` (each model request with its tool calls'
    ``start``, ``run`` and ``end`` times in seconds from the first line, the ``wait`` for a
    person's decision between ``start`` and ``run``, and the turn's seconds ``waited``), the
    ``summary``, ``extra_edges`` (transitions
    the log took that the built-in machine does not draw, e.g. ``resume``) and ``end`` (the
    last line's seconds).

    A tool call that ran a sub-agent (`SessionData.children`) has its run under its result
    item's ``child`` (under the call's block in its ``assistant`` item when the log ends before
    the call's result: the run as far as it got, its last state its ``state``): the sub-agent's ``tool`` name, ``run_id``, final ``state``, ``turns``,
    ``usage``, and its own ``items`` and ``steps`` (the same shapes, its own state changes), its
    sub-agents' under their results in turn. The page folds it under the call."""
    return _Builder(data).build()


def _child_model(child: SessionData) -> dict[str, Any]:
    """A sub-agent run's part of the page's data (see `page_model`)."""
    built = _Builder(child).build()
    link = child.link or {}
    summary = built["summary"]
    return {
        "tool": link.get("tool_name") or "sub-agent",
        "call": link.get("call_id"),
        "run_id": link.get("run_id"),
        "state": summary["state"],
        "turns": summary["turns"],
        "usage": summary["usage"],
        "items": built["items"],
        "steps": built["steps"],
    }


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
        self.answered_children: set[str] = set()  # call ids whose result holds their sub-agent

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
        self._fold_open_children()
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

    def _fold_open_children(self) -> None:
        """A sub-agent run whose call has no result (the log ends inside it: the process died
        while it ran) goes under the call itself, as far as it got."""
        children = self.data.children
        if len(self.answered_children) == len(children):
            return
        for item in self.items:
            if item["kind"] != "assistant":
                continue
            for block in item["blocks"]:
                call_id = block.get("id")
                if (
                    block["type"] == "call"
                    and call_id in children
                    and call_id not in self.answered_children
                ):
                    block["child"] = _child_model(children[call_id])

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
        child = self.data.children.get(message.tool_call_id)
        if child is not None:
            self.items[index]["child"] = _child_model(child)
            self.answered_children.add(message.tool_call_id)
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


def _edge_index() -> dict[tuple[str, str, str, str], str]:
    """``(source, dest, trigger, label)`` -> the element id of the overview edge that draws the
    branch: the merged edge of its (source, dest) pair, or the edge from a group's composite for
    a branch written for the group (``abort`` from ``executing_tools`` lights ``active ->
    aborted``). The same edge also under an empty label (a label the machine no longer has
    still finds its pair's edge)."""
    machine = LoopMachine()
    graph = page_graph()
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
