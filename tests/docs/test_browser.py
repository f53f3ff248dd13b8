"""The built site in headless Chromium, served on 127.0.0.1: the start page opens, the
navigation leads to every guide, and the search finds a term.

Needs Debian's ``chromium`` and ``chromium-driver`` (``.ci/run`` installs them); without them the
test is skipped, saying so. Selenium drives ``/usr/bin/chromium`` through ``/usr/bin/chromedriver``
and downloads nothing."""

from __future__ import annotations

import functools
import http.server
import os
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from .blocks import ROOT

CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
CHROMEDRIVER = os.environ.get("CHROMEDRIVER", "/usr/bin/chromedriver")
WAIT_SECONDS = 30  # the most any one wait for the page may take on a loaded machine


def _guides() -> dict[str, str]:
    """The Guides section of mkdocs.yml's nav: title -> page."""
    text = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    nav = yaml.load(text, Loader=yaml.BaseLoader)["nav"]  # BaseLoader: no !!python tags run
    section = next(item["Guides"] for item in nav if "Guides" in item)
    return {title: page for entry in section for title, page in entry.items()}


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        """No line per request on stderr."""


@pytest.fixture(scope="module")
def served(site: Path) -> Iterator[str]:
    """The built site on a free port of 127.0.0.1."""
    handler = functools.partial(_QuietHandler, directory=str(site))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    missing = [p for p in (CHROMIUM, CHROMEDRIVER) if not shutil.which(p)]
    if missing:
        pytest.skip(
            f"headless Chromium is not installed ({', '.join(missing)} missing): the site's browser "
            "test needs Debian's chromium and chromium-driver (.ci/run installs them)"
        )
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for argument in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--window-size=1400,900",
    ):
        options.add_argument(argument)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    try:
        yield driver
    finally:
        driver.quit()


def _wait(driver: Any, condition: Any) -> Any:
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(driver, WAIT_SECONDS).until(condition)


def test_the_start_page_leads_to_every_guide_and_the_search_finds_a_term(
    browser: Any, served: str
) -> None:
    from selenium.webdriver.common.by import By

    browser.get(served)
    _wait(browser, lambda d: d.find_element(By.TAG_NAME, "h1").text == "statemachine_agent")
    guides = _guides()
    assert len(guides) >= 10
    for title, page in guides.items():
        # Follow the navigation: the sidebar's link titled as the guide.
        link = _wait(
            browser,
            lambda d, title=title: next(
                (
                    a
                    for a in d.find_elements(By.CSS_SELECTOR, "nav.md-nav a.md-nav__link")
                    if a.get_attribute("textContent").strip() == title
                ),
                None,
            ),
        )
        browser.execute_script("arguments[0].click()", link)
        want = served + page.removesuffix(".md") + "/"
        _wait(browser, lambda d, want=want: d.current_url == want)
        assert browser.find_element(By.TAG_NAME, "h1").text

    # The search (mkdocs-material's, in a web worker): type a term, follow the first result.
    term = "compaction"
    browser.get(served)
    box = _wait(browser, lambda d: d.find_element(By.CSS_SELECTOR, "input.md-search__input"))
    box.click()
    box.send_keys(term)
    results = _wait(
        browser, lambda d: d.find_elements(By.CSS_SELECTOR, "a.md-search-result__link") or None
    )
    assert (
        "matching document" in browser.find_element(By.CSS_SELECTOR, ".md-search-result__meta").text
    )
    marked = browser.find_elements(By.CSS_SELECTOR, ".md-search-result mark")
    assert any(m.text.lower() == term for m in marked)
    first = results[0].get_attribute("href")
    assert first.startswith(served)
    browser.get(first)
    _wait(browser, lambda d: term in d.find_element(By.TAG_NAME, "article").text.lower())


@pytest.mark.parametrize(
    ("term", "page"),
    [
        ("compaction", "guides/context/"),
        ("steering", "concepts/protocol/"),
        ("abort", "concepts/protocol/"),
    ],
)
def test_the_search_lists_the_page_that_explains_a_term_before_the_api_reference(
    browser: Any, served: str, term: str, page: str
) -> None:
    """A newcomer searching a field's term lands on prose with an example, not on the (much
    longer) API reference, whose pages are demoted in the search (`search: boost` front matter)."""
    from selenium.webdriver.common.by import By

    browser.get(f"{served}?q={term}")
    results = _wait(
        browser, lambda d: d.find_elements(By.CSS_SELECTOR, "a.md-search-result__link") or None
    )
    first = results[0].get_attribute("href")
    assert first.startswith(served + page), f"{term}: first result {first}"
