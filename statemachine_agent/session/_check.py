"""Validating a session log: every problem at once, each naming its line (or message index)."""

from __future__ import annotations

import os

from .._machine import State
from .._protocol import find_violations, with_open_batch
from .._states import RUN_STOPS
from ._read import SessionData, read_session

_IN_RUN = {State.AWAITING_MODEL.value, State.EXECUTING_TOOLS.value}


def check_session(path: str | os.PathLike[str]) -> tuple[SessionData, list[str]]:
    """Read a log (leniently) and list every violation.

    Checked: unreadable lines (before the end, and a torn last line), the header, results that
    answer no logged call or contradict an earlier one, unknown record types, calls with no
    recorded result, the rebuilt history against the tool-use protocol's rules 1-5, the state changes
    chaining up (each leaves the state the previous one entered), runs pairing up and each run
    ending in the state the machine was in (invariant 5).

    Returns:
        The `SessionData` and the violations (empty for a clean log).

    Raises:
        AgentError: the file is not a session log, or a newer format version.
    """
    data = read_session(path, strict=False)
    problems = [f"line {n}: unreadable: {why}" for n, why in data.corrupt]
    problems += [
        f"line {n}: unreadable at the end of the log (a crash mid-write; dropped on resume): {why}"
        for n, why in data.torn_tail
    ]
    if data.header is None and data.records:
        problems.append("the log has no header")
    problems += data.notes
    for repair in data.repairs:
        problems.append(
            f"call {repair.tool_call_id!r} ({repair.tool_name}) has no recorded result (the "
            "process died before it finished; resume answers it with an error result)"
        )
    messages = with_open_batch(
        data.messages, data.pending_results, {call.id for call in data.pending}
    )
    problems += [f"history {p}" for p in find_violations(messages)]
    problems += _check_states_and_runs(data)
    problems += _check_children(data)
    return data, problems


def _check_children(data: SessionData) -> list[str]:
    """The problems of each sub-agent run logged inline (`SessionData.children`), each named
    by the call that ran it: its history against the protocol, its states and runs."""
    problems: list[str] = []
    for call_id, child in data.children.items():
        where = f"sub-agent run of call {call_id!r}:"
        problems += [f"{where} {note}" for note in child.notes]
        for repair in child.repairs:
            problems.append(
                f"{where} call {repair.tool_call_id!r} ({repair.tool_name}) has no recorded "
                "result (the process died before it finished)"
            )
        problems += [f"{where} history {p}" for p in find_violations(child.messages)]
        problems += [f"{where} {p}" for p in _check_states_and_runs(child)]
        problems += [f"{where} {p}" for p in _check_children(child)]
    return problems


def _check_states_and_runs(data: SessionData) -> list[str]:
    problems: list[str] = []
    current: str | None = None
    run_line: int | None = None
    for record in data.records:
        body = record.body
        if record.type == "state":
            source, dest = body.get("source"), body.get("dest")
            if current is not None and source != current:
                problems.append(
                    f"line {record.line}: a state change from {source!r}, but the state was "
                    f"{current!r}"
                )
            if run_line is None and dest in _IN_RUN and body.get("trigger") != "start":
                problems.append(f"line {record.line}: state {dest!r} outside a run")
            current = str(dest)
        elif record.type == "run_start":
            if run_line is not None:
                problems.append(
                    f"line {record.line}: a run started before the run of line {run_line} ended"
                )
            run_line = record.line
        elif record.type == "run_end":
            if run_line is None:
                problems.append(f"line {record.line}: a run ended that never started")
            state = body.get("state")
            if state not in {s.value for s in RUN_STOPS}:
                problems.append(f"line {record.line}: a run ended in non-terminal state {state!r}")
            elif current is not None and state != current:
                problems.append(
                    f"line {record.line}: the run ended in {state!r} but the machine was in "
                    f"{current!r}"
                )
            run_line = None
    if run_line is not None:
        problems.append(f"line {run_line}: {_unended_run(data)}")
    return problems


def _unended_run(data: SessionData) -> str:
    """What resume does with a run whose end was never logged: the same rule as
    `SessionLog.open`, which writes the end (and, mid-run, the state change) to the log."""
    if data.state in RUN_STOPS:
        # The machine reached a terminal state; only the run's end line is missing.
        state = data.state.value
        return (
            f"the last run never logged its end (the process died after the run ended in "
            f"{state!r}; resume records its end as {state!r})"
        )
    return "the last run never ended (the process died during it; resume records it as aborted)"
