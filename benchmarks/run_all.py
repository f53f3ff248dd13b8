"""Run every benchmark figure and print a summary of the targets (issues 7 and 17).

Each figure runs in its own process (so memory figures are not skewed by the others), with this
interpreter: run it with the benchmark environment's Python to get the pydantic-ai column.

Usage: ``python benchmarks/run_all.py [--quick] [--json PATH]``
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from _common import machine, pydantic_ai_version, skip_note, table

HERE = Path(__file__).resolve().parent
SCRIPTS = [
    "bench_turn_cpu.py",
    "bench_overhead.py",
    "bench_growth.py",
    "bench_parallel.py",
    "bench_abort.py",
    "bench_scale.py",
    "bench_session.py",
    "bench_profile.py",
    "bench_sandbox.py",
    "bench_html.py",
    "bench_embedding.py",
    "bench_durable.py",
    "bench_context.py",
    "bench_mcp.py",
]


def main() -> int:
    passthrough = [a for a in sys.argv[1:] if a == "--quick"]
    out_path = sys.argv[sys.argv.index("--json") + 1] if "--json" in sys.argv else None
    info = machine()
    info["pydantic_ai"] = pydantic_ai_version()
    print("machine:", json.dumps(info))
    if info["pydantic_ai"] is None:
        print(skip_note())
    figures: dict[str, Any] = {}
    failed = []
    begin = time.perf_counter()
    for script in SCRIPTS:
        print(f"\n$ python benchmarks/{script}", flush=True)
        start = time.perf_counter()
        proc = subprocess.run(
            [sys.executable, str(HERE / script), *passthrough],
            capture_output=True,
            text=True,
            check=False,
        )
        for line in proc.stdout.splitlines():
            if line.startswith("JSON "):
                data = json.loads(line[5:])
                figures[data.pop("figure")] = data
            else:
                print(line)
        if proc.returncode != 0:
            failed.append(script)
            print(proc.stderr, file=sys.stderr)
        print(f"({time.perf_counter() - start:.1f} s)")
    rows = []
    for name, data in figures.items():
        for target, met in data.get("targets", {}).items():
            rows.append([name, target, met])
    print()
    print(table(["figure", "target", "met"], rows, "Targets"))
    print(f"\ntotal {time.perf_counter() - begin:.0f} s")
    if out_path:
        Path(out_path).write_text(json.dumps({"machine": info, "figures": figures}, indent=2))
    if failed:
        print("failed:", ", ".join(failed), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
