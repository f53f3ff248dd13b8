"""The ``statemachine-agent`` command line (click): ``run``, ``demo``, ``diagram``, ``replay``,
``check``, and the durable runs' ``worker``, ``submit``, ``status``, ``decide``, ``recover``.
Each command lives in its own module and is registered here."""

from __future__ import annotations

import click

from .. import __version__


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="statemachine-agent")
def main() -> None:
    """The LLM agent loop as an explicit state machine."""


def _register() -> None:
    # Imported here so that `import statemachine_agent.cli` stays cheap and free of cycles.
    from . import _commands

    for command in _commands.COMMANDS:
        main.add_command(command)


_register()
