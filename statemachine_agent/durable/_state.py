"""What a process that launched DBOS holds: the agent factory, this launch's incarnation, and
where it registered (one DBOS per process, so one `Process`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .._agent import Agent
from .._errors import UsageError

if TYPE_CHECKING:
    from ._abort import AbortWatch

AgentFactory = Callable[[], Agent]


@dataclass
class Process:
    """The durable state of this process (see `launch` and `shutdown`).

    Attributes:
        factory: the agent factory `launch` was given (None: DBOS is not launched here).
        incarnation: a fresh id per launch: a tool step started under another one was in
            flight when its worker died.
        registered: (executor id, registry engine) of this worker when it registered.
        launched: (db, executor id) of this process once launched.
        watches: the abort watch of each run executing here, by run id (see `_abort`).
    """

    factory: AgentFactory | None = None
    incarnation: str = ""
    registered: tuple[str, Any] | None = None
    launched: tuple[str, str] | None = None
    watches: dict[str, AbortWatch] = field(default_factory=dict)


process = Process()
"""The one `Process` of this process."""


def require_launched() -> None:
    if process.factory is None:
        raise UsageError(
            "DBOS is not launched in this process: call statemachine_agent.durable.launch(...) "
            "first, or use statemachine_agent.durable.Client from a process that is not a worker"
        )
