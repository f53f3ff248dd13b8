"""Regenerate ``docs/replay.png`` from a real render: run the offline demo into a scratch
folder, write its replay page with ``statemachine-agent replay --html``, and screenshot the page
in headless Chromium (the command line, nothing else).

Usage: ``python tools/render_replay_png.py [--out docs/replay.png] [--chromium chromium]
[--step N]``. The page opens at its first step, or at ``#step=N`` when ``--step`` is given.
Exits 1 with Chromium's output when the screenshot was not written.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CLI = [sys.executable, "-m", "statemachine_agent"]
# Headless and offline: no first-run tasks, no background requests, no crash reporting.
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--hide-scrollbars",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-default-apps",
    "--disable-sync",
    "--disable-extensions",
    "--metrics-recording-only",
    "--no-default-browser-check",
    "--disable-crash-reporter",
    "--window-size=1400,1000",
    "--virtual-time-budget=5000",  # let the page run its scripts before the shot
]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "replay.png")
    parser.add_argument("--chromium", default=shutil.which("chromium") or "chromium")
    parser.add_argument("--step", type=int, help="open the page at this step (#step=N)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="render-replay-") as scratch:
        base = Path(scratch)
        subprocess.run(
            [*CLI, "demo", "--into", str(base / "demo"), "--delay", "0"],
            check=True,
            stdout=subprocess.DEVNULL,
        )
        page = base / "run.html"
        subprocess.run(
            [*CLI, "replay", str(base / "demo" / "session.jsonl"), "--html", str(page)],
            check=True,
            stdout=subprocess.DEVNULL,
        )
        url = page.as_uri() + (f"#step={args.step}" if args.step is not None else "")
        shot = base / "replay.png"
        done = subprocess.run(
            [
                args.chromium,
                *FLAGS,
                f"--user-data-dir={base / 'profile'}",
                f"--screenshot={shot}",
                url,
            ],
            capture_output=True,
            text=True,
            timeout=120,
        )
        if not shot.exists() or shot.stat().st_size == 0:
            sys.stderr.write(f"chromium wrote no screenshot:\n{done.stdout}{done.stderr}")
            return 1
        args.out.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(shot, args.out)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
