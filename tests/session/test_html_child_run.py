"""Issue 37, item 4: the HTML replay shows a sub-agent's run folded under the call that ran it,
with its own states lit (checked in headless Chromium, `test_html.py`'s browser, offline)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from statemachine_agent import Agent, tool
from statemachine_agent.models import ScriptedModel
from statemachine_agent.session import page_model, read_session, write_html
from statemachine_agent.testing.steps import call, text_response, tool_response

from .test_html import browser, click, open_page

__all__ = ["browser"]  # the module-scoped headless Chromium of test_html.py


@tool
def lookup(topic: str) -> str:
    """Look a topic up."""
    return f"facts about {topic}"


async def two_level_log(path: Path) -> Path:
    """A parent that calls the ``research`` sub-agent (call ``p1``); the sub-agent calls
    ``lookup`` with the same call id ``p1`` (ids are per run), then answers."""
    child = Agent(
        ScriptedModel(
            [
                tool_response(call("lookup", {"topic": "otters"}, id="p1")),
                text_response("Otters hold hands."),
            ]
        ),
        tools=[lookup],
    )
    parent = Agent(
        ScriptedModel(
            [
                tool_response(call("research", {"prompt": "otters"}, id="p1")),
                text_response("Done: otters hold hands."),
            ]
        ),
        tools=[child.as_tool("research", "Research a topic.")],
        session=path,
    )
    result = await parent.run("go")
    assert result.state.value == "done"
    return path


def _text(driver: Any, selector: str) -> list[str]:
    return [e.text for e in driver.find_elements("css selector", selector)]


async def test_replay_page_folds_a_sub_agents_run_under_its_call_with_its_own_states(
    tmp_path: Path, browser: Any
) -> None:
    log = await two_level_log(tmp_path / "log.jsonl")
    model = page_model(read_session(log))
    # The sub-agent's run is not mixed into the parent's steps: those are the parent's 4.
    assert [s["dest"] for s in model["steps"]] == [
        "awaiting_model",
        "executing_tools",
        "awaiting_model",
        "done",
    ]
    page = write_html(log, tmp_path / "page.html")
    driver = browser
    open_page(driver, page)
    folded = driver.find_element("css selector", ".item.result[data-call='p1'] details.child-run")
    assert folded.get_attribute("open") is None  # folded until asked for
    assert "sub-agent research" in folded.text and "done · 2 turns" in folded.text
    # Nothing of the sub-agent is in the parent's transcript outside the fold.
    top = driver.find_elements("css selector", "#transcript > .chunk > .item")
    assert not any(
        "Otters hold hands." in node.text
        for node in top
        if "child-run" not in (node.get_attribute("innerHTML") or "")
    )
    click(driver, folded.find_element("css selector", "summary"))
    chips = _text(driver, "details.child-run .child-state")
    assert chips == ["awaiting_model", "executing_tools", "awaiting_model", "done"]
    assert "Otters hold hands." in folded.find_element("css selector", ".child-items").text
    # Its own states lit: the sub-agent's executing_tools step lights that state in the diagram,
    # its chip, and its lookup call's result (not the parent's call p1).
    click(driver, driver.find_elements("css selector", "details.child-run .child-state")[1])
    assert _text(driver, ".child-state.current") == ["executing_tools"]
    node = driver.execute_script("return DATA.steps[1].node")
    assert "current" in str(driver.find_element("id", node).get_attribute("class")).split()
    assert "sub-agent research (call p1) step 2 / 4" in driver.find_element("id", "step-text").text
    # the child's last step lights its done state and its answer
    click(driver, driver.find_elements("css selector", "details.child-run .child-state")[3])
    lit = _text(driver, "details.child-run .item.lit")
    assert any("Otters hold hands." in text for text in lit), lit
    assert driver.execute_script("return document.body.dataset.state") == "done"
    assert driver.get_log("browser") == []  # no script error
