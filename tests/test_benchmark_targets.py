"""`benchmarks/run_all.py`'s issue 39 summary: each target printed with its figure, PASS only for
a figure measured in the run that meets its bound (issue 39, "Done when"); a target whose script
is missing, failed or skipped the figure reads "not measured" with the reason, never PASS."""

from __future__ import annotations

import importlib
import json
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


@pytest.fixture
def run_all(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    """`benchmarks/run_all.py` (the benchmarks folder on the path, as when it runs)."""
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    return importlib.import_module("run_all")


ALL_RAN = {
    "bench_instructions.py --targets": None,
    "bench_bytes.py": None,
    "bench_durable.py": None,
}


def measured(**changes: Any) -> dict[str, dict[str, Any]]:
    """A run's JSON lines with every issue 39 figure, meeting every target (``changes``:
    figure name -> key -> value, replacing or, with None, removing a key)."""
    figures: dict[str, dict[str, Any]] = {
        "instructions": {
            "per_turn": 250_000,
            "batch_4_over_1": 2.6,
            "pydantic_ai_over_ours": 40.0,
            "not_measured": {},
        },
        "bytes": {"pair_bytes": 1536, "idle_agent_bytes": 10239},
        "durable": {
            "overhead": {
                "ours": {"records_per_call_turn": 2.0, "overhead_over_floor": 1.3},
                "ours_marker": {"records_per_call_turn": 3.0},
            },
            "overhead_postgres": {"ours": {"overhead_over_floor": 1.3}},
        },
    }
    for figure, keys in changes.items():
        for key, value in keys.items():
            *parents, last = key.split(".")
            holder = figures[figure]
            for part in parents:
                holder = holder[part]
            if value is None:
                del holder[last]
            else:
                holder[last] = value
    return figures


def verdicts(rows: list[list[str]]) -> dict[str, str]:
    return {row[0]: row[3] for row in rows}


def test_every_issue_39_target_is_a_row_with_its_figure_and_bound(run_all: ModuleType) -> None:
    rows = run_all.issue_39_rows(measured(), ALL_RAN)
    assert [row[0] for row in rows] == [
        "instructions a turn, batch 1",
        "instructions a turn, batch 4 over batch 1",
        "pydantic-ai's instructions over ours, a whole 20-turn run",
        "a call + result pair in the history",
        "an idle agent",
        "DBOS records a turn, one idempotent call",
        "DBOS records a turn, one non-idempotent call",
        "durable overhead a turn over the bare-DBOS floor, SQLite",
        "durable overhead a turn over the bare-DBOS floor, Postgres",
    ]
    assert rows[0][1:] == ["250,000 instructions", "<= 250,000 instructions", "PASS"]
    assert rows[2][1:] == ["40.00x", ">= 40.00x", "PASS"]
    assert rows[4][1:] == ["10,239 bytes", "< 10,240 bytes", "PASS"]
    assert set(verdicts(rows).values()) == {"PASS"}


@pytest.mark.parametrize(
    ("figure", "key", "value", "target"),
    [
        ("instructions", "per_turn", 250_001, "instructions a turn, batch 1"),
        ("instructions", "batch_4_over_1", 2.61, "instructions a turn, batch 4 over batch 1"),
        (
            "instructions",
            "pydantic_ai_over_ours",
            39.9,
            "pydantic-ai's instructions over ours, a whole 20-turn run",
        ),
        ("bytes", "pair_bytes", 1537, "a call + result pair in the history"),
        ("bytes", "idle_agent_bytes", 10240, "an idle agent"),
        (
            "durable",
            "overhead.ours.records_per_call_turn",
            2.05,
            "DBOS records a turn, one idempotent call",
        ),
        (
            "durable",
            "overhead.ours_marker.records_per_call_turn",
            5.15,
            "DBOS records a turn, one non-idempotent call",
        ),
        (
            "durable",
            "overhead_postgres.ours.overhead_over_floor",
            4.3,
            "durable overhead a turn over the bare-DBOS floor, Postgres",
        ),
    ],
)
def test_a_figure_past_its_bound_is_no(
    run_all: ModuleType, figure: str, key: str, value: float, target: str
) -> None:
    rows = verdicts(run_all.issue_39_rows(measured(**{figure: {key: value}}), ALL_RAN))
    assert rows[target] == "NO"
    assert [t for t, v in rows.items() if v != "PASS"] == [target]


def test_a_target_whose_script_is_not_in_the_checkout_is_not_measured_never_pass(
    run_all: ModuleType,
) -> None:
    outcomes = {**ALL_RAN, "bench_bytes.py": "not in this checkout"}
    rows = verdicts(run_all.issue_39_rows(measured(), outcomes))
    why = "not measured: bench_bytes.py: not in this checkout"
    assert rows["a call + result pair in the history"] == why
    assert rows["an idle agent"] == why


def test_a_target_whose_script_failed_is_not_measured_even_with_its_figure_printed(
    run_all: ModuleType,
) -> None:
    outcomes = {**ALL_RAN, "bench_durable.py": "failed (exit 1)"}
    rows = verdicts(run_all.issue_39_rows(measured(), outcomes))
    durable = {t: v for t, v in rows.items() if "DBOS" in t}
    assert set(durable.values()) == {"not measured: bench_durable.py: failed (exit 1)"}


def test_a_target_whose_script_was_not_run_is_not_measured(run_all: ModuleType) -> None:
    rows = verdicts(run_all.issue_39_rows(measured(), {}))
    assert all(v.startswith("not measured: ") and v.endswith("was not run") for v in rows.values())


def test_a_figure_the_script_skipped_is_not_measured_with_the_scripts_reason(
    run_all: ModuleType,
) -> None:
    figures = measured(
        instructions={
            "pydantic_ai_over_ours": None,
            "not_measured": {"pydantic_ai_whole_run_ge_40x_ours": "pydantic-ai is not importable"},
            # a script's own flag is not a figure: it never makes a row PASS
            "targets": {"pydantic_ai_whole_run_ge_40x_ours": True},
        },
        durable={"overhead_postgres": None},
    )
    rows = verdicts(run_all.issue_39_rows(figures, ALL_RAN))
    assert rows["pydantic-ai's instructions over ours, a whole 20-turn run"] == (
        "not measured: pydantic-ai is not importable"
    )
    assert rows["durable overhead a turn over the bare-DBOS floor, Postgres"] == (
        "not measured: bench_durable.py printed no overhead_postgres.ours.overhead_over_floor"
    )


def test_a_script_not_in_the_checkout_is_skipped_saying_so(
    run_all: ModuleType, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run_all.run("bench_not_there.py --targets", []) == ([], "not in this checkout")
    assert "benchmarks/bench_not_there.py is not in this checkout" in capsys.readouterr().out


def test_bench_instructions_figures_are_read_under_the_names_run_all_reads(
    run_all: ModuleType, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`bench_instructions --targets`'s JSON line, with the counts stubbed (no valgrind run) and
    no pydantic-ai: run_all reads both instruction figures and the reason for the third."""
    bench = importlib.import_module("bench_instructions")
    common = importlib.import_module("_common")
    monkeypatch.setattr(bench, "per_turn", lambda batch, stub=False: 200_000.0 * (1 + batch) / 2)
    monkeypatch.setattr(bench, "whole_run", lambda build: (300_000.0, 210))
    monkeypatch.setattr(common, "pydantic_ai_version", lambda: None)
    bench.targets()
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("JSON ")]
    data = json.loads(lines[-1][5:])
    figures = {data.pop("figure"): data}
    rows = run_all.issue_39_rows(figures, {"bench_instructions.py --targets": None})
    assert rows[0][1:] == ["200,000 instructions", "<= 250,000 instructions", "PASS"]
    assert rows[1][1:] == ["2.50x", "<= 2.60x", "PASS"]
    assert rows[2][3].startswith("not measured: pydantic-ai is not importable in this interpreter")


def test_bench_instructions_breakdown_reads_each_part_as_a_difference_of_two_counts(
    run_all: ModuleType, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`bench_instructions --breakdown` (counts stubbed): the events are a turn less the run
    with no subscriber, a call's task the minimal loop with call tasks less the one without,
    the engine's own work the run with no subscriber less the minimal loop."""
    bench = importlib.import_module("bench_instructions")
    counts = {
        "engine": 340_000.0,
        "no_subscriber": 270_000.0,
        "minimal": 76_000.0,
        "minimal_call_tasks": 124_000.0,
        "responses": 35_000.0,
    }
    assert set(bench.PARTS) == set(counts)
    monkeypatch.setattr(bench, "per_turn", lambda batch, stub=False, part="engine": counts[part])
    assert bench.breakdown(1) == counts
    rows = {
        line.split("|")[1].strip(): line.split("|")[2].strip()
        for line in capsys.readouterr().out.splitlines()
        if line.startswith("| ") and not line.startswith("| part")
    }
    assert rows["the events a subscriber receives (a turn less the run with no subscriber)"] == (
        "70.0k"
    )
    assert rows["a call's task (the minimal loop with call tasks less the one without)"] == "48.0k"
    assert (
        rows[
            "the engine's own work besides events and the minimal loop (its calls' tasks included)"
        ]
        == "194.0k"
    )


def test_the_minimal_loop_with_call_tasks_awaits_each_call_in_a_task_of_its_own(
    run_all: ModuleType,
) -> None:
    """`_common.minimal_run(call_tasks=True)`: each call runs in a new task, not the loop's own;
    without it, in the loop's own task. The history is the same either way."""
    import asyncio

    common = importlib.import_module("_common")
    bench = importlib.import_module("bench_turn_cpu")
    seen: list[asyncio.Task[Any] | None] = []

    async def tool() -> str:
        seen.append(asyncio.current_task())
        return "ok"

    async def both() -> tuple[list[Any], list[Any], asyncio.Task[Any] | None]:
        plain = await common.minimal_run(bench.responder(3, 2), tool)
        tasks = await common.minimal_run(bench.responder(3, 2), tool, call_tasks=True)
        return plain, tasks, asyncio.current_task()

    plain, tasks, own = asyncio.run(both())
    common.check_minimal(plain, 2, 3)
    common.check_minimal(tasks, 2, 3)
    assert seen[:6] == [own] * 6
    assert own not in seen[6:] and len(set(seen[6:])) == 6
