"""The cases of issue "The transition table is the engine": the definition is what runs, user
extensions are validated when added, and the protocol holds on every path into a terminal state."""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import Phase, settings
from hypothesis.stateful import run_state_machine_as_test

import statemachine_agent
from statemachine_agent import (
    AbortSignal,
    Agent,
    LoopData,
    MachineDefinitionError,
    Run,
    State,
    StateChanged,
    ToolContext,
    ToolResultMessage,
    TransitionSpec,
    Usage,
    UserMessage,
    render_diagram,
    tool,
)
from statemachine_agent.models import ScriptedModel
from statemachine_agent.session import FORMAT, VERSION, check_session
from statemachine_agent.testing import AgentKit, agent_state_machine, assert_valid_history
from statemachine_agent.testing.steps import call, text_response, tool_response

PACKAGE = Path(statemachine_agent.__file__).parent


@tool
def lookup(key: str) -> str:
    """Look a key up."""
    return f"value of {key}"


def checkpoint_script() -> list[dict[str, Any]]:
    return [
        tool_response(call("lookup", {"key": "a"}, id="k1")),
        text_response("The value of a is known."),
    ]


# -- case 1: a transition that would shadow the built-in branches is refused ---------------------


def test_unguarded_transition_shadowing_builtins_is_refused() -> None:
    agent = Agent(ScriptedModel(checkpoint_script()), tools=[lookup])
    before = list(agent.machine.specs)
    oops = TransitionSpec("model_replied", (State.AWAITING_MODEL,), State.DONE, label="oops")
    with pytest.raises(MachineDefinitionError) as caught:
        agent.machine.add_transition(oops)
    message = str(caught.value)
    assert "'oops'" in message
    for branch in (
        "refusal",
        "tool_calls",
        "turn_limit",
        "pause_turn",
        "max_tokens",
        "queued_input",
        "final_answer",
    ):
        assert f"'{branch}'" in message, (branch, message)
    assert agent.machine.specs == before  # unchanged
    result = agent.run_sync("What is a?")
    assert result.state is State.DONE
    assert result.text == "The value of a is known."
    assert [m.role for m in result.messages] == ["user", "assistant", "tool_result", "assistant"]


# -- case 2: a user's transition to done answers the response's calls ----------------------------


def over_budget(data: LoopData) -> bool:
    """Two completed turns are the budget."""
    return data.turns >= 2


def add_budget(agent: Agent) -> Agent:
    """The user transition of case 2: ``model_replied -> done`` when over budget, before
    ``tool_calls``."""
    agent.machine.add_transition(
        TransitionSpec(
            "model_replied",
            (State.AWAITING_MODEL,),
            State.DONE,
            (over_budget,),
            before="tool_calls",
        )
    )
    return agent


def budget_agent(model: Any, **options: Any) -> Agent:
    return add_budget(Agent(model, tools=[lookup], **options))


def test_user_transition_to_done_answers_every_call() -> None:
    script = [
        tool_response(call("lookup", {"key": "a"}, id="a1")),
        tool_response(call("lookup", {"key": "b"}, id="b1")),
        tool_response(call("lookup", {"key": "c"}, id="c1"), call("lookup", {"key": "d"}, id="d1")),
        text_response("never requested"),
    ]
    agent = budget_agent(ScriptedModel(script))
    result = agent.run_sync("Look up a, b, c and d")
    assert result.state is State.DONE
    assert result.turns == 3
    last_two = result.messages[-2:]
    assert [m.tool_call_id for m in last_two if isinstance(m, ToolResultMessage)] == ["c1", "d1"]
    for message in last_two:
        assert isinstance(message, ToolResultMessage) and message.is_error
        assert message.text == ("Not run: the run ended in state done by transition 'over_budget'.")
    assert_valid_history(result.messages)
    assert "awaiting_model --> done : model_replied [over_budget]" in str(
        render_diagram(agent, detail="full")
    )


def test_user_transition_from_executing_tools_to_max_turns_keeps_the_protocol() -> None:
    """A transition into a terminal state from executing_tools: the batch has its results; a
    later abort or user effect cannot leave calls open either."""
    agent = Agent(
        ScriptedModel([tool_response(call("lookup", {"key": "a"}, id="x1")), text_response("no")]),
        tools=[lookup],
    )
    agent.machine.add_transition(
        TransitionSpec(
            "tools_finished",
            (State.EXECUTING_TOOLS,),
            State.MAX_TURNS,
            (lambda data: True,),
            label="always_stop",
            before="turn_limit",
        )
    )
    result = agent.run_sync("go")
    assert result.state is State.MAX_TURNS
    assert result.messages[-1].text == "value of a"
    assert_valid_history(result.messages)


# -- case 3: a user state with an effect of its own -----------------------------------------------


def has_todo(data: LoopData) -> bool:
    """A result of the last batch mentions TODO."""
    return any("TODO" in result.text for result in data.results)


async def review(run: Run) -> str:
    """One extra model request asking for a review, then the built-in trigger it leads to."""
    run.append(UserMessage("A result mentions TODO: review your work before answering."))
    return await run.request_model()


@tool
def read_notes() -> str:
    """Read the notes."""
    return "TODO: check the totals"


def reviewing_agent(model: Any, **options: Any) -> Agent:
    agent = Agent(model, tools=[read_notes, lookup], **options)
    add_reviewing(agent)
    return agent


def add_reviewing(agent: Agent, guards: tuple[Any, ...] = (has_todo,)) -> None:
    """The user state ``reviewing``, entered after a batch when ``guards`` pass."""
    machine = agent.machine
    machine.add_state("reviewing", review)
    machine.add_transition(
        TransitionSpec(
            "tools_finished",
            (State.EXECUTING_TOOLS,),
            "reviewing",
            guards,
            label="review",
            before="next_turn",
        )
    )
    machine.add_transition(
        TransitionSpec(
            "model_replied", ("reviewing",), State.EXECUTING_TOOLS, (has_calls,), "review_calls"
        )
    )
    machine.add_transition(
        TransitionSpec(
            "model_replied", ("reviewing",), State.DONE, label="reviewed", after="review_calls"
        )
    )


def has_calls(data: LoopData) -> bool:
    """The response holds tool calls."""
    return data.response is not None and bool(data.response.tool_calls)


def test_user_state_with_an_effect_runs_and_is_drawn() -> None:
    model = ScriptedModel(
        [
            tool_response(call("read_notes", id="n1")),
            text_response("Reviewed: the totals are checked."),
        ]
    )
    agent = reviewing_agent(model)
    states: list[str] = []

    def on_event(event: Any) -> None:
        if isinstance(event, StateChanged):
            states.append(event.dest)

    agent.subscribe(on_event)
    result = agent.run_sync("Read the notes")
    assert result.state is State.DONE
    assert result.text == "Reviewed: the totals are checked."
    assert states == ["awaiting_model", "executing_tools", "reviewing", "done"]
    assert len(model.requests) == 2
    assert model.requests[1].messages[-1] == UserMessage(
        "A result mentions TODO: review your work before answering."
    )
    assert_valid_history(result.messages)
    mermaid = str(render_diagram(agent, detail="full"))
    assert "executing_tools --> reviewing : tools_finished [has_todo]" in mermaid
    assert "reviewing --> done : model_replied [else]" in mermaid
    assert "note right of reviewing : do / review" in mermaid


def test_a_state_without_an_effect_is_refused() -> None:
    agent = Agent(ScriptedModel([]))
    into_nowhere = TransitionSpec(
        "tools_finished", (State.EXECUTING_TOOLS,), "reviewing", (has_todo,), before="next_turn"
    )
    with pytest.raises(MachineDefinitionError, match="unknown state 'reviewing'"):
        agent.machine.add_transition(into_nowhere)
    into_idle = TransitionSpec(
        "tools_finished", (State.EXECUTING_TOOLS,), State.IDLE, (has_todo,), before="next_turn"
    )
    with pytest.raises(MachineDefinitionError, match="'idle', a state with no effect"):
        agent.machine.add_transition(into_idle)
    with pytest.raises(MachineDefinitionError, match="needs an effect"):
        agent.machine.add_state("reviewing", None)  # type: ignore[arg-type]


def test_placement_is_explicit_and_checked() -> None:
    agent = Agent(ScriptedModel([]))
    spec = TransitionSpec(
        "model_replied", (State.AWAITING_MODEL,), State.DONE, (over_budget,), after="tool_calls"
    )
    agent.machine.add_transition(spec)
    names = [s.name for s in agent.machine.specs if s.trigger == "model_replied"]
    assert names.index("over_budget") == names.index("tool_calls") + 1
    with pytest.raises(MachineDefinitionError, match="no 'model_replied' branch is labelled"):
        agent.machine.add_transition(
            TransitionSpec("model_replied", (State.AWAITING_MODEL,), State.DONE, before="nope")
        )
    # An unguarded branch placed last is itself shadowed by final_answer.
    with pytest.raises(MachineDefinitionError, match=r"'final_answer'.*'late'"):
        agent.machine.add_transition(
            TransitionSpec(
                "model_replied",
                (State.AWAITING_MODEL,),
                State.DONE,
                label="late",
                after="final_answer",
            )
        )


# -- case 4: the property kit on these agents ------------------------------------------------------

FIND = settings(
    max_examples=60,
    stateful_step_count=4,
    derandomize=True,
    deadline=None,
    database=None,
    phases=[Phase.explicit, Phase.generate, Phase.shrink],
    report_multiple_bugs=False,
)


def test_kit_passes_the_budget_agent() -> None:
    def build(kit: AgentKit) -> Agent:
        return add_budget(kit.agent())

    run_state_machine_as_test(agent_state_machine(build), settings=FIND)


def test_kit_passes_the_reviewing_agent() -> None:
    def build(kit: AgentKit) -> Agent:
        agent = kit.agent()
        add_reviewing_any(agent)
        return agent

    run_state_machine_as_test(agent_state_machine(build), settings=FIND)


def any_result(data: LoopData) -> bool:
    """The last batch had a result whose text is not an error (the kit's tools say 'ok')."""
    return any(not result.is_error for result in data.results)


def add_reviewing_any(agent: Agent) -> None:
    add_reviewing(agent, (any_result, lambda data: data.turns < 2))


def test_kit_catches_an_effect_that_drops_a_result() -> None:
    async def dropping(run: Run) -> str:
        results = [m for m in run.messages if isinstance(m, ToolResultMessage)]
        if results:
            run.messages.remove(results[-1])  # deliberately broken
        return "tools_finished"

    def build(kit: AgentKit) -> Agent:
        agent = kit.agent()
        agent.machine.add_state("dropping", dropping)
        agent.machine.add_transition(
            TransitionSpec(
                "tools_finished",
                (State.EXECUTING_TOOLS,),
                "dropping",
                (lambda data: len(data.results) > 0 and not data.terminate,),
                label="drop",
                before="next_turn",
            )
        )
        agent.machine.add_transition(
            TransitionSpec("tools_finished", ("dropping",), State.AWAITING_MODEL, label="dropped")
        )
        return agent

    with pytest.raises(AssertionError) as caught:
        run_state_machine_as_test(agent_state_machine(build), settings=FIND)
    report = f"{caught.value}\n" + "\n".join(getattr(caught.value, "__notes__", []))
    assert "Failing test case" in report
    assert "have no result" in report or "before the results of" in report, report


# -- case 5: a log that holds only its header and run_start ----------------------------------------


def test_log_with_only_header_and_run_start(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    lines = [
        {"type": "header", "format": FORMAT, "version": VERSION, "model": "m", "tools": []},
        {"type": "run_start", "time": 0},
    ]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    agent = Agent.resume(path, model=ScriptedModel([text_response("hello")]))
    assert agent.state is State.ABORTED
    result = agent.run_sync("hi")
    assert result.state is State.DONE
    assert agent.session is not None
    agent.session.close()
    _data, problems = check_session(path)
    assert problems == []
    done = subprocess.run(
        [sys.executable, "-m", "statemachine_agent", "check", str(path)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr


# -- case 6: the driver never compares branch labels -------------------------------------------------

LABELS = (
    "refusal",
    "tool_calls",
    "turn_limit",
    "pause_turn",
    "max_tokens",
    "queued_input",
    "final_answer",
    "terminated",
    "hook_failed",
    "next_turn",
)


def test_no_comparison_with_branch_labels_outside_the_table() -> None:
    names = "|".join(LABELS)
    pattern = re.compile(
        rf"""(==|!=|\bin\b|\bis\b)\s*\(?\s*["']({names})["']|["']({names})["']\s*(==|!=)"""
    )
    offenders = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.name == "_machine.py" or path.relative_to(PACKAGE).parts[0] == "_diagram":
            continue  # the table itself, and the diagrams drawing its labels
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if pattern.search(line) or re.search(r"\blabel\s*(==|!=|\bin\b)", line):
                offenders.append(f"{path.relative_to(PACKAGE)}:{number}: {line.strip()}")
    assert offenders == []


def test_python_dash_m_runs_the_cli() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "statemachine_agent", "--help"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0 and "Usage" in done.stdout


def test_core_does_not_import_session() -> None:
    core = [p for p in PACKAGE.glob("_*.py") if not p.name.startswith("__")]
    for path in core:
        text = path.read_text()
        top_level = [
            line for line in text.splitlines() if re.match(r"^(from|import) .*\bsession\b", line)
        ]
        assert top_level == [], (path.name, top_level)


def test_a_log_through_a_user_state_passes_check(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    model = ScriptedModel(
        [tool_response(call("read_notes", id="n1")), text_response("Reviewed: totals checked.")]
    )
    agent = Agent(model, tools=[read_notes, lookup], session=path)
    add_reviewing(agent)
    assert agent.run_sync("Read the notes").state is State.DONE
    agent.close()
    _data, problems = check_session(path)
    assert problems == []
    assert "reviewing" in path.read_text()


def test_dot_output_is_named_after_the_loop() -> None:
    assert str(render_diagram(format="dot")).startswith("digraph agent_loop {")


def test_a_hook_returning_something_that_is_not_a_decision_does_not_run_the_call() -> None:
    ran: list[str] = []

    @tool
    def act() -> str:
        """Act."""
        ran.append("ran")
        return "done"

    script = [tool_response(call("act", id="a1")), text_response("ok")]
    agent = Agent(ScriptedModel(script), tools=[act], before_tool_call=lambda info: "yes")
    result = agent.run_sync("go")
    assert ran == []
    assert result.messages[2].is_error
    assert result.messages[2].text.startswith("The before_tool_call hook returned 'yes'")


# -- checks a mutation review found untested -----------------------------------------------------


async def test_abort_scope_re_raises_a_block_s_own_timeout() -> None:
    from statemachine_agent._cancel import abort_scope

    with pytest.raises(TimeoutError, match="own"):
        async with abort_scope(AbortSignal()):
            raise TimeoutError("own")


def test_a_model_s_own_timeout_fails_the_run_rather_than_aborting_it() -> None:
    class TimingOut:
        name = "timing-out"

        async def stream(self, request: Any) -> Any:
            raise TimeoutError("read timed out")
            yield  # pragma: no cover  (an async generator)

    result = Agent(TimingOut(), model_retries=0).run_sync("go")  # type: ignore[arg-type]
    assert result.state is State.FAILED
    assert "TimeoutError" in (result.error or "")


def test_an_effect_returning_no_trigger_in_a_non_terminal_state_is_a_definition_error() -> None:
    async def nothing(run: Run) -> None:
        return None

    agent = Agent(ScriptedModel([text_response("hi")]))
    agent.machine.add_state("stuck", nothing)  # type: ignore[arg-type]
    agent.machine.add_transition(
        TransitionSpec(
            "model_replied", (State.AWAITING_MODEL,), "stuck", (lambda data: True,), "into_stuck"
        )
    )
    agent.machine.add_transition(TransitionSpec("go_on", ("stuck",), State.DONE))
    with pytest.raises(MachineDefinitionError, match="returned no trigger"):
        agent.run_sync("go")
    assert agent.state is State.FAILED


def test_answer_dangling_answers_every_call_after_the_first_result() -> None:
    from statemachine_agent import AssistantMessage, ToolCallBlock
    from statemachine_agent._messages import text_result
    from statemachine_agent._protocol import answer_dangling

    calls = [ToolCallBlock(id=i, name="x", input={}) for i in ("r_a", "w_b", "r_c")]
    history = [
        UserMessage("go"),
        AssistantMessage(content=calls, stop_reason="tool_use"),
        text_result(calls[0], "done"),
    ]
    assert [r.tool_call_id for r in answer_dangling(history)] == ["w_b", "r_c"]


def test_check_reports_a_run_that_ended_in_another_state_than_the_machine(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    agent = Agent(ScriptedModel([text_response("hi")]), session=path)
    agent.run_sync("go")
    agent.close()
    lines = path.read_text().splitlines()
    last = json.loads(lines[-1])
    assert last["type"] == "run_end" and last["state"] == "done"
    last["state"] = "max_turns"
    lines[-1] = json.dumps(last)
    path.write_text("\n".join(lines) + "\n")
    _data, problems = check_session(path)
    assert any("ended in 'max_turns' but the machine was in 'done'" in p for p in problems), (
        problems
    )


# -- checks review 3 (planted bugs in the engine-cost changes) found untested -----------------


def test_removing_an_abort_callback_removes_that_callback_only() -> None:
    signal = AbortSignal()
    called: list[str] = []
    remove_first = signal.add_callback(lambda: called.append("first"))
    signal.add_callback(lambda: called.append("second"))
    remove_third = signal.add_callback(lambda: called.append("third"))
    remove_first()
    remove_first()  # removing twice is harmless
    signal.add_callback(lambda: called.append("fourth"))
    remove_third()
    signal.set("stop")
    assert called == ["second", "fourth"]
    assert signal.reason == "stop"


async def test_an_abort_ending_a_scope_entered_during_a_cancellation_keeps_the_cancellation() -> (
    None
):
    """Code cleaning up after a cancellation of its task enters an abort scope; an abort ends the
    block (swallowed, ``scope.aborted``: the scope counts the cancellations its task had when it
    was entered, as ``asyncio.timeout`` does), yet the task's own pending cancellation is
    re-raised at the end of the scope, never lost."""
    from statemachine_agent._cancel import abort_scope

    signal = AbortSignal()
    log: list[Any] = []
    in_scope = asyncio.Event()

    async def body() -> None:
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            log.append("cleaning up")
            scope = abort_scope(signal)
            try:
                async with scope:
                    in_scope.set()
                    await asyncio.sleep(30)
                log.append("after the scope")
            finally:
                task = asyncio.current_task()
                assert task is not None
                log.append((scope.aborted, task.cancelling()))
        log.append("went on")

    task = asyncio.ensure_future(body())
    await asyncio.sleep(0)
    task.cancel()
    await in_scope.wait()
    signal.set("stop")
    with pytest.raises(asyncio.CancelledError):
        await task
    assert log == ["cleaning up", (True, 1)]


def test_setting_run_usage_replaces_the_usage_added_before() -> None:
    from statemachine_agent._settings import RunSettings

    agent = Agent(ScriptedModel([]))
    run = Run(RunSettings.read(agent), agent.conversation, agent.bus, agent.machine)
    run.add_usage(Usage(input_tokens=5, output_tokens=1))
    run.usage = Usage(input_tokens=100, output_tokens=10)
    assert run.usage == Usage(input_tokens=100, output_tokens=10)
    run.add_usage(Usage(input_tokens=1, output_tokens=2, cache_write_tokens=3))
    run.add_usage(Usage(cache_read_tokens=4))
    expected = Usage(input_tokens=101, output_tokens=12, cache_write_tokens=3, cache_read_tokens=4)
    assert run.usage == expected
    assert run.usage == expected  # reading it again changes nothing


def test_run_usage_read_every_turn_still_sums_every_response() -> None:
    """``should_continue`` reads ``run.usage`` each turn (summing the parts added so far); the
    total keeps the earlier turns."""
    script = [
        tool_response(call("act"), usage={"input_tokens": 10 * i, "output_tokens": i})
        for i in range(1, 4)
    ]
    script.append(text_response("done", usage={"input_tokens": 1000, "output_tokens": 7}))
    seen: list[Usage] = []

    def act() -> str:
        """Act."""
        return "acted"

    def keep_going(info: Any) -> bool:
        seen.append(info.usage)
        return True

    agent = Agent(ScriptedModel(script), tools=[act], should_continue=keep_going)
    result = agent.run_sync("go")
    assert result.state is State.DONE
    assert seen == [
        Usage(input_tokens=10, output_tokens=1),
        Usage(input_tokens=30, output_tokens=3),
        Usage(input_tokens=60, output_tokens=6),
    ]
    assert result.usage == Usage(input_tokens=1060, output_tokens=13)


def test_a_tool_context_carries_the_agents_deps() -> None:
    deps = {"db": "sqlite://"}
    seen: list[tuple[Any, str, str]] = []

    def lookup(ctx: ToolContext, key: str) -> str:
        """Look a key up."""
        seen.append((ctx.deps, ctx.call_id, ctx.tool_name))
        return ctx.deps[key]

    script = [tool_response(call("lookup", {"key": "db"}, id="c1")), text_response("done")]
    result = Agent(ScriptedModel(script), tools=[lookup], deps=deps).run_sync("go")
    assert seen == [(deps, "c1", "lookup")]
    assert seen[0][0] is deps
    assert result.messages[2].text == "sqlite://"
