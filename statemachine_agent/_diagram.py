"""State diagrams of the agent loop: machine definition -> neutral graph -> Mermaid, DOT, SVG/PNG.

`diagram_graph` reads a `LoopMachine` (or an `Agent`'s machine, including the guards, transitions and
enter/exit callbacks a user added) into a `DiagramGraph`; `to_mermaid` and `to_dot` turn it into text
with no system binary; `render_image` pipes DOT through Graphviz's ``dot`` for SVG or PNG.
`render_diagram` does it all in one call.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from ._errors import GraphvizNotFoundError, UsageError
from ._machine import LoopMachine, State

DiagramFormat = Literal["mermaid", "dot", "svg", "png"]
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
    """A transition from one source state.

    Attributes:
        source: the state left.
        dest: the state entered.
        trigger: the event (``model_replied``).
        guards: the guards' names, all of which must pass; empty for an unguarded transition.
        fallback: unguarded, but guarded siblings of the same trigger and source are tried first
            (drawn as ``[else]``).
    """

    source: str
    dest: str
    trigger: str
    guards: tuple[str, ...] = ()
    fallback: bool = False

    @property
    def condition(self) -> str:
        """``[guard and guard]``, ``[else]`` for a fallback, or empty."""
        if self.guards:
            return f"[{' and '.join(self.guards)}]"
        return "[else]" if self.fallback else ""

    @property
    def text(self) -> str:
        """The one-line edge label: ``trigger [guard and guard]``."""
        return f"{self.trigger} {self.condition}".strip()


@dataclass(frozen=True, slots=True)
class DiagramGraph:
    """The neutral graph every renderer reads: states in `State` order, edges in priority order."""

    name: str
    nodes: tuple[DiagramNode, ...]
    edges: tuple[DiagramEdge, ...]


def callable_name(function: Any) -> str:
    """A readable name for a guard or callback: its ``__name__`` (``functools.partial`` unwrapped),
    ``lambda`` for a lambda; safe for Mermaid and DOT labels."""
    while hasattr(function, "func"):  # functools.partial
        function = function.func
    name = getattr(function, "__name__", None) or type(function).__name__
    name = name.replace("<lambda>", "lambda")
    return "".join(ch if ch.isalnum() or ch in "_." else "_" for ch in name)


def diagram_graph(
    source: Any = None, *, highlight: bool = True, name: str = "agent_loop"
) -> DiagramGraph:
    """Read a machine into a `DiagramGraph`.

    Args:
        source: a `LoopMachine`, an object with a ``machine`` attribute (an `Agent`), or None for
            the built-in definition.
        highlight: mark the machine's current state (never for ``source=None``).
        name: the graph's name.

    Raises:
        UsageError: ``source`` is neither a machine nor has one.
    """
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
    edges = []
    guarded: set[tuple[str, str]] = {
        (spec.trigger, src) for spec in machine.specs if spec.guards for src in spec.sources
    }
    for spec in machine.specs:
        for src in spec.sources:
            edges.append(
                DiagramEdge(
                    str(src),
                    str(spec.dest),
                    str(spec.trigger),
                    tuple(callable_name(g) for g in spec.guards),
                    fallback=not spec.guards and (spec.trigger, src) in guarded,
                )
            )
    return DiagramGraph(name, tuple(nodes), tuple(edges))


def to_mermaid(graph: DiagramGraph) -> str:
    """Mermaid ``stateDiagram-v2`` text: terminal states bold with a thick border (class
    ``terminal``), the current state filled (class ``current``), callbacks as notes."""
    lines = ["stateDiagram-v2", f"    [*] --> {_initial(graph.nodes)}"]
    lines += [f"    {e.source} --> {e.dest} : {e.text}" for e in graph.edges]
    for node in graph.nodes:
        notes = _callback_lines(node)
        if notes:
            lines.append(f"    note right of {node.name} : {'<br/>'.join(notes)}")
    lines += [
        "    classDef terminal font-weight:bold,stroke-width:3px",
        "    classDef current fill:#ffe08a,stroke:#b8860b,stroke-width:3px",
    ]
    terminal = [n.name for n in graph.nodes if n.terminal]
    if terminal:
        lines.append(f"    class {','.join(terminal)} terminal")
    current = [n.name for n in graph.nodes if n.current]
    if current:
        lines.append(f"    class {','.join(current)} current")
    return "\n".join(lines) + "\n"


def to_dot(graph: DiagramGraph, *, element_ids: bool = False) -> str:
    """Graphviz DOT text: terminal states with a double border, the current state filled,
    callbacks listed under the state's name.

    Args:
        graph: the graph to draw.
        element_ids: give each state the id ``state_NAME`` and each edge ``edge_INDEX`` (its
            position in ``graph.edges``); Graphviz's SVG keeps them, so a page can highlight one.
    """
    lines = [
        f"digraph {graph.name} {{",
        '    node [shape=box, style=rounded, fontname="Helvetica"];',
        '    edge [fontname="Helvetica", fontsize=10];',
        '    __start__ [shape=point, label=""];',
        f"    __start__ -> {_initial(graph.nodes)};",
    ]
    for node in graph.nodes:
        attrs = [f"label={_quote(chr(10).join([node.name, *_callback_lines(node)]))}"]
        if node.terminal:
            attrs.append("peripheries=2")
        if node.current:
            attrs.append('style="rounded,filled", fillcolor="#ffe08a"')
        if element_ids:
            attrs.append(f"id={_quote('state_' + node.name)}")
        lines.append(f"    {node.name} [{', '.join(attrs)}];")
    for index, edge in enumerate(graph.edges):
        label = "\n".join(part for part in (edge.trigger, edge.condition) if part)
        extra = f", id={_quote(f'edge_{index}')}" if element_ids else ""
        lines.append(f"    {edge.source} -> {edge.dest} [label={_quote(label)}{extra}];")
    lines.append("}")
    return "\n".join(lines) + "\n"


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
    source: Any = None, *, format: DiagramFormat = "mermaid", highlight: bool = True
) -> str | bytes:
    """Render the loop's state diagram.

    Args:
        source: an `Agent`, a `LoopMachine`, or None for the built-in definition.
        format: ``mermaid`` or ``dot`` (text, nothing to install), ``svg`` (text) or ``png``
            (bytes), which need Graphviz's ``dot``.
        highlight: mark the current state of ``source``.

    Returns:
        Text for mermaid, dot and svg; bytes for png.

    Raises:
        GraphvizNotFoundError: svg/png without Graphviz installed.
        UsageError: an unknown format.
    """
    graph = diagram_graph(source, highlight=highlight)
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
    escaped = text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return f'"{escaped}"'
