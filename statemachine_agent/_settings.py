"""`RunSettings`: what a run reads of its agent's configuration, read once when the run is
claimed (assigning ``agent.max_turns`` or ``agent.limits`` changes later runs, not this one)."""

from __future__ import annotations

import dataclasses
import operator
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol, Self

from ._compaction_config import Compaction
from ._dataclasses import fast_init
from ._execution import ToolExecution
from ._guards import MaxTokensPolicy
from ._hooks import AfterToolCall, BeforeToolCall, ShouldContinue, TransformContext
from ._limits import UsageLimits
from ._messages import Message
from ._sources import ToolTable
from ._tools import Tool
from .models._base import Model, ToolDefinition

if TYPE_CHECKING:
    from pydantic import BaseModel


class HistoryLog(Protocol):
    """Where a replaced history is recorded (a session log's ``record_history``)."""

    def record_history(
        self, messages: Sequence[Message], *, reason: str, summary: str | None = None
    ) -> None:
        """Record that the history was replaced by ``messages``."""


@dataclasses.dataclass(frozen=True, slots=True)
class RunSettings:
    """The configuration one run reads (the fields are `Agent`'s options of the same names).

    Attributes:
        max_turns: the turn cap of this run (``run(max_turns=N)`` when given, else the agent's).
        tool_definitions: the tools as the model sees them, in declaration order.
        tool_table: with tool sources (MCP servers), the agent's `ToolTable`: the run lists
            the sources' tools into it before each request and reads its tools instead of
            ``tools`` and ``tool_definitions``; None without sources.
        session: where a compaction inside the run records the new history, or None.
        step_prefix: what a durable run's step names start with: empty for an agent's own run,
            ``<call id>/`` for a sub-agent's (``p1/model_request``), nested for deeper ones.
    """

    model: Model
    tools: dict[str, Tool]
    tool_definitions: list[ToolDefinition]
    tool_table: ToolTable | None
    system: str | None
    max_turns: int
    tool_execution: ToolExecution
    max_continuations: int
    max_tokens_policy: MaxTokensPolicy
    abort_grace_seconds: float
    model_retries: int
    retry_backoff_seconds: float
    before_tool_call: BeforeToolCall | None
    after_tool_call: AfterToolCall | None
    should_continue: ShouldContinue | None
    transform_context: TransformContext | None
    deps: Any
    model_settings: dict[str, Any]
    limits: UsageLimits | None
    final_turn: bool | str
    output_type: type[BaseModel] | None
    output_retries: int
    compaction: Compaction | None
    session: HistoryLog | None
    step_prefix: str = ""

    @classmethod
    def read(cls, config: object, **given: Any) -> Self:
        """The settings read from ``config`` (an `Agent`: each field from its attribute of the
        same name; a field with a default that ``config`` lacks keeps it), with the fields in
        ``given`` taken from there instead.

        ``tools``, ``tool_definitions`` and ``model_settings`` are copied: a change made in
        place on the agent's dict or list during the run (``agent.model_settings["x"] = ...``,
        ``agent.tool_definitions.append(...)``) applies from the next run too, not half-way
        through this one.

        Raises:
            AttributeError: ``config`` lacks one of the fields without a default (one in
                ``given`` too: each is read, in one step, before ``given`` replaces it).
            KeyError: ``given`` names no field.
        """
        values = [*_read_required(config)]
        for name, default in _DEFAULTED:
            values.append(getattr(config, name, default))
        for name, value in given.items():
            values[_POSITION[name]] = value
        for i in _COPIED:  # shallow copies: the run keeps the containers of its claim
            values[i] = values[i].copy()
        return cls(*values)


fast_init(RunSettings)  # one per run (benchmarks/README.md, "Why the code is shaped this way")

_NAMES = tuple(f.name for f in dataclasses.fields(RunSettings))
"""`RunSettings`' fields in order (those without a default first, as dataclasses orders them)."""

_read_required = operator.attrgetter(
    *(f.name for f in dataclasses.fields(RunSettings) if f.default is dataclasses.MISSING)
)
"""The fields without a default, read from a configuration in one call: a run's settings are
read at every claim."""

_DEFAULTED = tuple(
    (f.name, f.default)
    for f in dataclasses.fields(RunSettings)
    if f.default is not dataclasses.MISSING
)
"""The fields with a default, each with it (after the others, in order)."""

_POSITION = {name: i for i, name in enumerate(_NAMES)}
"""Each field's position in the positional arguments of ``RunSettings``."""

_COPIED = tuple(_POSITION[name] for name in ("tools", "tool_definitions", "model_settings"))
"""Where the fields holding the agent's own mutable containers are (see `RunSettings.read`)."""
