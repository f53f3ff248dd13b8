"""Mermaid ``stateDiagram-v2`` text of a `DiagramGraph` (`to_mermaid`), and how a state's name
and a label are written so Mermaid reads them as they are (`mermaid_ids`, `mermaid_text`)."""

from __future__ import annotations

import re
from collections.abc import Sequence

from ._graph import IDENTIFIER, DiagramGraph, callback_lines, initial_state


def to_mermaid(graph: DiagramGraph) -> str:
    """Mermaid ``stateDiagram-v2`` text: groups as composite states (``state active { ... }``),
    terminal states bold with a thick border (class ``terminal``), the current state filled
    (class ``current``), callbacks as notes; an overview edge's labels one per line.

    A state or group is written by its name where that is a plain identifier and not one of
    Mermaid's words (`mermaid_ids`); any other, such as ``needs-review``, gets the id ``s_N``
    and is declared ``state "needs-review" as s_N`` (Mermaid's ids take no dash, space or
    colon). Label and note text goes through `mermaid_text`.
    """
    ids = mermaid_ids([*(n.name for n in graph.nodes), *(g.name for g in graph.groups)])
    grouped = {m for g in graph.groups for m in g.members}
    lines = ["stateDiagram-v2", f"    [*] --> {ids[initial_state(graph.nodes)]}"]
    for group in graph.groups:
        lines.append(f"    state {_mermaid_declared(group.name, ids)} {{")
        lines += [
            f"        {m if ids[m] == m else 'state ' + _mermaid_declared(m, ids)}"
            for m in group.members
        ]
        lines.append("    }")
    lines += [
        f"    state {_mermaid_declared(n.name, ids)}"
        for n in graph.nodes
        if n.name not in grouped and ids[n.name] != n.name
    ]
    lines += [
        f"    {ids[e.source]} --> {ids[e.dest]} : "
        + ("<br/>".join(map(mermaid_text, e.lines)) if e.summary else mermaid_text(e.text))
        for e in graph.edges
    ]
    for node in graph.nodes:
        notes = callback_lines(node)
        if notes:
            text = "<br/>".join(map(mermaid_text, notes))
            lines.append(f"    note right of {ids[node.name]} : {text}")
    lines += [
        "    classDef terminal font-weight:bold,stroke-width:3px",
        "    classDef current fill:#ffe08a,stroke:#b8860b,stroke-width:3px",
    ]
    terminal = [ids[n.name] for n in graph.nodes if n.terminal]
    if terminal:
        lines.append(f"    class {','.join(terminal)} terminal")
    current = [ids[n.name] for n in graph.nodes if n.current]
    if current:
        lines.append(f"    class {','.join(current)} current")
    return "\n".join(lines) + "\n"


MERMAID_WORDS = frozenset(
    {
        "accdescr",
        "acctitle",
        "as",
        "class",
        "classdef",
        "click",
        "direction",
        "end",
        "hide",
        "left",
        "note",
        "of",
        "right",
        "scale",
        "state",
        "statediagram",
        "style",
    }
)
"""Words Mermaid's ``stateDiagram`` lexer reads as keywords (case-insensitively), so never used
as an id; an id starting with ``default`` is avoided too (the lexer takes that word from the
front of any token)."""
_MERMAID_CODES = {"#": "#35;", ":": "#58;", ";": "#59;", '"': "#quot;", "%": "#37;", "&": "#38;"}
_MERMAID_CODES |= {"<": "#lt;", ">": "#gt;", "{": "#123;", "}": "#125;", "`": "#96;"}
_DIRECTION = re.compile(r"(directio)n(?=\s+(?:tb|bt|rl|lr))", re.IGNORECASE)


def mermaid_ids(names: Sequence[str]) -> dict[str, str]:
    """A Mermaid id for each state or group name: the name itself where it is an identifier
    (``[A-Za-z_][A-Za-z0-9_]*``) that is not in `MERMAID_WORDS` and does not start with
    ``default``, else ``s_N`` (N from 1, in ``names`` order, skipping ids already taken), so
    every id is distinct and a plain identifier.

    The rule comes from Mermaid's ``stateDiagram`` grammar: an id ends at a space, dash, colon
    or brace, and the lexer matches its keywords case-insensitively before ids.
    """
    plain = {n for n in names if IDENTIFIER.fullmatch(n) and _mermaid_free(n)}
    ids: dict[str, str] = {}
    number = 0
    for name in names:
        if name in plain:
            ids[name] = name
            continue
        number += 1
        while f"s_{number}" in plain:
            number += 1
        ids[name] = f"s_{number}"
    return ids


def _mermaid_free(name: str) -> bool:
    lowered = name.lower()
    return lowered not in MERMAID_WORDS and not lowered.startswith("default")


def mermaid_text(text: str) -> str:
    """``text`` safe as a Mermaid label, note or state name: each character Mermaid would read
    as syntax (``#`` ``:`` ``;`` ``"`` ``%`` ``&`` ``<`` ``>`` ``{`` ``}`` and a backtick) and
    every control character written as Mermaid's entity code (``#58;`` for ``:``, ``#quot;``
    for ``"``), which Mermaid draws as the character itself; ``direction LR`` (a statement
    anywhere on a line) is broken up the same way."""
    escaped = "".join(
        _MERMAID_CODES.get(ch) or (f"#{ord(ch)};" if ord(ch) < 32 or ord(ch) == 127 else ch)
        for ch in text
    )
    return _DIRECTION.sub(r"\1#110;", escaped)


def _mermaid_declared(name: str, ids: dict[str, str]) -> str:
    """``name`` as a ``state`` statement writes it: the id alone where it is the name, else
    ``"the name" as s_N``."""
    return name if ids[name] == name else f'"{mermaid_text(name)}" as {ids[name]}'
