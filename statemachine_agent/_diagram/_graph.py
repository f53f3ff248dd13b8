"""The neutral graph of a machine (`diagram_graph`): states, edges and groups every renderer
(Mermaid, DOT) reads. The two views and the flat table are described in the package docstring."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from .._errors import UsageError
from .._machine import LoopMachine, State

Detail = Literal["overview", "full", "branches"]

IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
"""A name Mermaid and DOT may write bare (unless it is one of their words)."""


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
    ``lambda`` for a lambda, a name itself (the table names its effects and actions); safe for
    Mermaid and DOT labels."""
    if isinstance(function, str):
        return function
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


def initial_state(nodes: Sequence[DiagramNode]) -> str:
    """The name of the state the machine starts in."""
    return next(n.name for n in nodes if n.initial)


def callback_lines(node: DiagramNode) -> list[str]:
    """The lines a state's drawing lists under its name: its effect, enter and exit callbacks."""
    effect = [f"do / {node.effect}"] if node.effect else []
    return effect + [f"entry / {n}" for n in node.on_enter] + [f"exit / {n}" for n in node.on_exit]
