"""``python -m statemachine_agent``: the command line."""

from .cli import main

main()
