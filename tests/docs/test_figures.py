"""Figures live in one place (issue 38, item 4): no page but the benchmarks page quotes a measured
time or size (``about 4 ms``, ``0.8 s``, ``5 KiB``, ``426k instructions``); the others link to it.
A value the reader sets or that the code fixes (a timeout in an example, a documented constant)
is not a measurement: `ALLOWED` lists each such phrase with its reason."""

from __future__ import annotations

import io
import re
import tokenize

from .blocks import DOCS, README, ROOT, pages

# A number (or a range of two) and a unit of time or size, or an instruction count.
FIGURE = re.compile(
    r"\d[\d,]*(?:\.\d+)?(?:\s?[-–]\s?\d[\d,]*(?:\.\d+)?)?\s?"
    r"(?:[kKM]\s)?"
    r"(?:ns|µs|us|ms|s|secs?|seconds?|minutes?|mins?|hours?|h|B|bytes?|[KMG]i?B|kB"
    r"|k?\s?instructions)\b"
)

# (page, the phrase as written, why it is not a measured figure).
ALLOWED: list[tuple[str, str, str]] = [
    (
        "docs/concepts/protocol.md",
        "0.1 s",
        "the documented constant STOP_WAIT_SECONDS, a rule of the abort",
    ),
    (
        "docs/guides/claude.md",
        "0.5 s",
        "the Anthropic SDK's own first retry delay, which the guide tells a test to avoid",
    ),
    (
        "docs/guides/claude.md",
        "10 ms",
        'the example\'s own "retry-after-ms": "10" header, what the fake API is told to send',
    ),
    (
        "docs/guides/embedding.md",
        "20 ms",
        "the documented threshold over which a subscriber is logged as slow "
        "(SLOW_SUBSCRIBER_SECONDS)",
    ),
    (
        "docs/guides/mcp.md",
        "30 s",
        "the documented default of startup_timeout_seconds (STARTUP_TIMEOUT_SECONDS)",
    ),
    (
        "docs/testing/oracle.md",
        "2 ms",
        "a scenario's tool timeout, a value the oracle's strategies choose",
    ),
]


# In the package's comments and docstrings, a duration is often a value the code sets (a tool that
# sleeps 2 ms in the oracle's scenarios); a measurement reads as one: a cost in µs, a memory size,
# an instruction count, "about" a duration, or a share of a turn.
MEASURED = re.compile(
    r"\d[\d,.]*\s?(?:µs|ns|[KMG]iB|k?\s?instructions)\b"
    r"|about\s+\d[\d,.]*\s?(?:ms|s|seconds?)\b"
    r"|(?:a\s+tenth|about\s+half|several\s+times\s+(?:faster|slower))\b"
)


def _figures(text: str) -> list[str]:
    return [m.group(0) for m in FIGURE.finditer(text)]


def test_no_page_but_the_benchmarks_page_quotes_a_measured_figure() -> None:
    allowed: dict[str, list[str]] = {}
    for page, phrase, _why in ALLOWED:
        allowed.setdefault(page, []).append(phrase)
    found = []
    for page in pages():
        if page == DOCS / "benchmarks.md":
            continue  # the one place figures live (it includes benchmarks/README.md)
        name = page.relative_to(README.parent).as_posix()
        rest = list(allowed.get(name, []))
        for figure in _figures(page.read_text(encoding="utf-8")):
            if figure in rest:
                rest.remove(figure)  # each allowed phrase covers one occurrence
            else:
                found.append(f"{name}: {figure!r}")
    assert not found, (
        "figures belong on the benchmarks page (docs/benchmarks.md, from benchmarks/README.md); "
        f"link to it instead: {found}"
    )


def test_every_allowed_phrase_is_still_on_its_page() -> None:
    """An allow-list entry whose phrase left its page is removed, not kept to cover a new figure."""
    stale = [
        (page, phrase)
        for page, phrase, _why in ALLOWED
        if phrase not in _figures((README.parent / page).read_text(encoding="utf-8"))
    ]
    assert not stale


def test_no_package_comment_or_docstring_quotes_a_measured_figure() -> None:
    """Performance notes keep a short reason in the code; their figures are in
    benchmarks/README.md ("Why the code is shaped this way", issue 35)."""
    found = []
    for path in sorted((ROOT / "statemachine_agent").rglob("*.py")):
        source = path.read_text(encoding="utf-8")
        for token in tokenize.generate_tokens(io.StringIO(source).readline):
            if token.type in (tokenize.COMMENT, tokenize.STRING):
                found.extend(
                    f"{path.relative_to(ROOT)}:{token.start[0]}: {m.group(0)!r}"
                    for m in MEASURED.finditer(token.string)
                )
    assert not found, f"move the figure to benchmarks/README.md, keep the reason: {found}"


def test_the_check_finds_figures_of_each_kind() -> None:
    text = (
        "about 4-7 ms a command, 0.8 s to render, 5 KiB an agent, a 6.8 MiB page, 426k "
        "instructions a turn, 10.23 ms/turn, in 3 minutes, 120 µs"
    )
    assert _figures(text) == [
        "4-7 ms",
        "0.8 s",
        "5 KiB",
        "6.8 MiB",
        "426k instructions",
        "10.23 ms",
        "3 minutes",
        "120 µs",
    ]
    assert _figures("timeout_seconds=5, max_turns=20, rule 3 says, 2 calls, 10,000 messages") == []
    measured = "48 µs a turn, 4.6 KiB, 426k instructions, about 10 ms, a tenth of a turn"
    assert [m.group(0) for m in MEASURED.finditer(measured)] == [
        "48 µs",
        "4.6 KiB",
        "426k instructions",
        "about 10 ms",
        "a tenth",
    ]
    assert not MEASURED.search("sleeps 2 ms, a 1 s grace period, up to 4 bytes each")
