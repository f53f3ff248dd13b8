"""Agents for the durable tests and benchmarks; child processes import this module too (the
test puts this folder on ``PYTHONPATH``). Every model here is a function of the request, as a
real model is: a recovered run asks for the next response with the history it has reached."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

from statemachine_agent import Agent, ToolContext, ToolResultMessage, UsageLimits, tool
from statemachine_agent.models import FunctionModel

FINAL_ANSWER = "Both tools have answered."
FAST_RESULT = "fast done"
SLOW_RESULT = "slow done"


def _append(path: Path, line: str) -> None:
    with path.open("a", encoding="utf-8") as f:
        f.write(line + "\n")
        f.flush()
        os.fsync(f.fileno())


# -- case 1: a batch of fast + slow, killed mid-batch --------------------------------------------


def fast() -> str:
    """Append a line to the side-effect file."""
    _append(Path(os.environ["SMA_SIDE_FILE"]), "fast")
    return FAST_RESULT


def slow() -> str:
    """Append a line to the side-effect file, then take long (SMA_SLOW_SECONDS, default 60)."""
    _append(Path(os.environ["SMA_SIDE_FILE"]), "slow")
    time.sleep(float(os.environ.get("SMA_SLOW_SECONDS", "60")))
    return SLOW_RESULT


def batch_model(messages: list[object], request: object) -> object:
    if not any(isinstance(m, ToolResultMessage) for m in messages):
        return {
            "content": [
                {"type": "tool_use", "id": "call_fast", "name": "fast", "input": {}},
                {"type": "tool_use", "id": "call_slow", "name": "slow", "input": {}},
            ],
            "stop_reason": "tool_use",
        }
    return FINAL_ANSWER


def batch_agent() -> Agent:
    """``fast`` + ``slow`` in one parallel batch; ``slow`` is idempotent when
    SMA_SLOW_IDEMPOTENT=1."""
    idempotent = os.environ.get("SMA_SLOW_IDEMPOTENT") == "1"
    return Agent(
        FunctionModel(batch_model),
        tools=[tool(fast), tool(idempotent=idempotent)(slow)],
    )


# -- case 2 and the benchmarks: N turns, one appending call each ---------------------------------


def append_line(run: str, ctx: ToolContext) -> str:
    """Append this call's id to the run's file in SMA_RUN_DIR."""
    _append(Path(os.environ["SMA_RUN_DIR"]) / f"{run}.txt", ctx.call_id)
    return "appended"


async def turns_model(messages: list[object], request: object) -> object:
    await asyncio.sleep(float(os.environ.get("SMA_MODEL_SECONDS", "0.05")))
    first = messages[0]
    run = first.text  # type: ignore[attr-defined]  # the prompt is the run's name
    done = sum(isinstance(m, ToolResultMessage) for m in messages)
    if done < int(os.environ.get("SMA_TURNS", "3")):
        name = os.environ.get("SMA_TOOL", "append_line")
        return {
            "content": [
                {
                    "type": "tool_use",
                    "id": f"call_{done + 1}",
                    "name": name,
                    "input": {"run": run} if name == "append_line" else {},
                },
            ],
            "stop_reason": "tool_use",
        }
    return f"{run}: finished after {done} calls"


def turns_agent() -> Agent:
    """SMA_TURNS tool turns (default 3), each one ``append_line`` call, then a final answer."""
    return Agent(FunctionModel(turns_model), tools=[tool(append_line)], max_turns=100)


async def noop() -> str:
    """Do nothing."""
    return "ok"


def noop_agent() -> Agent:
    """Like `turns_agent`, each call a no-op (SMA_TOOL=noop): the benchmarks' agent."""
    return Agent(FunctionModel(turns_model), tools=[tool(noop)], max_turns=100)


def idempotent_noop_agent() -> Agent:
    """`noop_agent` with the no-op tool ``@tool(idempotent=True)`` (no ``tool_start`` marker)."""
    return Agent(FunctionModel(turns_model), tools=[tool(idempotent=True)(noop)], max_turns=100)


# -- case 3: a run awaiting approval -------------------------------------------------------------

DEPLOY_CALL = "call_deploy"
CHECK_CALL = "call_check"


def check(target: str) -> str:
    """Check the target (appends a line to the side-effect file); needs no approval."""
    _append(Path(os.environ["SMA_SIDE_FILE"]), f"check {target}")
    return f"{target} is healthy"


def deploy(target: str) -> str:
    """Deploy to the target (appends a line to the side-effect file); needs approval."""
    _append(Path(os.environ["SMA_SIDE_FILE"]), f"deploy {target}")
    return f"deployed to {target}"


def approval_model(messages: list[object], request: object) -> object:
    results = [m for m in messages if isinstance(m, ToolResultMessage)]
    if not results:
        return {
            "content": [
                {
                    "type": "tool_use",
                    "id": CHECK_CALL,
                    "name": "check",
                    "input": {"target": "prod"},
                },
                {
                    "type": "tool_use",
                    "id": DEPLOY_CALL,
                    "name": "deploy",
                    "input": {"target": "prod"},
                },
            ],
            "stop_reason": "tool_use",
        }
    return "Settled: " + "; ".join(f"{m.tool_name}: {m.text}" for m in results)


def approval_agent() -> Agent:
    """``check`` and ``deploy`` in one batch; ``deploy`` requires approval."""
    return Agent(
        FunctionModel(approval_model),
        tools=[tool(check), tool(requires_approval=True)(deploy)],
    )


# -- issue 32, case 1: a run's counts across a restart -------------------------------------------


def limited_approval_model(messages: list[object], request: object) -> object:
    """`approval_model`, each request logged (a ``request`` line in the side-effect file)."""
    _append(Path(os.environ["SMA_SIDE_FILE"]), "request")
    return approval_model(messages, request)


def limited_approval_agent() -> Agent:
    """`approval_agent` with ``UsageLimits(max_requests=1)``: the first request uses it, so once
    ``deploy`` is approved the run stops before a second one."""
    return Agent(
        FunctionModel(limited_approval_model),
        tools=[tool(check), tool(requires_approval=True)(deploy)],
        limits=UsageLimits(max_requests=1),
    )
