"""The cost of a sub-agent call (``agent.as_tool``) over a plain tool call, per call.

Two parents of N turns, one call a turn: to a plain no-op tool, or to a sub-agent that answers at
once (one scripted response, no tool). The difference per call is what a child run costs: its
claim, its machine's transitions, its events (passed on to the parent's subscriber) and its
result. Measured two ways:

- instructions (valgrind's callgrind), 20 vs 220 turns, the difference over 200: a figure that
  does not move with the machine's load (skipped without ``valgrind``);
- CPU and wall time of N turns, repeated: the median and the spread (min-max) of each.

Usage: ``python benchmarks/bench_subagent.py [--quick]``
"""

from __future__ import annotations

import asyncio
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench_instructions import instructions

from statemachine_agent import Agent, tool
from statemachine_agent.models import ScriptedModel


@tool
def noop() -> str:
    """Do nothing."""
    return "ok"


def build(turns: int, nested: bool) -> Agent:
    """A parent of ``turns`` turns, each one call (to ``noop`` or to a sub-agent), then an answer;
    a subscriber attached (the realistic set-up: events are built)."""
    steps: list[dict[str, Any]] = []
    for i in range(turns):
        name, args = ("child", {"prompt": "go"}) if nested else ("noop", {})
        block = {"type": "tool_use", "id": f"t{i}", "name": name, "input": args}
        steps.append({"content": [block], "stop_reason": "tool_use"})
    steps.append({"content": [{"type": "text", "text": "done"}], "stop_reason": "end_turn"})
    answer = {"content": [{"type": "text", "text": "ok"}], "stop_reason": "end_turn"}
    tools: list[Any] = [noop]
    if nested:
        child = Agent(ScriptedModel([answer] * turns))
        tools = [child.as_tool("child", "A sub-agent.")]
    agent = Agent(ScriptedModel(steps), tools=tools, max_turns=turns + 1)
    agent.subscribe(lambda event: None)
    return agent


ONE_RUN = """
import asyncio, sys
sys.path.insert(0, {here!r})
from bench_subagent import build
agent = build(int(sys.argv[1]), sys.argv[2] == "1")
asyncio.run(agent.run("go"))
"""


def timed(turns: int, nested: bool) -> tuple[float, float]:
    agent = build(turns, nested)
    cpu, wall = time.process_time(), time.perf_counter()
    result = asyncio.run(agent.run("go"))
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    assert result.state.value == "done", result.error
    return cpu, wall


def main() -> None:
    quick = "--quick" in sys.argv
    turns, repeats = (50, 3) if quick else (200, 7)
    rows = {}
    for nested in (False, True):
        samples = [timed(turns, nested) for _ in range(repeats)]
        rows[nested] = samples
        label = "sub-agent call" if nested else "plain tool call"
        for index, what in ((0, "CPU"), (1, "wall")):
            per_call = [s[index] / turns * 1e6 for s in samples]
            print(
                f"{label:16} {what:4} {statistics.median(per_call):7.0f} µs per turn "
                f"(min {min(per_call):.0f}, max {max(per_call):.0f}; {repeats} runs of {turns})"
            )
    extra = [
        (rows[True][i][0] - rows[False][i][0]) / turns * 1e6 for i in range(repeats)
    ]  # paired by repeat
    print(
        f"a sub-agent call costs {statistics.median(extra):.0f} µs CPU more than a plain call "
        f"(the median of the {repeats} runs' paired differences, not the difference of the "
        f"medians above; min {min(extra):.0f}, max {max(extra):.0f})"
    )
    if shutil.which("valgrind") is None:
        print("valgrind is not installed (apt-get install valgrind): instructions skipped")
        return
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        script = folder / "one_run.py"
        script.write_text(ONE_RUN.format(here=str(Path(__file__).resolve().parent)))
        per_turn = {}
        for nested in (False, True):
            short = instructions(script, 20, folder, "1" if nested else "0")
            long = instructions(script, 220, folder, "1" if nested else "0")
            per_turn[nested] = (long - short) / 200
    print(
        f"instructions per turn: plain {per_turn[False] / 1000:.0f}k, sub-agent "
        f"{per_turn[True] / 1000:.0f}k: a sub-agent call costs "
        f"{(per_turn[True] - per_turn[False]) / 1000:.0f}k more (20 vs 220 turns)"
    )


if __name__ == "__main__":
    main()
