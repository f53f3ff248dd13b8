"""Issue 37, items 3-4, for a session log that ENDS inside a sub-agent's run (the process was
SIGKILLed while the sub-agent's tool ran): the HTML replay folds the sub-agent's partial run under
its open call, its states lit as far as it got (checked in headless Chromium); ``check`` reports
the open calls at both levels and ``check --fix`` closes them; a resume answers them at both
levels and the run goes on. The test learns that the tool runs from a named pipe (an event)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from statemachine_agent import State, ToolResultMessage
from statemachine_agent.cli import main
from statemachine_agent.session import page_model, read_session, write_html
from statemachine_agent.session._check import check_session
from statemachine_agent.testing import assert_valid_history

from .killing import load_script
from .test_html import browser, click, open_page

__all__ = ["browser"]  # the module-scoped headless Chromium of test_html.py

SCRIPT = Path(__file__).resolve().parent / "crash_subagent.py"
SAFETY_SECONDS = 60.0  # only ends a hung wait; nothing is asserted about time
crash_subagent = load_script(SCRIPT)


@pytest.fixture
def crashed(tmp_path: Path) -> Path:
    """The parent's log, its process SIGKILLed while the sub-agent's ``lookup`` (c1) runs."""
    log, fifo = tmp_path / "log.jsonl", tmp_path / "ready.fifo"
    os.mkfifo(fifo)
    process = subprocess.Popen(
        [sys.executable, str(SCRIPT), str(log), str(fifo)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        with fifo.open(encoding="utf-8") as ready:  # opens once the tool runs
            assert ready.readline() == "running\n"
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=SAFETY_SECONDS)
        assert process.returncode == -signal.SIGKILL
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        assert process.stderr is not None
        process.stderr.close()
    return log


def _open_call_child(model: dict[str, Any], call_id: str) -> dict[str, Any]:
    for item in model["items"]:
        for block in item.get("blocks") or []:
            if block.get("id") == call_id and "child" in block:
                return dict(block["child"])
    raise AssertionError(f"no sub-agent run under call {call_id}")


def _text(driver: Any, selector: str) -> list[str]:
    return [e.text for e in driver.find_elements("css selector", selector)]


async def test_replay_page_of_a_log_ending_mid_child_folds_its_partial_run_under_the_open_call(
    crashed: Path, tmp_path: Path, browser: Any
) -> None:
    model = page_model(read_session(crashed))
    child = _open_call_child(model, "p1")
    assert (child["state"], child["turns"], child["tool"]) == ("executing_tools", 1, "research")
    assert [s["dest"] for s in child["steps"]] == ["awaiting_model", "executing_tools"]
    assert child["items"][-1]["kind"] == "crash"  # its run ends where the log does
    assert not any(item["kind"] == "result" for item in model["items"])  # p1 has none

    page = write_html(crashed, tmp_path / "page.html")
    driver = browser
    open_page(driver, page)
    folded = driver.find_element(
        "css selector", ".item.assistant .call[data-call='p1'] details.child-run"
    )
    assert folded.get_attribute("open") is None  # folded until asked for
    assert "sub-agent research" in folded.text and "executing_tools · 1 turns" in folded.text
    click(driver, folded.find_element("css selector", "summary"))
    chips = driver.find_elements("css selector", "details.child-run .child-state")
    assert [chip.text for chip in chips] == ["awaiting_model", "executing_tools"]
    inside = folded.find_element("css selector", ".child-items").text
    assert "lookup" in inside and "the log ends during this run" in inside
    # Lit as far as it got: its last state, executing_tools, with its call to lookup.
    click(driver, chips[-1])
    assert _text(driver, ".child-state.current") == ["executing_tools"]
    node = driver.execute_script(
        "return DATA.items.flatMap(i => i.blocks || []).find(b => b.child).child.steps[1].node"
    )
    assert "current" in str(driver.find_element("id", node).get_attribute("class")).split()
    assert "sub-agent research (call p1) step 2 / 2" in driver.find_element("id", "step-text").text
    assert driver.execute_script("return document.body.dataset.state") == "executing_tools"
    assert driver.get_log("browser") == []  # no script error


def test_check_of_a_log_ending_mid_child_reports_and_fixes_the_open_calls_at_both_levels(
    crashed: Path,
) -> None:
    out = CliRunner().invoke(main, ["check", str(crashed)])
    assert out.exit_code == 1, out.output
    text = " ".join(out.output.split())  # as printed, however the console wrapped it
    assert "4 violation(s)" in text
    for problem in (
        "- call 'p1' (research) has no recorded result",
        "- line 2: the last run never ended",
        "- sub-agent run of call 'p1': call 'c1' (lookup) has no recorded result",
        "- sub-agent run of call 'p1': line 8: the last run never ended",
    ):
        assert problem in text, text
    fixed = CliRunner().invoke(main, ["check", str(crashed), "--fix"])
    assert fixed.exit_code == 0, fixed.output
    said = " ".join(fixed.output.split())
    assert (
        "answered 2 call(s) (sub-agent runs' included) that had no recorded result with an error "
        "result, recorded the end of the run the process died in as 'aborted' and ended 1 "
        "sub-agent run(s) it died in as 'aborted'." in said
    ), said
    data, problems = check_session(crashed)
    assert problems == []
    assert_valid_history(data.messages)
    assert_valid_history(data.children["p1"].messages)
    assert data.children["p1"].state is State.ABORTED


async def test_resume_of_a_log_ending_mid_child_answers_the_open_calls_at_both_levels(
    crashed: Path, tmp_path: Path
) -> None:
    resumed = crash_subagent.resumed_parent(crashed)
    assert resumed.state is State.ABORTED
    p1 = [m for m in resumed.messages if isinstance(m, ToolResultMessage)]
    assert [(m.tool_call_id, m.is_error) for m in p1] == [("p1", True)]
    assert_valid_history(resumed.messages)
    result = await resumed.run()
    assert (result.state, result.text) == (State.DONE, crash_subagent.PARENT_ANSWER)
    resumed.close()

    data, problems = check_session(crashed)
    assert problems == []  # the sub-agent's open call and run were closed in the log too
    child = data.children["p1"]
    assert child.state is State.ABORTED
    assert_valid_history(child.messages)
    c1 = [m for m in child.messages if isinstance(m, ToolResultMessage)]
    assert [(m.tool_call_id, m.is_error) for m in c1] == [("c1", True)]
    # The page now folds the sub-agent under p1's repaired result, ended aborted.
    model = page_model(read_session(crashed))
    (answered,) = [i for i in model["items"] if i["kind"] == "result" and i["call"] == "p1"]
    assert answered["repair"] is True and answered["child"]["state"] == "aborted"
