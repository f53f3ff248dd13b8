"""The list of CLI commands; each feature module adds its own."""

from __future__ import annotations

import click

COMMANDS: list[click.Command] = []
