"""The HTML replay of a session (`render_html`, ``statemachine-agent replay --html``), clicked
through in a real headless Chromium opened from disk with the network off.

The browser tests need Debian's ``chromium`` and ``chromium-driver`` (``.ci/run`` installs them);
without them they are skipped, saying so. Selenium is pointed at ``/usr/bin/chromedriver`` and
``/usr/bin/chromium`` and never downloads a driver.
"""

from __future__ import annotations

import asyncio
import io
import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from rich.console import Console

from statemachine_agent import Agent, GraphvizNotFoundError, tool
from statemachine_agent.cli import main
from statemachine_agent.cli._demo import run_demo
from statemachine_agent.models import ScriptedModel
from statemachine_agent.session import (
    _html,
    _html_diagram,
    page_model,
    read_session,
    render_html,
    write_html,
)
from statemachine_agent.testing.steps import call, text_response, tool_response

from .killing import run_and_kill

HANG_CHILD = Path(__file__).with_name("hang_child.py")
CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
CHROMEDRIVER = os.environ.get("CHROMEDRIVER", "/usr/bin/chromedriver")
XSS = "<img src=x onerror=\"document.title='pwned'\">"
SCRIPT_END = "</script><script>document.title='pwned by script'</script><!--"


# -- logs ----------------------------------------------------------------------------------------


def demo_log(base: Path) -> Path:
    """The demo's session log (the same run as ``statemachine-agent demo --delay 0``)."""
    _, _, session = run_demo(base, console=Console(file=io.StringIO()), delay_seconds=0.0)
    return session


def parallel_log(path: Path) -> Path:
    """One batch of three parallel calls sleeping 0.3 s, 0.1 s and 0.2 s, then an answer."""

    @tool
    async def wait(seconds: float) -> str:
        """Sleep, then say how long."""
        await asyncio.sleep(seconds)
        return f"waited {seconds}"

    model = ScriptedModel(
        [
            tool_response(
                call("wait", {"seconds": 0.3}, id="c1"),
                call("wait", {"seconds": 0.1}, id="c2"),
                call("wait", {"seconds": 0.2}, id="c3"),
            ),
            text_response("all waited"),
        ]
    )
    agent = Agent(model, tools=[wait], session=path)
    agent.run_sync("wait three times")
    assert agent.session is not None
    agent.session.close()
    return path


def killed_log(base: Path) -> Path:
    """hang_child.py SIGKILLed mid-batch: of its three parallel calls, c2 and c1 finished (their
    results are logged), c3 hangs until the kill (no result)."""
    log, markers = base / "crash.jsonl", base / "markers.txt"

    def two_results(lines: list[dict[str, Any]]) -> bool:
        return sum(1 for line in lines if line["type"] == "tool_result") == 2

    assert run_and_kill(HANG_CHILD, log, markers, two_results), "the child did not hang"
    return log


def killed_and_resumed_log(base: Path) -> Path:
    """`killed_log`, then the child run again: it resumes the log (c3 repaired, the run
    ``aborted``) and starts a new run that ends ``done``."""
    log = killed_log(base)
    assert not run_and_kill(HANG_CHILD, log, base / "markers.txt", lambda _lines: False)
    return log


def xss_log(path: Path) -> Path:
    @tool
    def fetch_page(note: str = "") -> str:
        """Return a page."""
        return XSS

    model = ScriptedModel(
        [
            tool_response(call("fetch_page", {"note": SCRIPT_END}, id="x1"), text=SCRIPT_END),
            text_response("The page holds " + XSS),
        ]
    )
    agent = Agent(model, tools=[fetch_page], session=path)
    agent.run_sync("fetch " + XSS)
    assert agent.session is not None
    agent.session.close()
    return path


# -- the browser -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    missing = [p for p in (CHROMIUM, CHROMEDRIVER) if not shutil.which(p)]
    if missing:
        reason = (
            f"headless Chromium is not installed ({', '.join(missing)} missing): the browser tests "
            "need Debian's chromium and chromium-driver (.ci/run installs them)"
        )
        print(reason)
        pytest.skip(reason)
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for argument in (
        "--headless=new",
        "--no-sandbox",  # Chromium refuses to run as root with its sandbox
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--window-size=1400,900",
    ):
        options.add_argument(argument)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    try:
        driver.execute_cdp_cmd("Network.enable", {})
        driver.execute_cdp_cmd(
            "Network.emulateNetworkConditions",
            {"offline": True, "latency": 0, "downloadThroughput": -1, "uploadThroughput": -1},
        )
        yield driver
    finally:
        driver.quit()


def open_page(driver: Any, page: Path) -> None:
    """Load ``page`` from disk and wait until its script has built it."""
    from selenium.webdriver.support.ui import WebDriverWait

    driver.get(page.resolve().as_uri())
    WebDriverWait(driver, 30).until(
        lambda d: d.execute_script("return document.body.dataset.ready") == "1"
    )
    # Nothing was fetched: the page is self-contained.
    assert driver.execute_script("return performance.getEntriesByType('resource').length") == 0
    assert driver.get_log("browser") == []  # no script error, no blocked request


def press(driver: Any, *keys: str) -> None:
    from selenium.webdriver.common.action_chains import ActionChains

    actions = ActionChains(driver)
    for key in keys:
        actions.send_keys(key)
    actions.perform()


def click(driver: Any, element: Any) -> None:
    """Scroll ``element`` to the middle of the window (clear of the sticky step bar), click it."""
    driver.execute_script("arguments[0].scrollIntoView({block: 'center'})", element)
    element.click()


def classes(driver: Any, element_id: str) -> list[str]:
    return str(driver.find_element("id", element_id).get_attribute("class")).split()


def lit_texts(driver: Any, selector: str) -> list[str]:
    return [e.text for e in driver.find_elements("css selector", selector + ".lit")]


def step_to(driver: Any, text: str) -> None:
    """From the first step, press the right arrow until the step line shows ``text``."""
    from selenium.webdriver.common.keys import Keys

    press(driver, Keys.HOME)
    count = len(page_steps(driver))
    for _ in range(count):
        if text in driver.find_element("id", "step-text").text:
            return
        press(driver, Keys.ARROW_RIGHT)
    raise AssertionError(f"no step shows {text!r}")


def page_steps(driver: Any) -> list[Any]:
    return list(driver.execute_script("return DATA.steps"))


# -- the cases ---------------------------------------------------------------------------


def test_demo_log_shows_6_turns_done_and_the_first_batch_lights_executing_tools(
    tmp_path: Path, browser: Any
) -> None:
    from selenium.webdriver.common.keys import Keys

    page = write_html(demo_log(tmp_path / "demo"), tmp_path / "demo.html")
    open_page(browser, page)
    assert browser.find_element("id", "summary-turns").text == "6"
    assert len(browser.find_elements("css selector", "#timeline .turn")) == 6
    assert browser.find_element("id", "summary-state").text == "done"
    # It opens at the first step (issue 33 case 4: a screenshot at load shows its top).
    assert "current" in classes(browser, "state_awaiting_model")
    assert browser.find_element("id", "step-count").text == "step 1 / 12"
    press(browser, Keys.END)
    assert "current" in classes(browser, "state_done")

    press(browser, Keys.HOME, Keys.ARROW_RIGHT)  # the keyboard: the first tool batch
    assert browser.find_element("id", "step-text").text == (
        "awaiting_model → executing_tools (model_replied: tool_calls)"
    )
    assert "current" in classes(browser, "state_executing_tools")
    assert "current" not in classes(browser, "state_done")
    assert [e.get_attribute("id") for e in browser.find_elements("css selector", ".current")] == [
        "state_executing_tools"
    ]
    taken = browser.find_elements("css selector", "#diagram .edge.taken")
    # The overview's edge of the pair, labelled with the branch's TransitionSpec label (issue 34).
    assert len(taken) == 1 and taken[0].text == "tool_calls"
    (lit_call,) = browser.find_elements("css selector", ".call.lit")
    assert lit_call.get_attribute("data-call") == "toolu_demo_01"
    assert lit_call.find_element("css selector", ".who").text == "→ list_files"
    arguments = lit_call.find_element("css selector", "pre").text
    assert json.loads(arguments) == {"path": ".", "recursive": True}
    assert arguments == '{\n  "path": ".",\n  "recursive": true\n}'
    assert [
        e.get_attribute("data-call")
        for e in browser.find_elements("css selector", ".item.lit")
        if "result" in str(e.get_attribute("class"))
    ] == ["toolu_demo_01"]

    browser.find_element("id", "next").click()  # the buttons step too
    assert "current" in classes(browser, "state_awaiting_model")
    browser.find_element("id", "prev").click()
    assert "current" in classes(browser, "state_executing_tools")
    assert browser.find_element("id", "step-count").text == "step 2 / 12"


def test_parallel_bars_overlap_and_end_2nd_3rd_1st(tmp_path: Path, browser: Any) -> None:
    page = write_html(parallel_log(tmp_path / "parallel.jsonl"), tmp_path / "parallel.html")
    open_page(browser, page)
    rects = {
        call_id: browser.execute_script(
            "const r = document.querySelector(`#timeline .bar[data-call='${arguments[0]}']`)"
            ".getBoundingClientRect(); return [r.left, r.right];",
            call_id,
        )
        for call_id in ("c1", "c2", "c3")
    }
    lefts = [r[0] for r in rects.values()]
    rights = [r[1] for r in rects.values()]
    assert max(lefts) < min(rights), f"the bars do not overlap: {rects}"
    assert sorted(rects, key=lambda c: rects[c][1]) == ["c2", "c3", "c1"]
    # The widths follow the durations: 0.1 s is a third of 0.3 s (within scheduling noise).
    width = {c: r[1] - r[0] for c, r in rects.items()}
    assert width["c2"] < width["c3"] < width["c1"]


def test_killed_mid_batch_and_resumed_marks_the_repair_the_abort_and_the_new_run(
    tmp_path: Path, browser: Any
) -> None:
    page = write_html(killed_and_resumed_log(tmp_path), tmp_path / "crash.html")
    open_page(browser, page)
    items = browser.execute_script(
        "return [...document.querySelectorAll('#transcript .item')].map("
        "n => [n.className.replace(' lit', ''), n.dataset.call || '', n.textContent])"
    )
    kinds = [k for k, _, _ in items]
    crash = kinds.index("item crash")
    repairs = [i for i, (k, _, _) in enumerate(items) if "repair" in k.split()]
    assert [items[i][1] for i in repairs] == ["c3"]  # the call that hung had no result
    assert "repair: answered on resume" in items[repairs[0]][2]
    assert "no result recorded" in items[repairs[0]][2]
    aborted = next(i for i, (k, _, t) in enumerate(items) if k == "item state" and "aborted" in t)
    # In log order: the crash, its repair, aborted, the old run's end, then the resumed run.
    assert crash < repairs[0] < aborted
    assert items[aborted][2] == "⚠ executing_tools → aborted  (resume: recovered)"
    assert kinds[aborted + 1] == "item run_end" and "run 1 ended: aborted" in items[aborted + 1][2]
    assert kinds[aborted + 2] == "item run_start" and items[aborted + 2][2] == "run 2 started"
    assert items[aborted + 3][2] == "user" + "three at once"
    assert items[aborted + 4][2] == "aborted → awaiting_model  (start: start)"
    assert browser.find_element("id", "summary-state").text == "done"
    assert browser.find_element("id", "summary-runs").text == "2"
    assert browser.find_element("id", "summary-repairs").text == "1"

    click(browser, browser.find_elements("css selector", "#transcript .item.crash")[0])
    assert "current" in classes(browser, "state_aborted")
    assert "taken" in classes(browser, "edge_x0")  # the recovery, drawn from the log
    assert "recovered after the process died" in browser.find_element("id", "step-text").text
    (lit_repair,) = browser.find_elements("css selector", "#transcript .item.result.repair.lit")
    assert lit_repair.get_attribute("data-call") == "c3"
    rights = {}
    for call_id in ("c1", "c2", "c3"):
        bar = browser.find_element("css selector", f"#timeline .bar[data-call='{call_id}']")
        assert ("repair" in str(bar.get_attribute("class")).split()) == (call_id == "c3")
        # Where the bar ends, in % of the timeline's width (a very short bar is drawn 2 px wide).
        rights[call_id] = browser.execute_script(
            "return parseFloat(arguments[0].style.left) + parseFloat(arguments[0].style.width)",
            bar,
        )
    # The repaired call's bar stops where the log stopped (c1's result, the last line before the
    # kill), not at the resume seconds later.
    assert rights["c3"] == pytest.approx(rights["c1"]), rights
    assert rights["c2"] < rights["c1"]
    # The crashed turn ends there too (its row's length leaves out the time until the resume).
    turn = browser.execute_script("return DATA.turns[0]")
    assert turn["end"] == next(c["end"] for c in turn["calls"] if c["id"] == "c1")


def test_markup_in_a_tool_result_is_text_and_never_runs(tmp_path: Path, browser: Any) -> None:
    log = xss_log(tmp_path / "xss.jsonl")
    page = write_html(log, tmp_path / "xss.html")
    raw = page.read_text()
    assert XSS not in raw and "</script><script>document" not in raw
    open_page(browser, page)
    assert browser.title == "session xss.jsonl"
    step_to(browser, "(model_replied: tool_calls)")
    (result,) = browser.find_elements("css selector", ".item.result.lit")
    assert result.find_element("css selector", "pre").text == XSS
    assert browser.title == "session xss.jsonl"
    assert browser.find_elements("css selector", "#transcript img, #transcript script") == []
    user = browser.find_element("css selector", "#transcript .item.user").text
    assert user == "user\nfetch " + XSS
    texts = browser.find_element("id", "transcript").text
    assert SCRIPT_END in texts and f"The page holds {XSS}" in texts
    assert browser.title == "session xss.jsonl"


def test_screenshot_at_the_first_tool_batch(tmp_path: Path, browser: Any) -> None:
    page = write_html(demo_log(tmp_path / "demo"), tmp_path / "demo.html")
    open_page(browser, page)
    step_to(browser, "awaiting_model → executing_tools")
    shot = tmp_path / "first_tool_batch.png"
    assert browser.save_screenshot(str(shot))
    data = shot.read_bytes()
    assert data.startswith(b"\x89PNG\r\n\x1a\n")
    # A blank 1400x900 page is about 6 kB; the rendered diagram, timeline and text are far more.
    assert len(data) > 40_000, len(data)
    print(f"screenshot: {shot} ({len(data)} bytes)")


# -- more of the same kind -----------------------------------------------------------------------


def test_sequential_calls_are_drawn_one_after_another(tmp_path: Path, browser: Any) -> None:
    """A bar starts when its call started (the log's ``tool_start`` line), not with its batch."""

    @tool
    async def nap(seconds: float) -> str:
        """Sleep."""
        await asyncio.sleep(seconds)
        return "slept"

    log = tmp_path / "seq.jsonl"
    model = ScriptedModel(
        [
            tool_response(
                call("nap", {"seconds": 0.1}, id="s1"), call("nap", {"seconds": 0.1}, id="s2")
            ),
            text_response("napped"),
        ]
    )
    agent = Agent(model, tools=[nap], session=log, tool_execution="sequential")
    agent.run_sync("nap twice")
    assert agent.session is not None
    agent.session.close()
    starts = [line for line in log.read_text().splitlines() if '"type":"tool_start"' in line]
    assert [json.loads(line)["call_id"] for line in starts] == ["s1", "s2"]
    out = CliRunner().invoke(main, ["check", str(log)])
    assert out.exit_code == 0, out.output  # a tool_start line is no violation

    open_page(browser, write_html(log, tmp_path / "seq.html"))
    first, second = (
        browser.execute_script(
            "const r = document.querySelector(`#timeline .bar[data-call='${arguments[0]}']`)"
            ".getBoundingClientRect(); return [r.left, r.right];",
            call_id,
        )
        for call_id in ("s1", "s2")
    )
    assert second[0] >= first[1] - 1.0, (first, second)


def test_a_long_log_is_built_as_needed_and_every_step_still_lights_its_entries(
    tmp_path: Path, browser: Any
) -> None:
    from selenium.webdriver.common.keys import Keys

    @tool
    def tick(n: int) -> str:
        """Count."""
        return f"tick {n}"

    log = tmp_path / "long.jsonl"
    steps = [tool_response(call("tick", {"n": n}, id=f"t{n}")) for n in range(150)]
    model = ScriptedModel([*steps, text_response("ticked")])
    agent = Agent(model, tools=[tick], session=log, max_turns=200)
    agent.run_sync("tick 150 times")
    assert agent.session is not None
    agent.session.close()
    open_page(browser, write_html(log, tmp_path / "long.html"))
    total = browser.execute_script("return DATA.items.length")
    assert total > 600  # more than one chunk of 200
    built = browser.execute_script("return document.querySelectorAll('#transcript .item').length")
    assert built < total  # the middle is built when needed
    assert browser.find_element("id", "summary-turns").text == "151"
    press(browser, Keys.END)  # the last chunk is built when its step is shown
    (answer,) = browser.find_elements("css selector", ".item.assistant.lit")
    assert answer.find_element("css selector", ".text").text == "ticked"
    assert answer.find_element("css selector", ".meta").text.startswith("turn 151 · stop end_turn")

    press(browser, Keys.HOME)
    assert "current" in classes(browser, "state_awaiting_model")
    assert lit_texts(browser, ".item.user") == ["user\ntick 150 times"]
    press(browser, *[Keys.ARROW_RIGHT] * (2 * 75 + 1))  # to turn 76's batch, a middle chunk
    (lit_call,) = browser.find_elements("css selector", ".call.lit")
    assert lit_call.get_attribute("data-call") == "t75"
    (result,) = browser.find_elements("css selector", ".item.result.lit")
    assert result.find_element("css selector", "pre").text == "tick 75"
    assert lit_texts(browser, "#timeline .turn")[0].startswith("turn 76 · run 1")


def test_thinking_is_folded_error_results_are_marked_and_usage_adds_up(
    tmp_path: Path, browser: Any
) -> None:
    @tool
    def explode() -> str:
        """Fail."""
        raise RuntimeError("boom")

    log = tmp_path / "think.jsonl"
    first = tool_response(
        call("explode", {}, id="e1"), usage={"input_tokens": 10, "output_tokens": 3}
    )
    first["content"].insert(0, {"type": "thinking", "thinking": "let me think", "signature": "s"})
    model = ScriptedModel(
        [first, text_response("it failed", usage={"input_tokens": 20, "output_tokens": 5})]
    )
    agent = Agent(model, tools=[explode], session=log)
    agent.run_sync("explode")
    assert agent.session is not None
    agent.session.close()
    open_page(browser, write_html(log, tmp_path / "think.html"))
    details = browser.find_element("css selector", "details.thinking")
    assert details.get_attribute("open") is None
    assert details.find_element("css selector", "summary").text == "thinking (12 characters)"
    assert "let me think" not in browser.find_element("id", "transcript").text
    click(browser, details.find_element("css selector", "summary"))
    assert "let me think" in browser.find_element("id", "transcript").text
    result = browser.find_element("css selector", ".item.result")
    assert "error" in str(result.get_attribute("class")).split()
    assert result.find_element("css selector", ".badge.error").text == "error"
    assert "boom" in result.find_element("css selector", "pre").text
    metas = [e.text for e in browser.find_elements("css selector", ".item.assistant .meta")]
    assert metas[0] == "turn 1 · stop tool_use · 10 in / 3 out tokens"
    assert metas[-1] == "turn 2 · stop end_turn · 20 in / 5 out tokens"
    assert browser.find_element("id", "summary-usage").text == "30 in / 8 out tokens"


def test_long_results_are_folded_until_asked_for(tmp_path: Path, browser: Any) -> None:
    output = "\n".join(f"line {n}" for n in range(1, 5001))

    @tool
    def dump() -> str:
        """A long output."""
        return output

    log = tmp_path / "long.jsonl"
    model = ScriptedModel([tool_response(call("dump", {}, id="d1")), text_response("long")])
    agent = Agent(model, tools=[dump], session=log)
    agent.run_sync("dump")
    assert agent.session is not None
    agent.session.close()
    open_page(browser, write_html(log, tmp_path / "long.html"))
    result = browser.find_element("css selector", ".item.result")
    shown = result.find_element("css selector", "pre").text
    assert shown.splitlines()[-2:] == ["line 20", "…"]
    button = result.find_element("css selector", "button.fold")
    assert button.text == f"show all (5000 lines, {len(output)} characters)"
    click(browser, button)
    assert result.find_element("css selector", "pre").text.splitlines()[-1] == "line 5000"


def test_the_page_works_without_graphviz(
    tmp_path: Path, browser: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_dot(*_args: Any, **_kwargs: Any) -> bytes:
        raise GraphvizNotFoundError("no dot")

    monkeypatch.setattr(_html_diagram, "render_image", no_dot)
    log = parallel_log(tmp_path / "p.jsonl")
    page = write_html(log, tmp_path / "p.html")
    assert 'class="simple"' in page.read_text()
    open_page(browser, page)
    step_to(browser, "awaiting_model → executing_tools")
    assert "current" in classes(browser, "state_executing_tools")
    edges = _html_diagram.page_graph().edges
    tool_calls = next(
        i
        for i, e in enumerate(edges)
        if (e.source, e.dest) == ("awaiting_model", "executing_tools")
    )
    assert "taken" in classes(browser, f"edge_{tool_calls}")


def test_every_edge_and_state_has_an_element_in_both_drawings(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    edges = len(_html_diagram.page_graph().edges)
    expected = [f'id="edge_{n}"' for n in range(edges)] + ['id="edge_x0"']
    expected += [f'id="state_{s}"' for s in ("idle", "awaiting_model", "executing_tools", "done")]
    expected += ['id="group_active"', 'id="group_ended"']
    extra = [("executing_tools", "aborted", "resume")]
    drawings = [_html_diagram.simple_svg(_html_diagram._with_extra(extra), edges)]
    if shutil.which("dot"):
        drawings.append(_html_diagram.diagram_svg(extra))
    for svg in drawings:
        for element in expected:
            assert element in svg, element


def test_the_recovery_transition_is_drawn_as_an_extra_edge(tmp_path: Path) -> None:
    model = page_model(read_session(killed_and_resumed_log(tmp_path)))
    assert model["extra_edges"] == [("executing_tools", "aborted", "resume")]
    recovered = [s for s in model["steps"] if s["recovered"]]
    assert [(s["source"], s["dest"], s["edge"]) for s in recovered] == [
        ("executing_tools", "aborted", "edge_x0")
    ]


def test_a_log_that_ends_mid_run_says_so_and_its_unfinished_call_has_no_end(
    tmp_path: Path,
) -> None:
    log = killed_log(tmp_path)
    model = page_model(read_session(log))
    assert model["items"][-1]["kind"] == "crash"
    assert model["items"][-1]["text"] == (
        "the log ends during this run (the process died, or is still running)"
    )
    assert model["summary"]["state"] == "executing_tools"
    ends = {c["id"]: c["end"] for c in model["turns"][-1]["calls"]}
    assert ends["c3"] is None and ends["c1"] is not None and ends["c2"] is not None
    assert "the log ends during this run" in render_html(log)  # the page renders it


def test_an_empty_log_renders_a_page(tmp_path: Path) -> None:
    log = tmp_path / "empty.jsonl"
    log.write_text(
        '{"type":"header","format":"statemachine-agent-session","version":1,"tools":[]}\n'
    )
    model = page_model(read_session(log))
    assert (model["items"], model["steps"], model["turns"]) == ([], [], [])
    assert model["summary"]["state"] == "idle"
    assert render_html(log).startswith("<!DOCTYPE html>")


def test_script_json_cannot_end_its_script_element() -> None:
    text = _html._script_json({"a": "</script><!-- & >"})
    assert "<" not in text and ">" not in text and "&" not in text
    assert json.loads(text) == {"a": "</script><!-- & >"}


def test_replay_html_command_writes_the_page(tmp_path: Path) -> None:
    log = parallel_log(tmp_path / "p.jsonl")
    out = CliRunner().invoke(main, ["replay", str(log), "--html", str(tmp_path / "p.html")])
    assert out.exit_code == 0, out.output
    assert f"wrote {tmp_path / 'p.html'}" in out.output
    page = (tmp_path / "p.html").read_text()
    assert page.startswith("<!DOCTYPE html>") and "<title>session p.jsonl</title>" in page
    assert page == render_html(log)


def test_replay_html_refuses_a_file_that_is_not_a_log(tmp_path: Path) -> None:
    bad = tmp_path / "notes.txt"
    bad.write_text("hello\n")
    out = CliRunner().invoke(main, ["replay", str(bad), "--html", str(tmp_path / "x.html")])
    assert out.exit_code == 1 and "is not a session log" in out.output
    assert not (tmp_path / "x.html").exists()
