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
import os
import re
import tempfile
from importlib import resources
from pathlib import Path
from typing import Any

from .._errors import UsageError
from ._html_diagram import diagram_svg
from ._html_model import page_model
from ._read import SessionData, read_session

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


def _script_json(model: dict[str, Any]) -> str:
    """JSON safe inside ``<script type="application/json">``: no ``<``, ``>`` or ``&`` appears
    literally (they only occur inside JSON strings, where ``\\u003c`` means the same)."""
    text = json.dumps(model, ensure_ascii=False, separators=(",", ":"))
    return text.replace("&", "\\u0026").replace("<", "\\u003c").replace(">", "\\u003e")


def _asset(name: str) -> str:
    return resources.files(__package__).joinpath("html", name).read_text(encoding="utf-8")
