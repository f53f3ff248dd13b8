"""Figure 9: the HTML replay of a 10,000-message session log.

A run of 5,000 turns (one tool call each, zero-latency model; every 50th result is 400 lines long,
so the page folds it) writes a 10,000-message log. Measured: `render_html` time and the page's size,
then the time headless Chromium takes to open the page from disk and build it (Selenium's ``get``
until the page's script has finished, and the page's own navigation timing), and one step forward.
The browser part needs Debian's ``chromium`` and ``chromium-driver`` and Selenium; without them it
is skipped, saying so.

Usage: ``python benchmarks/bench_html.py [--quick]``
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from _common import emit, median, quick, table

from statemachine_agent import Agent, AssistantMessage, State, TextBlock, ToolCallBlock, tool
from statemachine_agent.models import ScriptedModel
from statemachine_agent.session import render_html

TURNS = 5000  # 2 messages a turn: 10,000 messages
LONG_EVERY = 50
CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"


async def work(lines: int) -> str:
    """Return ``lines`` lines of output."""
    return "\n".join(f"output line {n}" for n in range(lines))


WORK = tool(work)


def write_log(path: Path, turns: int) -> int:
    script = [
        AssistantMessage(
            content=[
                TextBlock(text=f"Step {i}: running the work."),
                ToolCallBlock(
                    id=f"call_{i}", name="work", input={"lines": 400 if i % LONG_EVERY == 0 else 3}
                ),
            ],
            stop_reason="tool_use",
        )
        for i in range(turns)
    ]
    script.append(AssistantMessage(content=[TextBlock(text="done")], stop_reason="end_turn"))
    agent = Agent(
        ScriptedModel(script, record_requests=False),
        tools=[WORK],
        max_turns=turns + 1,
        session=path,
    )
    result = asyncio.run(agent.run("go"))
    assert result.state is State.DONE, result.error
    assert agent.session is not None
    agent.session.close()
    return len(result.messages)


def open_in_browser(page: Path, reps: int) -> dict[str, float] | None:
    """Median seconds to open ``page`` in headless Chromium, or None without a browser."""
    if not (shutil.which(CHROMIUM) and shutil.which(CHROMEDRIVER)):
        print(f"no {CHROMIUM} / {CHROMEDRIVER}: the browser figures are skipped")
        return None
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
        from selenium.webdriver.common.keys import Keys
        from selenium.webdriver.support.ui import WebDriverWait
    except ImportError:
        print(
            "selenium is not installed (pip install -e '.[dev]'): the browser figures are skipped"
        )
        return None
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for argument in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1400,900"):
        options.add_argument(argument)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    opens, navigations, steps = [], [], []
    try:
        for _ in range(reps):
            driver.get("about:blank")
            start = time.perf_counter()
            driver.get(page.resolve().as_uri())
            WebDriverWait(driver, 60).until(
                lambda d: d.execute_script("return document.body.dataset.ready") == "1"
            )
            opens.append(time.perf_counter() - start)
            navigations.append(
                driver.execute_script(
                    "const n = performance.getEntriesByType('navigation')[0];"
                    "return (n.loadEventEnd - n.startTime) / 1000;"
                )
            )
            body = driver.find_element("tag name", "body")
            start = time.perf_counter()
            body.send_keys(Keys.HOME)
            driver.execute_script("return document.getElementById('step-count').textContent")
            steps.append(time.perf_counter() - start)
    finally:
        driver.quit()
    return {"open": median(opens), "navigation": median(navigations), "step": median(steps)}


def main() -> dict[str, Any]:
    reps = 1 if quick() else 3
    turns = 500 if quick() else TURNS
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        log = base / "run.jsonl"
        messages = write_log(log, turns)
        renders = []
        text = ""
        for _ in range(reps):
            start = time.perf_counter()
            text = render_html(log)
            renders.append(time.perf_counter() - start)
        page = base / "run.html"
        page.write_text(text, encoding="utf-8")
        browser = open_in_browser(page, reps)
        log_bytes, page_bytes = log.stat().st_size, page.stat().st_size
    rows: list[list[Any]] = [
        ["messages in the log", messages],
        ["log size (MiB)", log_bytes / 2**20],
        ["render_html (s)", median(renders)],
        ["page size (MiB)", page_bytes / 2**20],
    ]
    data: dict[str, Any] = {
        "messages": messages,
        "log_bytes": log_bytes,
        "render_seconds": median(renders),
        "page_bytes": page_bytes,
    }
    if browser is not None:
        rows += [
            ["Chromium: open from disk until built (s)", browser["open"]],
            ["Chromium: navigation start to load end (s)", browser["navigation"]],
            ["Chromium: one step (Home key, s)", browser["step"]],
        ]
        data.update(
            browser_open_seconds=browser["open"],
            browser_navigation_seconds=browser["navigation"],
            browser_step_seconds=browser["step"],
            targets={"browser_open_lt_3s": browser["open"] < 3.0},
        )
    print(table(["measure", "value"], rows, "Figure 9: HTML replay of a 10,000-message log"))
    emit("html", data)
    return data


if __name__ == "__main__":
    main()
