"""``statemachine-agent diagram``: print or write the loop's state diagram."""

from __future__ import annotations

from pathlib import Path
from typing import cast

import click

from .._diagram import DiagramFormat, render_diagram
from .._errors import UsageError


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
    "-o",
    "--output",
    type=click.Path(dir_okay=False, writable=True, path_type=Path),
    help="Write to this file instead of standard output (required for png).",
)
def diagram(format_: str, output: Path | None) -> None:
    """Render the agent loop's state diagram (states, guarded transitions, terminal states)."""
    if format_ == "png" and output is None:
        raise click.UsageError("--format png writes binary data: give -o FILE")
    try:
        rendered = render_diagram(format=cast(DiagramFormat, format_))
    except UsageError as exc:
        raise click.ClickException(str(exc)) from exc
    if output is None:
        assert isinstance(rendered, str)
        click.echo(rendered, nl=False)
    elif isinstance(rendered, bytes):
        output.write_bytes(rendered)
    else:
        output.write_text(rendered, encoding="utf-8")
