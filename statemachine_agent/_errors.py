"""Exceptions of statemachine_agent.

Expected endings of a run (``done``, ``aborted``, ``max_turns``, ``failed``) are states in the
`RunResult`, not exceptions. These are for misuse, for bugs, and for the model adapters to tell the
engine what went wrong on the wire::

    AgentError
    ├── UsageError               misuse of the API (e.g. ``run`` while a run is in progress)
    │   ├── AgentBusyError
    │   ├── GraphvizNotFoundError  SVG/PNG asked for without Graphviz's ``dot``
    │   └── SandboxUnavailableError  a required bubblewrap sandbox cannot be had here
    ├── InvalidHistoryError      a history breaks the tool-use protocol (lists every violation)
    ├── MachineDefinitionError   the state machine has an unreachable state or a dead end
    ├── ToolDefinitionError      a function cannot be turned into a tool
    ├── ToolError                raised by a tool: becomes a clean error result
    ├── SessionCorruptError      a complete line of a session log cannot be read (defined
    │                            in ``statemachine_agent.session``, which builds on the core)
    └── ModelError               a model request failed
        ├── ModelAuthError       bad or missing credentials (not retried)
        ├── ModelRetryableError  overload, rate limit, dropped connection (retried by the engine)
        └── ScriptExhaustedError a ScriptedModel was asked for more responses than it holds
"""

from __future__ import annotations


class AgentError(Exception):
    """Root of every exception this library raises on purpose."""


class UsageError(AgentError):
    """The library was called in a way it does not support; the message says how to fix it."""


class AgentBusyError(UsageError):
    """A run was started while another run of the same agent is in progress."""


class GraphvizNotFoundError(UsageError):
    """Graphviz's ``dot`` binary is needed for SVG/PNG and is not installed."""


class SandboxUnavailableError(UsageError):
    """``mode="require"`` and bubblewrap is missing or cannot create namespaces here."""


class InvalidHistoryError(AgentError):
    """A history breaks the tool-use protocol (rules 1-5 of ``statemachine_agent.testing.assert_valid_history``).

    Attributes:
        violations: one line per problem, each naming the message index.
    """

    def __init__(self, violations: list[str]) -> None:
        self.violations = violations
        super().__init__(
            f"invalid history ({len(violations)} problem(s)):\n"
            + "\n".join(f"- {v}" for v in violations)
        )


class MachineDefinitionError(AgentError):
    """The state machine definition is invalid (unreachable states, dead ends, unknown names)."""


class ToolDefinitionError(AgentError):
    """A function or model cannot be turned into a tool (missing annotation, bad name, ...)."""


class ToolError(AgentError):
    """Raise from a tool to return a clean error result: the message is what the model reads."""


class ModelError(AgentError):
    """A model request failed.

    Attributes:
        kind: the provider's error type (``overloaded_error``, ``authentication_error``, ...).
        status_code: the HTTP status, when there was one.
        attempts: how many requests were made, retries included.
    """

    def __init__(
        self,
        message: str,
        *,
        kind: str = "api_error",
        status_code: int | None = None,
        attempts: int = 1,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.kind = kind
        self.status_code = status_code
        self.attempts = attempts


class ModelAuthError(ModelError):
    """Credentials are missing, wrong or lack permission. Never retried."""


class ModelRetryableError(ModelError):
    """A failure that may pass: overload, rate limit, dropped stream. The engine retries it."""


class ScriptExhaustedError(ModelError):
    """A `ScriptedModel` was asked for a response after its last step (the run ends ``failed``)."""
