"""Issue 34 item 4: the replay page's diagram is legible. At a 1400 x 1000 window the page draws
the overview (one edge per (source, dest) pair, groups as composites) with state names at least
11 px tall, pans and zooms (wheel, drag, buttons, fit), and at every step its lit state and lit
edge are on screen; a group's transition lights the edge drawn from the composite. Checked in
headless Chromium (`tests/session/test_html.py`'s browser, network off) with the viewport set to
1400 x 1000; ``docs/replay.png`` is checked to be a real render of the page.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from statemachine_agent import Agent, GraphvizNotFoundError, tool
from statemachine_agent._machine import LoopMachine
from statemachine_agent.models import ScriptedModel
from statemachine_agent.session import (
    _html_diagram,
    _html_model,
    page_model,
    read_session,
    write_html,
)
from statemachine_agent.testing.steps import call, text_response, tool_response

from .test_html import browser, demo_log, open_page, press
from .test_html_replay_page import png_colours

__all__ = ["browser"]  # the module-scoped headless Chromium of test_html.py

ROOT = Path(__file__).resolve().parents[2]
MIN_NAME_PX = 11.0  # the issue: state names at least 11 px tall on screen

# Each state name's text (the first text of a state), its box in window pixels.
NAME_RECTS = """
return [...document.querySelectorAll('#diagram .node[id^="state_"]')].map((node) => {
  const r = node.querySelector('text').getBoundingClientRect();
  return {id: node.id, text: node.querySelector('text').textContent, left: r.left, top: r.top,
          right: r.right, bottom: r.bottom, height: r.height};
});
"""
# The viewport's box, the lit state's, and the lit edge's label and arrowhead boxes.
LIT_RECTS = """
const box = (e) => { const r = e.getBoundingClientRect();
  return {left: r.left, top: r.top, right: r.right, bottom: r.bottom}; };
const state = [...document.querySelectorAll('#diagram .node.current')];
const edges = [...document.querySelectorAll('#diagram .edge.taken')];
return {
  viewport: box(document.getElementById('viewport')),
  states: state.map((e) => e.id),
  state: state.length ? box(state[0]) : null,
  edges: edges.map((e) => e.id),
  title: edges.length && edges[0].querySelector('title') ?
    edges[0].querySelector('title').textContent : null,
  label: edges.length ? [...edges[0].querySelectorAll('text')].map((t) => t.textContent) : [],
  parts: edges.length ? [...edges[0].querySelectorAll('text, polygon')].map(box) : [],
};
"""


# -- logs ----------------------------------------------------------------------------------------


def three_runs_log(path: Path) -> Path:
    """Three runs in one session: a paused turn continued, then done; a tool that aborts the
    run (``abort`` from ``executing_tools``, a transition of the ``active`` group); a run that
    starts from ``aborted`` (``start`` of the ``ended`` group) and ends done."""
    agent: Agent | None = None

    @tool
    def stop(note: str = "") -> str:
        """Abort the run."""
        assert agent is not None
        agent.abort("stopped by the tool")
        return "stopping"

    model = ScriptedModel(
        [
            text_response("half an answer", stop_reason="pause_turn"),
            text_response("first answer"),
            tool_response(call("stop", {}, id="s1")),
            text_response("third answer"),
        ]
    )
    agent = Agent(model, tools=[stop], session=path)
    states = [agent.run_sync(prompt).state for prompt in ("one", "two", "three")]
    assert [str(s) for s in states] == ["done", "aborted", "done"]
    assert agent.session is not None
    agent.session.close()
    return path


# -- the window ------------------------------------------------------------------------------------


@pytest.fixture
def window(browser: Any) -> Iterator[Any]:
    """The browser with its viewport 1400 x 1000 CSS px (the issue's window)."""
    browser.execute_cdp_cmd(
        "Emulation.setDeviceMetricsOverride",
        {"width": 1400, "height": 1000, "deviceScaleFactor": 1, "mobile": False},
    )
    try:
        yield browser
    finally:
        browser.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})


def no_graphviz(monkeypatch: pytest.MonkeyPatch) -> None:
    def missing(*_args: Any, **_kwargs: Any) -> bytes:
        raise GraphvizNotFoundError("no dot")

    monkeypatch.setattr(_html_diagram, "render_image", missing)


def inside(rect: dict[str, float], box: dict[str, float]) -> bool:
    return (
        rect["left"] >= box["left"] - 0.5
        and rect["top"] >= box["top"] - 0.5
        and rect["right"] <= box["right"] + 0.5
        and rect["bottom"] <= box["bottom"] + 0.5
    )


def walk(driver: Any) -> list[dict[str, Any]]:
    """From the first step to the last (the right arrow), at each: the names are at least 11 px
    tall, one state and one edge are lit, both on screen in the diagram. Returns each step's
    lit ids, edge title and label."""
    from selenium.webdriver.common.keys import Keys

    assert driver.execute_script("return [innerWidth, innerHeight]") == [1400, 1000]
    count = len(driver.execute_script("return DATA.steps"))
    press(driver, Keys.HOME)
    seen = []
    for number in range(1, count + 1):
        assert driver.find_element("id", "step-count").text == f"step {number} / {count}"
        names = driver.execute_script(NAME_RECTS)
        assert len(names) == 9
        small = [(n["text"], round(n["height"], 1)) for n in names if n["height"] < MIN_NAME_PX]
        assert small == [], f"step {number}: state names under {MIN_NAME_PX} px: {small}"
        lit = driver.execute_script(LIT_RECTS)
        step = driver.execute_script("return DATA.steps[arguments[0]]", number - 1)
        assert lit["states"] == [f"state_{step['dest']}"], number
        assert lit["edges"] == [step["edge"]], number
        assert inside(lit["state"], lit["viewport"]), f"step {number}: lit state off screen"
        off = [p for p in lit["parts"] if not inside(p, lit["viewport"])]
        assert lit["parts"] and not off, f"step {number}: lit edge off screen: {lit['label']}"
        seen.append({"state": lit["states"][0], "title": lit["title"], "label": lit["label"]})
        press(driver, Keys.ARROW_RIGHT)
    return seen


# -- the case ------------------------------------------------------------------------------


@pytest.mark.parametrize("drawing", ["graphviz", "without_graphviz"])
def test_at_1400x1000_names_are_11px_and_every_step_shows_its_lit_state_and_edge(
    tmp_path: Path, window: Any, monkeypatch: pytest.MonkeyPatch, drawing: str
) -> None:
    if drawing == "without_graphviz":
        no_graphviz(monkeypatch)
    page = write_html(demo_log(tmp_path / "demo"), tmp_path / "demo.html")
    assert ('class="simple"' in page.read_text()) == (drawing == "without_graphviz")
    open_page(window, page)
    seen = walk(window)
    assert len(seen) == 12
    assert [s["label"] for s in seen[:3]] == [
        ["start"],
        ["tool_calls"],
        ["final_turn", "next_turn"],
    ]
    assert seen[-1]["state"] == "state_done"
    assert seen[-1]["label"] == ["refusal", "unknown_stop_reason", "context_window", "final_answer"]


def test_a_groups_transition_lights_the_edge_drawn_from_its_composite(
    tmp_path: Path, window: Any
) -> None:
    page = write_html(three_runs_log(tmp_path / "runs.jsonl"), tmp_path / "runs.html")
    open_page(window, page)
    seen = [(s["state"], s["title"], s["label"]) for s in walk(window)]
    assert seen == [
        ("state_awaiting_model", "idle->awaiting_model", ["start"]),
        (
            "state_awaiting_model",  # pause_turn: the self-loop, which lists its branches
            "awaiting_model:w->awaiting_model:w",  # drawn on its left side
            ["final_turn", "pause_turn", "max_tokens", "queued_input", "output_missing"],
        ),
        (
            "state_done",
            "awaiting_model->done",
            ["refusal", "unknown_stop_reason", "context_window", "final_answer"],
        ),
        ("state_awaiting_model", "ended->awaiting_model", ["start"]),  # from done
        ("state_executing_tools", "awaiting_model->executing_tools", ["tool_calls"]),
        ("state_aborted", "active->aborted", ["abort"]),  # not executing_tools->aborted
        ("state_awaiting_model", "ended->awaiting_model", ["start"]),  # from aborted
        (
            "state_done",
            "awaiting_model->done",
            ["refusal", "unknown_stop_reason", "context_window", "final_answer"],
        ),
    ]


def test_every_branch_of_the_machine_lights_the_overview_edge_that_draws_it() -> None:
    """For each transition the engine can fire (each spec, from each source state), the edge a
    step lights is the one overview edge of the drawing that lists the branch's label and goes
    from that state, or from a group holding it that the branch was written for, to its dest."""
    graph = _html_diagram.page_graph()
    svg = _html_diagram.diagram_svg()
    groups = {g.name: set(g.members) for g in graph.groups}
    assert set(groups) == {"active", "ended"}
    index = _html_model._edge_index()
    checked = 0
    for spec in LoopMachine().specs:
        for source in map(str, spec.sources):
            element = index[(source, str(spec.dest), str(spec.trigger), spec.name)]
            assert re.fullmatch(r"edge_\d+", element)
            edge = graph.edges[int(element.removeprefix("edge_"))]
            assert spec.name in edge.labels and edge.dest == str(spec.dest), spec
            if edge.source != source:
                assert edge.source in spec.groups and source in groups[edge.source], spec
            else:
                assert not any(source in groups[g] for g in spec.groups if g in groups), spec
            assert f'id="{element}"' in svg
            checked += 1
    assert checked > len(graph.edges) == 22


def test_wheel_zooms_drag_pans_buttons_zoom_and_fit_shows_the_whole_diagram(
    tmp_path: Path, window: Any
) -> None:
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.actions.wheel_input import ScrollOrigin

    page = write_html(demo_log(tmp_path / "demo"), tmp_path / "demo.html")
    open_page(window, page)
    viewport = window.find_element("id", "viewport")

    def name(state: str) -> dict[str, float]:
        return next(n for n in window.execute_script(NAME_RECTS) if n["id"] == f"state_{state}")

    opened = name("awaiting_model")
    assert opened["height"] >= MIN_NAME_PX
    # The wheel: up zooms in, about the pointer.
    origin = ScrollOrigin.from_element(viewport)
    ActionChains(window).scroll_from_origin(origin, 0, -300).perform()
    bigger = name("awaiting_model")["height"]
    assert bigger > opened["height"] * 1.2

    # A drag moves the drawing with the pointer.
    before = name("awaiting_model")
    ActionChains(window).move_to_element(viewport).click_and_hold().move_by_offset(
        -120, -40
    ).release().perform()
    after = name("awaiting_model")
    assert after["left"] - before["left"] == pytest.approx(-120, abs=1.5)
    assert after["top"] - before["top"] == pytest.approx(-40, abs=1.5)

    # The wheel down zooms back out.
    ActionChains(window).scroll_from_origin(origin, 0, 300).perform()
    assert name("awaiting_model")["height"] == pytest.approx(opened["height"], rel=0.02)
    after = name("awaiting_model")

    # The buttons: + and - zoom by a quarter; fit shows the whole diagram.
    window.find_element("id", "zoom-in").click()
    assert name("awaiting_model")["height"] == pytest.approx(after["height"] * 1.25, rel=0.05)
    window.find_element("id", "zoom-out").click()
    assert name("awaiting_model")["height"] == pytest.approx(after["height"], rel=0.05)
    window.find_element("id", "zoom-fit").click()
    whole = window.execute_script(
        "const r = document.querySelector('#viewport svg > g').getBoundingClientRect();"
        "return {left: r.left, top: r.top, right: r.right, bottom: r.bottom};"
    )
    view = window.execute_script(
        "const r = document.getElementById('viewport').getBoundingClientRect();"
        "return {left: r.left, top: r.top, right: r.right, bottom: r.bottom};"
    )
    assert inside(whole, view)
    assert whole["right"] - whole["left"] > 0.9 * (view["right"] - view["left"]) or whole[
        "bottom"
    ] - whole["top"] > 0.9 * (view["bottom"] - view["top"])
    # Stepping after a fit keeps the fit's scale while the lit state is on screen.
    fitted = name("awaiting_model")["height"]
    press(window, "j")
    assert name("awaiting_model")["height"] == pytest.approx(fitted, rel=0.01)
    # The page itself never scrolled: the wheel and the drag went to the diagram.
    assert window.execute_script("return [scrollX, scrollY]") == [0, 0]


def test_the_page_model_lights_the_composites_edge_for_a_groups_transition(
    tmp_path: Path,
) -> None:
    model = page_model(read_session(three_runs_log(tmp_path / "runs.jsonl")))
    graph = _html_diagram.page_graph()
    pairs = [
        (graph.edges[int(s["edge"].removeprefix("edge_"))].source, s["dest"])
        for s in model["steps"]
    ]
    assert pairs[3] == ("ended", "awaiting_model")
    assert pairs[5] == ("active", "aborted")
    assert model["extra_edges"] == []


def test_docs_replay_png_is_a_real_render_of_the_page() -> None:
    """``docs/replay.png`` (made by ``tools/render_replay_png.py``): a 1400 x 1000 screenshot
    with hundreds of colours (a blank or failed render has a handful)."""
    data = (ROOT / "docs" / "replay.png").read_bytes()
    assert data[12:16] == b"IHDR"
    assert (int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")) == (1400, 1000)
    assert png_colours(data) > 100
