"""``.ci/run`` runs the README's test command as written, and first prints the resolved versions
of the direct dependencies (issue 30), so a drift in what pip resolved shows in the CI log."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CI = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
README_TEST_COMMAND = re.compile(r"^python3 -m venv \.venv && .*-m pytest .*$", re.M)


def _readme_test_command() -> str:
    found = README_TEST_COMMAND.findall((ROOT / "README.md").read_text(encoding="utf-8"))
    assert len(found) == 1, found
    return str(found[0])


def _dependency_script() -> str:
    found = re.findall(r"^\.venv/bin/python - <<'PY'\n(.*?)^PY$", CI, re.M | re.S)
    assert len(found) == 1
    return str(found[0])


def test_ci_runs_the_readme_test_command_byte_for_byte() -> None:
    assert _readme_test_command() in CI.splitlines()


def test_ci_prints_the_direct_dependency_versions_before_the_tests() -> None:
    lines = CI.splitlines()
    printer = lines.index(".venv/bin/python - <<'PY'")
    assert printer < lines.index(_readme_test_command())
    # Installed the same way as the README's command, just before.
    assert lines[printer - 1] == "python3 -m venv .venv && .venv/bin/pip install -q -e '.[dev]'"

    shown = subprocess.run(
        [sys.executable, "-c", _dependency_script()],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout.splitlines()
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    wanted = [*project["dependencies"]]
    wanted += [r for extra in project["optional-dependencies"].values() for r in extra]
    names = {re.sub(r"[-_.]+", "-", re.split(r"[<>=!~\[ ;]", r)[0]).lower() for r in wanted}
    listed = {
        # "name==version", or "name: not installed" (the benchmark extra's peers are not in .venv)
        re.sub(r"[-_.]+", "-", re.split("==|:", line.strip())[0]).lower(): line
        for line in shown[1:]
    }
    assert shown[0].startswith("direct dependencies as resolved")
    assert set(listed) == names  # every direct dependency, nothing else
    for name in ("anthropic", "pydantic", "dbos", "hypothesis"):
        assert re.fullmatch(r"\s+\S+==\S+", listed[name]), listed[name]  # a pinned version
