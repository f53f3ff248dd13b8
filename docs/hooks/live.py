"""MkDocs hook: the parts of the site that come from the code at build time, never pasted.

A page writes a marker comment on a line of its own and this hook replaces it before Markdown
(and mkdocstrings) see the page:

- ``<!-- live: state-diagram -->``: the built-in machine's overview diagram (Mermaid), as
  ``statemachine-agent diagram`` prints it, drawn in the browser by ``docs/js/diagram.mjs``.
- ``<!-- live: state-table -->``: the states of the built-in definition (`LoopMachine().states`,
  its groups) with their effects and the branches that leave each.
- ``<!-- live: transition-table -->``: every branch in the order it is tried (`LoopMachine().specs`).
- ``<!-- api: MODULE -->``: one mkdocstrings block per name in ``MODULE.__all__``, so the API
  reference lists every public name and a new one appears without editing a page.
"""

from __future__ import annotations

import html
import importlib
import inspect
import re
from typing import Any

import statemachine_agent
from statemachine_agent import LoopMachine, render_diagram
from statemachine_agent._diagram import callable_name

_MARKER = re.compile(r"^<!-- (live|api): ([\w.-]+) -->$", re.M)


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def _state_table() -> str:
    machine = LoopMachine()
    groups = {name: g for name, g in machine.groups.items()}
    rows = [
        "| state | effect | group | ends a run | `run()` returns here | left by |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for name, spec in machine.states.items():
        member_of = [g for g, group in groups.items() if name in group.states]
        leaving = sorted({s.trigger for s in machine.specs if name in s.sources})
        rows.append(
            f"| `{name}` | {f'`{callable_name(spec.effect)}`' if spec.effect else '-'} "
            f"| {', '.join(f'`{g}`' for g in member_of) or '-'} "
            f"| {'yes' if spec.terminal else 'no'} | {'yes' if spec.terminal or spec.stops_run else 'no'} "
            f"| {', '.join(f'`{t}`' for t in leaving)} |"
        )
    legend = [f"- `{g.name}`: {g.description}" for g in groups.values()]
    return "\n".join([*rows, "", "Groups:", "", *legend])


def _transition_table() -> str:
    rows = ["| # | trigger | from | to | guards | label |", "| --- | --- | --- | --- | --- | --- |"]
    for i, spec in enumerate(LoopMachine().specs, 1):
        sources = ", ".join(f"`{s}`" for s in (spec.groups or spec.sources))
        guards = ", ".join(f"`{_cell(callable_name(g))}`" for g in spec.guards) or "-"
        rows.append(
            f"| {i} | `{spec.trigger}` | {sources} | `{spec.dest}` | {guards} | `{_cell(spec.label)}` |"
        )
    return "\n".join(rows)


def _private_bases(cls: type, public: set[str]) -> bool:
    """Whether ``cls`` inherits from a class of the package that the reference never shows."""
    return any(
        base.__module__.startswith("statemachine_agent")
        and base.__name__ not in public
        and getattr(statemachine_agent, base.__name__, None) is not base
        for base in cls.__mro__[1:]
    )


def _api(module_name: str) -> str:
    module = importlib.import_module(module_name)
    names: list[str] = list(module.__all__)
    blocks = []
    for name in names:
        obj = getattr(module, name)
        block = f"::: {module_name}.{name}"
        if inspect.isclass(obj) and _private_bases(obj, set(names)):
            # `Agent.steer`, an event's `run_id`...: members of a private base are the class's own.
            block += "\n    options:\n      inherited_members: true"
        blocks.append(block)
    return "\n\n".join(blocks)


def _replace(match: re.Match[str]) -> str:
    kind, what = match.groups()
    if kind == "api":
        return _api(what)
    if what == "state-diagram":
        # Drawn by docs/js/diagram.mjs where Mermaid loads; readable text where it does not.
        return f'<pre class="state-diagram">{html.escape(str(render_diagram()).rstrip())}</pre>'
    if what == "state-table":
        return _state_table()
    if what == "transition-table":
        return _transition_table()
    raise ValueError(
        f"unknown live marker {what!r}: use state-diagram, state-table or transition-table"
    )


def on_page_markdown(markdown: str, **kwargs: Any) -> str:
    """Replace each marker of the page with what the code says now."""
    return _MARKER.sub(_replace, markdown)
