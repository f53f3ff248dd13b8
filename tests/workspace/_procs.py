"""Looking at processes by PID (from /proc), to check that a command left nothing running."""

from __future__ import annotations

import os
import time
from pathlib import Path


def _stat(pid: int) -> tuple[str, int] | None:
    """(state, process group) of ``pid``, or None when it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[1].split()
    return fields[0], int(fields[2])


def _alive(pid: int) -> bool:
    stat = _stat(pid)
    return stat is not None and stat[0] not in ("Z", "X")


def live_members(pgid: int) -> list[int]:
    """Processes of group ``pgid`` that are not zombies (from /proc)."""
    alive = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            stat = _stat(int(entry))
            if stat is not None and stat[1] == pgid and stat[0] not in ("Z", "X"):
                alive.append(int(entry))
    return alive


def _parents() -> dict[int, int]:
    parents = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            parents[int(entry)] = int(stat.rsplit(")", 1)[1].split()[1])
    return parents


def descendants(pid: int | None = None) -> list[int]:
    """Live descendants of ``pid`` (default: this test process), by host PID, from /proc."""
    root = os.getpid() if pid is None else pid
    parents = _parents()
    found: list[int] = []
    frontier = [root]
    while frontier:
        parent = frontier.pop()
        children = [child for child, up in parents.items() if up == parent]
        found += children
        frontier += children
    return [p for p in found if _alive(p)]


def cmdline(pid: int) -> list[str]:
    """The command line of ``pid`` ([] when it is gone)."""
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    return [part.decode(errors="replace") for part in raw.split(b"\0")[:-1]]


def pids_running(*argv: str) -> list[int]:
    """Live processes started by this test process (at any depth) whose command line is
    exactly ``argv`` (e.g. ``sleep 300.25``): other people's processes never count."""
    return [pid for pid in descendants() if cmdline(pid) == list(argv)]


def _settle(check: object) -> list[int]:
    """SIGKILLed processes take a moment to be gone: poll a little before judging."""
    assert callable(check)
    for _ in range(50):
        alive: list[int] = check()
        if not alive:
            return []
        time.sleep(0.1)
    result: list[int] = check()
    return result


def survivors_after_settling(pgid: int) -> list[int]:
    """Live members of group ``pgid``, after a moment for killed ones to go."""
    return _settle(lambda: live_members(pgid))


def still_alive_after_settling(pids: list[int]) -> list[int]:
    """Which of ``pids`` are still alive, after a moment for killed ones to go."""
    return _settle(lambda: [pid for pid in pids if _alive(pid)])
