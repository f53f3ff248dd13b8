"""Add a budget guard and an audit callback to the loop's transitions, then property-test them with
the kit: random scripts, tool failures, aborts and queued input, invariants 1-6 after every step.

Run: python examples/property_test_hooks.py   (or point pytest at it: it collects TestMyHooks)
"""

from statemachine_agent import State, TransitionSpec
from statemachine_agent.testing import agent_state_machine

audit: list[int] = []


def over_budget(data):  # a guard: plain function of the loop's data; two turns per run
    return data.turns >= 2


def build(kit):  # the kit passes its model, tools and tool-execution mode; add your hooks
    agent = kit.agent()
    agent.machine.add_transition(
        TransitionSpec(
            "tools_finished",
            (State.EXECUTING_TOOLS,),
            State.MAX_TURNS,
            (over_budget,),
            before="turn_limit",
        )
    )
    agent.machine.on_enter(State.MAX_TURNS, lambda data: audit.append(data.turns))
    return agent


TestMyHooks = agent_state_machine(build).TestCase

if __name__ == "__main__":
    from hypothesis.stateful import run_state_machine_as_test

    run_state_machine_as_test(agent_state_machine(build))
    print(f"invariants held; the budget ended {len(audit)} run(s)")
