"""Per-turn cost in instructions (valgrind's callgrind): a figure that does not move with the
machine's load, for before/after comparisons of the engine.

Two runs are counted, 20 and 220 turns (the realistic set-up of `bench_turn_cpu`: responses built
per turn, a subscriber attached; one no-op call per turn, or BATCH); the difference over 200 is
the instructions one turn costs, start-up and import cancelled out. Needs
``valgrind`` (Debian package ``valgrind``); an older checkout is measured with ``PYTHONPATH``
pointing at it.

The cost of context accounting (issue 13) is the difference with ``--stub-accounting`` (the
meter does nothing, as in `bench_context`'s stubbed configuration): an exact figure where CPU time
on a shared machine only bounds it by its noise.

Usage: ``python benchmarks/bench_instructions.py [BATCH] [--stub-accounting]``
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
n, batch, stub = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3] == "1"
if stub:  # the context meter does nothing (as bench_context's stubbed configuration)
    from statemachine_agent._accounting import ContextMeter, ContextUsage
    constant = ContextUsage(0, 0, 0, None)
    ContextMeter.counted = lambda self, messages, usage: None
    ContextMeter.deferred = lambda self, messages, window: constant
agent, seen = build(n, batch)
asyncio.run(agent.run("go"))
"""


def instructions(script: Path, turns: int, folder: Path, *args: str) -> int:
    """Instructions callgrind counted for one run of ``script`` with ``turns`` turns (its first
    argument) and ``args`` after it; the callgrind file is written in ``folder``."""
    tag = ".".join((str(turns), *args))
    done = subprocess.run(
        [
            "valgrind",
            "--tool=callgrind",
            f"--callgrind-out-file={folder / f'cg.{tag}'}",
            sys.executable,
            str(script),
            str(turns),
            *args,
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=900,
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
        args = [a for a in sys.argv[1:] if not a.startswith("--")]
        batch = int(args[0]) if args else 1
        stub = "--stub-accounting" in sys.argv
        run_args = (str(batch), "1" if stub else "0")
        short = instructions(script, 20, folder, *run_args)
        long = instructions(script, 220, folder, *run_args)
    what = ", context meter stubbed" if stub else ""
    print(
        f"{(long - short) / 200 / 1000:.0f}k instructions per turn (20 vs 220 turns, batch "
        f"{batch}{what})"
    )


if __name__ == "__main__":
    main()
