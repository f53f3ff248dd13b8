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


def pids_running(*argv: str) -> list[int]:
    """Live processes whose command line is exactly ``argv`` (e.g. ``sleep 300.25``)."""
    wanted = "\0".join(argv) + "\0"
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cmdline = Path(f"/proc/{entry}/cmdline").read_text(errors="replace")
        except OSError:
            continue
        if cmdline == wanted and _alive(int(entry)):
            found.append(int(entry))
    return found


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
