"""Issue 33, cases 4 and 5 (the replay page as a person sees it), and issue 40 (text from the log
is never HTML): each case checked in headless Chromium (`tests/session/test_html.py`'s browser,
opened from disk with the network off) or as a ``statemachine-agent`` process."""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
import tempfile
import zlib
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from statemachine_agent import Agent, Approve, tool
from statemachine_agent._errors import UsageError
from statemachine_agent.cli import main
from statemachine_agent.models import ScriptedModel
from statemachine_agent.session import _html, page_model, read_session, render_html, write_html
from statemachine_agent.testing.steps import call, text_response, tool_response
from statemachine_agent.workspace import Permissions

from .test_html import CHROMIUM, browser, classes, demo_log, lit_texts, open_page, press

__all__ = ["browser"]  # the module-scoped headless Chromium of test_html.py

XSS_NAME = '<img src=x onerror="window.__pwned=1">'
XSS_ERROR = "</script><script>window.__pwned=2</script><b onmouseover=alert(1)>bold</b>"


# -- helpers ---------------------------------------------------------------------------------------


def png_colours(data: bytes) -> int:
    """How many distinct pixel colours a PNG (8-bit, not interlaced, as Chromium writes) has."""
    assert data.startswith(b"\x89PNG\r\n\x1a\n")
    pos, idat, header = 8, b"", None
    while pos < len(data):
        (size,) = struct.unpack(">I", data[pos : pos + 4])
        kind, body = data[pos + 4 : pos + 8], data[pos + 8 : pos + 8 + size]
        pos += 12 + size
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
    assert header is not None
    width, height, depth, colour_type, _, _, interlace = header
    assert depth == 8 and interlace == 0, header
    bpp = {0: 1, 2: 3, 4: 2, 6: 4}[colour_type]
    raw, stride = zlib.decompress(idat), width * bpp
    previous, seen, at = bytearray(stride), set(), 0
    for _ in range(height):
        kind, line = raw[at], bytearray(raw[at + 1 : at + 1 + stride])
        at += 1 + stride
        for x in range(stride):  # the PNG filters (RFC 2083, 6.2-6.6)
            a = line[x - bpp] if x >= bpp else 0
            b = previous[x]
            c = previous[x - bpp] if x >= bpp else 0
            if kind == 1:
                line[x] = (line[x] + a) & 255
            elif kind == 2:
                line[x] = (line[x] + b) & 255
            elif kind == 3:
                line[x] = (line[x] + (a + b) // 2) & 255
            elif kind == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[x] = (line[x] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        seen.update(bytes(line[k : k + bpp]) for k in range(0, stride, bpp))
        previous = line
    return len(seen)


def retime(log: Path, times: dict[int, float]) -> None:
    """Give line ``n`` (0-based, the header is 0) the ``time`` ``times[n]``: a log with exact
    durations, whatever the machine's speed was."""
    lines = log.read_text().splitlines()
    for number, when in times.items():
        body = json.loads(lines[number])
        body["time"] = when
        lines[number] = json.dumps(body)
    log.write_text("\n".join(lines) + "\n")


def line_numbers(log: Path, kind: str, **fields: Any) -> list[int]:
    out = []
    for number, line in enumerate(log.read_text().splitlines()):
        body = json.loads(line)
        if body["type"] == kind and all(body.get(k) == v for k, v in fields.items()):
            out.append(number)
    return out


def result_line(log: Path, call_id: str) -> int:
    (number,) = [
        n
        for n, line in enumerate(log.read_text().splitlines())
        if json.loads(line)["type"] == "tool_result"
        and json.loads(line)["message"]["tool_call_id"] == call_id
    ]
    return number


def evenly_timed(log: Path, extra: dict[int, float]) -> None:
    """Line ``n`` at ``n`` × 10 ms, plus ``extra[m]`` seconds for every line from ``m`` on."""
    count = len(log.read_text().splitlines())
    times = {}
    for n in range(1, count):
        times[n] = round(n * 0.01 + sum(s for m, s in extra.items() if n >= m), 6)
    retime(log, times)


def seconds(value: float) -> str:
    """A duration as the page writes it (page.js ``seconds``)."""
    if value < 1:
        return f"{value * 1000:.{1 if value < 0.01 else 0}f} ms"
    return f"{value:.{2 if value < 10 else 1}f} s"


def bar_of(driver: Any, call_id: str) -> Any:
    return driver.find_element("css selector", f"#timeline .bar[data-call='{call_id}']")


@tool
def write_file(path: str, text: str) -> str:
    """Write a file (a guarded tool: `Permissions` asks before it runs)."""
    return f"wrote {len(text)} characters to {path}"


@tool(requires_approval=True)
def edit_file(path: str) -> str:
    """Edit a file (a person approves each edit)."""
    return f"edited {path}"


@tool
def look() -> str:
    """Look around."""
    return "seen"


def prompted_log(log: Path, answer: bool) -> Path:
    """A call a ``[y/n]`` prompt let run (or not): `Permissions` asks, the log records the
    answer as a ``decision`` line (``on_decided``), as ``statemachine-agent run`` does."""
    model = ScriptedModel(
        [
            tool_response(call("write_file", {"path": "n.txt", "text": "hi"}, id="w1")),
            text_response("noted"),
        ]
    )
    permissions = Permissions(confirm=lambda _question: answer)
    agent = Agent(model, tools=[write_file], session=log, before_tool_call=permissions)
    assert agent.session is not None
    permissions.on_decided = agent.session.record
    agent.run_sync("note it")
    agent.session.close()
    return log


def deferred_log(log: Path, *, decide: bool) -> Path:
    """A batch of ``look`` and ``edit_file`` (which needs approval): the run stops in
    ``awaiting_approval``; with ``decide``, another agent resumes the log and approves it."""
    steps = [
        tool_response(call("look", {}, id="a1"), call("edit_file", {"path": "x.py"}, id="e1")),
        text_response("edited"),
    ]
    agent = Agent(ScriptedModel(steps), tools=[edit_file, look], session=log)
    assert agent.run_sync("edit x.py").state.value == "awaiting_approval"
    assert agent.session is not None
    agent.session.close()
    if decide:
        resumed = Agent.resume(log, model=ScriptedModel(steps[1:]), tools=[edit_file, look])
        assert resumed.run_sync(None, decisions={"e1": Approve()}).state.value == "done"
        assert resumed.session is not None
        resumed.session.close()
    return log


def chromium_screenshot(page: str, out: Path, home: Path) -> bytes:
    """``chromium --headless --screenshot`` as a person runs it (its profile in ``home``)."""
    home.mkdir(exist_ok=True)
    done = subprocess.run(
        [
            CHROMIUM,
            "--headless",
            "--no-sandbox",  # Chromium refuses to run as root with its sandbox
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--disable-background-networking",
            "--no-first-run",
            f"--user-data-dir={home / 'profile'}",
            f"--screenshot={out}",
            "--window-size=1400,1000",
            page,
        ],
        env={**os.environ, "HOME": str(home)},
        capture_output=True,
        timeout=120,
        check=False,
    )
    assert out.exists(), done.stderr.decode(errors="replace")[-2000:]
    return out.read_bytes()


# -- case 4: the page as a person sees it ------------------------------------------------------


def test_a_headless_chromium_screenshot_at_load_shows_the_page(
    tmp_path: Path, browser: Any
) -> None:
    page = write_html(demo_log(tmp_path / "demo"), tmp_path / "run.html")
    shot = chromium_screenshot(page.resolve().as_uri(), tmp_path / "shot.png", tmp_path / "home")
    # A blank page is one colour; the header, diagram, timeline and transcript are hundreds.
    assert png_colours(shot) > 100
    open_page(browser, page)
    assert png_colours(browser.get_screenshot_as_png()) > 100
    assert browser.find_element("id", "step-count").text == "step 1 / 12"
    assert browser.execute_script("return window.scrollY") == 0
    # The first step's entries are built, not placeholders: the prompt is on screen.
    prompt = browser.find_element("css selector", "#transcript .item.user.lit")
    assert prompt.text.startswith("user\nThe tests of this project fail.")
    assert browser.execute_script(
        "const r = arguments[0].getBoundingClientRect(); return r.top >= 0 && "
        "r.bottom <= window.innerHeight",
        prompt,
    )


def test_the_urls_step_opens_that_step_painted(tmp_path: Path, browser: Any) -> None:
    page = write_html(demo_log(tmp_path / "demo"), tmp_path / "run.html")
    url = page.resolve().as_uri() + "#step=12"
    shot = chromium_screenshot(url, tmp_path / "shot.png", tmp_path / "home")
    assert png_colours(shot) > 100
    browser.get(url)
    from selenium.webdriver.support.ui import WebDriverWait

    WebDriverWait(browser, 30).until(
        lambda d: d.execute_script("return document.body.dataset.ready") == "1"
    )
    assert browser.find_element("id", "step-count").text == "step 12 / 12"
    assert "current" in str(browser.find_element("id", "state_done").get_attribute("class"))
    (answer,) = browser.find_elements("css selector", ".item.assistant.lit")
    assert answer.is_displayed()
    assert browser.execute_script(
        "const r = arguments[0].getBoundingClientRect(); return r.bottom > 0 && "
        "r.top < window.innerHeight",
        answer,
    )
    assert png_colours(browser.get_screenshot_as_png()) > 100
    from selenium.webdriver.common.keys import Keys

    press(browser, Keys.HOME)  # stepping keeps the URL's step, so a link names what is shown
    assert browser.execute_script("return location.hash") == "#step=1"


def test_the_urls_step_in_the_middle_opens_that_step_not_the_next(
    tmp_path: Path, browser: Any
) -> None:
    # #step=N counts from 1 as the page's "step N / 12" does. The last step (#step=12) cannot
    # show an off-by-one (a step past the end is the last one): step 3 of 12 can.
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support.ui import WebDriverWait

    log = demo_log(tmp_path / "demo")
    step = page_model(read_session(log))["steps"][2]
    stepped, linked = write_html(log, tmp_path / "a.html"), write_html(log, tmp_path / "b.html")
    open_page(browser, stepped)  # step 1, then two steps on: step 3, as a person gets there
    press(browser, Keys.ARROW_RIGHT, Keys.ARROW_RIGHT)
    assert browser.find_element("id", "step-count").text == "step 3 / 12"
    by_keys = lit_texts(browser, "#transcript .item")

    browser.get(linked.resolve().as_uri() + "#step=3")
    WebDriverWait(browser, 30).until(
        lambda d: d.execute_script("return document.body.dataset.ready") == "1"
    )
    assert browser.find_element("id", "step-count").text == "step 3 / 12"
    assert browser.execute_script("return document.body.dataset.state") == step["dest"]
    assert "current" in classes(browser, "state_" + step["dest"])
    lit = lit_texts(browser, "#transcript .item")
    assert lit == by_keys and len(lit) == len(step["items"])
    assert lit[0] == "executing_tools → awaiting_model (tools_finished: next_turn)"
    assert lit[1].startswith("assistantturn 2 ·") and "A pricing module" in lit[1], lit


def test_time_waiting_at_a_yn_prompt_is_drawn_apart_from_running_time(
    tmp_path: Path, browser: Any
) -> None:
    log = prompted_log(tmp_path / "prompt.jsonl", answer=True)
    (start,) = line_numbers(log, "tool_start", call_id="w1")
    (decided,) = line_numbers(log, "decision", call_id="w1", decision="approve")
    result = result_line(log, "w1")
    assert start < decided < result  # the answer, logged when it came
    # The person took 8 s to answer; the call then ran 10 ms a line (the log's times say so).
    evenly_timed(log, {decided: 8.0 - 0.01 * (decided - start)})
    ran = 0.01 * (result - decided)
    model = page_model(read_session(log))
    (entry,) = model["turns"][0]["calls"]
    assert entry["wait"] == {"from": entry["start"], "to": pytest.approx(entry["start"] + 8.0)}
    assert entry["run"] == entry["wait"]["to"] and entry["decision"] == "approve"

    assert entry["end"] - entry["run"] == pytest.approx(ran)
    open_page(browser, write_html(log, tmp_path / "prompt.html"))
    bar = bar_of(browser, "w1")
    assert bar.get_attribute("title") == (
        f"write_file {seconds(entry['end'] - entry['run'])} (after 8.00 s waiting for approval)"
    )
    wait = bar.find_element("css selector", ".wait")
    assert wait.get_attribute("title") == "waiting for approval 8.00 s"
    share = browser.execute_script(
        "return arguments[0].getBoundingClientRect().width / "
        "arguments[1].getBoundingClientRect().width",
        wait,
        bar,
    )
    assert share == pytest.approx(8.0 / (8.0 + ran), abs=0.01)
    label = browser.find_element("css selector", "#timeline .turn .turn-label")
    turn = model["turns"][0]
    assert turn["waited"] == pytest.approx(8.0)
    assert label.get_attribute("textContent") == (
        f"turn 1 · run 1 · {seconds(turn['end'] - turn['start'] - turn['waited'])}"
        f" + {seconds(turn['waited'])} waiting for approval"
    )
    decision = browser.find_element("css selector", "#transcript .item.decision .who")
    assert decision.text == "✔ approved write_file"


def test_a_declined_prompt_is_a_wait_and_a_denial(tmp_path: Path) -> None:
    log = prompted_log(tmp_path / "no.jsonl", answer=False)
    (decided,) = line_numbers(log, "decision", call_id="w1", decision="deny")
    body = json.loads(log.read_text().splitlines()[decided])
    assert body["reason"].startswith("The user declined to let you write n.txt")
    (entry,) = page_model(read_session(log))["turns"][0]["calls"]
    assert entry["decision"] == "deny" and entry["error"] is True
    assert entry["wait"]["to"] == entry["run"] <= entry["end"]


def test_the_cli_records_when_the_person_answered_a_yn_prompt(tmp_path: Path) -> None:
    pexpect = pytest.importorskip(
        "pexpect", reason="pexpect is not installed (a dev dependency: pip install -e '.[dev]')"
    )
    from tests.cli.test_pty import spawn

    workspace = tmp_path / "ws"
    workspace.mkdir()
    script = tmp_path / "script.json"
    script.write_text(
        json.dumps(
            [
                tool_response(call("write_file", {"path": "a.txt", "content": "x\n"}, id="t1")),
                text_response("written"),
            ]
        )
    )
    log = tmp_path / "run.jsonl"
    child = spawn(
        ["run", "Write a.txt", "-w", str(workspace), "-m", f"script:{script}", "--session",
         str(log)],
        tmp_path,
    )  # fmt: skip
    child.expect("Allow the agent to write a.txt")
    child.expect("y/n")
    child.sendline("y")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0, child.before
    assert (workspace / "a.txt").read_text() == "x\n"
    (start,) = line_numbers(log, "tool_start", call_id="t1")
    (decided,) = line_numbers(log, "decision", call_id="t1", decision="approve")
    assert start < decided < result_line(log, "t1")
    (entry,) = page_model(read_session(log))["turns"][0]["calls"]
    decided_at = json.loads(log.read_text().splitlines()[decided])["time"]
    origin = json.loads(log.read_text().splitlines()[1])["time"]
    assert entry["wait"]["to"] == pytest.approx(decided_at - origin, abs=1e-6)


def test_a_call_awaiting_approval_is_labelled_waiting_for_approval(
    tmp_path: Path, browser: Any
) -> None:
    log = deferred_log(tmp_path / "deferred.jsonl", decide=False)
    model = page_model(read_session(log))
    assert model["summary"]["state"] == "awaiting_approval"
    open_page(browser, write_html(log, tmp_path / "deferred.html"))
    bar = bar_of(browser, "e1")
    assert bar.get_attribute("title") == "edit_file waiting for approval"
    assert "waiting" in str(bar.get_attribute("class")).split()
    assert "no result" not in browser.find_element("id", "timeline").get_attribute("textContent")
    assert (
        bar.find_element("css selector", ".wait")
        .get_attribute("title")
        .startswith("waiting for approval ")
    )
    pending = browser.find_element("css selector", "#transcript .item.pending")
    assert pending.find_element("css selector", ".badge.waiting").text == "waiting for approval"
    assert "edit_file requires approval" in pending.text
    assert bar_of(browser, "a1").get_attribute("title").startswith("look ")


def test_an_approved_deferred_call_ran_after_its_wait(tmp_path: Path, browser: Any) -> None:
    log = deferred_log(tmp_path / "approved.jsonl", decide=True)
    started = line_numbers(log, "tool_start", call_id="e1")
    (decided,) = line_numbers(log, "decision", call_id="e1", decision="approve")
    assert started[0] < decided < started[1] < result_line(log, "e1")  # deferred, then run
    evenly_timed(log, {decided: 3600.0})  # approved an hour later, from another process
    waited = 3600.0 + 0.01 * (decided - started[0])
    ran = 0.01 * (result_line(log, "e1") - started[1])
    model = page_model(read_session(log))
    calls = {c["id"]: c for c in model["turns"][0]["calls"]}
    assert sorted(calls) == ["a1", "e1"]  # the decided batch goes on in its turn
    edit = calls["e1"]
    assert edit["wait"]["to"] - edit["wait"]["from"] == pytest.approx(waited)
    assert edit["end"] - edit["run"] == pytest.approx(ran)
    assert model["turns"][0]["waited"] == pytest.approx(waited)
    open_page(browser, write_html(log, tmp_path / "approved.html"))
    bar = bar_of(browser, "e1")
    assert bar.get_attribute("title") == (
        f"edit_file {seconds(edit['end'] - edit['run'])} (after {waited:.1f} s waiting for approval)"
    )
    wait = bar.find_element("css selector", ".wait")
    assert wait.get_attribute("title") == f"waiting for approval {waited:.1f} s"
    assert "waiting" not in str(bar.get_attribute("class")).split()
    label = browser.find_element("css selector", "#timeline .turn .turn-label")
    assert label.get_attribute("textContent").endswith(" waiting for approval")
    decision = browser.find_element("css selector", "#transcript .item.decision .who")
    assert decision.text == "✔ approved edit_file"


def test_write_html_on_a_missing_log_raises_the_error_replay_prints(tmp_path: Path) -> None:
    missing = tmp_path / "nope.jsonl"
    out = tmp_path / "page.html"
    with pytest.raises(UsageError) as raised:
        write_html(missing, out)
    message = str(raised.value)
    assert message.startswith(f"no session log at {missing}: the file does not exist")
    assert not out.exists()
    with pytest.raises(UsageError, match="the file does not exist"):
        render_html(missing)
    with pytest.raises(UsageError, match="is a folder, not a session log"):
        write_html(tmp_path, out)
    done = subprocess.run(
        [sys.executable, "-m", "statemachine_agent", "replay", str(missing), "--html", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=tmp_path,
    )
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    assert " ".join(message.split()) in " ".join(done.stderr.split())
    assert not out.exists()


# -- case 5: a lone surrogate, and a render that fails --------------------------------------------


def surrogate_log(base: Path) -> Path:
    """A tool returns ``os.listdir`` of a folder holding a file whose name is not UTF-8."""
    folder = base / "files"
    folder.mkdir()
    (Path(os.fsdecode(os.fsencode(folder) + b"/caf\xff.txt"))).write_text("x")

    @tool
    def list_names() -> str:
        """The folder's names."""
        return "\n".join(sorted(os.listdir(folder)))

    log = base / "names.jsonl"
    model = ScriptedModel([tool_response(call("list_names", {}, id="l1")), text_response("ok")])
    agent = Agent(model, tools=[list_names], session=log)
    agent.run_sync("list the names")
    assert agent.session is not None
    agent.session.close()
    assert "caf\\udcff.txt" in log.read_text()  # the log holds the lone surrogate
    return log


def test_a_lone_surrogate_is_shown_as_a_replacement_by_replay_html(
    tmp_path: Path, browser: Any
) -> None:
    log = surrogate_log(tmp_path)
    out = tmp_path / "names.html"
    done = subprocess.run(
        [sys.executable, "-m", "statemachine_agent", "replay", str(log), "--html", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    page = out.read_bytes().decode("utf-8")  # strict: the page is valid UTF-8
    assert "caf\ufffd.txt" in page
    open_page(browser, out)
    result = browser.find_element("css selector", "#transcript .item.result pre")
    assert result.text == "caf\ufffd.txt"
    # Through the library too, and with a log whose own name is not UTF-8.
    odd = Path(os.fsdecode(os.fsencode(tmp_path) + b"/run\xfe.jsonl"))
    odd.write_bytes(log.read_bytes())
    assert write_html(odd, tmp_path / "odd.html") == tmp_path / "odd.html"
    text = (tmp_path / "odd.html").read_bytes().decode("utf-8")
    assert "<title>session run\ufffd.jsonl</title>" in text and "caf\ufffd.txt" in text


def test_a_lone_high_surrogate_in_a_tool_result_is_shown_as_a_replacement(
    tmp_path: Path,
) -> None:
    # Not only surrogateescape's range (U+DC80-DCFF): half of an emoji's pair (U+D83D), as a
    # tool cutting text by UTF-16 units leaves it, is as unencodable in UTF-8.
    @tool
    def cut() -> str:
        """Half of an emoji."""
        return "smile \ud83d!"

    log = tmp_path / "half.jsonl"
    model = ScriptedModel([tool_response(call("cut", {}, id="h1")), text_response("ok")])
    agent = Agent(model, tools=[cut], session=log)
    agent.run_sync("cut it")
    assert agent.session is not None
    agent.session.close()
    assert "smile \\ud83d!" in log.read_text()  # the log's JSON holds the escape
    out = tmp_path / "half.html"
    done = subprocess.run(
        [sys.executable, "-m", "statemachine_agent", "replay", str(log), "--html", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    page = out.read_bytes().decode("utf-8")  # strict: the page is valid UTF-8
    assert "smile \ufffd!" in page
    # The printed transcript alike, whatever errors the output stream was set up with: strict,
    # or surrogateescape (a C or POSIX locale), which fails on a surrogate it did not make.
    for errors in ("strict", "surrogateescape"):
        printed = subprocess.run(
            [sys.executable, "-m", "statemachine_agent", "replay", str(log)],
            capture_output=True,
            env={**os.environ, "PYTHONIOENCODING": f"utf-8:{errors}"},
            timeout=120,
            check=False,
        )
        assert printed.returncode == 0, printed.stderr.decode(errors="replace")
        assert "← ✓ cut smile \ufffd!" in printed.stdout.decode("utf-8")  # strict


def test_a_render_that_fails_leaves_the_earlier_page_byte_identical(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = deferred_log(tmp_path / "good.jsonl", decide=True)
    out = tmp_path / "page.html"
    write_html(log, out)
    good = out.read_bytes()
    assert good.startswith(b"<!DOCTYPE html>")
    before = sorted(os.listdir(tmp_path))

    def fails_partway(_data: Any) -> dict[str, Any]:
        raise RuntimeError("the render failed partway")

    with monkeypatch.context() as patch:  # the model of the page cannot be built
        patch.setattr(_html, "page_model", fails_partway)
        with pytest.raises(RuntimeError, match="partway"):
            write_html(log, out)
        out_cli = CliRunner().invoke(main, ["replay", str(log), "--html", str(out)])
        assert out_cli.exit_code != 0 and isinstance(out_cli.exception, RuntimeError)
    assert out.read_bytes() == good

    def unencodable(*_args: Any, **_kwargs: Any) -> str:
        return "<!DOCTYPE html>" + "x" * 100_000 + "\udcff"  # fails while being written

    with monkeypatch.context() as patch:
        patch.setattr(_html, "render_html", unencodable)
        with pytest.raises(UnicodeEncodeError):
            write_html(log, out)
    assert out.read_bytes() == good

    def no_rename(*_args: Any) -> None:
        raise OSError(28, "No space left on device")

    with monkeypatch.context() as patch:  # the rename itself fails
        patch.setattr(_html.os, "replace", no_rename)
        with pytest.raises(OSError, match="No space left"):
            write_html(log, out)
        out_cli = CliRunner().invoke(main, ["replay", str(log), "--html", str(out)])
        assert out_cli.exit_code == 1 and "cannot write" in out_cli.output
    assert out.read_bytes() == good
    assert sorted(os.listdir(tmp_path)) == before  # no temporary file is left behind


@pytest.mark.parametrize("relative", [False, True], ids=["absolute_path", "relative_path"])
def test_the_temporary_page_is_made_beside_the_output_not_in_tmpdir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, relative: bool
) -> None:
    # os.replace cannot rename across filesystems: a temporary file in $TMPDIR would make the
    # write fail wherever the output is on another filesystem (a mounted project folder).
    log = deferred_log(tmp_path / "p.jsonl", decide=False)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "no-such-tmpdir"))
    sources: list[Path] = []
    real_replace = os.replace

    def recording_replace(source: Any, target: Any) -> None:
        sources.append(Path(source))
        real_replace(source, target)

    monkeypatch.setattr(_html.os, "replace", recording_replace)
    out = tmp_path / "pages" / "run.html"
    out.parent.mkdir()
    if relative:
        monkeypatch.chdir(out.parent)
    target = Path("run.html") if relative else out
    assert write_html(log, target) == target
    assert out.read_bytes().startswith(b"<!DOCTYPE html>")
    assert len(sources) == 1 and sources[0].resolve().parent == out.parent.resolve()
    assert sorted(os.listdir(out.parent)) == ["run.html"]  # the temporary file was renamed


def test_a_new_page_gets_the_usual_file_permissions(tmp_path: Path) -> None:
    log = deferred_log(tmp_path / "p.jsonl", decide=False)
    umask = os.umask(0o022)
    try:
        write_html(log, tmp_path / "new.html")
    finally:
        os.umask(umask)
    assert (tmp_path / "new.html").stat().st_mode & 0o777 == 0o644
    (tmp_path / "old.html").write_text("old")
    (tmp_path / "old.html").chmod(0o640)
    write_html(log, tmp_path / "old.html")
    assert (tmp_path / "old.html").stat().st_mode & 0o777 == 0o640


# -- issue 40: text from the log is never HTML ---------------------------------------------------


def test_markup_in_a_tool_name_and_an_error_text_is_shown_as_text(
    tmp_path: Path, browser: Any
) -> None:
    @tool
    def explode() -> str:
        """Fail with markup in the error."""
        raise RuntimeError(XSS_ERROR)

    log = tmp_path / "markup.jsonl"
    model = ScriptedModel(
        [
            tool_response(call(XSS_NAME, {"q": XSS_ERROR}, id="n1"), call("explode", {}, id="x1")),
            text_response("done"),
        ]
    )
    agent = Agent(model, tools=[explode], session=log)
    agent.run_sync("go")
    assert agent.session is not None
    agent.session.close()
    page = write_html(log, tmp_path / "markup.html")
    open_page(browser, page)
    press_to_batch = "awaiting_model → executing_tools"
    from .test_html import step_to

    step_to(browser, press_to_batch)
    # No element was made from the log's text, and no handler in it ran.
    assert browser.execute_script("return window.__pwned") is None
    assert browser.execute_script("return document.scripts.length") == 2  # the page's own
    assert browser.find_elements("css selector", "body img, #transcript b, #timeline b") == []
    assert browser.execute_script("return document.querySelectorAll('[onerror], [onmouseover]')"
                                  ".length") == 0  # fmt: skip
    # The text shows literally: the call, its result, its timeline bar, the error.
    call_who = browser.find_element("css selector", ".call[data-call='n1'] .who")
    assert call_who.text == "→ " + XSS_NAME
    name_result = browser.find_element("css selector", ".item.result[data-call='n1']")
    assert name_result.find_element("css selector", ".who").text == "✗ " + XSS_NAME
    assert XSS_NAME in name_result.find_element("css selector", "pre").text
    assert bar_of(browser, "n1").get_attribute("title").startswith(XSS_NAME + " ")
    error_result = browser.find_element("css selector", ".item.result[data-call='x1'] pre")
    assert XSS_ERROR in error_result.text
    arguments = browser.find_element("css selector", ".call[data-call='n1'] pre").text
    assert json.loads(arguments) == {"q": XSS_ERROR}
    assert browser.title == "session markup.jsonl"
