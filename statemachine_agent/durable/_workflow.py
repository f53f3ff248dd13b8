"""The run workflow: the ordinary engine driven with a `DurableRun`, waiting durably in
``awaiting_approval`` for decisions sent from any process."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping, Sequence
from typing import Any

from dbos import DBOS

from .._agent import Agent
from .._conversation import as_user as _as_user
from .._errors import UsageError
from .._hooks import Decision, PendingCall
from .._result import RunResult
from .._states import State, Trigger
from . import _abort
from ._codec import decode_decision, encode_pending, encode_result
from ._names import APPROVAL_TIMEOUT_SECONDS, DECISION_TOPIC, PENDING_EVENT, WORKFLOW_NAME
from ._state import process
from ._steps import DurableRun

logger = logging.getLogger("statemachine_agent")


async def drive(
    agent: Agent,
    prompt: str,
    *,
    max_turns: int | None = None,
    approval_timeout_seconds: float = APPROVAL_TIMEOUT_SECONDS,
) -> RunResult:
    """Run ``agent`` on ``prompt`` with a `DurableRun` (inside a workflow: durably), waiting in
    ``awaiting_approval`` for decisions sent with `send_decisions` (see the module docstring).

    Returns:
        The result ``agent.run(decisions=...)`` gives for the last decisions in process, with
        ``new_messages`` and ``usage`` covering the whole run (from the prompt).

    Raises:
        AgentBusyError: the agent is already running.
        UsageError: the prompt is empty.
    """
    user = _as_user(prompt)
    start = len(agent.messages)
    result = await _drive(agent, user, Trigger.START, max_turns=max_turns)
    usage = result.usage
    while result.state is State.AWAITING_APPROVAL:
        message = await _wait_for_decisions(result.pending, approval_timeout_seconds)
        if message is None:  # no decision in time: end as an abort of the waiting run does
            reason = (
                f"No decision came within approval_timeout_seconds={approval_timeout_seconds:g}; "
                "the calls awaiting approval were not run."
            )
            result = await _drive(agent, None, Trigger.ABORT, abort_reason=reason)
        elif "abort" in message:
            result = await _drive(agent, None, Trigger.ABORT, abort_reason=str(message["abort"]))
        else:
            decisions = _applicable(message, result.pending)
            if not decisions:
                continue  # nothing this run can use: wait again
            result = await _drive(agent, None, Trigger.DECIDED, decisions=decisions)
        usage = usage + result.usage
    return dataclasses.replace(result, new_messages=result.messages[start:], usage=usage)


async def _drive(
    agent: Agent,
    user: Any,
    first: str,
    *,
    max_turns: int | None = None,
    decisions: Mapping[str, Decision] | None = None,
    abort_reason: str | None = None,
) -> RunResult:
    """One `DurableRun` from trigger ``first``: ``start`` (with the prompt), ``decided`` (the
    calls awaiting approval, with ``decisions``) or ``abort`` (a waiting run, with
    ``abort_reason``), claimed as ``agent.run()`` claims it."""
    if max_turns is not None and not agent.is_running:
        agent.max_turns = max_turns
    # A continued run keeps counting, as agent.run(decisions=...) does.
    return await agent.claim(
        first, user, decisions=decisions, run_class=DurableRun, abort_reason=abort_reason
    )


async def _wait_for_decisions(
    calls: Sequence[PendingCall], timeout_seconds: float
) -> dict[str, Any] | None:
    """Publish the pending calls and wait durably for a message on `DECISION_TOPIC` (None when
    none came within ``timeout_seconds``)."""
    await DBOS.set_event_async(PENDING_EVENT, [encode_pending(c) for c in calls])
    with _abort.waiting_for_decisions():
        message = await DBOS.recv_async(DECISION_TOPIC, timeout_seconds=timeout_seconds)
    await DBOS.set_event_async(PENDING_EVENT, [])
    if message is None:
        return None
    if not isinstance(message, dict):
        logger.warning("a durable run ignored a message that is not a decision: %r", message)
        return {}
    return message


def _applicable(message: dict[str, Any], calls: Sequence[PendingCall]) -> dict[str, Decision]:
    """The decisions of ``message`` for calls still waiting. A call is decided once: a decision
    for a call already decided (another process was quicker) or unknown is dropped, logged."""
    waiting = {call.id for call in calls}
    decisions: dict[str, Decision] = {}
    for call_id, data in dict(message.get("decisions") or {}).items():
        try:
            decision = decode_decision(data)
        except (KeyError, TypeError, ValueError) as exc:
            logger.warning("a durable run ignored a malformed decision for %s: %s", call_id, exc)
            continue
        if call_id in waiting:
            decisions[call_id] = decision
        else:
            logger.warning(
                "a durable run ignored a decision for %s: no such call is pending", call_id
            )
    return decisions


@DBOS.workflow(name=WORKFLOW_NAME)
async def agent_workflow(
    prompt: str,
    max_turns: int | None = None,
    approval_timeout_seconds: float = APPROVAL_TIMEOUT_SECONDS,
) -> dict[str, Any]:
    """The run workflow: a fresh agent from the worker's factory, driven durably."""
    if process.factory is None:
        raise UsageError("no agent factory: call statemachine_agent.durable.launch() first")
    agent = process.factory()
    workflow_id = DBOS.workflow_id
    if workflow_id is not None:
        _abort.watch(workflow_id)
    try:
        result = await drive(
            agent,
            prompt,
            max_turns=max_turns,
            approval_timeout_seconds=approval_timeout_seconds,
        )
    finally:
        if workflow_id is not None:
            _abort.unwatch(workflow_id)
        if agent.tool_table is not None:  # its MCP servers: stopped with the run
            await agent.tool_table.aclose()
    return encode_result(result)
