"""The Python blocks of the documentation (README.md and every page under docs/), and the
convention by which a block states what it prints.

A fenced block opened with ```` ```python ```` is an example that runs as a test; other fences
(``bash``, ``text``, ``json``, ``mermaid``) are not run. A page's blocks run in order, in one fresh
temporary folder and one namespace, so a later block may use what an earlier one made.

Printed output: a comment ``# -> TEXT`` states one line of what the block prints, either at the
end of the ``print(...)`` line or on a line of its own after it. When a block states any, its whole
printed output must be exactly those lines, in order; a stated line ending in ``...`` matches any
line that begins with the text before the dots (for long messages). A block that states none is
only run.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
_FENCE = re.compile(r"^```python\n(.*?)^```", re.M | re.S)
_STATED = re.compile(r"#\s->\s?(.*)$")


@dataclass(frozen=True)
class Block:
    """One Python block: its page, its 1-based line in the page, and its code."""

    page: Path
    line: int
    code: str

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def pages() -> list[Path]:
    """README.md and every Markdown page of the site, in a stable order."""
    return [README, *sorted(DOCS.rglob("*.md"))]


def blocks(page: Path) -> list[Block]:
    """The page's Python blocks, in order."""
    text = page.read_text(encoding="utf-8")
    return [
        Block(page, text.count("\n", 0, m.start()) + 2, m.group(1)) for m in _FENCE.finditer(text)
    ]


def stated_output(code: str) -> list[str] | None:
    """The lines the block says it prints (its ``# -> `` comments, in order), or None when it
    states none. A ``#`` inside a string literal is not a comment: only tokenized comments count."""
    import io
    import tokenize

    lines = [
        m.group(1).rstrip()
        for token in tokenize.generate_tokens(io.StringIO(code).readline)
        if token.type == tokenize.COMMENT and (m := _STATED.match(token.string))
    ]
    return lines or None


def output_mismatch(stated: list[str], printed: str) -> str | None:
    """Why ``printed`` is not the ``stated`` output (None when it is)."""
    got = printed.rstrip("\n").split("\n") if printed.strip() else []
    if len(got) == len(stated) and all(
        line == want or (want.endswith("...") and line.startswith(want[:-3].rstrip()))
        for want, line in zip(stated, got, strict=True)
    ):
        return None
    return "stated:\n  " + "\n  ".join(stated) + "\nprinted:\n  " + "\n  ".join(got)


def documentation_text() -> str:
    """README.md and every page of the site, one after another: what a test of the documentation's
    words searches, wherever a section lives now."""
    return "\n\n".join(page.read_text(encoding="utf-8") for page in pages())
