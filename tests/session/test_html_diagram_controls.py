"""Issue 34: the page diagram as a mutation check found it untested (label lines stacked without
Graphviz; the wheel zooms about the pointer; Ctrl, Meta and Alt keys stay the browser's)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from statemachine_agent.session import _html_diagram, write_html

from .test_html import browser, demo_log, open_page  # noqa: F401
from .test_html_diagram import NAME_RECTS, window  # noqa: F401


def test_without_graphviz_a_merged_edges_label_lines_are_stacked() -> None:
    svg = _html_diagram.simple_svg(_html_diagram.page_graph())
    merged = 0
    for group in re.findall(r'<g id="edge_\d+" class="edge">.*?</g>', svg):
        ys = [float(y) for y in re.findall(r'<text x="[^"]+" y="([^"]+)"', group)]
        assert len(ys) == len(set(ys)), group  # one line under the other, none on top
        merged += len(ys) > 1
    assert merged >= 3


def name_centre(window: Any, state: str) -> tuple[float, float]:  # noqa: F811
    rect = next(n for n in window.execute_script(NAME_RECTS) if n["id"] == f"state_{state}")
    return (rect["left"] + rect["right"]) / 2, (rect["top"] + rect["bottom"]) / 2


def test_the_wheel_zooms_about_the_pointer(tmp_path: Path, window: Any) -> None:  # noqa: F811 (the fixture)
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.actions.wheel_input import ScrollOrigin

    page = write_html(demo_log(tmp_path / "demo"), tmp_path / "demo.html")
    open_page(window, page)
    x, y = name_centre(window, "executing_tools")
    box = window.execute_script(
        "const r = document.getElementById('viewport').getBoundingClientRect();"
        "return [r.left, r.top, r.width, r.height];"
    )
    viewport = window.find_element("id", "viewport")
    # The pointer on the state's name (offsets from the viewport's centre).
    origin = ScrollOrigin.from_element(
        viewport, int(x - box[0] - box[2] / 2), int(y - box[1] - box[3] / 2)
    )
    ActionChains(window).scroll_from_origin(origin, 0, -300).perform()
    after = name_centre(window, "executing_tools")
    assert after == pytest.approx((x, y), abs=2)  # the point under the pointer stays put


def test_ctrl_keys_stay_the_browsers(tmp_path: Path, window: Any) -> None:  # noqa: F811 (the fixture)
    page = write_html(demo_log(tmp_path / "demo"), tmp_path / "demo.html")
    open_page(window, page)
    before = window.execute_script("return document.querySelector('#viewport svg').dataset.scale")
    for key in ("-", "+", "0"):
        for modifier in ("ctrlKey", "metaKey", "altKey"):
            prevented = window.execute_script(
                "const e = new KeyboardEvent('keydown', {key: arguments[0], cancelable: true,"
                " bubbles: true, [arguments[1]]: true});"
                "document.body.dispatchEvent(e); return e.defaultPrevented;",
                key,
                modifier,
            )
            assert prevented is False, (key, modifier)
    after = window.execute_script("return document.querySelector('#viewport svg').dataset.scale")
    assert after == before
