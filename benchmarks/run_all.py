"""Run every benchmark figure and print a summary of the targets (issues 7, 17 and 39).

Each figure runs in its own process (so memory figures are not skewed by the others), with this
interpreter: run it with the benchmark environment's Python to get the pydantic-ai column.

The summary ends with issue 39's targets (`ISSUE_39`), each with the figure it is read from and
PASS or NO. A target is PASS only when its figure was measured in this run and meets it: when the
script it comes from is not in the checkout, failed, or skipped the figure (no valgrind, no
pydantic-ai, no PostgreSQL binaries...), the row says "not measured" and why.

Usage: ``python benchmarks/run_all.py [--quick] [--issue-39] [--json PATH]`` (``--issue-39``:
only the scripts issue 39's targets are read from).
"""

from __future__ import annotations

import json
import operator
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
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
    "bench_bytes.py",
    "bench_instructions.py --targets",
    "bench_mcp.py",
]


@dataclass(frozen=True)
class Target:
    """One target of issue 39 and where its figure is read from.

    Attributes:
        name: the target in the issue's words.
        script: the command line (relative to ``benchmarks/``) that measures it.
        figure: the name of the script's JSON line (``emit``'s first argument).
        path: the dotted key of the figure in that line.
        unit: the figure's unit, printed after it.
        compare: ``operator.le``, ``operator.lt`` or ``operator.ge``: figure against ``limit``.
        limit: the issue's bound, in ``unit``.
        key: the script's name for the target (in its ``targets`` and ``not_measured``).
    """

    name: str
    script: str
    figure: str
    path: str
    unit: str
    compare: Callable[[float, float], bool]
    limit: float
    key: str


INSTRUCTIONS = "bench_instructions.py --targets"
ISSUE_39 = [
    Target(
        "instructions a turn, batch 1",
        INSTRUCTIONS,
        "instructions",
        "per_turn",
        "instructions",
        operator.le,
        250_000,
        "per_turn_le_250k",
    ),
    Target(
        "instructions a turn, batch 4 over batch 1",
        INSTRUCTIONS,
        "instructions",
        "batch_4_over_1",
        "x",
        operator.le,
        2.6,
        "batch_4_le_2_6x_single",
    ),
    Target(
        "pydantic-ai's instructions over ours, a whole 20-turn run",
        INSTRUCTIONS,
        "instructions",
        "pydantic_ai_over_ours",
        "x",
        operator.ge,
        40,
        "pydantic_ai_whole_run_ge_40x_ours",
    ),
    Target(
        "a call + result pair in the history",
        "bench_bytes.py",
        "bytes",
        "pair_bytes",
        "bytes",
        operator.le,
        1536,
        "pair_le_1_5kib",
    ),
    Target(
        "an idle agent",
        "bench_bytes.py",
        "bytes",
        "idle_agent_bytes",
        "bytes",
        operator.lt,
        10240,
        "idle_agent_lt_10kib",
    ),
    Target(
        "DBOS records a turn, one idempotent call",
        "bench_durable.py",
        "durable",
        "overhead.ours.records_per_call_turn",
        "records",
        operator.le,
        2,
        "records_per_turn_idempotent_le_2",
    ),
    Target(
        "DBOS records a turn, one non-idempotent call",
        "bench_durable.py",
        "durable",
        "overhead.ours_marker.records_per_call_turn",
        "records",
        operator.le,
        3,
        "records_per_turn_non_idempotent_le_3",
    ),
    Target(
        "durable overhead a turn over the bare-DBOS floor, SQLite",
        "bench_durable.py",
        "durable",
        "overhead.ours.overhead_over_floor",
        "x",
        operator.le,
        1.3,
        "overhead_within_1_3x_floor_sqlite",
    ),
    Target(
        "durable overhead a turn over the bare-DBOS floor, Postgres",
        "bench_durable.py",
        "durable",
        "overhead_postgres.ours.overhead_over_floor",
        "x",
        operator.le,
        1.3,
        "overhead_within_1_3x_floor_postgres",
    ),
]

SIGNS = {operator.le: "<=", operator.lt: "<", operator.ge: ">="}


def _number(value: float, unit: str) -> str:
    text = f"{value:,.2f}" if abs(value) < 100 else f"{value:,.0f}"
    return f"{text}x" if unit == "x" else f"{text} {unit}"


def _read(data: Mapping[str, Any], path: str) -> float | None:
    value: Any = data
    for part in path.split("."):
        value = value.get(part) if isinstance(value, Mapping) else None
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def issue_39_rows(
    figures: Mapping[str, Mapping[str, Any]], outcomes: Mapping[str, str | None]
) -> list[list[str]]:
    """Issue 39's targets as table rows: target, figure, bound, verdict.

    Args:
        figures: the JSON lines of this run, by figure name (``emit``'s first argument).
        outcomes: each script's outcome in this run, by its command line: None when it ran to
            the end, else why not ("not in this checkout", "failed (exit 1)"...); a script
            absent from it was not run.

    Returns:
        One row a target. The verdict is "PASS" only when the figure was measured in this run
        and meets the bound, "NO" when it was measured and does not, else "not measured: " and
        the reason (the script's own ``not_measured`` entry when it gave one).
    """
    rows = []
    for target in ISSUE_39:
        bound = f"{SIGNS[target.compare]} {_number(target.limit, target.unit)}"
        data = figures.get(target.figure, {})
        value = _read(data, target.path)
        if target.script not in outcomes:
            why = f"{target.script} was not run"
        elif outcomes[target.script] is not None:
            why = f"{target.script}: {outcomes[target.script]}"
        elif value is None:
            given = data.get("not_measured", {})
            why = given.get(target.key) if isinstance(given, Mapping) else None
            why = why or f"{target.script} printed no {target.path}"
        else:
            met = target.compare(value, target.limit)
            rows.append([target.name, _number(value, target.unit), bound, "PASS" if met else "NO"])
            continue
        rows.append([target.name, "-", bound, f"not measured: {why}"])
    return rows


def verdict(met: Any) -> str:
    """A script's own target flag as the summary prints it (None: not measured)."""
    if met is None:
        return "not measured"
    return "PASS" if met else "NO"


def run(script: str, passthrough: list[str]) -> tuple[list[dict[str, Any]], str | None]:
    """Run one script (a command line relative to ``benchmarks/``) and echo its output.

    Returns:
        Its JSON lines, and None when it ran to the end, else why not.
    """
    name, *args = script.split()
    if not (HERE / name).exists():
        print(f"(benchmarks/{name} is not in this checkout: skipped)")
        return [], "not in this checkout"
    proc = subprocess.run(
        [sys.executable, str(HERE / name), *args, *passthrough],
        capture_output=True,
        text=True,
        check=False,
    )
    lines = []
    for line in proc.stdout.splitlines():
        if line.startswith("JSON "):
            lines.append(json.loads(line[5:]))
        else:
            print(line)
    if proc.returncode != 0:
        print(proc.stderr, file=sys.stderr)
        return lines, f"failed (exit {proc.returncode})"
    return lines, None


def main() -> int:
    passthrough = [a for a in sys.argv[1:] if a == "--quick"]
    out_path = sys.argv[sys.argv.index("--json") + 1] if "--json" in sys.argv else None
    scripts = SCRIPTS
    if "--issue-39" in sys.argv:
        scripts = list(dict.fromkeys(t.script for t in ISSUE_39))
    info = machine()
    info["pydantic_ai"] = pydantic_ai_version()
    print("machine:", json.dumps(info))
    if info["pydantic_ai"] is None:
        print(skip_note())
    figures: dict[str, Any] = {}
    outcomes: dict[str, str | None] = {}
    begin = time.perf_counter()
    for script in scripts:
        print(f"\n$ python benchmarks/{script}", flush=True)
        start = time.perf_counter()
        lines, outcomes[script] = run(script, passthrough)
        for data in lines:
            figures[data.pop("figure")] = data
        print(f"({time.perf_counter() - start:.1f} s)")
    rows = []
    for name, data in figures.items():
        for target, met in data.get("targets", {}).items():
            rows.append([name, target, verdict(met)])
    print()
    print(table(["figure", "target", "met"], rows, "Targets"))
    print()
    print(
        table(
            ["target", "measured", "bound", "met"],
            issue_39_rows(figures, outcomes),
            "Issue 39: each target with its figure (instructions, bytes and records do not move "
            "with the machine's load; the durable overhead is CPU time and does)",
        )
    )
    print(f"\ntotal {time.perf_counter() - begin:.0f} s")
    if out_path:
        Path(out_path).write_text(json.dumps({"machine": info, "figures": figures}, indent=2))
    failed = [s for s, why in outcomes.items() if why is not None and why.startswith("failed")]
    if failed:
        print("failed:", ", ".join(failed), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
