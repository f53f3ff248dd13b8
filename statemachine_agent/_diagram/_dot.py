"""Graphviz: DOT text of a `DiagramGraph` (`to_dot`), the element ids a page highlights
(`element_id`), ``dot`` run for SVG or PNG (`render_image`), and the stamp that ties a committed
SVG to the DOT it was drawn from (`stamp_svg`)."""

from __future__ import annotations

import hashlib
import shutil
import subprocess
from typing import Literal

from .._errors import GraphvizNotFoundError, UsageError
from ._graph import IDENTIFIER, DiagramGraph, DiagramNode, callback_lines, initial_state


def to_dot(graph: DiagramGraph, *, element_ids: bool = False) -> str:
    """Graphviz DOT text: terminal states with a double border, the current state filled,
    callbacks listed under the state's name; each group a dashed cluster (``cluster_NAME``)
    titled by a node named after it, from which the group's edges leave (clipped at the
    cluster's border with ``ltail``).

    Every id of a node or cluster (a node, an edge's ends, a subgraph, ``ltail``) is a quoted
    DOT string with ``"`` and ``\\`` escaped, so a state named ``node``, ``needs review`` or
    ``a:b`` is one node showing its name (unquoted, Graphviz reads a keyword, two ids, or a node
    and a port). Labels keep their line breaks as they are (drawn as ``\\n`` would be).

    Args:
        graph: the graph to draw.
        element_ids: give each state the id ``element_id("state", name)`` (``state_NAME``),
            each group's cluster ``element_id("group", name)`` and each edge ``edge_INDEX`` (its
            position in ``graph.edges``); Graphviz's SVG keeps them, so a page can highlight one.
    """
    names = {n.name for n in graph.nodes} | {g.name for g in graph.groups}
    start = "__start__"
    while start in names:  # a state may be named so
        start += "_"
    plain_name = IDENTIFIER.fullmatch(graph.name) and graph.name.lower() not in _DOT_WORDS
    lines = [f"digraph {graph.name if plain_name else _quote(graph.name)} {{"]
    if graph.detail != "branches":  # the views: left to right, clusters as edge ends
        lines.append("    rankdir=LR; compound=true;")
    lines += [
        '    node [shape=box, style=rounded, fontname="Helvetica"];',
        '    edge [fontname="Helvetica", fontsize=10];',
        f'    {_quote(start)} [shape=point, label=""];',
        f"    {_quote(start)} -> {_quote(initial_state(graph.nodes))};",
    ]
    grouped = {m: g for g in graph.groups for m in g.members}
    for group in graph.groups:
        extra = f" id={_quote(element_id('group', group.name))};" if element_ids else ""
        lines += [
            f"    subgraph {_quote('cluster_' + group.name)} {{",
            f'        style="rounded,dashed"; color="#777777"; label="";{extra}',
            f"        {_quote(group.name)} [shape=plaintext, label={_quote(group.name)}, "
            'fontname="Helvetica-Bold", fontcolor="#555555"];',
        ]
        lines += [
            f"        {_dot_node(n, element_ids)}" for n in graph.nodes if n.name in group.members
        ]
        lines.append("    }")
    lines += [f"    {_dot_node(n, element_ids)}" for n in graph.nodes if n.name not in grouped]
    members = {g.name: g.members for g in graph.groups}
    for index, edge in enumerate(graph.edges):
        attrs = [f"label={_quote(chr(10).join(edge.lines))}"]
        if edge.source in members and edge.dest not in members[edge.source]:
            attrs.append(f"ltail={_quote('cluster_' + edge.source)}")  # from the cluster's border
        if edge.source == edge.dest and graph.detail != "branches":
            attrs.append("tailport=w, headport=w")  # the loop and its label left of the state
        if element_ids:
            attrs.append(f"id={_quote(f'edge_{index}')}")
        lines.append(f"    {_quote(edge.source)} -> {_quote(edge.dest)} [{', '.join(attrs)}];")
    lines.append("}")
    return "\n".join(lines) + "\n"


_DOT_WORDS = frozenset({"node", "edge", "graph", "digraph", "subgraph", "strict"})
"""DOT's keywords (any case), never written as a bare id."""


def element_id(kind: str, name: str) -> str:
    """The SVG/HTML element id of a state (``kind="state"``) or group (``"group"``) named
    ``name``: ``state_NAME`` where the name is only ASCII letters, digits and ``_``; otherwise
    each other character is written as ``-HEX-`` (its code point), so ``needs review`` is
    ``state_needs-20-review``. Distinct names give distinct ids, and every id is a valid XML
    id and HTML id (no space, nothing a CSS selector must escape but the dash it allows)."""
    return f"{kind}_" + "".join(
        ch if ch.isascii() and (ch.isalnum() or ch == "_") else f"-{ord(ch):x}-" for ch in name
    )


def _dot_node(node: DiagramNode, element_ids: bool) -> str:
    attrs = [f"label={_quote(chr(10).join([node.name, *callback_lines(node)]))}"]
    if node.terminal:
        attrs.append("peripheries=2")
    if node.current:
        attrs.append('style="rounded,filled", fillcolor="#ffe08a"')
    if element_ids:
        attrs.append(f"id={_quote(element_id('state', node.name))}")
    return f"{_quote(node.name)} [{', '.join(attrs)}];"


def render_image(
    dot_text: str,
    image_format: Literal["svg", "png"] = "svg",
    *,
    dot_binary: str = "dot",
    timeout_seconds: float = 30.0,
) -> bytes:
    """Run Graphviz's ``dot`` on ``dot_text``.

    Raises:
        GraphvizNotFoundError: ``dot`` is not on the PATH (the message says how to install it).
        UsageError: ``dot`` rejected the input (its stderr is quoted).
    """
    path = shutil.which(dot_binary)
    if path is None:
        raise GraphvizNotFoundError(
            f"{image_format.upper()} output needs Graphviz's `{dot_binary}` program, which is not "
            "installed (Debian/Ubuntu: apt-get install graphviz; macOS: brew install graphviz). "
            "The mermaid and dot formats need nothing installed."
        )
    done = subprocess.run(
        [path, f"-T{image_format}"],
        input=dot_text.encode(),
        capture_output=True,
        check=False,
        timeout=timeout_seconds,
    )
    if done.returncode != 0:
        raise UsageError(f"dot failed: {done.stderr.decode(errors='replace').strip()}")
    return done.stdout


SOURCE_STAMP = "statemachine-agent dot-source-sha256:"


def stamp_svg(svg: str, dot_text: str) -> str:
    """Record in ``svg`` (as an XML comment before ``<svg``) the hash of the DOT it was rendered
    from, so a committed SVG can be checked against the code without Graphviz installed."""
    stamp = f"<!-- {SOURCE_STAMP} {dot_source_hash(dot_text)} -->\n"
    index = svg.find("<svg")
    return svg + stamp if index < 0 else svg[:index] + stamp + svg[index:]


def svg_source_hash(svg: str) -> str | None:
    """The DOT hash `stamp_svg` recorded in ``svg``, or None."""
    _, found, rest = svg.partition(SOURCE_STAMP)
    return rest.split()[0] if found and rest.split() else None


def dot_source_hash(dot_text: str) -> str:
    """The hash `stamp_svg` records for ``dot_text``."""
    return hashlib.sha256(dot_text.encode()).hexdigest()


def _quote(text: str) -> str:
    """``text`` as a quoted DOT string: ``\\`` and ``"`` escaped, a line break kept as it is
    (Graphviz draws it as ``\\n``, centred; and its ``-Tjson`` gives the label's lines back)."""
    escaped = text.replace("\\", "\\\\").replace('"', '\\"')
    return f'"{escaped}"'
