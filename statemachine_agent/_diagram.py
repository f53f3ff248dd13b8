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

import hashlib
import re
import shutil
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from ._errors import GraphvizNotFoundError, UsageError
from ._machine import LoopMachine, State

DiagramFormat = Literal["mermaid", "dot", "svg", "png"]
Detail = Literal["overview", "full", "branches"]
DETAILS: tuple[str, ...] = ("overview", "full")
"""The views `render_diagram` and the CLI draw (``branches`` is `diagram_graph`'s flat table)."""
TEXT_FORMATS: tuple[str, ...] = ("mermaid", "dot")
IMAGE_FORMATS: tuple[str, ...] = ("svg", "png")


@dataclass(frozen=True, slots=True)
class DiagramNode:
    """A state.

    Attributes:
        name: the state's value (``awaiting_model``).
        initial: the machine starts here.
        terminal: a run ends here.
        current: the machine is in this state now (highlighted).
        on_enter: names of callbacks run on entering it.
        on_exit: names of callbacks run on leaving it.
        effect: the name of its effect (what entering it does); None for ``idle`` and for the
            terminal states, whose effect is always to settle the run.
    """

    name: str
    initial: bool = False
    terminal: bool = False
    current: bool = False
    on_enter: tuple[str, ...] = ()
    on_exit: tuple[str, ...] = ()
    effect: str | None = None


@dataclass(frozen=True, slots=True)
class DiagramEdge:
    """A transition from one source: a state, or a group drawn as a composite state.

    Attributes:
        source: the state left, or the name of a `DiagramGroup` (its transition leaves each
            member).
        dest: the state entered.
        trigger: the event (``model_replied``); an overview edge's triggers, comma-separated.
        guards: the guards' names, all of which must pass; empty for an unguarded transition.
        fallback: unguarded, but guarded siblings of the same trigger and source are tried first
            (drawn as ``[else]``).
        labels: the `TransitionSpec.label` s (names) of the branches this edge draws, each once.
        summary: an overview edge: it stands for every branch from ``source`` to ``dest`` and is
            labelled with ``labels``, one per line.
    """

    source: str
    dest: str
    trigger: str
    guards: tuple[str, ...] = ()
    fallback: bool = False
    labels: tuple[str, ...] = ()
    summary: bool = False

    @property
    def condition(self) -> str:
        """``[guard and guard]``, ``[else]`` for a fallback, or empty."""
        if self.guards:
            return f"[{' and '.join(self.guards)}]"
        return "[else]" if self.fallback else ""

    @property
    def text(self) -> str:
        """The one-line edge label: ``trigger [guard and guard]``, or an overview edge's labels
        separated by `` / ``."""
        if self.summary:
            return " / ".join(self.labels)
        return f"{self.trigger} {self.condition}".strip()

    @property
    def lines(self) -> tuple[str, ...]:
        """The label's lines: an overview edge's branch labels, else the trigger and condition."""
        if self.summary:
            return self.labels
        return tuple(part for part in (self.trigger, self.condition) if part)


@dataclass(frozen=True, slots=True)
class DiagramGroup:
    """A `StateGroup` drawn as a composite state.

    Attributes:
        name: the group's name (``active``); edges whose source is this name leave the composite.
        members: its states, in the graph's node order.
        description: what the members share.
    """

    name: str
    members: tuple[str, ...]
    description: str = ""


@dataclass(frozen=True, slots=True)
class DiagramGraph:
    """The neutral graph every renderer reads: states in definition order, edges in priority
    order (an overview edge where its first branch is), groups (composites) in `GROUPS` order."""

    name: str
    nodes: tuple[DiagramNode, ...]
    edges: tuple[DiagramEdge, ...]
    groups: tuple[DiagramGroup, ...] = ()
    detail: Detail = "branches"


def callable_name(function: Any) -> str:
    """A readable name for a guard or callback: its ``__name__`` (``functools.partial`` unwrapped),
    ``lambda`` for a lambda; safe for Mermaid and DOT labels."""
    while hasattr(function, "func"):  # functools.partial
        function = function.func
    name = getattr(function, "__name__", None) or type(function).__name__
    name = name.replace("<lambda>", "lambda")
    return "".join(ch if ch.isalnum() or ch in "_." else "_" for ch in name)


def diagram_graph(
    source: Any = None,
    *,
    highlight: bool = True,
    name: str = "agent_loop",
    detail: Detail = "branches",
) -> DiagramGraph:
    """Read a machine into a `DiagramGraph`.

    Args:
        source: a `LoopMachine`, an object with a ``machine`` attribute (an `Agent`), or None for
            the built-in definition.
        highlight: mark the machine's current state (never for ``source=None``).
        name: the graph's name.
        detail: ``branches`` (one edge per branch and source state, no groups: each transition
            the engine can fire), ``full`` (every branch with its guards, a group's branches once
            from its composite) or ``overview`` (as ``full``, then one edge per (source, dest)
            labelled with its branches' labels).

    Raises:
        UsageError: ``source`` is neither a machine nor has one, or ``detail`` is unknown.
    """
    if detail not in ("overview", "full", "branches"):
        raise UsageError(f"unknown diagram detail {detail!r}: use overview or full")
    machine = LoopMachine() if source is None else getattr(source, "machine", source)
    if not isinstance(machine, LoopMachine):
        raise UsageError(f"cannot draw {source!r}: pass an Agent or a LoopMachine")
    current = machine.state if (highlight and source is not None) else None
    nodes = []
    for state_name, state_spec in machine.states.items():
        enter, exit_ = machine.state_callbacks(state_name)
        nodes.append(
            DiagramNode(
                state_name,
                initial=state_name == State.IDLE,
                terminal=state_spec.terminal,
                current=state_name == current,
                on_enter=tuple(callable_name(c) for c in enter),
                on_exit=tuple(callable_name(c) for c in exit_),
                effect=None
                if state_spec.terminal or state_spec.effect is None
                else callable_name(state_spec.effect),
            )
        )
    order = [n.name for n in nodes]
    groups: tuple[DiagramGroup, ...] = ()
    if detail != "branches":
        groups = tuple(
            DiagramGroup(
                g.name,
                tuple(sorted(map(str, g.states), key=order.index)),
                g.description,
            )
            for g in machine.groups.values()
            if g.states
        )
    drawn = {g.name: set(g.members) for g in groups}
    guarded: set[tuple[str, str]] = {
        (spec.trigger, src) for spec in machine.specs if spec.guards for src in spec.sources
    }
    edges = []
    for spec in machine.specs:
        composites = [g for g in spec.groups if g in drawn]
        covered = {m for g in composites for m in drawn[g]}
        rest = [str(s) for s in spec.sources if str(s) not in covered]
        for src in (*composites, *rest):
            members = drawn.get(src, {src})
            edges.append(
                DiagramEdge(
                    src,
                    str(spec.dest),
                    str(spec.trigger),
                    tuple(callable_name(g) for g in spec.guards),
                    fallback=not spec.guards and any((spec.trigger, m) in guarded for m in members),
                    labels=(spec.name,),
                )
            )
    if detail == "overview":
        edges = _one_per_pair(edges)
    return DiagramGraph(name, tuple(nodes), tuple(edges), groups, detail)


def _one_per_pair(edges: Sequence[DiagramEdge]) -> list[DiagramEdge]:
    """One summary edge per (source, dest), where its first branch is: the branches' triggers
    and labels, each once, in priority order."""
    merged: dict[tuple[str, str], tuple[list[str], list[str]]] = {}
    for edge in edges:
        triggers, labels = merged.setdefault((edge.source, edge.dest), ([], []))
        if edge.trigger not in triggers:
            triggers.append(edge.trigger)
        labels += [label for label in edge.labels if label not in labels]
    return [
        DiagramEdge(source, dest, ", ".join(triggers), labels=tuple(labels), summary=True)
        for (source, dest), (triggers, labels) in merged.items()
    ]


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
    lines = ["stateDiagram-v2", f"    [*] --> {ids[_initial(graph.nodes)]}"]
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
        notes = _callback_lines(node)
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


_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
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
    plain = {n for n in names if _IDENTIFIER.fullmatch(n) and _mermaid_free(n)}
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
    plain_name = _IDENTIFIER.fullmatch(graph.name) and graph.name.lower() not in _DOT_WORDS
    lines = [f"digraph {graph.name if plain_name else _quote(graph.name)} {{"]
    if graph.detail != "branches":  # the views: left to right, clusters as edge ends
        lines.append("    rankdir=LR; compound=true;")
    lines += [
        '    node [shape=box, style=rounded, fontname="Helvetica"];',
        '    edge [fontname="Helvetica", fontsize=10];',
        f'    {_quote(start)} [shape=point, label=""];',
        f"    {_quote(start)} -> {_quote(_initial(graph.nodes))};",
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
    attrs = [f"label={_quote(chr(10).join([node.name, *_callback_lines(node)]))}"]
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


def _initial(nodes: Sequence[DiagramNode]) -> str:
    return next(n.name for n in nodes if n.initial)


def _callback_lines(node: DiagramNode) -> list[str]:
    effect = [f"do / {node.effect}"] if node.effect else []
    return effect + [f"entry / {n}" for n in node.on_enter] + [f"exit / {n}" for n in node.on_exit]


def _quote(text: str) -> str:
    """``text`` as a quoted DOT string: ``\\`` and ``"`` escaped, a line break kept as it is
    (Graphviz draws it as ``\\n``, centred; and its ``-Tjson`` gives the label's lines back)."""
    escaped = text.replace("\\", "\\\\").replace('"', '\\"')
    return f'"{escaped}"'


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
