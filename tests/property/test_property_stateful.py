"""The stateful kit on the library itself: a plain agent and agents with correct hooks of every
kind (issue 5, deliverable 6)."""

from __future__ import annotations

import pytest

from statemachine_agent import (
    Agent,
    Allow,
    Deny,
    LoopData,
    State,
    ToolCallInfo,
    ToolResultMessage,
    TransitionSpec,
    TurnInfo,
)
from statemachine_agent.testing import AgentKit, Declared, agent_state_machine

# A hypothesis search (and shrink) is CPU bound: seconds alone, minutes on a loaded 2-core
# machine (it timed out at 120 s with two suites running beside other work). The timeout only
# catches a hang; no behaviour here depends on time.
pytestmark = pytest.mark.timeout(900)


def plain(kit: AgentKit) -> Agent:
    return kit.agent()


def with_hooks(kit: AgentKit) -> Agent:
    def before(info: ToolCallInfo) -> Allow | None:
        # Rewrite lookups to one key (arguments are validated again by the engine).
        return Allow({"key": "a"}) if info.tool.name == "lookup" else None

    def keep_going(info: TurnInfo) -> bool:
        return info.turn < 3

    def quiet_guard(data: LoopData) -> bool:
        return data.continuations < 2

    agent = kit.agent(before_tool_call=before, should_continue=keep_going, max_turns=4)
    agent.machine.add_guard("model_replied", State.AWAITING_MODEL, quiet_guard)
    agent.machine.on_exit(State.EXECUTING_TOOLS, lambda data: None)
    return agent


def with_added_transition(kit: AgentKit) -> Agent:
    def refuse_unknown_stop(data: LoopData) -> bool:
        reason = None if data.response is None else data.response.stop_reason
        return reason == "brand_new_reason" and not data.response.tool_calls  # type: ignore[union-attr]

    agent = kit.agent()
    agent.machine.add_transition(
        TransitionSpec("model_replied", (State.AWAITING_MODEL,), State.DONE, (refuse_unknown_stop,))
    )
    return agent


def with_declared_hooks(kit: AgentKit) -> Agent:
    def no_writes(info: ToolCallInfo) -> Deny | None:
        return Deny("writes are not allowed here") if info.tool.name == "write" else None

    def audit(info: ToolCallInfo, result: ToolResultMessage) -> None:
        return None  # keeps every result

    return kit.agent(before_tool_call=no_writes, after_tool_call=audit, max_turns=3)


TestPlainAgent = agent_state_machine(plain, declared=Declared(), name="PlainAgent").TestCase
TestAgentWithDeclaredHooks = agent_state_machine(
    with_declared_hooks,
    declared=Declared(before=lambda name, arguments: "deny" if name == "write" else "allow"),
    name="AgentWithDeclaredHooks",
).TestCase
TestAgentWithHooks = agent_state_machine(with_hooks, name="AgentWithHooks").TestCase
TestAgentWithAddedTransition = agent_state_machine(
    with_added_transition, name="AgentWithAddedTransition"
).TestCase
