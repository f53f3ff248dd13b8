"""The oracle's sub-agent: the ``delegate`` tool, a child `Agent` turned into a tool with
`Agent.as_tool`, playing a scripted run of its own per call (`Child`), and what the rules say
that run does (`predict_child`).

The rules come from ``Agent.as_tool``'s docstring and ``docs/guides/subagents.md``: each call
runs the child on a fresh history with its own ``max_turns``; ``done`` gives its final text,
any other ending an error result ``Sub-agent 'delegate' ended in state '<state>': <why>``; the
child's counts start from the parent's and are checked against the parent's `UsageLimits`
(the result names the parent's limit when the parent's next request check would stop it);
what it used is added to the parent's counts when the call ends; the parent's abort aborts it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

# Public names only (the engine's internals may change under it): the oracle sees the loop as a
# user does.
from ... import Agent, AssistantMessage, Tool, UserMessage
from ...models import ModelRequest, ScriptedModel, StreamEvent
from .scenario import Child, Limits
from .texts import INPUT_TOKENS, OUTPUT_TOKENS
from .tools import call_block, job, tag_of

DELEGATE = "delegate"
"""The sub-agent tool's name."""
CHILD_PREFIX = "k"
"""The first letter of a child's tool-call ids (``k<parent call id>_<n>``, e.g. ``kr11_1``)."""
CHILD_GRACE_SECONDS = 1.0
"""The child agent's ``abort_grace_seconds``: a child tool that stops on the abort gets to."""

ABORTED_CHILD = f"Sub-agent {DELEGATE!r} ended in state 'aborted': aborted by the oracle scenario"
"""The result of a call whose child run the parent's abort (its reason) reached."""
Hit = tuple[str, int, int, int]
"""A usage limit reached: (name, value, used, wanted)."""


def child_call_id(tag: str, n: int) -> str:
    """The id of the ``n``-th call of the child run a parent call with text ``tag`` started."""
    return f"{CHILD_PREFIX}{tag.removeprefix('out-')}_{n}"


# -- the limits, as `UsageLimits` words them --------------------------------------------------


def token_hit(limits: Limits | None, inp: int, out: int) -> Hit | None:
    """A token limit exceeded (used > value), counted after each response."""
    if limits is None:
        return None
    for name, used in (("max_output_tokens", out), ("max_total_tokens", inp + out)):
        value = getattr(limits, name)
        if value is not None and used > value:
            return name, value, used, 0
    return None


def request_hit(limits: Limits | None, requests: int, inp: int, out: int) -> Hit | None:
    """Before a request: ``max_requests`` reached (one more wanted), or a token limit exceeded."""
    if (
        limits is not None
        and limits.max_requests is not None
        and requests + 1 > limits.max_requests
    ):
        return "max_requests", limits.max_requests, requests, 1
    return token_hit(limits, inp, out)


def calls_hit(
    limits: Limits | None, tool_calls: int, wanted: int, inp: int, out: int
) -> Hit | None:
    """Before a batch: a token limit exceeded, or the batch would cross ``max_tool_calls``."""
    hit = token_hit(limits, inp, out)
    if hit is not None or limits is None or limits.max_tool_calls is None:
        return hit
    if tool_calls + wanted > limits.max_tool_calls:
        return "max_tool_calls", limits.max_tool_calls, tool_calls, wanted
    return None


# -- the prediction ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ChildOutcome:
    """What one child run does, undisturbed.

    Attributes:
        state: ``done``, ``failed`` (a final provider error) or ``max_turns`` (its own cap or
            a usage limit).
        turns: its turns.
        requests, tool_calls, input_tokens, output_tokens: the tree's counts when it ends
            (the parent's at the call's start plus the child's).
        tool_starts: how many of its calls' tools start.
        hit: the usage limit that stopped it, None for none.
        parent_hit: the parent's limit named in the call's result: the one that stopped the
            child (any kind), else the one its counts reach at the parent's next request
            check; None for none.
    """

    state: str
    turns: int
    requests: int
    tool_calls: int
    input_tokens: int
    output_tokens: int
    tool_starts: int
    hit: Hit | None = None
    parent_hit: Hit | None = None


def predict_child(
    child: Child, limits: Limits | None, counts: tuple[int, int, int, int], *, usage: bool
) -> ChildOutcome:
    """The child run a ``delegate`` call starts when the parent's counts are ``counts``
    (requests, tool calls, input and output tokens); ``usage``: each response reports
    ``INPUT_TOKENS`` and ``OUTPUT_TOKENS``."""
    requests, tool_calls, inp, out = counts
    turns = starts = 0
    state, hit = "failed", None  # a script that runs out fails the request
    for step in child.steps:
        hit = request_hit(limits, requests, inp, out)
        if hit is not None:
            state = "max_turns"
            break
        requests += 1
        if step.kind == "invalid_request":
            state = "failed"
            break
        turns += 1
        if usage:
            inp, out = inp + INPUT_TOKENS, out + OUTPUT_TOKENS
        if not step.calls:
            state = "done"
            break
        hit = calls_hit(limits, tool_calls, len(step.calls), inp, out)
        if hit is not None:
            state = "max_turns"
            break
        tool_calls += len(step.calls)
        starts += len(step.calls)
        if turns >= child.max_turns:
            state = "max_turns"
            break
    # The limits here are the parent's (the child's own are none): a limit that stopped the child
    # is the parent's, named in the call's result whatever its kind; otherwise the one its
    # counts reach at the parent's next request check.
    parent_hit = hit if hit is not None else request_hit(limits, requests, inp, out)
    return ChildOutcome(state, turns, requests, tool_calls, inp, out, starts, hit, parent_hit)


def child_kind(outcome: ChildOutcome, tag: str) -> str:
    """The result kind of the call: ``ok[<tag>]`` (the child's final text is the call's tag)
    or ``child_<state>``."""
    return f"ok[{tag}]" if outcome.state == "done" else f"child_{outcome.state}"


def child_fragments(outcome: ChildOutcome) -> tuple[list[str], list[str]]:
    """What an error result of this child run must say (its state and why, where the limit
    is the parent's), and what it must not (a parent's limit that is not reached)."""
    if outcome.state == "done":
        return [], []
    head = f"Sub-agent {DELEGATE!r} ended in state {outcome.state!r}: "
    must = [head]
    if outcome.state == "failed":
        must.append("Model request failed (invalid_request_error)")
    elif outcome.hit is not None:
        name, value = outcome.hit[:2]
        must.append(f"Stopped after {outcome.turns} turn(s): the usage limit {name}={value}")
    else:
        must.append(f"Stopped after {outcome.turns} turn(s): the max_turns limit")
    if outcome.parent_hit is None:
        return must, ["the parent run's limit"]
    name, value = outcome.parent_hit[:2]
    must.append(f"(the parent run's limit: the usage limit {name}={value} was reached")
    must.append("; it stops the parent too)")
    return must, []


# -- the child agent --------------------------------------------------------------------------


class ChildModel:
    """The child's `Model`: stateless, so every call's run plays `Child.steps` from the start.
    The step is the number of responses in the request's history; the prompt (the parent
    call's text, ``out-<id>``) names the ids of its calls and is its final answer."""

    def __init__(self, child: Child, *, usage: bool) -> None:
        self.child = child
        self.usage = usage

    @property
    def name(self) -> str:
        """The model name reported."""
        return "oracle-child"

    def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        """Play the step the request's history has reached."""
        messages = request.messages
        tag = next((m.text for m in messages if isinstance(m, UserMessage)), "out-x")
        index = sum(isinstance(m, AssistantMessage) for m in messages)
        steps = self.child.steps
        rendered = [self._render(index, tag)] if index < len(steps) else []
        return ScriptedModel(rendered, record_requests=False).stream(request)

    def _render(self, index: int, tag: str) -> dict[str, Any]:
        step = self.child.steps[index]
        if step.kind == "invalid_request":
            return {"error": {"type": "invalid_request_error", "message": "scripted invalid"}}
        response: dict[str, Any]
        if not step.calls:
            response = {"content": [{"type": "text", "text": tag}], "stop_reason": "end_turn"}
        else:
            before = sum(len(s.calls) for s in self.child.steps[:index])
            content: list[dict[str, Any]] = [{"type": "text", "text": f"child step {index + 1}"}]
            for n, call in enumerate(step.calls, before + 1):
                content.append(call_block(call, child_call_id(tag, n)))
            response = {"content": content, "stop_reason": "tool_use"}
        if self.usage:
            response["usage"] = {"input_tokens": INPUT_TOKENS, "output_tokens": OUTPUT_TOKENS}
        return response


def delegate_tool(child: Child, *, usage: bool) -> Tool:
    """The ``delegate`` tool: a fresh child `Agent` (the oracle's ``job`` tool, its own
    ``max_turns``, no hooks) as a tool (`Agent.as_tool`)."""
    agent = Agent(
        ChildModel(child, usage=usage),
        tools=[job],
        max_turns=child.max_turns,
        model_retries=0,
        abort_grace_seconds=CHILD_GRACE_SECONDS,
    )
    return agent.as_tool(DELEGATE, "Hand a task to the oracle's sub-agent.")


def delegate_tag(call_id: str) -> str:
    """The prompt of a ``delegate`` call (its ``out-<id>`` text)."""
    return tag_of(call_id)
