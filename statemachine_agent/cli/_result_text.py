"""How the terminal views (the live view and ``replay``) write a tool call and its result in
a few lines: `call_summary`, `result_mark`, `result_lines`, `result_summary`."""

from __future__ import annotations

import json
import re

from .._messages import ToolCallBlock, ToolResultMessage

_ARG_KEYS = ("command", "path")
LINE_WIDTH = 100
"""How many characters of a line the views show on a terminal."""


def _short(text: str, limit: int = LINE_WIDTH) -> str:
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
    result: ToolResultMessage, *, max_lines: int = 1, width: int | None = LINE_WIDTH
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


def result_lines(result: ToolResultMessage, *, width: int | None = LINE_WIDTH) -> str:
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
