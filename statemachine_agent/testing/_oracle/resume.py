"""What `Agent.resume` rebuilds from a session log, as the README states it (`predict_resume`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

# Public names only (the engine's internals may change under it): the oracle sees the loop as a
# user does.
from ... import (
    HISTORY_ADAPTER,
)
from .kinds import Token, kind_of_dict, tokens_of


def predict_resumed_turns(lines: Sequence[dict[str, Any]]) -> int:
    """The turns a resumed agent's run continued without a prompt goes on from (the README's
    rules): the last ended run's recorded ``counts``; for a run whose end is not in the log,
    the turns it started from (the previous run's when it was continued without a prompt, else
    0) plus its logged responses that completed a turn (not failed, not cut by an abort)."""
    last = 0
    running: int | None = None
    for line in lines:
        kind = line.get("type")
        if kind == "run_start":
            running = last if line.get("continued") else 0
        elif kind == "run_end":
            counts = line.get("counts")
            if isinstance(counts, dict):
                last = int(counts["turns"])
            elif running is not None:
                last = running
            running = None
        elif kind == "message" and running is not None:
            message = line["message"]
            if message.get("role") == "assistant" and message.get("stop_reason") not in (
                "aborted",
                "error",
            ):
                running += 1
    return running if running is not None else last


def predict_resume(lines: Sequence[dict[str, Any]]) -> tuple[list[Token], str]:
    """What `Agent.resume` rebuilds from the complete lines of a session log (the README's rules):
    messages in logged order; each call's result, logged in completion order, put back right after
    its assistant message in declaration order; a call without a logged result answered "no result
    recorded"; the terminal state the log recorded last, else ``aborted`` for a run that never
    ended (even one cut before its first message).

    Returns:
        (the abstract history, the state).
    """
    items: list[Token] = []
    results: dict[str, str] = {}
    state = "idle"
    open_run = False
    for line in lines:
        kind = line.get("type")
        if kind == "message":
            message = line["message"]
            role = message.get("role")
            if role == "tool_result":
                results.setdefault(message["tool_call_id"], kind_of_dict(message))
            elif role == "assistant":
                ids = tuple(b["id"] for b in message["content"] if b.get("type") == "tool_call")
                items.append(("assistant", str(message.get("stop_reason")), ids))
            else:
                items.append(("user",))
        elif kind == "history":  # the history was replaced (a given history, a compaction)
            items, results = [], {}
            for token in tokens_of(HISTORY_ADAPTER.validate_python(line["messages"])):
                if token[0] == "result":
                    results.setdefault(token[1], token[2])
                else:
                    items.append(token)
        elif kind == "tool_result":
            message = line["message"]
            results.setdefault(message["tool_call_id"], kind_of_dict(message))
        elif kind == "state":
            state = line["dest"]
        elif kind == "run_start":
            open_run = True
        elif kind == "run_end":
            open_run = False
            state = line.get("state", state)
    out: list[Token] = []
    for token in items:
        out.append(token)
        if token[0] == "assistant" and token[1] not in ("aborted", "error"):
            for call_id in token[2]:
                out.append(("result", call_id, results.get(call_id, "no_result")))
    # A crash after the terminal state was recorded keeps that state.
    if state not in ("done", "aborted", "max_turns", "failed") and (open_run or state != "idle"):
        state = "aborted"
    return out, state
