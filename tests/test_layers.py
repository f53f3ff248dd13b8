"""Issue 35, items 2 and 3: the seams that keep the layers apart, by their behaviour. The batch's
public per-call hooks (what a durable batch overrides), the session package's registered support
(how ``Agent(session=...)`` and ``Agent.resume`` reach it), ``SessionCorruptError`` in the session
package, and the table's effect and action names bound by the run layer when a definition is
built."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import statemachine_agent
from statemachine_agent import AbortSignal, Agent, AgentError, Tool, tool
from statemachine_agent._execution import BatchRun
from statemachine_agent._messages import ToolCallBlock, ToolResultMessage
from statemachine_agent.models import ScriptedModel
from statemachine_agent.session import SessionCorruptError, SessionLog


@tool
def double(x: int) -> int:
    """Double x."""
    return 2 * x


class _Recording(BatchRun):
    """A batch that records each call it processes and each tool execution, through the hooks."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.seen: list[str] = []

    async def run_call(self, index: int, call: ToolCallBlock) -> None:
        self.seen.append(f"call {index} {call.id}")
        await super().run_call(index, call)
        self.seen.append(f"done {index}")

    async def execute(self, index: int, tool: Tool, kwargs: dict[str, Any]) -> ToolResultMessage:
        self.seen.append(f"execute {index} {tool.name} {kwargs}")
        return await super().execute(index, tool, kwargs)


def _answer(text: str) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": text}], "stop_reason": "end_turn"}


def _batch(calls: list[ToolCallBlock], mode: str) -> _Recording:
    return _Recording(
        calls,
        {"double": double},
        mode=mode,  # type: ignore[arg-type]
        signal=AbortSignal(),
        abort_grace_seconds=1.0,
        emit=lambda _event: None,
    )


@pytest.mark.parametrize("mode", ["sequential", "parallel"])
async def test_a_batch_subclass_sees_each_call_through_run_call_and_execute(mode: str) -> None:
    calls = [
        ToolCallBlock(id="c1", name="double", input={"x": 2}),
        ToolCallBlock(id="c2", name="double", input={"x": "not a number"}),
        ToolCallBlock(id="c3", name="double", input={"x": 5}),
    ]
    batch = _batch(calls, mode)
    await batch.run()
    assert [c.id for c in batch.calls] == ["c1", "c2", "c3"]
    results = batch.results()
    assert [r.tool_call_id for r in results] == ["c1", "c2", "c3"]
    assert [r.is_error for r in results] == [False, True, False]
    # Every call goes through run_call; only calls whose arguments validate reach execute.
    assert sorted(e for e in batch.seen if e.startswith("call")) == [
        "call 0 c1",
        "call 1 c2",
        "call 2 c3",
    ]
    assert sorted(e for e in batch.seen if e.startswith("execute")) == [
        "execute 0 double {'x': 2}",
        "execute 2 double {'x': 5}",
    ]
    assert sorted(e for e in batch.seen if e.startswith("done")) == ["done 0", "done 1", "done 2"]


async def test_a_run_uses_the_batch_class_hooks_for_its_tool_calls() -> None:
    seen: list[str] = []

    class Batch(_Recording):
        async def execute(
            self, index: int, tool: Tool, kwargs: dict[str, Any]
        ) -> ToolResultMessage:
            seen.append(f"{tool.name} {kwargs}")
            return await super().execute(index, tool, kwargs)

    class Run(statemachine_agent.Run):
        batch_class = Batch

    call = {"type": "tool_use", "id": "toolu_1", "name": "double", "input": {"x": 21}}
    model = ScriptedModel(
        [
            {"content": [call], "stop_reason": "tool_use"},
            {"content": [{"type": "text", "text": "42"}], "stop_reason": "end_turn"},
        ]
    )
    agent = Agent(model, tools=[double])
    result = await agent.claim(None, statemachine_agent.UserMessage("twice 21"), run_class=Run)
    assert result.state == "done"
    assert seen == ["double {'x': 21}"]


def test_session_corrupt_error_lives_in_the_session_package_and_is_an_agent_error() -> None:
    assert SessionCorruptError.__module__.startswith("statemachine_agent.session")
    assert issubclass(SessionCorruptError, AgentError)
    assert "SessionCorruptError" in statemachine_agent.session.__all__


def test_agent_session_and_resume_reach_the_session_package_through_its_registered_support(
    tmp_path: Path,
) -> None:
    from statemachine_agent._session_seam import session_support

    support = session_support()
    assert support.open == SessionLog.open
    path = tmp_path / "run.jsonl"
    agent = Agent(ScriptedModel([_answer("hi")]), session=path)
    assert isinstance(agent.session, SessionLog)
    assert agent.run_sync("hello").state == "done"
    agent.close()
    resumed = Agent.resume(path, model=ScriptedModel([_answer("again")]))
    assert isinstance(resumed.session, SessionLog)
    assert [m.role for m in resumed.messages] == ["user", "assistant"]
    resumed.close()


def test_the_table_names_its_effects_and_actions_and_the_run_layer_binds_each_name() -> None:
    from statemachine_agent import _compacting, _effects
    from statemachine_agent._definition import (
        STATES,
        TRANSITIONS,
        ActionName,
        EffectName,
    )
    from statemachine_agent._machine import LoopMachine

    assert {s.effect for s in STATES if s.effect is not None} == set(EffectName)
    assert {t.action for t in TRANSITIONS if t.action is not None} == set(ActionName)
    machine = LoopMachine()
    assert machine.effect_of("awaiting_model") is _effects.request_model
    assert machine.effect_of("compacting") is _compacting.compact_context
    assert machine.effect_of("idle") is None
    machine.fire("start", statemachine_agent.LoopData())
    fired = machine.fire("model_replied", statemachine_agent.LoopData())
    assert (fired.label, fired.action) == ("final_answer", _effects.note_final_answer)
    assert (fired.effect, fired.stops) == (_effects.settle, True)


def test_a_transition_naming_an_unbound_action_is_refused_when_its_definition_is_built() -> None:
    from statemachine_agent._machine import LoopMachine

    machine = LoopMachine()
    spec = statemachine_agent.TransitionSpec(
        "model_replied",
        ("awaiting_model",),
        "done",
        guards=(lambda data: False,),
        label="mine",
        action="no_such_action",
    )
    with pytest.raises(statemachine_agent.MachineDefinitionError, match="no_such_action"):
        machine.add_transition(spec)
    assert machine.shared  # unchanged
    named = statemachine_agent.TransitionSpec(
        "model_replied",
        ("awaiting_model",),
        "done",
        guards=(lambda data: False,),
        label="mine",
        action="note_final_answer",
    )
    machine.add_transition(named)  # a built-in action's name is bound like the table's
    assert machine.fire("start", statemachine_agent.LoopData()).label == "start"


def test_binding_the_table_refuses_a_missing_or_unknown_name() -> None:
    from statemachine_agent._bindings import BUILTIN_STEPS
    from statemachine_agent._machine import bind_steps

    missing = {k: v for k, v in BUILTIN_STEPS.items() if k != "settle"}
    with pytest.raises(statemachine_agent.MachineDefinitionError, match="'settle' is not bound"):
        bind_steps(missing)
    with pytest.raises(statemachine_agent.MachineDefinitionError, match="'extra' is not a name"):
        bind_steps({**BUILTIN_STEPS, "extra": print})
    bind_steps(BUILTIN_STEPS)  # what the run layer did: unchanged
    assert statemachine_agent.LoopMachine().effect_of("done") is BUILTIN_STEPS["settle"]
