"""Per-turn cost in instructions (valgrind's callgrind): a figure that does not move with the
machine's load, for before/after comparisons of the engine.

Two runs are counted, 20 and 220 turns (the realistic set-up of `bench_turn_cpu`: responses built
per turn, a subscriber attached; one no-op call per turn, or BATCH); the difference over 200 is
the instructions one turn costs, start-up and import cancelled out. Needs
``valgrind`` (Debian package ``valgrind``); an older checkout is measured with ``PYTHONPATH``
pointing at it.

Every counted process runs with ``PYTHONHASHSEED=0``: Python's hash seed changes the order of
sets and the layout of dicts and moved the figure of one commit by a few thousand instructions a
turn between runs (536k-542k at batch 1); with the seed fixed, two runs of one tree gave 545.0k
and 543.4k (the temporary folder's name and memory addresses still vary) and a whole 20-turn run
625,862 and 625,870 a turn, so a difference of tens of thousands is a change of the code. (A seed is a choice: another seed gives another figure
within that spread.) Counts also depend a little on the interpreter's environment (the benchmark
venv counts 545k where the project's venv counts 543k): compare counts made with one interpreter.

The cost of context accounting (issue 13) is the difference with ``--stub-accounting`` (the
meter does nothing, as in `bench_context`'s stubbed configuration): an exact figure where CPU time
on a shared machine only bounds it by its noise.

``--targets`` counts the figures issue 39 sets targets on and prints each with its target (and the
JSON line `run_all.py` collects):

- a turn at batch 1, at most 250k instructions; a turn at batch 4, at most 2.6x that;
- pydantic-ai over a whole 20-turn run, at least 40x ours. Each side is counted twice in the same
  process set-up: a script that imports everything, builds its agent (the model function, the no-op
  tool, a subscriber) inside ``asyncio.run`` and runs 20 turns, and the same script doing no run
  (0 turns). The difference over 20 is a turn of a whole run, the first run's one-time work
  included (lazy imports, schema and validator building the first request does) and start-up,
  import and the agent's construction cancelled out. Our side is `bench_turn_cpu`'s set-up (a
  `FunctionModel` building each response, one no-op call a turn, a subscriber keeping every
  event). pydantic-ai's side (`build_pydantic_ai`) is its ``Agent`` with its ``FunctionModel``
  building each response when asked, the same no-op tool (``tool_plain``) called once a turn, and
  its subscriber equivalent: ``agent.run(..., event_stream_handler=...)`` with a handler keeping
  every event (``PartStartEvent``, ``PartEndEvent``, ``FunctionToolCallEvent``,
  ``FunctionToolResultEvent``, ``FinalResultEvent``). pydantic-ai streams the model's response
  when a handler is given, so its model function is a ``stream_function`` yielding each response
  whole (one ``DeltaToolCall`` a turn, then the text ``done``), as our offline model turns a whole
  response into its stream events. The same agent without a handler (``FunctionModel(function)``,
  as in `bench_overhead`) is counted beside it for reference. pydantic-ai is not a dependency of
  the project: without it in this interpreter its column is skipped with a note (benchmarks/
  README.md, "Setup"). The counts with pydantic-ai take several minutes (its import alone is about
  3.3G instructions, slowed some 50x under callgrind).

``--breakdown`` counts where a turn goes (`PARTS`): the same set-up with no subscriber (the
difference is the events), the minimal loop of `bench_turn_cpu` (the same responses and result
messages with no engine), the same loop awaiting each call in a task of its own (the difference
is what a call's task costs any loop) and the benchmark's model function alone (building the
responses).

Usage: ``python benchmarks/bench_instructions.py [BATCH] [--stub-accounting] [--targets |
--breakdown]``
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent

ONE_RUN = """
import asyncio, sys
sys.path.insert(0, {here!r})
from bench_turn_cpu import build, noop, responder
n, batch, stub, part = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3] == "1", sys.argv[4]
if stub:  # the context meter does nothing (as bench_context's stubbed configuration)
    from statemachine_agent._accounting import ContextMeter, ContextUsage
    constant = ContextUsage(0, 0, 0, None)
    ContextMeter.counted = lambda self, messages, usage: None
    ContextMeter.deferred = lambda self, messages, window: constant
if part in ("engine", "no_subscriber"):
    agent, seen = build(n, batch, subscribe=part == "engine")
    asyncio.run(agent.run("go"))
elif part in ("minimal", "minimal_call_tasks"):
    from _common import minimal_run
    tasks = part == "minimal_call_tasks"
    asyncio.run(minimal_run(responder(n, batch), noop, call_tasks=tasks))
else:  # "responses": the model function alone, called as often as a run asks it
    respond = responder(n, batch)
    for _ in range(n + 1):
        respond(None, None)
"""

PARTS = {
    "engine": "a turn: the engine, a subscriber keeping every event (the headline set-up)",
    "no_subscriber": "the same run with no subscriber (no event is built)",
    "minimal": (
        "the minimal loop (`_common.minimal_run`): the same responses and result messages, "
        "no engine"
    ),
    "minimal_call_tasks": "the minimal loop awaiting each call in an asyncio task of its own",
    "responses": "building the responses alone (the benchmark's model function)",
}
"""The runs `--breakdown` counts, each a turn's part of the headline set-up."""

# A whole run of N turns (argv[1]; 0: the same script doing no run), built by ``bench_instructions.
# {build}``; both sides of the pydantic-ai comparison use this script, only the builder differs.
WHOLE_RUN = """
import asyncio, sys
sys.path.insert(0, {here!r})
from bench_instructions import {build} as build
turns = int(sys.argv[1])

async def main() -> None:
    go, seen = build(turns)
    if turns:
        await go()
        print("EVENTS", len(seen))

asyncio.run(main())
"""

TARGET_PER_TURN = 250_000
TARGET_BATCH4_RATIO = 2.6
TARGET_PYDANTIC_AI_RATIO = 40.0
WHOLE_RUN_TURNS = 20

Go = Callable[[], Awaitable[None]]


def callgrind(script: Path, turns: int, folder: Path, *args: str) -> tuple[int, str]:
    """Instructions callgrind counted for one run of ``script`` with ``turns`` (its first argument)
    and ``args`` after it, and what the script printed; the callgrind file is written in
    ``folder``. The process runs with ``PYTHONHASHSEED=0`` (see the module's docstring).

    Raises:
        subprocess.CalledProcessError: the script failed (its stderr is in the exception).
    """
    tag = ".".join((script.stem, str(turns), *args))
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
        timeout=1800,
        env={**os.environ, "PYTHONHASHSEED": "0"},
    )
    match = re.search(r"Collected : (\d+)", done.stderr)
    assert match is not None, done.stderr[-500:]
    return int(match.group(1)), done.stdout


def instructions(script: Path, turns: int, folder: Path, *args: str) -> int:
    """Instructions callgrind counted for one run of ``script`` with ``turns`` turns (its first
    argument) and ``args`` after it; the callgrind file is written in ``folder``."""
    return callgrind(script, turns, folder, *args)[0]


def per_turn(batch: int, stub: bool = False, part: str = "engine") -> float:
    """Instructions one turn of ``batch`` calls costs: 220 turns minus 20, over 200 (``part``:
    which run of `PARTS` is counted)."""
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        script = folder / "one_run.py"
        script.write_text(ONE_RUN.format(here=str(HERE)))
        run_args = (str(batch), "1" if stub else "0", part)
        short = instructions(script, 20, folder, *run_args)
        long = instructions(script, 220, folder, *run_args)
    return (long - short) / 200


def whole_run(build: str) -> tuple[float, int]:
    """Instructions a turn of a whole 20-turn run built by ``build`` (a function of this module):
    the run minus the same script doing no run, over 20; and the events its subscriber kept."""
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        script = folder / f"whole_{build}.py"
        script.write_text(WHOLE_RUN.format(here=str(HERE), build=build))
        none, _ = callgrind(script, 0, folder)
        run, printed = callgrind(script, WHOLE_RUN_TURNS, folder)
    events = re.search(r"EVENTS (\d+)", printed)
    assert events is not None, printed
    return (run - none) / WHOLE_RUN_TURNS, int(events.group(1))


async def noop() -> str:
    """Do nothing."""
    return "ok"


def build_ours(turns: int) -> tuple[Go, list[Any]]:
    """`bench_turn_cpu`'s realistic set-up for a run of ``turns`` turns (one no-op call each,
    then ``done``), a subscriber keeping every event: the run to await and the events kept."""
    from bench_turn_cpu import build

    agent, seen = build(turns, 1)

    async def go() -> None:
        result = await agent.run("go")
        assert result.state == "done", (result.state, result.error)

    return go, seen


def build_pydantic_ai(turns: int, streamed: bool = True) -> tuple[Go, list[Any]]:
    """pydantic-ai's ``Agent`` doing the same run: a ``FunctionModel`` building each response when
    asked (one call of the no-op tool a turn for ``turns`` turns, then ``done``) and, when
    ``streamed``, an ``event_stream_handler`` keeping every event (its subscriber equivalent;
    the model function is then a ``stream_function`` yielding each response whole). Returns the
    run to await and the events kept. Needs pydantic-ai (ImportError without it)."""
    from pydantic_ai import Agent, RunContext
    from pydantic_ai.messages import (
        AgentStreamEvent,
        ModelMessage,
        ModelResponse,
        TextPart,
        ToolCallPart,
    )
    from pydantic_ai.models.function import AgentInfo, DeltaToolCall, DeltaToolCalls, FunctionModel
    from pydantic_ai.usage import UsageLimits

    asked = 0
    seen: list[Any] = []

    def respond(_messages: list[ModelMessage], _info: AgentInfo) -> ModelResponse:
        nonlocal asked
        asked += 1
        if asked > turns:
            return ModelResponse(parts=[TextPart("done")])
        return ModelResponse(parts=[ToolCallPart("noop", {}, tool_call_id=f"call_{asked}_0")])

    async def respond_stream(
        _messages: list[ModelMessage], _info: AgentInfo
    ) -> AsyncIterator[str | DeltaToolCalls]:
        nonlocal asked
        asked += 1
        if asked > turns:
            yield "done"
            return
        yield {0: DeltaToolCall(name="noop", json_args="{}", tool_call_id=f"call_{asked}_0")}

    async def keep(_ctx: RunContext[None], events: AsyncIterable[AgentStreamEvent]) -> None:
        async for event in events:
            seen.append(event)

    model = FunctionModel(stream_function=respond_stream) if streamed else FunctionModel(respond)
    agent = Agent(model)
    agent.tool_plain(noop)

    async def go() -> None:
        result = await agent.run(
            "go",
            usage_limits=UsageLimits(request_limit=None),
            event_stream_handler=keep if streamed else None,
        )
        assert result.output == "done" and asked == turns + 1, (result.output, asked)

    return go, seen


def build_pydantic_ai_plain(turns: int) -> tuple[Go, list[Any]]:
    """`build_pydantic_ai` with no event handler and a plain model function (`bench_overhead`'s
    set-up): the reference without a subscriber."""
    return build_pydantic_ai(turns, streamed=False)


def targets() -> dict[str, Any]:
    """Count the issue 39 figures, print each against its target and emit the JSON line.

    Returns:
        The JSON line's data: the figures, ``targets`` (target name -> met, None when not
        measured) and ``not_measured`` (target name -> why).
    """
    from _common import SETUP, emit, pydantic_ai_version

    single, four = per_turn(1), per_turn(4)
    ours, our_events = whole_run("build_ours")
    print(f"{single / 1000:.0f}k instructions a turn, batch 1 (target <= 250k)")
    print(f"{four / 1000:.0f}k batch 4: {four / single:.2f}x batch 1 (target <= 2.6x)")
    print(
        f"{ours / 1000:.0f}k a turn over a whole {WHOLE_RUN_TURNS}-turn run, ours "
        f"({our_events} events kept)"
    )
    data: dict[str, Any] = {
        "per_turn": single,
        "per_turn_batch_4": four,
        "batch_4_over_1": four / single,
        "whole_run_per_turn": ours,
        "whole_run_events": our_events,
        "hash_seed": 0,
        "not_measured": {},
    }
    ratio = None
    version = pydantic_ai_version()
    if version is None:
        why = f"pydantic-ai is not importable in this interpreter (set up: {SETUP})"
        data["not_measured"]["pydantic_ai_whole_run_ge_40x_ours"] = why
        print(f"pydantic-ai column skipped: {why}")
    else:
        pai, pai_events = whole_run("build_pydantic_ai")
        plain, _ = whole_run("build_pydantic_ai_plain")
        ratio = pai / ours
        print(
            f"{pai / 1e6:.2f}M a turn, pydantic-ai {version} with an event_stream_handler "
            f"({pai_events} events kept): {ratio:.1f}x ours (target >= 40x); without a "
            f"handler {plain / 1e6:.2f}M ({plain / ours:.1f}x)"
        )
        data.update(
            pydantic_ai_version=version,
            pydantic_ai_whole_run_per_turn=pai,
            pydantic_ai_whole_run_events=pai_events,
            pydantic_ai_plain_whole_run_per_turn=plain,
            pydantic_ai_over_ours=ratio,
            pydantic_ai_plain_over_ours=plain / ours,
        )
    data["targets"] = {
        "per_turn_le_250k": single <= TARGET_PER_TURN,
        "batch_4_le_2_6x_single": four / single <= TARGET_BATCH4_RATIO,
        "pydantic_ai_whole_run_ge_40x_ours": (
            None if ratio is None else ratio >= TARGET_PYDANTIC_AI_RATIO
        ),
    }
    emit("instructions", data)
    return data


def breakdown(batch: int = 1) -> dict[str, float]:
    """Count each run of `PARTS` and print where a turn goes: the events (a turn with a
    subscriber less one without), the minimal loop (of which building the responses), and the
    engine's own work besides those two. Returns the counts by part."""
    from _common import table

    counts = {part: per_turn(batch, part=part) for part in PARTS}
    rows = [[what, f"{counts[part] / 1000:.1f}k"] for part, what in PARTS.items()]
    events = counts["engine"] - counts["no_subscriber"]
    own = counts["no_subscriber"] - counts["minimal"]
    rows += [
        [
            "the events a subscriber receives (a turn less the run with no subscriber)",
            f"{events / 1000:.1f}k",
        ],
        [
            "a call's task (the minimal loop with call tasks less the one without)",
            f"{(counts['minimal_call_tasks'] - counts['minimal']) / 1000:.1f}k",
        ],
        [
            "the engine's own work besides events and the minimal loop (its calls' tasks included)",
            f"{own / 1000:.1f}k",
        ],
    ]
    print(f"### Where a turn goes (instructions a turn, batch {batch}, 220 minus 20 turns)")
    print(table(["part", "instructions a turn"], rows))
    return counts


def main() -> None:
    if shutil.which("valgrind") is None:
        why = "valgrind is not installed (apt-get install valgrind)"
        print(f"{why}: skipped")
        if "--targets" in sys.argv:
            from _common import emit

            names = ("per_turn_le_250k", "batch_4_le_2_6x_single")
            names += ("pydantic_ai_whole_run_ge_40x_ours",)
            emit(
                "instructions",
                {"targets": dict.fromkeys(names), "not_measured": dict.fromkeys(names, why)},
            )
        return
    if "--targets" in sys.argv:
        targets()
        return
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    if "--breakdown" in sys.argv:
        breakdown(int(args[0]) if args else 1)
        return
    batch = int(args[0]) if args else 1
    stub = "--stub-accounting" in sys.argv
    figure = per_turn(batch, stub)
    what = ", context meter stubbed" if stub else ""
    print(
        f"{figure / 1000:.0f}k instructions per turn (20 vs 220 turns, batch {batch}{what}, "
        "PYTHONHASHSEED=0)"
    )


if __name__ == "__main__":
    main()
