"""Figure 8: what the bubblewrap sandbox adds to each ``run_command`` (issue 18).

``run_shell`` (the tool's body: start, read the output, wait) in a scratch workspace under /tmp,
unsandboxed and sandboxed (network off, and on), for a trivial command (``true``: the fixed
cost), a Python start (``python -c pass``) and a small unittest run. Commands run one at a time,
the variants interleaved, so the machine's noise falls on all of them alike. Also: the one-time
check that ``bwrap`` works (`check_sandbox`, once per process).

Usage: ``python benchmarks/bench_sandbox.py [--quick]``
"""

from __future__ import annotations

import asyncio
import shlex
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _common import emit, median, quick, table

from statemachine_agent.workspace import Sandbox, SandboxStatus, check_sandbox, run_shell
from statemachine_agent.workspace._sandbox import _probe

TEST = """\
import unittest


class T(unittest.TestCase):
    def test_add(self):
        self.assertEqual(1 + 1, 2)
"""
PYTHON = shlex.quote(sys.executable)  # not a `python3` on PATH, which may be a slow shim
COMMANDS = {
    "true": "true",
    "python -c pass": f"{PYTHON} -c pass",
    "python -m unittest (1 test)": f"{PYTHON} -m unittest -q",
}


async def once(command: str, root: Path, sandbox: SandboxStatus | None) -> float:
    start = time.perf_counter()
    result = await run_shell(command, str(root), None, 60.0, sandbox=sandbox)
    elapsed = time.perf_counter() - start
    assert result.details["exit_code"] == 0, (
        f"{command!r} exited {result.details['exit_code']} (an interpreter the sandbox cannot see, "
        f"e.g. a venv under /tmp, exits 127): {result.content}"
    )
    return elapsed * 1e3


def main() -> dict[str, Any]:
    reps = 10 if quick() else 60
    _probe.cache_clear()
    start = time.perf_counter()
    status = check_sandbox(Sandbox(), warn=False)
    probe_ms = (time.perf_counter() - start) * 1e3
    if not status.active:
        print(f"sandbox unavailable ({status.problem}): figure 8 skipped")
        data: dict[str, Any] = {"skipped": status.problem}
        emit("sandbox", data)
        return data
    networked = check_sandbox(Sandbox(allow_network=True), warn=False)
    variants: dict[str, SandboxStatus | None] = {
        "none": None,
        "sandbox": status,
        "sandbox, network on": networked,
    }
    root = Path(tempfile.mkdtemp(prefix="bench-sandbox-"))
    try:
        (root / "test_t.py").write_text(TEST)
        samples: dict[tuple[str, str], list[float]] = {}
        for label, command in COMMANDS.items():
            for sandbox in variants.values():  # warm-up
                asyncio.run(once(command, root, sandbox))
            for _ in range(reps):
                for variant, sandbox in variants.items():
                    ms = asyncio.run(once(command, root, sandbox))
                    samples.setdefault((label, variant), []).append(ms)
    finally:
        shutil.rmtree(root)
    rows = []
    data = {"reps": reps, "probe_ms": probe_ms, "commands": {}}
    for label in COMMANDS:
        bare = median(samples[(label, "none")])
        boxed = median(samples[(label, "sandbox")])
        net = median(samples[(label, "sandbox, network on")])
        rows.append([label, bare, boxed, net, boxed - bare, boxed / bare])
        data["commands"][label] = {
            "none_ms": bare,
            "sandbox_ms": boxed,
            "sandbox_network_ms": net,
            "added_ms": boxed - bare,
        }
    print(
        table(
            [
                "command",
                "no sandbox ms",
                "sandbox ms",
                "sandbox, network on ms",
                "added ms",
                "sandbox / none",
            ],
            rows,
            "Figure 8: run_command with and without the sandbox (median per command)",
        )
    )
    print(f"one-time check that bwrap works (check_sandbox): {probe_ms:.1f} ms")
    emit("sandbox", data)
    return data


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
