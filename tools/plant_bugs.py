#!/usr/bin/env python3
"""Issue 23, case 2: plant the sixteen bugs one at a time and see whether ``tests/property`` alone
(profile ``ci``) catches each, how long it took and how small the shrunk example is.

Each bug is one or more exact search/replace edits against the current engine. The repository is
copied once into a temporary folder (as ``tools/mutate.py`` does); each bug is applied to that
copy, ``pytest -x tests/property`` runs there with ``HYPOTHESIS_PROFILE=ci`` (the copy first on
``PYTHONPATH``), and the files are restored before the next bug. The working tree is never changed.

For each bug it prints: caught or SURVIVED, the first test that failed, the wall time until pytest
stopped (collection, the tests before it and hypothesis' shrinking included), that test's own time,
and the size of the falsifying example (runs / responses / tool calls: scenario runs, steps and
calls, or a script's responses and ``tool_use`` blocks). A bug whose text is not in its file (the
engine moved on) is "not applicable": update its edit. The exit status is 1 when any bug survived
or did not apply.

Usage (from the repository root, with the dev venv)::

    .venv/bin/python tools/plant_bugs.py              # all sixteen
    .venv/bin/python tools/plant_bugs.py 11 14        # only these numbers
    .venv/bin/python tools/plant_bugs.py --list
    .venv/bin/python tools/plant_bugs.py --all-tests  # every failing test, not only the first
    .venv/bin/python tools/plant_bugs.py --bugs fresh # issue 40's fresh list (tools/fresh_bugs.py)
    .venv/bin/python tools/plant_bugs.py --bugs fresh --full 3 7  # the README's whole test
                                                      # command with -x, instead of tests/property
    .venv/bin/python tools/plant_bugs.py --bugs mcp --copy-in ..  # issue 36's MCP bugs
        # (tools/mutants_mcp.py) against tests/mcp + the durable MCP test; the copy outside /tmp,
        # which a sandboxed server's bubblewrap hides
    .venv/bin/python tools/plant_bugs.py --bugs subagents --copy-in ..  # issue 37's sub-agent
        # bugs (tools/mutants_subagents.py) against the sub-agent tests
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from mutate import PACKAGE, check_import, copy_repo


@dataclass(frozen=True)
class Edit:
    """Replace ``old`` (exactly once) by ``new`` in ``file`` (relative to the package)."""

    file: str
    old: str
    new: str


@dataclass(frozen=True)
class Bug:
    number: int
    name: str
    edits: tuple[Edit, ...]


def _e(file: str, old: str, new: str) -> tuple[Edit, ...]:
    return (Edit(file, old, new),)


# The sixteen bugs of issue 23, case 2, in the order.
BUGS: tuple[Bug, ...] = (
    Bug(
        1,
        "results in completion order",
        (
            Edit(
                "_execution.py",
                "        slot.result = result\n        if slot.announced:\n",
                "        slot.result = result\n"
                '        self.__dict__.setdefault("_done", []).append(result)\n'
                "        if slot.announced:\n",
            ),
            Edit(
                "_execution.py",
                "            out.append(slot.result)\n        return out\n",
                "            out.append(slot.result)\n"
                '        done = self.__dict__.get("_done", [])\n'
                "        first = [r for r in done if any(r is o for o in out)]\n"
                "        return first + [r for r in out if not any(r is f for f in first)]\n",
            ),
        ),
    ),
    Bug(
        2,
        "unstarted calls left without results on abort",
        _e(
            "_execution.py",
            "            if slot.result is None:\n                if self._terminated",
            "            if slot.result is None and self._signal.aborted and not slot.started:\n"
            "                continue\n"
            "            if slot.result is None:\n                if self._terminated",
        ),
    ),
    Bug(
        3,
        "a raising call's result dropped when a sibling times out",
        _e(
            "_execution.py",
            "            out.append(slot.result)\n        return out\n",
            "            out.append(slot.result)\n"
            '        if any(r.text.startswith("Timed out") for r in out):\n'
            "            out = [r for r in out if not (r.is_error and re.match(r'\\w+Error: ', r.text))]\n"
            "        return out\n",
        )
        + _e("_execution.py", "import json\n", "import json\nimport re\n"),
    ),
    Bug(
        4,
        "the last call of a batch of 4 losing its result",
        _e(
            "_execution.py",
            "            out.append(slot.result)\n        return out\n",
            "            out.append(slot.result)\n        return out[:3] if len(out) >= 4 else out\n",
        ),
    ),
    Bug(
        5,
        "a result sent to the wrong call id when two calls use one tool",
        _e(
            "_execution.py",
            "            out.append(slot.result)\n        return out\n",
            "            out.append(slot.result)\n"
            "        by_tool = {r.tool_name: r for r in out}  # keyed by tool: the last call wins\n"
            "        return [\n"
            '            by_tool[r.tool_name].model_copy(update={"tool_call_id": r.tool_call_id})\n'
            "            for r in out\n"
            "        ]\n",
        ),
    ),
    Bug(
        6,
        "steering delivered before a batch's results",
        _e(
            "_effects.py",
            "        else:\n            _append_results(run, results)\n    if run.signal.aborted:",
            "        else:\n            run.deliver_steering()\n"
            "            _append_results(run, results)\n    if run.signal.aborted:",
        ),
    ),
    Bug(
        7,
        "a truncated call executed",
        _e("_execution.py", "    if call.truncated:\n        return TRUNCATED\n", ""),
    ),
    Bug(
        8,
        "the dangling-call repair skipped",
        _e(
            "_run.py",
            "for repair in answer_dangling(self.messages):  # a given history ended mid-batch",
            "for repair in []:  # a given history ended mid-batch",
        ),
    ),
    Bug(
        9,
        "the turn counter off by one when continuing",
        _e(
            "_agent.py",
            "run = Run(self, turns=self._last_turns, counts=self._last_counts)",
            "run = Run(self, turns=self._last_turns + 1, counts=self._last_counts)",
        ),
    ),
    Bug(
        10,
        "a refusal's calls executed",
        _e(
            "_machine.py",
            "    return data.response is not None and data.response.stop_reason == StopReason.REFUSAL\n",
            "    return (\n"
            "        data.response is not None\n"
            "        and data.response.stop_reason == StopReason.REFUSAL\n"
            "        and not data.response.tool_calls\n"
            "    )\n",
        ),
    ),
    Bug(
        11,
        "cancellation mid-batch leaving a finished call's result unrecorded",
        _e(
            "_execution.py",
            "            if slot.result is None:\n                if self._terminated",
            "            if not hold and slot.started:  # a cancelled batch forgets what finished\n"
            "                slot.result = text_result(slot.call, INTERRUPTED, is_error=True)\n"
            "            if slot.result is None:\n                if self._terminated",
        ),
    ),
    Bug(
        12,
        "an abort as a response completes leaving its calls unanswered",
        _e(
            "_effects.py",
            "    if run.signal.aborted and not response.tool_calls:\n",
            "    if run.signal.aborted:\n",
        ),
    ),
    Bug(
        13,
        "calls after a terminating denial left without results",
        _e(
            "_execution.py",
            "                if self._terminated and not self._signal.aborted:\n"
            "                    text = AFTER_TERMINATION\n",
            "                if self._terminated and not self._signal.aborted:\n"
            "                    continue\n",
        ),
    ),
    Bug(
        14,
        "a raising hook escaping the batch",
        _e(
            "_execution.py",
            '                return _hook_failed("before_tool_call", call, exc)\n',
            "                raise\n",
        ),
    ),
    Bug(
        15,
        "resume not repairing a crashed batch",
        _e(
            "session/_read.py",
            "                repair = text_result(call, NO_RESULT_RECORDED, is_error=True)\n"
            "                data.repairs.append(repair)\n"
            "                data.messages.append(repair)\n",
            "                pass\n",
        ),
    ),
    Bug(
        16,
        "max_turns letting one more turn through",
        _e(
            "_machine.py",
            "return data.turns >= data.max_turns or not data.keep_going",
            "return data.turns > data.max_turns or not data.keep_going",
        ),
    ),
)


@dataclass
class Outcome:
    status: str  # caught, SURVIVED, not applicable, timeout, error
    test: str = ""
    wall: float = 0.0
    test_seconds: float | None = None
    size: str = ""
    tail: str = ""
    example: str = ""


def falsifying_example(output: str) -> str:
    """The first falsifying example in pytest's output ("" when none is printed)."""
    marks = [output.find(m) for m in ("Failing test case:", "Falsifying example")]
    start = min((m for m in marks if m >= 0), default=-1)
    if start >= 0:  # hypothesis: up to its explanation, a state machine's teardown, a blank line
        ends = [output.find(m, start) for m in ("Explanation:", "state.teardown()", "\n\n")]
        end = min((e for e in ends if e >= 0), default=len(output))
        return output[start:end]
    # The exhaustive mode names the scenario it played (one line).
    line = next((ln for ln in output.splitlines() if "Scenario(runs=" in ln), "")
    return line[line.find("Scenario(runs=") :]


def example_size(text: str) -> str:
    """runs/responses/calls of a falsifying example."""
    if not text:
        return "?"
    # Scenario runs, steps and calls; a script's responses and tool_use blocks.
    runs = text.count("RunSpec(") + text.count("script=")
    responses = text.count("Step(") + text.count("'stop_reason'") + text.count('"stop_reason"')
    calls = (
        text.count("Call(") + text.count("'type': 'tool_use'") + text.count('"type": "tool_use"')
    )
    history = "+history" if "history='mid_batch'" in text or "history=[{" in text else ""
    return f"{runs}/{responses}/{calls}{history}"


# ``--full``: every test the README's command runs, the property suite and the behaviour folders
# first so that ``-x`` stops within minutes rather than after the slow CLI and durable folders.
# The paths must not overlap: pytest collects overlapping arguments in the folder's own order.
FIRST = ("property", "loop", "session", "subagents")


def full_order(repo: Path) -> list[str]:
    """The top-level entries of ``repo``'s tests/ that hold tests, ``FIRST`` first."""
    tests = repo / "tests"
    rest = sorted(
        p.name
        for p in tests.iterdir()
        if (p.is_dir() and p.name not in FIRST and p.name != "__pycache__")
        or (p.suffix == ".py" and p.name.startswith("test_"))
    )
    return [f"tests/{name}" for name in (*FIRST, *rest)]


def run_property_suite(
    repo: Path,
    timeout: float,
    stop: bool,
    full: bool = False,
    tests: tuple[str, ...] = ("tests/property",),
    profile: str = "ci",
    seed: int | None = None,
) -> tuple[str, float, str]:
    """Run ``tests`` (hypothesis profile ``profile``, ``ci`` by default; ``tests/property`` by
    default) in ``repo``; with ``full``, the README's whole test command (``pytest -q -rs -p
    no:cacheprovider``, every test, the default profile). ``seed``: ``--hypothesis-seed`` (the
    ``explore`` profile draws fresh examples; a seed makes a run repeatable)."""
    env = {**os.environ, "PYTHONPATH": str(repo), "PYTHONDONTWRITEBYTECODE": "1"}
    if full:
        command = [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", "-rf"]
        command += ["--durations=0", "--durations-min=0.5", *full_order(repo)]
    else:
        env["HYPOTHESIS_PROFILE"] = profile
        command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rf"]
        command += ["--durations=0", "--durations-min=0.5", *tests]
        if seed is not None:
            command.append(f"--hypothesis-seed={seed}")
    if stop:
        command.insert(3, "-x")
    started = time.monotonic()
    try:
        done = subprocess.run(
            command, cwd=repo, env=env, capture_output=True, text=True, timeout=timeout
        )
    except subprocess.TimeoutExpired:
        return "timeout", time.monotonic() - started, ""
    wall = time.monotonic() - started
    output = done.stdout + done.stderr
    status = {0: "passed", 1: "failed"}.get(done.returncode, f"error (exit {done.returncode})")
    return status, wall, output


def measure(
    repo: Path,
    bug: Bug,
    timeout: float,
    stop: bool,
    full: bool = False,
    tests: tuple[str, ...] = ("tests/property",),
    profile: str = "ci",
    seed: int | None = None,
) -> Outcome:
    originals: dict[Path, str] = {}
    for edit in bug.edits:
        target = repo / PACKAGE / edit.file
        text = originals.setdefault(target, target.read_text()) if target.exists() else ""
        current = target.read_text() if target.exists() else ""
        if text.count(edit.old) != 1 or current.count(edit.old) != 1:
            for path, original in originals.items():
                path.write_text(original)
            return Outcome("not applicable", tail=f"{edit.file}: {edit.old[:60]!r}")
        target.write_text(current.replace(edit.old, edit.new))
    try:
        status, wall, output = run_property_suite(repo, timeout, stop, full, tests, profile, seed)
    finally:
        for path, original in originals.items():
            path.write_text(original)
    failed = re.findall(r"^FAILED (\S+)", output, re.M)
    outcome = Outcome(
        {"failed": "caught", "passed": "SURVIVED"}.get(status, status),
        test=", ".join(f if full else f.split("::", 1)[-1] for f in failed),
        wall=wall,
    )
    if failed:
        outcome.example = falsifying_example(output)
        outcome.size = example_size(outcome.example)
    if failed:
        name = re.escape(failed[0])
        match = re.search(rf"^([\d.]+)s call\s+{name}\s*$", output, re.M)
        outcome.test_seconds = float(match.group(1)) if match else None
    if outcome.status not in ("caught", "SURVIVED"):
        outcome.tail = "\n".join(output.strip().splitlines()[-5:])
    return outcome


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("numbers", nargs="*", type=int, help="only these bugs")
    parser.add_argument("--list", action="store_true", help="list the bugs and stop")
    parser.add_argument("--all-tests", action="store_true", help="no -x: every failing test")
    parser.add_argument("--no-baseline", action="store_true", help="skip the unplanted run")
    parser.add_argument("--show", action="store_true", help="print each falsifying example")
    parser.add_argument("--timeout", type=float, default=900, help="seconds per bug")
    parser.add_argument(
        "--bugs",
        choices=("issue23", "fresh", "mcp", "subagents"),
        default="issue23",
        help="which list: issue 23's sixteen (default), issue 40's fresh list (fresh_bugs.py), "
        "issue 36's MCP bugs (mutants_mcp.py, against the MCP tests) or issue 37's sub-agent "
        "bugs (mutants_subagents.py, against the sub-agent tests)",
    )
    parser.add_argument(
        "--full",
        action="store_true",
        help="the README's whole test command (with -x; every test, the behaviour folders "
        "first) instead of tests/property",
    )
    parser.add_argument(
        "--profile",
        choices=("ci", "explore"),
        default="ci",
        help="the hypothesis profile for tests/property (ci: derandomized, 60 examples; "
        "explore: fresh examples, 150)",
    )
    parser.add_argument(
        "--seed", type=int, default=None, help="--hypothesis-seed for the explore profile"
    )
    parser.add_argument(
        "--copy-in", type=Path, default=None, help="make the copy in this folder (default: temp)"
    )
    args = parser.parse_args()
    bugs: tuple[Bug, ...] = BUGS
    tests: tuple[str, ...] = ("tests/property",)
    if args.bugs == "fresh":
        from fresh_bugs import BUGS as FRESH  # beside this file (on sys.path above)

        bugs = FRESH
    elif args.bugs == "mcp":  # issue 36: tools/mutants_mcp.py against the MCP tests
        import mutants_mcp

        bugs, tests = mutants_mcp.BUGS, mutants_mcp.TESTS
    elif args.bugs == "subagents":  # issue 37: tools/mutants_subagents.py, sub-agent tests
        import mutants_subagents

        bugs, tests = mutants_subagents.BUGS, mutants_subagents.TESTS
    chosen = [b for b in bugs if not args.numbers or b.number in args.numbers]
    suite = "the whole suite" if args.full else " ".join(tests) + f" (profile {args.profile})"
    if args.list:
        for bug in chosen:
            files = ", ".join(sorted({e.file for e in bug.edits}))
            print(f"{bug.number:2}  {bug.name}  ({files})")
        return 0
    with open("/proc/loadavg") as f:
        print(f"load average: {' '.join(f.read().split()[:3])} ({os.cpu_count()} cores)")
    bad = 0
    with tempfile.TemporaryDirectory(prefix="plant-", dir=args.copy_in) as tmp:
        repo = copy_repo(Path(tmp))
        check_import(repo)
        if not args.no_baseline:
            status, wall, output = run_property_suite(
                repo, args.timeout, True, args.full, tests, args.profile, args.seed
            )
            print(f"unplanted: {suite} {status} in {wall:.1f} s", flush=True)
            if status != "passed":
                print("\n".join(output.strip().splitlines()[-10:]))
                return 2
        print(f"{'#':>2}  {'outcome':8}  {'wall s':>6}  {'test s':>6}  {'size':14}  test / bug")
        for bug in chosen:
            o = measure(
                repo,
                bug,
                args.timeout,
                not args.all_tests,
                args.full,
                tests,
                args.profile,
                args.seed,
            )
            own = f"{o.test_seconds:6.1f}" if o.test_seconds is not None else "     -"
            print(
                f"{bug.number:2}  {o.status:8}  {o.wall:6.1f}  {own}  {o.size:14}  "
                f"{o.test or '-'}  ({bug.name})",
                flush=True,
            )
            if o.tail:
                print("    " + o.tail.replace("\n", "\n    "))
            if args.show and o.example:
                print("    " + o.example.replace("\n", "\n    "))
            bad += o.status != "caught"
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
