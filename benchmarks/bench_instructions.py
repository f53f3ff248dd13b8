"""Per-turn cost in instructions (valgrind's callgrind): a figure that does not move with the
machine's load, for before/after comparisons of the engine.

Two runs are counted, 20 and 220 turns (the realistic set-up of `bench_turn_cpu`: responses built
per turn, a subscriber attached; one no-op call per turn, or BATCH); the difference over 200 is
the instructions one turn costs, start-up and import cancelled out. Needs
``valgrind`` (Debian package ``valgrind``); an older checkout is measured with ``PYTHONPATH``
pointing at it.

Usage: ``python benchmarks/bench_instructions.py [BATCH]``
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ONE_RUN = """
import asyncio, sys
sys.path.insert(0, {here!r})
from bench_turn_cpu import build
n, batch = int(sys.argv[1]), int(sys.argv[2])
agent, seen = build(n, batch)
asyncio.run(agent.run("go"))
"""


def instructions(script: Path, turns: int, folder: Path, batch: int = 1) -> int:
    """Instructions callgrind counted for one run of ``turns`` turns."""
    done = subprocess.run(
        [
            "valgrind",
            "--tool=callgrind",
            f"--callgrind-out-file={folder / f'cg.{turns}'}",
            sys.executable,
            str(script),
            str(turns),
            str(batch),
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=600,
    )
    match = re.search(r"Collected : (\d+)", done.stderr)
    assert match is not None, done.stderr[-500:]
    return int(match.group(1))


def main() -> None:
    if shutil.which("valgrind") is None:
        print("valgrind is not installed (apt-get install valgrind): skipped")
        return
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        script = folder / "one_run.py"
        script.write_text(ONE_RUN.format(here=str(Path(__file__).resolve().parent)))
        batch = int(sys.argv[1]) if len(sys.argv) > 1 else 1
        short = instructions(script, 20, folder, batch)
        long = instructions(script, 220, folder, batch)
    print(
        f"{(long - short) / 200 / 1000:.0f}k instructions per turn (20 vs 220 turns, batch {batch})"
    )


if __name__ == "__main__":
    main()
