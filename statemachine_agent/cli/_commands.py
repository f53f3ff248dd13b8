"""The list of CLI commands; each feature module adds its own."""

from __future__ import annotations

import click

from ._demo import demo_command
from ._diagram import diagram
from ._durable import (
    decide_command,
    recover_command,
    status_command,
    submit_command,
    worker_command,
)
from ._run import approve_command, run_command
from ._session import check_command, replay_command

COMMANDS: list[click.Command] = []
COMMANDS.append(diagram)
COMMANDS.append(run_command)
COMMANDS.append(approve_command)
COMMANDS.append(demo_command)
COMMANDS.extend([replay_command, check_command])
COMMANDS.extend([worker_command, submit_command, status_command, decide_command, recover_command])
