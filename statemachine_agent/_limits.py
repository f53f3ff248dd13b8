"""`UsageLimits`: budgets a run checks before each model request and after each response.

The machine reads them through guards (``usage_limit`` branches of ``start``, ``model_replied``
and ``tools_finished`` in `_machine`); reaching one ends the run in
``max_turns`` with every call answered, and `RunResult.error` names the limit, its value and the
amount used. Counts (`RunCounts`) are per run and carry over when a run is continued without a
prompt (as turns do: ``run()``, decisions, a session log resumed, a durable run's later steps), so
raising a limit and calling ``run()`` again goes on where the run stopped. A final answer that
takes a token limit past its value ends the run ``done`` (the answer is kept: it was paid for) and
`RunResult.limit_exceeded` and `RunResult.error` say by how much.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import Any

from ._accounting import reported_context
from ._errors import UsageError
from ._messages import NO_USAGE, ToolCallBlock, Usage

FINAL_TURN_PROMPT = (
    "This is the final turn of this run: a limit was reached and tools are disabled. Answer now "
    "with what you have: what was done, what you found, and what is left to do."
)
"""The instruction added to the system prompt of the final turn (``Agent(final_turn=True)``)."""


@dataclass(frozen=True, slots=True)
class LimitHit:
    """A usage limit the run reached or went past, with the amounts.

    Two uses: the limit that stopped a run (it ends in ``max_turns``, and `RunResult.error`
    is `describe`'s text), and `RunResult.limit_exceeded`, the token limit a run's usage went
    past; a final answer that took it past ends the run ``done`` (the answer is kept), so that
    limit did not stop the run, and `RunResult.error` is `exceeded_text`'s.

    Attributes:
        name: the limit's name (``max_requests``, ``max_tool_calls``, ``max_total_tokens``, ...).
        value: the limit's value (requests, tool calls or tokens).
        used: the amount used so far in the run (requests sent, tool calls made, tokens).
        wanted: how many more the run was about to use when the limit stopped it (1 for the
            next request, the response's calls that would run for ``max_tool_calls``, see
            `calls_to_run`); 0 for a token
            limit, whose tokens are counted after each response, so already in ``used``.
        excess: derived, not a field (a property): how far ``used`` is past ``value``,
            ``max(0, used - value)``; 0 for a limit reached but not passed.
    """

    name: str
    value: int
    used: int
    wanted: int = 0

    def describe(self) -> str:
        """A sentence naming the limit, its value and the amount used."""
        text = f"the usage limit {self.name}={self.value} was reached: {self.used} used"
        if self.wanted:
            text += f", {self.wanted} more wanted"
        return text

    def call_text(self) -> str:
        """The result of a tool call the limit kept from running."""
        return f"Not run: {self.describe()}."

    @property
    def excess(self) -> int:
        """How far ``used`` is past ``value``: ``max(0, used - value)`` (derived, not a field:
        not in the repr nor in equality)."""
        return max(0, self.used - self.value)

    def exceeded_text(self) -> str:
        """A sentence saying the limit was exceeded and by how much (for a run that ended
        ``done`` past a token limit: its final answer took the tokens past it)."""
        return (
            f"The answer is kept (it was paid for), but the {self.name} limit ({self.value}) was "
            f"exceeded by {self.excess} tokens ({self.used} used)."
        )


@dataclass(frozen=True, slots=True)
class RunCounts:
    """What a run has counted toward its limits: a run continued without a prompt (``run()``,
    ``run(decisions=...)``, `Agent.resume` of a session log, a durable run after its worker
    restarted) goes on from these, exactly as the same run in one process does; a prompt starts
    a new run from zero.

    Attributes:
        turns: completed turns (the count ``max_turns`` caps).
        requests: model requests sent (``max_requests``), the default summarizer's compaction
            requests included; the final turn's is not counted.
        tool_calls: tool calls batches took in (``max_tool_calls``; see `calls_to_run`).
        usage: tokens of the run's responses (the token limits).
    """

    turns: int = 0
    requests: int = 0
    tool_calls: int = 0
    usage: Usage = NO_USAGE

    def to_json(self) -> dict[str, Any]:
        """The counts as JSON-ready data (what a session log's ``run_end`` line holds)."""
        return {
            "turns": self.turns,
            "requests": self.requests,
            "tool_calls": self.tool_calls,
            "usage": self.usage.model_dump(mode="json"),
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> RunCounts:
        """The counts `to_json` wrote.

        Raises:
            pydantic.ValidationError: ``usage`` is not a `Usage`.
            KeyError, TypeError, ValueError: a count is missing or not an integer.
        """
        return cls(
            turns=int(data["turns"]),
            requests=int(data["requests"]),
            tool_calls=int(data["tool_calls"]),
            usage=Usage.model_validate(data.get("usage") or {}),
        )


@dataclass(frozen=True, slots=True)
class UsageLimits:
    """Budgets for one run (None: no limit).

    Args:
        max_requests: model requests sent (a request retried after a transient failure counts
            once; each request of the default summarizer during compaction counts, as
            pydantic-ai's ``request_limit`` counts every request). Checked before each request:
            a request that would exceed it is not sent (a compaction it stops keeps the history
            as it was, and the run ends ``max_turns``).
        max_input_tokens: input tokens of the run's responses, prompt-cache reads and writes
            included. Checked after each response.
        max_output_tokens: generated tokens. Checked after each response.
        max_total_tokens: input plus output tokens. Checked after each response.
        max_tool_calls: tool calls a batch takes in: each complete call of a response, the
            ones then answered with an error included (an unknown tool, arguments that do
            not validate, a hook's denial). Checked after each response: a batch that would
            take the count past the limit is not run (each of its calls is answered with the
            limit's text). A call that never runs whatever the limit (cut off by the token
            limit or the context window, see `calls_to_run`) is not counted.

    Raises:
        UsageError: a limit is not a non-negative integer.
    """

    max_requests: int | None = None
    max_input_tokens: int | None = None
    max_output_tokens: int | None = None
    max_total_tokens: int | None = None
    max_tool_calls: int | None = None

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if value is not None and (
                isinstance(value, bool) or not isinstance(value, int) or value < 0
            ):
                raise UsageError(
                    f"UsageLimits({f.name}=...) must be a non-negative integer or None, got "
                    f"{value!r}"
                )

    def token_hit(self, usage: Usage) -> LimitHit | None:
        """The first token limit ``usage`` exceeds, if any."""
        input_tokens = reported_context(usage)  # input + cache read + cache write
        for name, used in (
            ("max_input_tokens", input_tokens),
            ("max_output_tokens", usage.output_tokens),
            ("max_total_tokens", input_tokens + usage.output_tokens),
        ):
            value = getattr(self, name)
            if value is not None and used > value:
                return LimitHit(name, value, used)
        return None

    def request_hit(self, requests: int, usage: Usage) -> LimitHit | None:
        """The limit that keeps the next request from being sent, if any: ``max_requests``
        reached, or a token limit already exceeded."""
        if self.max_requests is not None and requests + 1 > self.max_requests:
            return LimitHit("max_requests", self.max_requests, requests, 1)
        return self.token_hit(usage)

    def calls_hit(self, tool_calls: int, usage: Usage, wanted: int) -> LimitHit | None:
        """The limit that keeps a batch of ``wanted`` calls from running, if any: a token limit
        already exceeded, or ``max_tool_calls`` that the batch would exceed."""
        hit = self.token_hit(usage)
        if hit is not None:
            return hit
        if self.max_tool_calls is not None and tool_calls + wanted > self.max_tool_calls:
            return LimitHit("max_tool_calls", self.max_tool_calls, tool_calls, wanted)
        return None


def calls_to_run(calls: Sequence[ToolCallBlock]) -> int:
    """How many of a response's tool ``calls`` count toward ``max_tool_calls``: those the batch
    takes in, every complete call (one then answered with an error, for an unknown tool, say,
    included). A call cut off by the token limit (``truncated``) is answered as not
    run (its arguments are incomplete), so it is not counted; nor are the calls of a response
    cut off by the context window, which are all answered as not run (the caller passes none).
    """
    count = 0
    for call in calls:  # (a loop: see `_messages`)
        if not call.truncated:
            count += 1
    return count
