"""What a durable run stores and how: step outputs (messages, model outcomes) as JSON text,
pending calls, decisions, and the `RunResult` a workflow returns (JSON data, always picklable)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import BaseModel

from .._errors import UsageError
from .._hooks import Approve, Decision, Deny, PendingCall, check_decisions
from .._limits import LimitHit, RunCounts
from .._messages import HISTORY_ADAPTER, AssistantMessage, Message, Usage
from .._responses import RequestAborted, RequestFailed
from .._result import RunResult
from .._states import State


def dump_message(message: Message) -> str:
    return HISTORY_ADAPTER.dump_json([message]).decode()


def load_message(text: str) -> Message:
    return HISTORY_ADAPTER.validate_json(text)[0]


def encode_outcome(outcome: AssistantMessage | RequestAborted | RequestFailed) -> dict[str, str]:
    if isinstance(outcome, RequestFailed):
        too_long = {"prompt_too_long": "yes"} if outcome.prompt_too_long else {}
        return {"kind": "failed", "error": outcome.message, **too_long}
    if isinstance(outcome, RequestAborted):
        return {"kind": "aborted", "message": dump_message(outcome.partial)}
    return {"kind": "response", "message": dump_message(outcome)}


def decode_outcome(data: dict[str, str]) -> AssistantMessage | RequestAborted | RequestFailed:
    if data["kind"] == "failed":
        return RequestFailed(data["error"], prompt_too_long="prompt_too_long" in data)
    message = load_message(data["message"])
    assert isinstance(message, AssistantMessage)
    return RequestAborted(message) if data["kind"] == "aborted" else message


def encode_pending(call: PendingCall) -> dict[str, Any]:
    return dataclasses.asdict(call)


def decode_pending(data: Sequence[dict[str, Any]] | None) -> tuple[PendingCall, ...]:
    return tuple(PendingCall(**call) for call in data or ())


def encode_decision(decision: Decision) -> dict[str, Any]:
    if isinstance(decision, Approve):
        return {"decision": "approve", "arguments": decision.arguments}
    return {"decision": "deny", "reason": decision.reason, "terminate": decision.terminate}


def decode_decision(data: dict[str, Any]) -> Decision:
    if data["decision"] == "approve":
        return Approve(data["arguments"])
    if data["decision"] == "deny":
        return Deny(str(data["reason"]), bool(data["terminate"]))
    raise ValueError(f"unknown decision {data['decision']!r}")


def encode_result(result: RunResult) -> dict[str, Any]:
    """A `RunResult` as JSON-ready data (what the workflow returns): every field of it.

    Returns:
        A dict with one key per `RunResult` field: ``state``, ``messages`` and
        ``new_messages`` (lists of message dicts), ``turns``, ``usage``, ``stop_reason``,
        ``error``, ``refusal``, ``pending`` (a list of `PendingCall` dicts), ``final_text``,
        ``run_id``, ``output`` (the text answer, or a typed output's JSON: see
        `decode_result`), ``counts`` (`RunCounts.to_json`) and ``limit_exceeded`` (the
        `LimitHit`'s fields, or None).
    """
    output = result.output
    if isinstance(output, BaseModel):
        output = output.model_dump(mode="json")
    limit = result.limit_exceeded
    messages = HISTORY_ADAPTER.dump_python(result.messages, mode="json")
    new = result.new_messages
    start = len(result.messages) - len(new)
    if start >= 0 and all(a is b for a, b in zip(result.messages[start:], new, strict=True)):
        new_messages = messages[start:]  # the history's tail, as a run's result has it: once
    else:
        new_messages = HISTORY_ADAPTER.dump_python(new, mode="json")
    return {
        "state": str(result.state),
        "messages": messages,
        "new_messages": new_messages,
        "turns": result.turns,
        "usage": result.usage.model_dump(mode="json"),
        "stop_reason": result.stop_reason,
        "error": result.error,
        "refusal": result.refusal,
        "pending": [encode_pending(call) for call in result.pending],
        "final_text": result.final_text,
        "run_id": result.run_id,
        "output": output,
        "counts": result.counts.to_json(),
        "limit_exceeded": None if limit is None else dataclasses.asdict(limit),
    }


def decode_result(
    data: Mapping[str, Any], *, output_type: type[BaseModel] | None = None
) -> RunResult:
    """The `RunResult` back from `encode_result`'s data.

    Data written before a field was encoded (a run recorded by an older release) reads back
    with that field's default: no pending calls, no final text, an empty run id, no output, zero
    counts (`RunCounts`), no exceeded limit.

    Args:
        data: what `encode_result` returned.
        output_type: the agent's ``output_type``: a typed output is validated back into it (the
            equal instance). Without it, ``output`` is the output's JSON (a dict); a text answer
            is its text either way.

    Raises:
        KeyError: a field every release encodes (``state``, ``messages``, ...) is missing.
        pydantic.ValidationError: ``output`` does not validate as ``output_type``.
    """
    output = data.get("output")
    if output_type is not None and isinstance(output, dict):
        output = output_type.model_validate(output)
    counts = data.get("counts")
    limit = data.get("limit_exceeded")
    messages = HISTORY_ADAPTER.validate_python(data["messages"])
    new_data = data["new_messages"]
    start = len(messages) - len(new_data)
    if start >= 0 and data["messages"][start:] == new_data:
        new_messages = messages[start:]  # the history's tail (as a run's result has it)
    else:
        new_messages = HISTORY_ADAPTER.validate_python(new_data)
    return RunResult(
        state=State(data["state"]),
        messages=messages,
        new_messages=new_messages,
        turns=data["turns"],
        usage=Usage.model_validate(data["usage"]),
        stop_reason=data["stop_reason"],
        error=data["error"],
        refusal=data["refusal"],
        pending=decode_pending(data.get("pending")),
        final_text=data.get("final_text"),
        run_id=data.get("run_id") or "",
        output=output,
        counts=RunCounts() if counts is None else RunCounts.from_json(counts),
        limit_exceeded=None if limit is None else LimitHit(**limit),
    )


def decision_message(
    run_id: str, calls: Sequence[PendingCall], decisions: Mapping[str, Decision]
) -> dict[str, Any]:
    """``decisions`` as the message a waiting run reads, checked against its pending calls."""
    if not calls:
        raise UsageError(f"run {run_id!r} is not awaiting approval: there is nothing to decide")
    check_decisions([call.id for call in calls], decisions, of=f" of run {run_id!r}")
    return {"decisions": {cid: encode_decision(d) for cid, d in decisions.items()}}
