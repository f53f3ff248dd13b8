"""Session logs: append-only JSONL persistence, crash-safe resume, dangling-call repair, and
compaction at turn boundaries.

``Agent(model, session="run.jsonl")`` logs a new session; ``Agent.resume("run.jsonl", model=...,
tools=...)`` continues one after a crash or a normal exit. See the README section "Persisting and
resuming a session".
"""

from __future__ import annotations

from .._session_seam import SessionLogLike, SessionSupport, provide_sessions
from ._check import check_session
from ._compaction import (
    SUMMARY_PREFIX,
    Summarize,
    compact,
    compact_history,
    find_cut_points,
    kept_tokens_start,
    kept_window_start,
)
from ._errors import SessionCorruptError
from ._html import render_html, write_html
from ._html_model import page_model
from ._log import RECOVERED, SessionLog, attach_session
from ._read import (
    FORMAT,
    NO_RESULT_RECORDED,
    VERSION,
    PausedSpan,
    Record,
    SessionData,
    SessionTrace,
    load_history,
    read_session,
)

__all__ = [
    "FORMAT",
    "NO_RESULT_RECORDED",
    "RECOVERED",
    "SUMMARY_PREFIX",
    "VERSION",
    "PausedSpan",
    "Record",
    "SessionCorruptError",
    "SessionData",
    "SessionLog",
    "SessionLogLike",
    "SessionTrace",
    "Summarize",
    "attach_session",
    "check_session",
    "compact",
    "compact_history",
    "find_cut_points",
    "kept_tokens_start",
    "kept_window_start",
    "load_history",
    "page_model",
    "read_session",
    "render_html",
    "write_html",
]

# The core's `Agent(session=...)` and `Agent.resume` reach this package through this seam.
provide_sessions(SessionSupport(attach=attach_session, open=SessionLog.open))
