"""The state diagram of a session's HTML page: the built-in machine's overview as inline SVG, with
the element ids the page's script lights step by step. Graphviz draws it where ``dot`` is
installed; `simple_svg` draws it without."""

from __future__ import annotations

import html
import math

from .._diagram import (
    DiagramEdge,
    DiagramGraph,
    diagram_graph,
    element_id,
    render_image,
    to_dot,
)
from .._errors import GraphvizNotFoundError, UsageError


def page_graph() -> DiagramGraph:
    """The built-in machine as the page draws it: the overview (one edge per (source, dest)
    pair, labelled with its branches' labels; ``active`` and ``ended`` as composites)."""
    return diagram_graph(None, detail="overview")


def diagram_svg(extra_edges: list[tuple[str, str, str]] | None = None) -> str:
    """The built-in machine's overview (`page_graph`) as inline SVG, each state
    ``id="state_NAME"``, each group's composite ``id="group_NAME"`` (`element_id`: a name with
    other characters than letters, digits and ``_`` is encoded) and each edge ``id="edge_N"``
    (its index in the overview; ``edge_xN`` for ``extra_edges``: ``(source, dest, trigger)`` a log
    took that the machine does not draw). Graphviz's ``dot`` draws it; without Graphviz,
    `simple_svg`. The page's script pans and zooms it (``html/page.js``)."""
    builtin = len(page_graph().edges)
    full = _with_extra(extra_edges or [])
    extra = full.edges[builtin:]
    try:
        svg = render_image(to_dot(full, element_ids=True), "svg").decode()
    except (GraphvizNotFoundError, UsageError, OSError):
        return simple_svg(full, builtin)
    start = svg.find("<svg")
    svg = svg[start:] if start >= 0 else svg
    # Graphviz names the extra edges edge_N after the built-in ones; the page calls them edge_xN.
    for number in range(len(extra)):
        svg = svg.replace(f'id="edge_{builtin + number}"', f'id="edge_x{number}"')
    return svg


def _with_extra(extra_edges: list[tuple[str, str, str]]) -> DiagramGraph:
    """The page's graph (`page_graph`) with ``(source, dest, trigger)`` edges added at the end."""
    graph = page_graph()
    extra = tuple(DiagramEdge(s, d, t) for s, d, t in extra_edges)
    return DiagramGraph(graph.name, graph.nodes, (*graph.edges, *extra), graph.groups, graph.detail)


def simple_svg(graph: DiagramGraph, builtin_edges: int | None = None) -> str:
    """A plain layered drawing of ``graph`` (no Graphviz): each group a dashed box around its
    states in one row (``id="group_NAME"``), rows in the order a run goes through them, edges as
    curves labelled with their label lines (a group's edges leave its box). Same element ids as
    `diagram_svg`; edges from ``builtin_edges`` on are the extra ones (``edge_xN``)."""
    builtin = len(graph.edges) if builtin_edges is None else builtin_edges
    members = {group.name: list(group.members) for group in graph.groups}
    unit = {m: g for g, names in members.items() for m in names}
    units: dict[str, list[str]] = {}  # a group, or a state in no group -> its states
    for node in graph.nodes:
        units.setdefault(unit.get(node.name, node.name), []).append(node.name)
    for group, names in members.items():
        units.setdefault(group, names)
    layer = _layers(graph, units, unit)
    rows: dict[int, list[str]] = {}
    for name in units:
        rows.setdefault(layer[name], []).append(name)
    width, row_height, box_w, box_h, gap = 760, 130, 130, 34, 20
    pos: dict[str, tuple[float, float, float, float]] = {}  # centre x, y, width, height
    for row, row_units in sorted(rows.items()):
        states = [s for u in row_units for s in units[u]]
        step = min(box_w + gap, (width - 40) / max(len(states), 1))
        left = (width - step * len(states)) / 2 + step / 2
        y = 50.0 + row * row_height
        for k, name in enumerate(states):
            pos[name] = (left + k * step, y, min(box_w, step - 8), box_h)
        for u in row_units:
            if u in members:
                xs = [pos[m][0] for m in units[u]]
                half = min(box_w, step - 8) / 2 + 10
                pos[u] = ((min(xs) + max(xs)) / 2, y - 8, max(xs) - min(xs) + 2 * half, box_h + 36)
    height = 50 + max(rows) * row_height + 80
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" '
        f'width="{width}pt" height="{height}pt" class="simple">',
        '<defs><marker id="arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="8" '
        'markerHeight="8" markerUnits="userSpaceOnUse" orient="auto-start-reverse"><path d="M0,0L10,5L0,10z"/></marker></defs>',
    ]
    for cluster in graph.groups:
        x, y, w, h = pos[cluster.name]
        out.append(
            f'<g id="{element_id("group", cluster.name)}" class="cluster"><rect x="{x - w / 2:.1f}" '
            f'y="{y - h / 2:.1f}" width="{w:.1f}" height="{h:.1f}" rx="10" fill="none" '
            f'stroke="#777777" stroke-dasharray="5,3"/><text x="{x - w / 2 + 8:.1f}" '
            f'y="{y - h / 2 + 14:.1f}" font-size="12" font-weight="bold" fill="#555555">'
            f"{html.escape(cluster.name)}</text></g>"
        )
    seen: dict[tuple[str, str], int] = {}
    for number, edge in enumerate(graph.edges):
        element = f"edge_{number}" if number < builtin else f"edge_x{number - builtin}"
        nth = seen.get((edge.source, edge.dest), 0)
        seen[(edge.source, edge.dest)] = nth + 1
        x1, y1, w1, h1 = pos[edge.source]
        x2, y2, w2, h2 = pos[edge.dest]
        if edge.source == edge.dest:
            r = 18 + 12 * nth
            sx, sy = x1 - w1 / 2, y1
            path = (
                f"M{sx},{sy - 8} C{sx - 3 * r},{sy - 2 * r} {sx - 3 * r},{sy + 2 * r} {sx},{sy + 8}"
            )
            lx, ly = sx - 2.3 * r, sy - 2 * r
        else:
            if edge.source in members and edge.dest in members[edge.source]:
                x1, y1, w1, h1 = x1 - w1 / 2 + 30, y1 - h1 / 2 + 10, 0.0, 0.0  # its title
            back = 1 if layer[_unit(edge.dest, unit)] < layer[_unit(edge.source, unit)] else -1
            bend = back * (30 + 26 * nth)
            dx, dy = x2 - x1, y2 - y1
            length = math.hypot(dx, dy) or 1.0
            cx, cy = (x1 + x2) / 2 - dy / length * bend, (y1 + y2) / 2 + dx / length * bend
            sx, sy = _border(x1, y1, cx, cy, w1, h1)
            ex, ey = _border(x2, y2, cx, cy, w2, h2)
            path = f"M{sx:.1f},{sy:.1f} Q{cx:.1f},{cy:.1f} {ex:.1f},{ey:.1f}"
            lx, ly = 0.25 * sx + 0.5 * cx + 0.25 * ex, 0.25 * sy + 0.5 * cy + 0.25 * ey
        lines = "".join(  # a text per line, as Graphviz writes them
            f'<text x="{lx:.1f}" y="{ly + 11 * k:.1f}" font-size="10" text-anchor="middle">'
            f"{html.escape(line)}</text>"
            for k, line in enumerate(edge.lines)
        )
        out.append(
            f'<g id="{element}" class="edge"><path d="{path}" fill="none" stroke="black" '
            f'marker-end="url(#arrow)"/>{lines}</g>'
        )
    for node in graph.nodes:
        x, y, w, h = pos[node.name]
        stroke = ' stroke-width="3"' if node.terminal else ""
        out.append(
            f'<g id="{element_id("state", node.name)}" class="node"><rect x="{x - w / 2:.1f}" '
            f'y="{y - h / 2}" width="{w:.1f}" height="{h}" rx="8" fill="white" '
            f'stroke="black"{stroke}/><text x="{x:.1f}" y="{y + 4}" font-size="13" '
            f'text-anchor="middle">{html.escape(node.name)}</text></g>'
        )
    out.append("</svg>")
    return "\n".join(out)


def _unit(name: str, unit: dict[str, str]) -> str:
    return unit.get(name, name)


def _layers(
    graph: DiagramGraph, units: dict[str, list[str]], unit: dict[str, str]
) -> dict[str, int]:
    """Each unit's row (a group with its states, or a state in no group): the longest path from
    the initial state's unit, the edges that close a cycle left out (found depth first, edges
    into the units holding terminal states tried last, so a run's end is drawn below it)."""
    terminal = {n.name for n in graph.nodes if n.terminal}
    ends = {u for u, names in units.items() if terminal & set(names)}
    out: dict[str, list[str]] = {u: [] for u in units}
    for edge in graph.edges:
        a, b = _unit(edge.source, unit), _unit(edge.dest, unit)
        if a != b and b not in out[a]:
            out[a].append(b)
    for targets in out.values():
        targets.sort(key=lambda u: u in ends)
    initial = _unit(_first_initial(graph), unit)
    order: list[str] = []  # reverse postorder: a topological order of the edges kept
    forward: dict[str, list[str]] = {u: [] for u in units}
    on_stack: set[str] = set()
    visited: set[str] = set()

    def visit(u: str) -> None:
        visited.add(u)
        on_stack.add(u)
        for v in out[u]:
            if v in on_stack:
                continue  # closes a cycle: drawn going back up
            forward[u].append(v)
            if v not in visited:
                visit(v)
        on_stack.discard(u)
        order.append(u)

    for u in [initial, *units]:
        if u not in visited:
            visit(u)
    layer = dict.fromkeys(units, 0)
    for u in reversed(order):
        for v in forward[u]:
            layer[v] = max(layer[v], layer[u] + 1)
    return layer


def _first_initial(graph: DiagramGraph) -> str:
    return next((n.name for n in graph.nodes if n.initial), graph.nodes[0].name)


def _border(
    x: float, y: float, toward_x: float, toward_y: float, box_w: float, box_h: float
) -> tuple[float, float]:
    """Where the line from a box's centre ``(x, y)`` toward a point leaves the box."""
    dx, dy = toward_x - x, toward_y - y
    if dx == 0 and dy == 0:
        return x, y
    scale = min(
        (box_w / 2) / abs(dx) if dx else math.inf, (box_h / 2) / abs(dy) if dy else math.inf
    )
    return x + dx * scale, y + dy * scale
