"""Helpers for the real-kill tests: start a child script, watch its session log, SIGKILL it.

The moment of the kill is decided by a predicate on the log's complete lines (parsed JSON objects),
polled every few milliseconds, never by a fixed sleep after start. Markers are lines ``start ID`` /
``end ID`` that the children's tools append, so a test can count how often each call really ran.
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
SAFETY_SECONDS = 60.0  # only ends a hung poll; nothing is asserted about time
POLL_SECONDS = 0.002

LogLines = list[dict[str, Any]]


def load_script(script: Path) -> ModuleType:
    """Import a child script as a module, to build the same agent in the test process."""
    spec = importlib.util.spec_from_file_location(f"_session_{script.stem}", script)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def complete_lines(log: Path) -> LogLines:
    """The log's complete (newline-terminated) lines, parsed; a partly written tail is left out."""
    if not log.exists():
        return []
    raw = log.read_bytes()
    return [json.loads(line) for line in raw[: raw.rfind(b"\n") + 1].splitlines() if line]


def run_and_kill(
    script: Path,
    log: Path,
    markers: Path,
    when: Callable[[LogLines], bool],
    *,
    then_wait_seconds: float = 0.0,
) -> bool:
    """Run ``python script LOG MARKERS`` and SIGKILL it once ``when(lines)`` holds, after a further
    ``then_wait_seconds``.

    Returns:
        True when the child was killed, False when it exited on its own first.

    Raises:
        AssertionError: the child exited with an error, or neither happened within the safety net.
    """
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    child = subprocess.Popen([sys.executable, str(script), str(log), str(markers)], env=env)
    killed = False
    try:
        deadline = time.monotonic() + SAFETY_SECONDS
        while child.poll() is None and not when(complete_lines(log)):
            assert time.monotonic() < deadline, f"{script.name}: kill condition never met"
            time.sleep(POLL_SECONDS)
        if child.poll() is None and then_wait_seconds > 0:
            time.sleep(then_wait_seconds)
        if child.poll() is None:
            child.send_signal(signal.SIGKILL)
            killed = True
    finally:
        if child.poll() is None:  # an assertion above: do not leave the child behind
            child.kill()
        code = child.wait()
    assert killed or code == 0, f"{script.name} exited with {code}"
    return killed


def marker_counts(markers: Path, kind: str) -> Counter[str]:
    """How many ``kind`` (``start`` or ``end``) markers each call id has."""
    if not markers.exists():
        return Counter()
    return Counter(
        line.split()[1] for line in markers.read_text().splitlines() if line.startswith(kind + " ")
    )
