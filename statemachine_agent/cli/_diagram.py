"""``statemachine-agent diagram``: print or write the loop's state diagram, the built-in machine's
or the one of the user's own agent (``--agent pkg.module:attr``)."""

from __future__ import annotations

import pkgutil
from pathlib import Path
from typing import Any, cast

import click

from .._diagram import DETAILS, Detail, DiagramFormat, render_diagram
from .._errors import UsageError
from .._importing import working_folder_first
from .._machine import LoopMachine


@click.command("diagram")
@click.option(
    "--format",
    "format_",
    type=click.Choice(["mermaid", "dot", "svg", "png"]),
    default="mermaid",
    show_default=True,
    help="mermaid and dot need nothing installed; svg and png need Graphviz's `dot`.",
)
@click.option(
    "--detail",
    type=click.Choice(list(DETAILS)),
    default="overview",
    show_default=True,
    help="overview: one edge per pair of states, labelled with its branches' labels; "
    "full: every guarded branch with its trigger and guards.",
)
@click.option(
    "--agent",
    "agent_ref",
    metavar="MODULE:ATTR",
    help="Draw your own machine: an Agent, a LoopMachine, or a function returning one, "
    "imported from the working folder as `python -m` does (e.g. myapp.bot:agent).",
)
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False, writable=True, path_type=Path),
    help="Write to this file instead of standard output (required for png).",
)
def diagram(format_: str, detail: str, agent_ref: str | None, output: Path | None) -> None:
    """Render the agent loop's state diagram (states, groups, transitions, terminal states)."""
    if format_ == "png" and output is None:
        raise click.UsageError("--format png writes binary data: give -o FILE")
    source = None if agent_ref is None else load_machine(agent_ref)
    try:
        rendered = render_diagram(
            source, format=cast(DiagramFormat, format_), detail=cast(Detail, detail)
        )
    except UsageError as exc:
        raise click.ClickException(str(exc)) from exc
    if output is None:
        assert isinstance(rendered, str)
        click.echo(rendered, nl=False)
    elif isinstance(rendered, bytes):
        output.write_bytes(rendered)
    else:
        output.write_text(rendered, encoding="utf-8")


def load_machine(reference: str) -> Any:
    """The `Agent` or `LoopMachine` that ``reference`` (``pkg.module:attr``) names, calling it
    first when it is a factory (a callable that is neither). The working folder is searched first,
    as ``python -m`` does (`pkgutil.resolve_name` imports it).

    Raises:
        click.BadParameter: the reference is malformed, its module or attribute is missing, or
            the object (or what the factory returned) is neither an Agent nor a LoopMachine.
    """
    from .._agent import Agent

    def bad(message: str) -> click.BadParameter:
        return click.BadParameter(message, param_hint="'--agent'")

    module, colon, attr = reference.partition(":")
    if not colon or not module or not attr:
        raise bad(f"{reference!r} is not MODULE:ATTR (e.g. myapp.bot:agent)")
    working_folder_first()
    try:
        found = pkgutil.resolve_name(reference)
    except ModuleNotFoundError as exc:
        raise bad(
            f"cannot import {exc.name!r} for {reference!r}: run from the folder that holds it, "
            "or install it"
        ) from exc
    except AttributeError as exc:
        raise bad(f"module {module!r} has no attribute {attr!r}") from exc
    except Exception as exc:  # the user's module raised while importing
        raise bad(f"importing {module!r} raised {type(exc).__name__}: {exc}") from exc
    kinds = (Agent, LoopMachine)
    if not isinstance(found, kinds) and callable(found):
        try:
            found = found()
        except Exception as exc:
            raise bad(f"{reference}() raised {type(exc).__name__}: {exc}") from exc
    if not isinstance(found, kinds):
        raise bad(
            f"{reference} is a {type(found).__name__}, not an Agent, a LoopMachine or a function "
            "returning one"
        )
    return found
