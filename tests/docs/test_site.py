"""The documentation site: built with ``mkdocs build --strict`` (broken links and references
fail it), its API reference covering every public name, and its state table and diagram read from
the live definition when it is built."""

from __future__ import annotations

import html
import importlib
import re
import shutil
from pathlib import Path

import pytest

from statemachine_agent import LoopMachine, TransitionSpec, render_diagram

from .blocks import DOCS, ROOT
from .site import build

# The public modules and the reference page of each (every name of its __all__ is documented).
REFERENCE = {
    "statemachine_agent": "reference/index.html",
    "statemachine_agent.session": "reference/session/index.html",
    "statemachine_agent.models": "reference/models/index.html",
    "statemachine_agent.testing": "reference/testing/index.html",
    "statemachine_agent.workspace": "reference/workspace/index.html",
    "statemachine_agent.durable": "reference/durable/index.html",
    "statemachine_agent.otel": "reference/otel/index.html",
    "statemachine_agent.mcp": "reference/mcp/index.html",
}


def test_the_site_builds_with_strict(site: Path) -> None:
    assert (site / "index.html").is_file()
    assert (site / "search" / "search_index.json").is_file()


@pytest.mark.parametrize("module_name", REFERENCE)
def test_every_public_name_appears_in_the_api_reference(site: Path, module_name: str) -> None:
    page = (site / REFERENCE[module_name]).read_text(encoding="utf-8")
    names = importlib.import_module(module_name).__all__
    missing = [name for name in names if f'id="{module_name}.{name}"' not in page]
    assert not missing, f"{module_name}: not in the API reference: {missing}"


def test_a_broken_link_fails_the_strict_build(tmp_path: Path) -> None:
    copy = tmp_path / "project"
    shutil.copytree(DOCS, copy / "docs")
    shutil.copy(ROOT / "mkdocs.yml", copy / "mkdocs.yml")
    (copy / "benchmarks").mkdir()
    shutil.copy(ROOT / "benchmarks" / "README.md", copy / "benchmarks" / "README.md")
    page = copy / "docs" / "guides" / "tools.md"
    page.write_text(page.read_text(encoding="utf-8") + "\nSee [nowhere](no-such-page.md).\n")
    done = build(copy / "mkdocs.yml", tmp_path / "site")
    assert done.returncode != 0
    assert "no-such-page.md" in done.stdout + done.stderr


def test_no_page_pastes_the_state_diagram_or_the_state_table() -> None:
    for page in DOCS.rglob("*.md"):
        text = page.read_text(encoding="utf-8")
        assert "stateDiagram" not in text, f"{page}: use <!-- live: state-diagram -->"
        assert "| state |" not in text, f"{page}: use <!-- live: state-table -->"


def test_the_built_states_page_shows_the_live_diagram_and_every_state_and_branch(
    site: Path,
) -> None:
    page = html.unescape((site / "concepts" / "states" / "index.html").read_text(encoding="utf-8"))
    text = re.sub(r"<[^>]+>", "", page)
    assert str(render_diagram()).strip().splitlines()[0] in text
    machine = LoopMachine()
    for name in machine.states:
        assert f"{name}" in text
    for spec in machine.specs:
        assert spec.label in text, spec.label


def test_the_hook_renders_a_changed_definition(monkeypatch: pytest.MonkeyPatch) -> None:
    """The tables are read when the page is built: a state added to the definition shows."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("docs_live_hook", DOCS / "hooks" / "live.py")
    assert spec is not None and spec.loader is not None
    hook = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hook)

    async def review(run: object) -> str:
        return "start"

    class Extended(LoopMachine):
        def __init__(self) -> None:
            super().__init__()
            self.add_state("needs_review", review)
            self.add_transition(
                TransitionSpec("flag", ("awaiting_model",), "needs_review", label="flagged")
            )

    monkeypatch.setattr(hook, "LoopMachine", Extended)
    states = hook.on_page_markdown("<!-- live: state-table -->")
    branches = hook.on_page_markdown("<!-- live: transition-table -->")
    assert "`needs_review` | `review`" in states
    assert "| `flag` | `awaiting_model` | `needs_review` | - | `flagged` |" in branches
