"""Issue 37, item 4: a sub-agent's folded run in the HTML replay is built by the click that opens
it, not later by the ``toggle`` event (queued as a task): a reader, or a test, clicking one of its
state chips right after opening it finds the chips there (headless Chromium, offline)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from statemachine_agent.session import write_html

from .test_html import browser, open_page
from .test_html_child_run import two_level_log

__all__ = ["browser"]  # the module-scoped headless Chromium of test_html.py

_CLICK_AND_COUNT = """
const folded = document.querySelector(".item.result[data-call='p1'] details.child-run");
folded.querySelector("summary").click();
return [folded.open, folded.querySelectorAll(".child-state").length];
"""
"""One script, so one task: the click's handlers have run, the queued toggle event has not."""


async def test_a_sub_agents_fold_has_its_states_as_soon_as_its_summary_is_clicked(
    tmp_path: Path, browser: Any
) -> None:
    log = await two_level_log(tmp_path / "log.jsonl")
    page = write_html(log, tmp_path / "page.html")
    open_page(browser, page)
    opened, chips = browser.execute_script(_CLICK_AND_COUNT)
    assert opened is True
    assert chips == 4  # awaiting_model, executing_tools, awaiting_model, done
    assert browser.get_log("browser") == []  # no script error
