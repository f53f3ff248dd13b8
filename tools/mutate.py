#!/usr/bin/env python3
"""Mutation check: put realistic bugs into the package one at a time and see which the tests catch.

Each mutation names a file, an exact text and its replacement. The repository is copied once into
a temporary folder; each mutation is applied to that copy, the tests named for it are run there
(with the copy first on ``PYTHONPATH``, so the copy's package is the one imported), and the file is
restored before the next. The working tree is never changed.

A mutation whose text is not in its file (the code moved) is reported "not applicable", one whose
text occurs more than once "ambiguous"; neither is run. A mutation is "caught" when its tests
fail, "SURVIVED" when they pass. The exit status is 1 when any survived.

Usage (from the repository root, with the dev venv)::

    .venv/bin/python tools/mutate.py                 # every mutation
    .venv/bin/python tools/mutate.py -k fsync -k cancel   # those whose name holds a word
    .venv/bin/python tools/mutate.py --list
    .venv/bin/python tools/mutate.py --full          # the whole suite for each (slow)
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = "statemachine_agent"
COPIED = (
    "statemachine_agent",
    "tests",
    "examples",
    "diagrams",
    "docs",  # the documentation pages the tests read (tests/docs/blocks.py)
    "mkdocs.yml",
    "pyproject.toml",
    "README.md",
    "benchmarks",  # its README holds the figures the pages link to (tests/docs, tests/cli)
    "tools",
    ".ci",  # tests/test_ci_script.py reads .ci/run
)


@dataclass(frozen=True)
class Mutation:
    """One bug: replace ``old`` by ``new`` in ``file`` (relative to the package)."""

    name: str
    file: str
    old: str
    new: str
    tests: tuple[str, ...]
    why: str = ""


ENGINE = (
    "tests/loop/test_abort_and_cancel.py",
    "tests/loop/test_tool_calls.py",
    "tests/loop/test_hooks.py",
    "tests/loop/test_stop_reasons.py",
    "tests/loop/test_limits.py",
    "tests/loop/test_queued_input.py",
    "tests/test_agent.py",
)
ROBUST = (
    "tests/loop/test_history_checks.py",
    "tests/loop/test_model_streams.py",
    "tests/loop/test_threads_and_handles.py",
)

MUTATIONS: tuple[Mutation, ...] = (
    # -- the ten bugs issue 15 found uncaught ---------------------------------------------------
    Mutation(
        "cancel-swallowed-inline",
        "_cancel.py",
        "        if exc_type is None:\n            raise_if_cancelling()  # a cancellation the block swallowed\n",
        "",
        ENGINE + ROBUST,
        "a tool swallowing the run task's cancellation in an inline batch goes unnoticed",
    ),
    Mutation(
        "sequential-ignores-terminating-denial",
        "_execution.py",
        "if self._signal.aborted or self._terminated:",
        "if self._signal.aborted:",
        ENGINE,
        "sequential mode runs the calls after a terminating denial",
    ),
    Mutation(
        "fsync-skips-header",
        "session/_log.py",
        "                if self._syncer is not None:\n                    self._syncer.wrote()",
        '                if self._syncer is not None and body["type"] != "header":\n                    self._syncer.wrote()',
        ("tests/session/test_session_fsync.py", "tests/session/test_session_log.py"),
        "the header line is never synced",
    ),
    Mutation(
        "fsync-never",
        "session/_log.py",
        "                os.fsync(self._fd)\n",
        "                pass\n",
        ("tests/session/test_session_fsync.py", "tests/session/test_session_log.py"),
        "fsync=True does nothing",
    ),
    Mutation(
        "containment-string-prefix",
        "workspace/_paths.py",
        "if not resolved.is_relative_to(self.root):",
        "if not str(resolved).startswith(str(self.root)):",
        ("tests/workspace/test_containment.py", "tests/workspace/test_paths.py"),
        "a sibling folder sharing the root's name as prefix counts as inside",
    ),
    Mutation(
        "after-hook-failure-swallowed",
        "_execution.py",
        'return _hook_failed("after_tool_call", call, exc)',
        "return result",
        ENGINE,
        "a raising after_tool_call hook silently keeps the result",
    ),
    Mutation(
        "kit-skips-request-checks",
        "testing/_kit.py",
        "for n, request in enumerate(report.requests, 1):",
        "for n, request in enumerate(report.requests[:0], 1):",
        ("tests/testing/test_kit_checker.py", "tests/testing/test_kit_hooks.py"),
        "the kit never checks the requests sent",
    ),
    Mutation(
        "kit-accepts-doubled-events",
        "testing/_kit.py",
        "if started[call_id] != 1 or ended[call_id] != 1:",
        "if started[call_id] != ended[call_id]:",
        ("tests/testing/test_kit_checker.py", "tests/testing/test_kit_hooks.py"),
        "a call started and ended twice passes the kit",
    ),
    Mutation(
        "runs-tool-after-abort-in-hook",
        "_execution.py",
        "        if self._signal.aborted:\n            return text_result(call, NOT_RUN, is_error=True)\n",
        "",
        ENGINE + ROBUST,
        "a call whose permission hook aborted the run still runs",
    ),
    Mutation(
        "provider-cache-control-kept",
        "models/_anthropic_request.py",
        "out.append(_without_cache_control(block.data))",
        "out.append(block.data)",
        ("tests/models/test_anthropic_cache.py", "tests/models/test_anthropic_wire.py"),
        "a provider block's own breakpoint is sent (a fifth breakpoint is a 400)",
    ),
    Mutation(
        "listing-enters-symlinked-folders",
        "workspace/_paths.py",
        "enter = is_dir and not entry.is_symlink()",
        "enter = is_dir",
        ("tests/workspace/test_containment.py", "tests/workspace/test_paths.py"),
        "a recursive listing walks into a folder outside the root",
    ),
    Mutation(
        "no-abort-grace-parallel",
        "_execution.py",
        "await asyncio.wait(pending, timeout=self._grace)",
        "await asyncio.wait(pending, timeout=0)",
        ENGINE,
        "cooperative parallel tools lose their clean-up results",
    ),
    # -- more realistic bugs ------------------------------------------------------------------
    Mutation(
        "truncated-call-runs",
        "_execution.py",
        "    if call.truncated:\n        return TRUNCATED\n",
        "",
        ENGINE,
        "a call cut off by max_tokens is executed",
    ),
    Mutation(
        "turn-cap-off-by-one",
        "_machine.py",
        "return data.turns >= data.max_turns or not data.keep_going",
        "return data.turns > data.max_turns or not data.keep_going",
        ENGINE + ROBUST,
        "max_turns allows one turn too many",
    ),
    Mutation(
        "steering-dropped-after-batch",
        "_machine.py",
        '"next_turn",      fx.deliver_steering),',
        '"next_turn",      None),',
        ENGINE,
        "steering queued during a batch is not delivered after it",
    ),
    Mutation(
        "blank-tool-output-kept",
        "_execution.py",
        "    return without_blank_text(blocks, EMPTY_OUTPUT)\n",
        "    return blocks\n",
        ENGINE + ROBUST,
        "a blank text result reaches the provider",
    ),
    Mutation(
        "after-hook-result-not-readdressed",
        "_execution.py",
        "                # A hook may rewrite a result, never re-address it: the protocol pairs by id.\n                result = to_result(call, replaced)\n",
        "                # A hook may rewrite a result, never re-address it: the protocol pairs by id.\n                result = replaced\n",
        ENGINE,
        "an after_tool_call hook can re-address a result to another call",
    ),
    Mutation(
        "hook-arguments-not-revalidated",
        "_execution.py",
        "                    kwargs = tool.validate(changed)\n",
        "                    kwargs = changed\n",
        ENGINE,
        "arguments changed by a before_tool_call hook skip validation",
    ),
    Mutation(
        "resource-queue-ignored",
        "_execution.py",
        "        if previous is not None:\n            await asyncio.shield(previous)\n",
        "",
        ENGINE + ROBUST,
        "calls on one resource run concurrently",
    ),
    Mutation(
        "model-swallowed-cancel",
        "_cancel.py",
        "        if exc_type is None:\n            raise_if_cancelling()  # a cancellation the block swallowed\n",
        "",
        ENGINE + ROBUST,
        "a model swallowing the task's cancellation continues the run",
    ),
    Mutation(
        "usage-not-summed",
        "_effects.py",
        "run.add_usage(response.usage)",
        "run.usage = response.usage",
        ENGINE,
        "usage reports only the last response",
    ),
    Mutation(
        "one-retry-too-few",
        "_responses.py",
        "attempt <= retries",
        "attempt < retries",
        ENGINE + ROBUST,
        "model_retries=2 retries once",
    ),
    Mutation(
        "tool-result-error-flag-lost",
        "models/_anthropic_request.py",
        '"is_error": message.is_error,',
        '"is_error": False,',
        ("tests/models/test_anthropic_wire.py", "tests/models/test_anthropic_recordings.py"),
        "the model is told a failed call succeeded",
    ),
    Mutation(
        "dangling-calls-unanswered",
        "_run.py",
        "for repair in answer_dangling(self.messages):  # a given history ended mid-batch",
        "for repair in []:  # a given history ended mid-batch",
        ENGINE + ROBUST + ("tests/test_context.py",),
        "a given history ending mid-batch is sent with unanswered calls",
    ),
    Mutation(
        "prefix-rule-allows-chained-commands",
        "workspace/_permissions.py",
        "            if any(mark in command for mark in _SHELL_CONTROL):\n                return False\n",
        "",
        ("tests/workspace/test_permissions.py",),
        "--allow 'run_command:pytest' also allows 'pytest; rm -rf ~'",
    ),
    Mutation(
        "git-folder-listed",
        "workspace/_paths.py",
        'ALWAYS_SKIPPED = frozenset({".git"})',
        "ALWAYS_SKIPPED: frozenset[str] = frozenset()",
        ("tests/workspace/test_paths.py", "tests/workspace/test_files.py"),
        "listings show .git",
    ),
    Mutation(
        "resume-leaves-calls-unanswered",
        "session/_read.py",
        "repair = text_result(call, NO_RESULT_RECORDED, is_error=True)",
        'repair = text_result(call, "ok", is_error=False)',
        ("tests/session/test_session_repair.py", "tests/session/test_session_crash.py"),
        "a call with no logged result is resumed as if it succeeded",
    ),
    Mutation(
        "kit-ignores-non-terminal-state",
        "testing/_kit.py",
        "    if agent.state not in RUN_STOPS:\n",
        "    if False:\n",
        ("tests/testing/test_kit_checker.py", "tests/testing/test_kit_hooks.py"),
        "the kit accepts a run that ended mid-loop",
    ),
)


def copy_repo(into: Path) -> Path:
    """A copy of what the tests need, next to a link to the shared fixtures (../shared)."""
    repo = into / "repo"
    repo.mkdir()
    for name in COPIED:
        source = ROOT / name
        if source.is_dir():
            shutil.copytree(source, repo / name, ignore=shutil.ignore_patterns("__pycache__"))
        elif source.exists():
            shutil.copy2(source, repo / name)
    shared = ROOT.parent / "shared"
    if shared.is_dir():
        (into / "shared").symlink_to(shared)
    return repo


def run_tests(repo: Path, tests: tuple[str, ...], timeout: float) -> tuple[str, str]:
    """("failed" | "passed" | "timeout", last lines of output)."""
    env = {**os.environ, "PYTHONPATH": str(repo), "PYTHONDONTWRITEBYTECODE": "1"}
    command = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", *tests]
    try:
        done = subprocess.run(
            command, cwd=repo, env=env, capture_output=True, text=True, timeout=timeout
        )
    except subprocess.TimeoutExpired:
        return "timeout", ""
    tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-3:])
    if done.returncode == 0:
        return "passed", tail
    if done.returncode == 1:
        return "failed", tail
    return f"error (pytest exit {done.returncode})", tail


def check_import(repo: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(repo)}
    where = subprocess.run(
        [sys.executable, "-c", f"import {PACKAGE}; print({PACKAGE}.__file__)"],
        cwd=repo,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    if not Path(where).resolve().is_relative_to(repo.resolve()):
        sys.exit(f"the copy's package is not the one imported ({where}); stopping")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-k", action="append", default=[], help="only names containing WORD")
    parser.add_argument("--list", action="store_true", help="list the mutations and stop")
    parser.add_argument("--full", action="store_true", help="run the whole suite for each")
    parser.add_argument(
        "--tests", action="append", default=[], help="run these tests instead of each one's"
    )
    parser.add_argument("--timeout", type=float, default=600, help="seconds per mutation")
    args = parser.parse_args()
    chosen = [m for m in MUTATIONS if not args.k or any(word in m.name for word in args.k)]
    if args.list:
        for m in chosen:
            print(f"{m.name:40} {m.file:28} {m.why}")
        return 0
    outcomes: dict[str, list[str]] = {}
    with tempfile.TemporaryDirectory(prefix="mutate-") as tmp:
        repo = copy_repo(Path(tmp))
        check_import(repo)
        status, tail = run_tests(repo, ("tests",) if args.full else ENGINE, args.timeout)
        if status != "passed":
            print(f"the unmutated copy does not pass its tests:\n{tail}")
            return 2
        for m in chosen:
            target = repo / PACKAGE / m.file
            original = target.read_text() if target.exists() else ""
            count = original.count(m.old)
            if count != 1:
                outcome = "not applicable" if count == 0 else f"ambiguous ({count} matches)"
                outcomes.setdefault(outcome, []).append(m.name)
                print(f"{outcome:16} {m.name}  ({m.file})", flush=True)
                continue
            target.write_text(original.replace(m.old, m.new))
            started = time.monotonic()
            try:
                tests = ("tests",) if args.full else tuple(args.tests) or m.tests
                status, tail = run_tests(repo, tests, args.timeout)
            finally:
                target.write_text(original)
            outcome = {"failed": "caught", "passed": "SURVIVED"}.get(status, status)
            outcomes.setdefault(outcome, []).append(m.name)
            seconds = time.monotonic() - started
            print(f"{outcome:16} {m.name}  ({m.file}, {seconds:.0f} s)", flush=True)
            if outcome != "caught" and tail:
                print("                 " + tail.replace("\n", "\n                 "))
    print()
    for outcome, names in sorted(outcomes.items()):
        print(
            f"{outcome}: {len(names)}" + ("" if outcome == "caught" else f" ({', '.join(names)})")
        )
    return 1 if outcomes.get("SURVIVED") else 0


if __name__ == "__main__":
    sys.exit(main())
