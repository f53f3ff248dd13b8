"""The terminal views of a run: `LiveView` (rich) and `JsonLinesView` (one JSON event a line).

`LiveView` keeps finished things (streamed answers, tool results, state transitions) in the
scrollback and shows what is happening now below them in a rich ``Live`` region: the machine's
state, turn and token counters, the text being streamed, and a spinner per running tool call.

A sub-agent's events (``event.parent`` set, see `Agent.as_tool`) are shown indented under the
parent's call, four spaces a level, with their own state, turn and streamed text: they never
change the parent's status line (only the token counter, which counts the whole run tree, as
the parent's ``RunResult.counts.usage`` does).
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import IO, Any

from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.padding import Padding
from rich.spinner import Spinner
from rich.table import Table
from rich.text import Text

from .._events import (
    Event,
    MessageDelta,
    MessageEnd,
    MessageStart,
    ModelRetry,
    ParentRef,
    RunEnd,
    RunStart,
    StateChanged,
    ToolExecutionEnd,
    ToolExecutionStart,
    TurnEnd,
    TurnStart,
    event_to_dict,
)
from .._machine import State
from .._messages import AssistantMessage, ToolCallBlock, Usage
from .._result import RunResult
from ..workspace import INSTALL_HINT, CallPreview, SandboxStatus
from ._result_text import LINE_WIDTH, call_summary, result_lines, result_mark

STATE_STYLES = {
    "idle": "dim",
    "awaiting_model": "bold cyan",
    "executing_tools": "bold yellow",
    "done": "bold green",
    "aborted": "bold red",
    "max_turns": "bold magenta",
    "failed": "bold red",
}
NESTED_INDENT = 4
"""How many columns a sub-agent's activity is indented per level in the live view."""


_DIFF_STYLES = (("+++", "bold"), ("---", "bold"), ("@@", "cyan"), ("+", "green"), ("-", "red"))


def preview_renderable(preview: CallPreview) -> Text:
    """A permission prompt's `CallPreview` for the terminal: a diff with its added lines green
    and removed ones red (colors show only where the console supports them), a new file's head
    indented, a command in bold; the preview's note (what was trimmed) dim under it."""
    out = Text()
    for line in preview.text.splitlines():
        style = ""
        if preview.kind == "diff":
            style = next((s for prefix, s in _DIFF_STYLES if line.startswith(prefix)), "")
        elif preview.kind == "command":
            style = "bold"
        out.append(f"    {line}\n", style=style)
    if preview.note:
        out.append(f"    {preview.note}\n", style="dim")
    out.rstrip()
    return out


def usage_text(usage: Usage) -> str:
    """``1,234 in / 56 out tokens`` (cache reads and writes added when present)."""
    text = f"{usage.input_tokens:,} in / {usage.output_tokens:,} out tokens"
    if usage.cache_read_tokens or usage.cache_write_tokens:
        text += f" (cache {usage.cache_read_tokens:,} read / {usage.cache_write_tokens:,} written)"
    return text


PYTHON_ADVICE = " To continue, call run() again"
"""Where the engine's ``max_turns`` error starts telling a Python caller how to continue."""


def final_line(result: RunResult, *, continue_hint: str | None = None) -> Text:
    """The last line of a run: terminal state, turns, usage, and the error when there is one.

    Args:
        continue_hint: for a run that ended ``max_turns`` or ``aborted``, how to continue it
            (a command line); it replaces the engine's advice to Python callers.
    """
    state = result.state.value
    line = Text.assemble(
        (state, STATE_STYLES.get(state, "bold")),
        f" · {result.turns} turn{'s' if result.turns != 1 else ''} · {usage_text(result.usage)}",
    )
    error = result.error
    hint = continue_hint if result.state in (State.MAX_TURNS, State.ABORTED) else None
    if error and hint is not None:
        error = error.split(PYTHON_ADVICE, 1)[0]
    if error and result.state is not State.DONE:
        line.append(f"\n{error}", style="red" if result.state is State.FAILED else "")
    if hint is not None:
        line.append(f"\n{hint}", style="bold")
    return line


def sandbox_line(status: SandboxStatus) -> Text:
    """What ``run_command`` can reach, said before a run: green when sandboxed; when not, red
    (turned off) or a yellow warning with how to get the sandbox (bubblewrap unavailable)."""
    if status.active:
        return Text.assemble(("Sandbox: on. ", "bold green"), (status.describe(), "green"))
    if status.problem is None:
        return Text.assemble(("Sandbox: OFF. ", "bold red"), (status.describe(), "red"))
    return Text.assemble(
        ("Warning: sandbox unavailable. ", "bold yellow"),
        (status.describe(), "yellow"),
        (
            f". {INSTALL_HINT} --sandbox=require refuses to run without it; --no-sandbox turns "
            "it off without this warning.",
            "yellow",
        ),
    )


@dataclass
class NestedRun:
    """A run as the live view shows it: its own state, turn and streamed text; a sub-agent's is
    drawn indented under the parent's call.

    Attributes:
        depth: 0 for the agent the view follows, 1 for its sub-agent, 2 for that one's, ...
        name: the tool name of the call that runs it (`ParentRef.tool_name`).
    """

    depth: int
    name: str
    state: str = "idle"
    turn: int = 0
    streaming: str = ""
    preparing: str | None = None

    def progress(self) -> list[RenderableType]:
        """What its model is writing: the streamed text, and the call being written."""
        parts: list[RenderableType] = []
        if self.streaming.strip():
            parts.append(Text(self.streaming))
        if self.preparing:
            parts.append(Spinner("dots", text=Text(f"writing the {self.preparing} call", "dim")))
        return parts

    def render(self) -> RenderableType:
        """Its `progress` over a status line: name, state, turn."""
        parts = self.progress()
        parts.append(
            Text.assemble(
                (f"{self.name}  ", "bold"),
                (self.state, STATE_STYLES.get(self.state, "bold")),
                (f"  turn {self.turn}", "dim"),
            )
        )
        return Group(*parts)


class LiveView:
    """Renders an agent's events on a rich console (subscribe `handle` to the agent).

    `handle` only updates the view's state and queues what to print: the terminal is written by
    a drawing thread (and rich's refresh thread), so a slow terminal never holds up the agent's
    event loop (a subscriber must return quickly; see `Agent.subscribe`).

    Args:
        console: where to draw.
        show_transitions: print each state transition as a dim line.
    """

    def __init__(self, console: Console, *, show_transitions: bool = True) -> None:
        self.console = console
        self.show_transitions = show_transitions
        # Lines are cut to fit a terminal; anywhere else (a file, a pipe) they are kept whole.
        self.width: int | None = LINE_WIDTH if console.is_terminal else None
        self.own = NestedRun(0, "")  # the followed agent's own run
        self.usage = Usage()
        # Running calls by id (a sub-agent's by ``run_id/call id``: ids repeat across runs).
        self.running: dict[str, tuple[ToolCallBlock, RenderableType]] = {}
        # The sub-agent runs under way, by run id.
        self.nested: dict[str, NestedRun] = {}
        self.notice: str | None = None
        self.started = time.monotonic()
        self._paused = False
        self._held: list[RenderableType] = []
        self._queue: queue.SimpleQueue[RenderableType | threading.Event | None] = (
            queue.SimpleQueue()
        )
        self._drawer: threading.Thread | None = None
        self._live = Live(
            console=console,
            get_renderable=self._render,
            refresh_per_second=12,
            transient=True,
            redirect_stdout=False,
            redirect_stderr=False,
        )

    # -- lifecycle ------------------------------------------------------------------------------

    def __enter__(self) -> LiveView:
        self._live.start()
        self._drawer = threading.Thread(target=self._draw, name="live-view", daemon=True)
        self._drawer.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._drawer is not None:
            self._queue.put(None)
            self._drawer.join()
            self._drawer = None
        self._live.stop()

    def _draw(self) -> None:
        """The drawing thread: prints what `handle` queued, in order, until None."""
        while (item := self._queue.get()) is not None:
            if isinstance(item, threading.Event):
                item.set()  # `_flush` waits for this: everything before it is printed
            else:
                self._live.console.print(item)

    def _flush(self) -> None:
        """Wait until the drawing thread has printed everything queued so far."""
        if self._drawer is not None:
            printed = threading.Event()
            self._queue.put(printed)
            printed.wait()

    @contextmanager
    def paused(self) -> Iterator[None]:
        """Stop drawing (e.g. while a prompt waits for an answer); what events print meanwhile
        is held and printed after."""
        self._flush()
        self._paused = True
        self._live.stop()
        try:
            yield
        finally:
            self._live.start()
            self._paused = False
            for renderable in self._held:
                self._print(renderable)
            self._held.clear()

    def note(self, text: str) -> None:
        """Show ``text`` under the status line (e.g. "aborting...")."""
        self.notice = text

    def _print(self, renderable: RenderableType) -> None:
        if self._paused:
            self._held.append(renderable)
        elif self._drawer is not None:
            self._queue.put(renderable)
        else:  # not entered: nothing draws in the background
            self._live.console.print(renderable)

    # -- events ---------------------------------------------------------------------------------

    def handle(self, event: Event) -> None:
        """Update the view with one event: the followed agent's own run, or a sub-agent's (its
        own lane, `NestedRun`, its lines indented one level deeper than the run that called it)."""
        ref = event.parent
        if ref is None:
            lane, indent, key = self.own, 0, ""
        else:
            lane = self.nested.get(event.run_id) or self._open_lane(event.run_id, ref)
            indent, key = lane.depth * NESTED_INDENT, f"{event.run_id}/"  # ids repeat across runs

        def print_(renderable: RenderableType) -> None:
            self._print(Padding(renderable, (0, 0, 0, indent)) if indent else renderable)

        if isinstance(event, RunStart):
            if ref is not None:
                print_(Text(f"↳ {lane.name} (call {ref.call_id})", style="dim"))
        elif isinstance(event, StateChanged):
            lane.state = event.dest
            if self.show_transitions:
                print_(
                    Text.assemble(
                        ("" if indent else "  ", ""),
                        (event.source, "dim"),
                        (" → ", "dim"),
                        (event.dest, STATE_STYLES.get(event.dest, "")),
                        (f"  ({event.trigger}: {event.label})", "dim"),
                    )
                )
        elif isinstance(event, TurnStart | TurnEnd):
            lane.turn = event.turn
        elif isinstance(event, MessageStart):
            lane.streaming, lane.preparing = "", None
        elif isinstance(event, MessageDelta):
            if event.kind == "text":
                lane.streaming += event.delta
            elif event.kind == "tool_call":
                lane.preparing = event.tool_name or lane.preparing
        elif isinstance(event, MessageEnd) and isinstance(event.message, AssistantMessage):
            self.usage = self.usage + event.message.usage  # the tree's total, as counts.usage
            text = event.message.text.strip()
            if text:
                print_(Text(text))
            lane.streaming, lane.preparing = "", None
        elif isinstance(event, ToolExecutionStart):
            spinner = Spinner("dots", text=Text(call_summary(event.call), style="yellow"))
            shown = Padding(spinner, (0, 0, 0, indent)) if indent else spinner
            self.running[key + event.call.id] = (event.call, shown)
        elif isinstance(event, ToolExecutionEnd):
            self.running.pop(key + event.call.id, None)
            mark, style = result_mark(event.result)
            print_(
                Text.assemble(
                    (f"{mark} ", style),
                    (call_summary(event.call), "bold"),
                    (" — ", "dim"),
                    (result_lines(event.result, width=self.width), "dim" if mark == "✓" else style),
                )
            )
        elif isinstance(event, ModelRetry):
            print_(
                Text(
                    f"model request failed ({event.error}); retry {event.attempt} in "
                    f"{event.delay_seconds:g} s",
                    style="yellow",
                )
            )
        elif isinstance(event, RunEnd):
            lane.state = state = event.result.state.value
            if ref is not None:
                del self.nested[event.run_id]
                turns = event.result.turns
                print_(
                    Text.assemble(
                        (f"↳ {lane.name}: ", "dim"),
                        (state, STATE_STYLES.get(state, "bold")),
                        (f" · {turns} turn{'s' if turns != 1 else ''}", "dim"),
                    )
                )

    def _open_lane(self, run_id: str, ref: ParentRef) -> NestedRun:
        """The lane of a sub-agent run seen for the first time: one level deeper than its
        caller's."""
        outer = self.nested.get(ref.run_id)
        depth = outer.depth + 1 if outer is not None else 1
        lane = self.nested[run_id] = NestedRun(depth, ref.tool_name or "sub-agent")
        return lane

    # The followed run's own lane, read as the view's attributes (the status line draws them).
    @property
    def state(self) -> str:
        return self.own.state

    @property
    def turn(self) -> int:
        return self.own.turn

    @property
    def streaming(self) -> str:
        return self.own.streaming

    @property
    def preparing(self) -> str | None:
        return self.own.preparing

    # -- drawing --------------------------------------------------------------------------------

    def _status(self) -> Table:
        grid = Table.grid(padding=(0, 2))
        grid.add_row(
            Text(self.state, style=STATE_STYLES.get(self.state, "bold")),
            Text(f"turn {self.turn}", style="dim"),
            Text(usage_text(self.usage), style="dim"),
            Text(f"{time.monotonic() - self.started:.0f} s", style="dim"),
        )
        return grid

    def _render(self) -> RenderableType:
        parts = self.own.progress()
        # A snapshot: the refresh thread draws while the loop's thread updates the view.
        parts.extend(spinner for _, spinner in list(self.running.values()))
        for lane in list(self.nested.values()):
            parts.append(Padding(lane.render(), (0, 0, 0, lane.depth * NESTED_INDENT)))
        if self.state == "awaiting_model" and not self.streaming and not self.preparing:
            parts.append(Spinner("dots", text=Text("waiting for the model", style="dim")))
        parts.append(self._status())
        if self.notice:
            parts.append(Text(self.notice, style="yellow"))
        return Group(*parts)


class JsonLinesView:
    """Writes each event as one JSON line (``event_to_dict``) for scripts.

    When the reader goes away (``... --json | head -1``: a broken pipe), writing stops quietly,
    the stream's file descriptor is pointed at ``/dev/null`` (so the interpreter's last flush
    does not fail either, as the Python documentation on SIGPIPE advises) and ``on_closed`` is
    called once, e.g. to abort the run as ``git log | head`` stops ``git``.

    Args:
        stream: where to write (flushed after each line).
        run_start: fields added to each ``run_start`` line (e.g. ``{"sandbox": {...}}``).
        on_closed: called once when the reader has gone away.

    Attributes:
        closed: the reader went away (the CLI then exits with 141, as a shell reports SIGPIPE).
    """

    def __init__(
        self,
        stream: IO[str],
        run_start: dict[str, Any] | None = None,
        on_closed: Callable[[], object] | None = None,
    ) -> None:
        self.stream = stream
        self.run_start = run_start or {}
        self.on_closed = on_closed
        self.closed = False

    def handle(self, event: Event) -> None:
        """Write ``event`` as a JSON line."""
        if self.closed:
            return
        data = event_to_dict(event)
        if data.get("type") == "run_start":
            data = {**data, **self.run_start}
        try:
            self.stream.write(json.dumps(data, ensure_ascii=False, default=str) + "\n")
            self.stream.flush()
        except BrokenPipeError:
            self.closed = True
            with contextlib.suppress(OSError, ValueError):
                devnull = os.open(os.devnull, os.O_WRONLY)
                os.dup2(devnull, self.stream.fileno())
                os.close(devnull)
            if self.on_closed is not None:
                self.on_closed()


EventHandler = Callable[[Event], Any]
