"""State diagrams of the agent loop: machine definition -> neutral graph -> Mermaid, DOT, SVG/PNG.

`diagram_graph` reads a `LoopMachine` (or an `Agent`'s machine, including the guards, transitions,
states and enter/exit callbacks a user added) into a `DiagramGraph`; `to_mermaid` and `to_dot` turn
it into text with no system binary; `render_image` pipes DOT through Graphviz's ``dot`` for SVG or
PNG. `render_diagram` does it all in one call; `Diagram` is what ``agent.diagram()`` returns.

Two views (``detail``): the ``overview`` draws at most one edge per (source, dest) pair, labelled
with its branches' `TransitionSpec.label` s one per line; ``full`` draws every guarded branch with
its trigger and guards. Both draw the machine's `StateGroup` s as composite states (a Mermaid
``state active { }``, a DOT ``cluster_active``) and a group's transitions once, from the composite.
``branches`` (what `diagram_graph` returns by default) is the flat table: one edge per branch and
source state, no composites: one edge for each transition the engine can fire.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from typing import Any, Literal

from .._errors import GraphvizNotFoundError, UsageError
from ._dot import (
    SOURCE_STAMP,
    dot_source_hash,
    element_id,
    render_image,
    stamp_svg,
    svg_source_hash,
    to_dot,
)
from ._graph import (
    Detail,
    DiagramEdge,
    DiagramGraph,
    DiagramGroup,
    DiagramNode,
    callable_name,
    diagram_graph,
)
from ._mermaid import MERMAID_WORDS, mermaid_ids, mermaid_text, to_mermaid

__all__ = [
    "DETAILS",
    "IMAGE_FORMATS",
    "MERMAID_WORDS",
    "SOURCE_STAMP",
    "TEXT_FORMATS",
    "Detail",
    "Diagram",
    "DiagramEdge",
    "DiagramFormat",
    "DiagramGraph",
    "DiagramGroup",
    "DiagramNode",
    "GraphvizNotFoundError",
    "callable_name",
    "diagram_graph",
    "dot_source_hash",
    "element_id",
    "mermaid_ids",
    "mermaid_text",
    "render_diagram",
    "render_image",
    "stamp_svg",
    "svg_source_hash",
    "to_dot",
    "to_mermaid",
]

DiagramFormat = Literal["mermaid", "dot", "svg", "png"]
DETAILS: tuple[str, ...] = ("overview", "full")
"""The views `render_diagram` and the CLI draw (``branches`` is `diagram_graph`'s flat table)."""
TEXT_FORMATS: tuple[str, ...] = ("mermaid", "dot")
IMAGE_FORMATS: tuple[str, ...] = ("svg", "png")


def render_diagram(
    source: Any = None,
    *,
    format: DiagramFormat = "mermaid",
    highlight: bool = True,
    detail: Detail = "overview",
) -> str | bytes:
    """Render the loop's state diagram.

    Args:
        source: an `Agent`, a `LoopMachine`, or None for the built-in definition.
        format: ``mermaid`` or ``dot`` (text, nothing to install), ``svg`` (text) or ``png``
            (bytes), which need Graphviz's ``dot``.
        highlight: mark the current state of ``source``.
        detail: ``overview`` (one edge per pair of states, labelled with its branches' labels)
            or ``full`` (every guarded branch with its trigger and guards); see `diagram_graph`.

    Returns:
        Text for mermaid, dot and svg; bytes for png.

    Raises:
        GraphvizNotFoundError: svg/png without Graphviz installed.
        UsageError: an unknown format or detail.
    """
    graph = diagram_graph(source, highlight=highlight, detail=detail)
    renderers: dict[str, Callable[[DiagramGraph], str]] = {"mermaid": to_mermaid, "dot": to_dot}
    if format in renderers:
        return renderers[format](graph)
    if format == "svg":
        dot_text = to_dot(graph)
        return stamp_svg(render_image(dot_text, "svg").decode(), dot_text)
    if format == "png":
        return render_image(to_dot(graph), "png")
    raise UsageError(f"unknown diagram format {format!r}: use mermaid, dot, svg or png")


class Diagram:
    """A machine's state diagram as Jupyter shows it: SVG with Graphviz installed, a Mermaid
    Markdown block without it; ``str()`` is the Mermaid text. What ``agent.diagram()`` returns.

    Args:
        source: an `Agent` or a `LoopMachine` (its current state is marked), or None for the
            built-in definition.
        detail: ``overview`` or ``full`` (see `render_diagram`).

    Raises:
        UsageError: ``source`` is neither a machine nor has one, or ``detail`` is unknown.
    """

    __slots__ = ("graph",)

    def __init__(self, source: Any = None, *, detail: Detail = "overview") -> None:
        if detail not in DETAILS:
            raise UsageError(f"unknown diagram detail {detail!r}: use overview or full")
        self.graph = diagram_graph(source, detail=detail)

    def __str__(self) -> str:
        return to_mermaid(self.graph)

    def __repr__(self) -> str:
        current = next((n.name for n in self.graph.nodes if n.current), None)
        return f"<Diagram {self.graph.detail} of {len(self.graph.nodes)} states, current={current}>"

    @property
    def mermaid(self) -> str:
        """The Mermaid ``stateDiagram-v2`` text."""
        return to_mermaid(self.graph)

    @property
    def dot(self) -> str:
        """The Graphviz DOT text."""
        return to_dot(self.graph)

    def _repr_svg_(self) -> str | None:
        """Jupyter's SVG (Graphviz's layout), or None without Graphviz (then Markdown)."""
        if shutil.which("dot") is None:
            return None
        svg = render_image(to_dot(self.graph, element_ids=True), "svg").decode()
        start = svg.find("<svg")
        return svg[start:] if start >= 0 else svg

    def _repr_markdown_(self) -> str | None:
        """A Mermaid block for Jupyter when Graphviz is missing (None with it: SVG is shown)."""
        if shutil.which("dot") is not None:
            return None
        return f"```mermaid\n{to_mermaid(self.graph)}```\n"
