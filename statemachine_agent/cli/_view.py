"""The terminal views of a run: `LiveView` (rich) and `JsonLinesView` (one JSON event a line).

`LiveView` keeps finished things (streamed answers, tool results, state transitions) in the
scrollback and shows what is happening now below them in a rich ``Live`` region: the machine's
state, turn and token counters, the text being streamed, and a spinner per running tool call.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import re
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import IO, Any

from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.spinner import Spinner
from rich.table import Table
from rich.text import Text

from .._events import (
    Event,
    MessageDelta,
    MessageEnd,
    MessageStart,
    ModelRetry,
    RunEnd,
    StateChanged,
    ToolExecutionEnd,
    ToolExecutionStart,
    TurnEnd,
    TurnStart,
    event_to_dict,
)
from .._machine import State
from .._messages import AssistantMessage, ToolCallBlock, ToolResultMessage, Usage
from .._result import RunResult
from ..workspace import INSTALL_HINT, CallPreview, SandboxStatus

STATE_STYLES = {
    "idle": "dim",
    "awaiting_model": "bold cyan",
    "executing_tools": "bold yellow",
    "done": "bold green",
    "aborted": "bold red",
    "max_turns": "bold magenta",
    "failed": "bold red",
}
_ARG_KEYS = ("command", "path")
_LINE = 100


def _short(text: str, limit: int = _LINE) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def call_summary(call: ToolCallBlock) -> str:
    """``name arg`` for a tool call: its command or path, else its arguments as JSON."""
    args = call.input if isinstance(call.input, dict) else {}
    for key in _ARG_KEYS:
        if isinstance(args.get(key), str):
            extra = ""
            if call.name == "read_file" and ("start_line" in args or "end_line" in args):
                extra = f" [{args.get('start_line', 1)}-{args.get('end_line', 'end')}]"
            return f"{call.name} {_short(args[key], 70)}{extra}"
    raw = json.dumps(call.input, ensure_ascii=False) if call.input else ""
    return f"{call.name} {_short(raw, 70)}".rstrip()


ERROR_LINES = 5
"""How many lines of an error result the views show: enough for an invalid-arguments error's
heading and its first field errors."""
HEAD_LINES = 3
"""How many first lines of a tool result without a summary of its own the views show."""
COMMAND_TAIL_LINES = 8
"""How many last lines of a failing command's output the views show (where a test runner or a
compiler says what went wrong); a command that succeeded shows its first `HEAD_LINES`."""
FAILING_TEST_LINES = 5
"""How many lines naming a failing test (`FAILING_TEST`) before a failing command's last lines
the views show too."""
FAILING_TEST = re.compile(r"(?:FAIL|ERROR): \S|(?:FAILED|ERROR) \S")
"""A line naming a failing test: unittest's ``FAIL: test_x (...)`` / ``ERROR: test_x (...)``
headings and pytest's ``FAILED path::test_x - ...`` / ``ERROR path::test_x`` summary lines."""
_EXIT_LINE = re.compile(r"^\[exit code -?\d+\]$")


def _lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.strip()]


def _count(number: int) -> str:
    return f"{number} line{'s' if number != 1 else ''}"


def result_summary(
    result: ToolResultMessage, *, max_lines: int = 1, width: int | None = _LINE
) -> str:
    """A short account of a tool result: the tool's own ``details["summary"]``, else its first
    ``max_lines`` non-empty lines (each cut to ``width`` characters unless ``width`` is None,
    joined by newlines) and ``(+N lines)`` when more follow."""
    summary = result.details.get("summary") if isinstance(result.details, dict) else None
    if isinstance(summary, str):
        return summary
    lines = _lines(result.text)
    shown = "\n".join(_cut(line, width) for line in lines[:max_lines])
    rest = len(lines) - max_lines
    if rest > 0:
        shown += f" (+{_count(rest)})"
    return shown


def _cut(line: str, width: int | None) -> str:
    """``line`` cut to ``width`` characters (None: whole), its spacing kept (a traceback's frames
    are indented under their heading, a file's lines under their numbers)."""
    line = line.rstrip()
    if width is None:
        return line
    line = line.expandtabs(4)  # a line is cut by the characters it shows
    return line if len(line) <= width else line[: width - 1] + "…"


def _failing_command_lines(output: list[str]) -> list[str]:
    """The lines of a failing command's output the views show: the last `COMMAND_TAIL_LINES`,
    and before them the first `FAILING_TEST_LINES` lines naming a failing test (a test runner
    names the test above its traceback), each gap marked ``(… N lines)``."""
    tail = len(output) - COMMAND_TAIL_LINES
    if tail <= 0:
        return output
    named = [i for i in range(tail) if FAILING_TEST.match(output[i].lstrip())]
    shown: list[str] = []
    previous = -1
    for index in [*named[:FAILING_TEST_LINES], *range(tail, len(output))]:
        gap = index - previous - 1
        if gap:
            shown.append(f"(… {_count(gap)} before)" if previous < 0 else f"(… {_count(gap)})")
        shown.append(output[index])
        previous = index
    return shown


def result_mark(result: ToolResultMessage) -> tuple[str, str]:
    """The mark of a finished tool call and its rich style, one rule for every view (the live
    view, ``replay``): ``⏸`` deferred for a person's decision, ``✗`` an error result, ``!`` a
    command that ran and exited with a code other than 0 (worth a look, not a tool error),
    ``✓`` otherwise."""
    details = result.details if isinstance(result.details, dict) else {}
    if details.get("awaiting_approval") is True:
        return "⏸", "yellow"  # deferred: it has not run; a person decides
    if result.is_error:
        return "✗", "red"
    if details.get("exit_code") not in (None, 0):
        return "!", "yellow"
    return "✓", "green"


def result_lines(result: ToolResultMessage, *, width: int | None = _LINE) -> str:
    """A tool result as the views show it (the live view and ``replay``): continuation lines
    indented by four spaces.

    - A command (``details["exit_code"]``): its summary, then the last `COMMAND_TAIL_LINES`
      lines of its output when it failed (with the lines before them that name a failing
      test, `FAILING_TEST`), else the first `HEAD_LINES`.
    - An error result: its first `ERROR_LINES` lines (what is wrong and what to do).
    - Any other result: the tool's own summary (when it has one) and its first `HEAD_LINES`
      lines (a one-line result is its summary alone): e.g. the first lines ``read_file`` read.

    Lines keep their leading indentation.

    Args:
        width: lines longer than this are cut with ``…``; None prints them whole (for output
            that is not a terminal, where nothing should be lost).
    """
    details = result.details if isinstance(result.details, dict) else {}
    if "exit_code" in details:
        summary = str(details.get("summary") or f"exit code {details.get('exit_code')}")
        output = [line for line in _lines(result.text) if not _EXIT_LINE.match(line.strip())]
        if output == ["(no output)"]:
            output = []
        failed = result.is_error or details.get("exit_code") not in (None, 0)
        if failed:
            shown = _failing_command_lines(output)
        else:
            shown = output[:HEAD_LINES]
            if len(output) > HEAD_LINES:
                shown.append(f"(+{_count(len(output) - HEAD_LINES)})")
        text = "\n".join([summary, *(_cut(line, width) for line in shown)])
    elif isinstance(details.get("summary"), str) and not result.is_error:
        text = str(details["summary"])
        output = _lines(result.text)
        if len(output) > 1:
            text += "".join(f"\n{_cut(line, width)}" for line in output[:HEAD_LINES])
            if len(output) > HEAD_LINES:
                text += f" (+{_count(len(output) - HEAD_LINES)})"
    else:
        lines = ERROR_LINES if result.is_error else HEAD_LINES
        summary_only = isinstance(details.get("summary"), str)
        text = result_summary(result, max_lines=1 if summary_only else lines, width=width)
    return text.replace("\n", "\n    ")


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
        self.width: int | None = _LINE if console.is_terminal else None
        self.state = "idle"
        self.turn = 0
        self.usage = Usage()
        self.streaming = ""
        self.preparing: str | None = None
        self.running: dict[str, tuple[ToolCallBlock, Spinner]] = {}
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
        """Update the view with one event."""
        print_ = self._print
        if isinstance(event, StateChanged):
            self.state = event.dest
            if self.show_transitions:
                print_(
                    Text.assemble(
                        ("  ", ""),
                        (event.source, "dim"),
                        (" → ", "dim"),
                        (event.dest, STATE_STYLES.get(event.dest, "")),
                        (f"  ({event.trigger}: {event.label})", "dim"),
                    )
                )
        elif isinstance(event, TurnStart):
            self.turn = event.turn
        elif isinstance(event, MessageStart):
            self.streaming, self.preparing = "", None
        elif isinstance(event, MessageDelta):
            if event.kind == "text":
                self.streaming += event.delta
            elif event.kind == "tool_call":
                self.preparing = event.tool_name or self.preparing
        elif isinstance(event, MessageEnd) and isinstance(event.message, AssistantMessage):
            message = event.message
            self.usage = self.usage + message.usage
            text = message.text.strip()
            if text:
                print_(Text(text))
            self.streaming, self.preparing = "", None
        elif isinstance(event, ToolExecutionStart):
            spinner = Spinner("dots", text=Text(call_summary(event.call), style="yellow"))
            self.running[event.call.id] = (event.call, spinner)
        elif isinstance(event, ToolExecutionEnd):
            self.running.pop(event.call.id, None)
            mark, style = result_mark(event.result)
            print_(
                Text.assemble(
                    (f"{mark} ", style),
                    (call_summary(event.call), "bold"),
                    (" — ", "dim"),
                    (result_lines(event.result, width=self.width), "dim" if mark == "✓" else style),
                )
            )
        elif isinstance(event, TurnEnd):
            self.turn = event.turn
        elif isinstance(event, ModelRetry):
            print_(
                Text(
                    f"model request failed ({event.error}); retry {event.attempt} in "
                    f"{event.delay_seconds:g} s",
                    style="yellow",
                )
            )
        elif isinstance(event, RunEnd):
            self.state = event.result.state.value

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
        parts: list[RenderableType] = []
        if self.streaming.strip():
            parts.append(Text(self.streaming))
        if self.preparing:
            parts.append(Spinner("dots", text=Text(f"writing the {self.preparing} call", "dim")))
        # A snapshot: the refresh thread draws while the loop's thread updates the view.
        parts.extend(spinner for _, spinner in list(self.running.values()))
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
