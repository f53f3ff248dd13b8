"""Hypothesis strategies for agent runs; compose them in your own tests.

Model responses are Anthropic Messages API dicts, the shape `ScriptedModel` plays back. Tool calls
name the kit's tools (``act``, ``lookup``; see `statemachine_agent.testing.KIT_TOOLS`) or unknown
ones. The ``act`` tool does what its arguments say (``{"behaviour": "raise"}``), so a shrunk failing
script reads as what happened: which call raised, slept, ignored the abort or was denied.

Building blocks: `text_blocks`, `thinking_blocks`, `provider_blocks`, `tool_behaviours`,
`tool_arguments`, `tool_use_blocks`, `stop_reasons`, `responses`, `error_steps`, `scripts`,
`abort_points`, `queued_inputs`, `delivery_modes`, `histories`, `final_results` (typed results),
`deferring_responses`, `decisions`; for the oracle (defined in ``_scenario_strategies``):
`oracle_calls`, `oracle_steps`, `oracle_anchors`, `oracle_inputs`, `oracle_runs`,
`oracle_limits`, `approval_scenarios`, `child_scripts`, `subagent_scenarios`, `scenarios`
(`FAMILIES` lists the scenario families).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from hypothesis import strategies as st
from pydantic import BaseModel

from .._messages import (
    AssistantMessage,
    Message,
    StopReason,
    TextBlock,
    ToolCallBlock,
    ToolResultMessage,
    UserMessage,
)
from ._oracle import (
    AfterKind,
    Anchor,
    ArgsKind,
    BeforeKind,
    BehaviourName,
    Call,
    Child,
    Cut,
    DecisionKind,
    Input,
    Limits,
    RunSpec,
    Scenario,
    Step,
    StepKind,
    ToolName,
)
from ._scenario_strategies import (
    DELIVERY_MODES,
    FAMILIES,
    DeliveryMode,
    approval_scenarios,
    child_scripts,
    delivery_modes,
    oracle_anchors,
    oracle_calls,
    oracle_inputs,
    oracle_limits,
    oracle_runs,
    oracle_steps,
    scenarios,
    subagent_scenarios,
)

# The oracle's scenario types and strategies are public here too (they live in _oracle and
# _scenario_strategies).
__all__ = [
    "API_STOP_REASONS",
    "BEHAVIOURS",
    "DELIVERY_MODES",
    "FAMILIES",
    "KNOWN_TOOLS",
    "UNKNOWN_TOOLS",
    "AbortPoint",
    "AfterKind",
    "Anchor",
    "ArgsKind",
    "BeforeKind",
    "Behaviour",
    "BehaviourName",
    "Call",
    "Child",
    "Cut",
    "DecisionKind",
    "DeliveryMode",
    "Input",
    "Limits",
    "QueuedInput",
    "RunSpec",
    "Scenario",
    "Step",
    "StepKind",
    "ToolName",
    "abort_points",
    "approval_scenarios",
    "child_scripts",
    "decisions",
    "deferring_responses",
    "delivery_modes",
    "error_steps",
    "final_results",
    "histories",
    "oracle_anchors",
    "oracle_calls",
    "oracle_inputs",
    "oracle_limits",
    "oracle_runs",
    "oracle_steps",
    "provider_blocks",
    "queued_inputs",
    "responses",
    "scenarios",
    "scripts",
    "stop_reasons",
    "subagent_scenarios",
    "text_blocks",
    "texts",
    "thinking_blocks",
    "tool_arguments",
    "tool_behaviours",
    "tool_use_blocks",
]


Behaviour = Literal[
    "return",
    "raise",
    "tool_error",
    "sleep",
    "ignore_abort",
    "deny",
    "deny_stop",
    "finish",
    "defer",
]
BEHAVIOURS: tuple[Behaviour, ...] = (
    "return",
    "raise",
    "tool_error",
    "sleep",
    "ignore_abort",
    "deny",
    "deny_stop",
    "finish",
)
"""What a call of the kit's ``act`` tool does: return its text, raise an exception, raise a
`ToolError`, sleep (cooperatively stopping on abort), sleep ignoring the abort, be denied by the kit's
``before_tool_call`` hook, be denied with ``terminate=True``, return its text as a result marked
``terminate=True`` (the run ends ``done`` with it)."""

KNOWN_TOOLS = ("act", "lookup")
UNKNOWN_TOOLS = ("no_such_tool", "act_v2", "Lookup")

API_STOP_REASONS: tuple[str, ...] = tuple(
    r.value for r in StopReason if r not in (StopReason.ABORTED, StopReason.ERROR)
)
"""The stop reasons a provider sends (``aborted`` and ``error`` are recorded by the engine only)."""


@dataclass(frozen=True, slots=True)
class AbortPoint:
    """Stop the run when its ``after_events``-th event is emitted.

    Attributes:
        after_events: 1 for the run's first event (``run_start``), and so on; a point past the
            run's last event never fires.
        how: ``"abort"`` calls ``agent.abort()``; ``"cancel"`` cancels the task running the agent.
    """

    after_events: int
    how: Literal["abort", "cancel"] = "abort"


@dataclass(frozen=True, slots=True)
class QueuedInput:
    """Queue user input when the run's ``after_events``-th event is emitted.

    Attributes:
        after_events: as in `AbortPoint`; 0 queues it before the run starts.
        kind: ``"steer"`` (``agent.steer``) or ``"follow_up"`` (``agent.follow_up``).
        text: the message.
    """

    after_events: int
    kind: Literal["steer", "follow_up"]
    text: str


_WORDS = st.sampled_from(["ok", "done", "hello", "the file", "42", "résumé", "a\nb", "日本"])


def texts(*, blank: bool = True) -> st.SearchStrategy[str]:
    """Short texts; with ``blank``, also empty and whitespace-only ones (the engine must drop
    them before any request)."""
    words = st.lists(_WORDS, min_size=1, max_size=3).map(" ".join)
    return st.one_of(words, st.sampled_from(["", " ", "\n\t"])) if blank else words


def text_blocks(*, blank: bool = True) -> st.SearchStrategy[dict[str, Any]]:
    """``{"type": "text", "text": ...}``."""
    return texts(blank=blank).map(lambda t: {"type": "text", "text": t})


def thinking_blocks() -> st.SearchStrategy[dict[str, Any]]:
    """``{"type": "thinking", "thinking": ..., "signature": ...}``."""
    return texts(blank=False).map(
        lambda t: {"type": "thinking", "thinking": t, "signature": "sig-" + str(len(t))}
    )


def provider_blocks() -> st.SearchStrategy[dict[str, Any]]:
    """A block type the engine does not interpret (kept verbatim and sent back)."""
    return st.just({"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search"})


def tool_behaviours() -> st.SearchStrategy[dict[str, Any]]:
    """Valid arguments of the kit's ``act`` tool: a `Behaviour`, a sleep of 0-4 ms, a text."""
    return st.builds(
        lambda behaviour, ms, text: {"behaviour": behaviour, "seconds": ms / 1000, "text": text},
        st.sampled_from(BEHAVIOURS),
        st.integers(0, 4),
        texts(blank=False),
    )


def tool_arguments(name: str = "act") -> st.SearchStrategy[Any]:
    """The ``input`` of a ``tool_use`` block: valid for the kit's tools (most of the time), an
    object that fails validation, a string of raw JSON text that does not parse (as a stream cut
    short would leave it), or a JSON value that is not an object."""
    valid: st.SearchStrategy[Any] = (
        tool_behaviours()
        if name == "act"
        else st.sampled_from(["a", "b"]).map(lambda key: {"key": key})
    )
    invalid_object = st.sampled_from([{}, {"behaviour": "explode"}, {"key": 3, "extra": True}])
    unparsable = st.sampled_from(['{"behaviour": "ret', "{'a': 1}", "{,}", "[1, 2"])
    non_object = st.sampled_from([None, [1, 2], 7, "[1]", "true", '"text"'])
    # Mostly valid, so that tools really run; the other kinds one time in ten each.
    return st.integers(0, 9).flatmap(
        lambda k: valid if k < 7 else (invalid_object, unparsable, non_object)[k - 7]
    )


@st.composite
def tool_use_blocks(draw: st.DrawFn, call_id: str) -> dict[str, Any]:
    """A ``tool_use`` block with id ``call_id``, to a known or an unknown tool."""
    # Built in a composite (not a lambda) so that a failing example prints as plain data.
    name = draw(st.sampled_from(["act", "act", "act", "act", "lookup", "lookup", *UNKNOWN_TOOLS]))
    return {"type": "tool_use", "id": call_id, "name": name, "input": draw(tool_arguments(name))}


def stop_reasons() -> st.SearchStrategy[str | None]:
    """Every provider stop reason, an unknown future one, and a missing one."""
    return st.one_of(st.sampled_from(API_STOP_REASONS), st.sampled_from(["brand_new_reason", None]))


@st.composite
def responses(
    draw: st.DrawFn,
    *,
    call_ids: Sequence[str] | None = None,
    max_tool_calls: int = 4,
    min_tool_calls: int = 0,
) -> dict[str, Any]:
    """An assistant response: 0-2 text or thinking blocks, then ``min_tool_calls``-
    ``max_tool_calls`` tool calls (with text sometimes between them), any stop reason.

    Args:
        call_ids: ids for the tool calls (their number caps the calls); default ``call_1``...
        max_tool_calls: the most tool calls.
        min_tool_calls: the fewest tool calls (at most the number of ids).
    """
    ids = list(call_ids) if call_ids is not None else [f"call_{i}" for i in range(1, 9)]
    most = min(max_tool_calls, len(ids))
    n_calls = draw(st.integers(min(min_tool_calls, most), most))
    content: list[dict[str, Any]] = draw(
        st.lists(st.one_of(text_blocks(), thinking_blocks(), provider_blocks()), max_size=2)
    )
    for call_id in ids[:n_calls]:
        content.append(draw(tool_use_blocks(call_id)))
        if draw(st.integers(0, 5)) == 0:
            content.append(draw(text_blocks()))
    natural = "tool_use" if n_calls else "end_turn"
    stop = draw(stop_reasons()) if draw(st.integers(0, 2)) == 0 else natural
    response: dict[str, Any] = {"content": content, "stop_reason": stop}
    if stop == StopReason.REFUSAL:
        response["stop_details"] = {"type": "refusal", "category": "cyber", "explanation": "no"}
    response["usage"] = {"input_tokens": draw(st.integers(0, 50)), "output_tokens": len(content)}
    return response


def error_steps() -> st.SearchStrategy[dict[str, Any]]:
    """A recorded provider error: retryable (overload, API error) or final (invalid request,
    authentication)."""
    return st.sampled_from(
        ["overloaded_error", "api_error", "invalid_request_error", "authentication_error"]
    ).map(lambda kind: {"error": {"type": kind, "message": f"scripted {kind}"}})


@st.composite
def scripts(
    draw: st.DrawFn,
    *,
    max_responses: int = 8,
    max_tool_calls: int = 4,
    errors: bool = True,
    delays: bool = True,
    id_prefix: str = "call",
    working_start: bool = False,
) -> list[dict[str, Any]]:
    """A `ScriptedModel` script of 1-``max_responses`` steps. Tool-call ids are unique across it.

    The run it drives ends: in ``done`` on a final answer, or in ``failed`` once the script is
    exhausted (a valid terminal state). Steps may be errors (``errors``) and may wait 1 ms before
    answering (``delays``), so aborts land mid-request too. With ``working_start`` the first step
    is a response with at least one tool call (the model starts by working), so a search reaches
    the calls of a run (a sub-agent's, say) in fewer examples.
    """
    counter = itertools.count(1)
    steps: list[dict[str, Any]] = []
    for index in range(draw(st.integers(1, max_responses))):
        working = working_start and index == 0
        if errors and not working and draw(st.integers(0, 9)) == 0:
            step = dict(draw(error_steps()))
        else:
            ids = [f"{id_prefix}_{next(counter)}" for _ in range(max_tool_calls)]
            step = draw(
                responses(call_ids=ids, max_tool_calls=max_tool_calls, min_tool_calls=int(working))
            )
        if delays and draw(st.booleans()):
            step["delay_seconds"] = 0.001
        steps.append(step)
    return steps


def abort_points(max_events: int = 60) -> st.SearchStrategy[AbortPoint | None]:
    """No abort, or an abort (or task cancellation) at one of the run's first ``max_events``
    events."""
    point = st.builds(
        AbortPoint, st.integers(1, max_events), st.sampled_from(["abort", "abort", "cancel"])
    )
    return st.one_of(st.none(), point)


def queued_inputs(max_events: int = 60, max_size: int = 2) -> st.SearchStrategy[list[QueuedInput]]:
    """Steering and follow-up messages queued before the run (``after_events=0``) or while it
    runs."""
    return st.lists(
        st.builds(
            QueuedInput,
            st.integers(0, max_events),
            st.sampled_from(["steer", "follow_up"]),
            texts(blank=False),
        ),
        max_size=max_size,
    )


@st.composite
def histories(draw: st.DrawFn, *, max_turns: int = 3, id_prefix: str = "hist") -> list[Message]:
    """A valid history (it passes `assert_valid_history`): prompts, responses with 0-3 tool calls
    each answered in order, final answers. It ends on the user side or with a final answer."""
    counter = itertools.count(1)
    messages: list[Message] = [UserMessage(draw(texts(blank=False)))]
    for _ in range(draw(st.integers(0, max_turns))):
        calls = [
            ToolCallBlock(
                id=f"{id_prefix}_{next(counter)}", name=draw(st.sampled_from(KNOWN_TOOLS)), input={}
            )
            for _ in range(draw(st.integers(0, 3)))
        ]
        text = [TextBlock(text=draw(texts(blank=False)))]
        messages.append(
            AssistantMessage(
                content=[*text, *calls], stop_reason="tool_use" if calls else "end_turn"
            )
        )
        for call in calls:
            messages.append(
                ToolResultMessage(
                    tool_call_id=call.id,
                    tool_name=call.name,
                    content=[TextBlock(text=draw(texts(blank=False)))],
                    is_error=draw(st.booleans()),
                )
            )
        if not calls or draw(st.booleans()):
            messages.append(UserMessage(draw(texts(blank=False))))
    return messages


def deferring_responses() -> st.SearchStrategy[dict[str, Any]]:
    """A response whose batch holds one or two calls the kit defers (``{"behaviour": "defer"}``:
    the run stops in ``awaiting_approval``) among other calls of the kit's ``act`` tool."""
    deferred = st.just({"behaviour": "defer", "text": "needs a person"})
    other = tool_behaviours()
    calls = st.lists(st.one_of(deferred, other), min_size=1, max_size=3).filter(
        lambda items: any(item.get("behaviour") == "defer" for item in items)
    )
    return calls.map(
        lambda items: {
            "content": [
                {"type": "tool_use", "id": f"defer_{i}", "name": "act", "input": item}
                for i, item in enumerate(items)
            ],
            "stop_reason": "tool_use",
        }
    )


def decisions(call_ids: Sequence[str]) -> st.SearchStrategy[dict[str, Any]]:
    """Decisions on some of the pending calls ``call_ids`` (at least one): approve, approve with
    edited arguments (the ``act`` tool returning a text), deny, or deny and end the run."""
    from .._hooks import Approve, Deny

    one = st.sampled_from(
        [
            Approve(),
            Approve(arguments={"behaviour": "return", "text": "edited by a person"}),
            Deny("a person said no"),
            Deny("a person stopped the run", terminate=True),
        ]
    )
    return st.lists(st.sampled_from(list(call_ids)), min_size=1, unique=True).flatmap(
        lambda chosen: st.fixed_dictionaries({call_id: one for call_id in chosen})
    )


@st.composite
def final_results(
    draw: st.DrawFn,
    output_type: type[BaseModel],
    *,
    valid: bool | None = None,
    call_id: str = "final",
) -> dict[str, Any]:
    """A response calling the final result tool of ``Agent(output_type=output_type)``: with
    arguments the type accepts (``valid=True``), with arguments it rejects (``valid=False``: a
    required field missing, or one field given a value of the wrong shape), or either (None).
    Valid arguments are built with ``st.builds(output_type)`` (register strategies for field
    types Hypothesis cannot build)."""
    from .._output import OUTPUT_TOOL_NAME

    is_valid = draw(st.booleans()) if valid is None else valid
    instance = draw(st.builds(output_type))
    arguments = instance.model_dump(mode="json")
    if not is_valid:
        required = [name for name, f in output_type.model_fields.items() if f.is_required()]
        name = draw(st.sampled_from(required or list(output_type.model_fields)))
        if draw(st.booleans()) and required:
            arguments.pop(name)
        else:
            arguments[name] = {"not": ["a", "valid", "value"]}
    return {
        "content": [
            {"type": "tool_use", "id": call_id, "name": OUTPUT_TOOL_NAME, "input": arguments}
        ],
        "stop_reason": "tool_use",
    }
