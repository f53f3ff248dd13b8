"""Issue 31, cases 5-10: a history (and every request built from it) the API always accepts.

Each case runs offline with `ScriptedModel` (its ``tool_use`` blocks whose ``input`` is a string
are argument text, parsed as a provider stream would be). The same cases on the wire, through the
real SDK and the local replay server, are in ``tests/models/test_anthropic_history_accepted.py``.
"""

from __future__ import annotations

import asyncio
import json
import threading
from pathlib import Path
from typing import Any

import pytest

from statemachine_agent import (
    Agent,
    Approve,
    AssistantMessage,
    Compaction,
    Defer,
    LoopData,
    MessageEnd,
    State,
    TextBlock,
    ToolCallBlock,
    ToolContext,
    ToolExecutionEnd,
    ToolResultMessage,
    TransitionSpec,
    UserMessage,
    tool,
)
from statemachine_agent.models import ScriptedModel
from statemachine_agent.models._anthropic_request import RequestEncoder
from statemachine_agent.testing import assert_valid_history
from statemachine_agent.testing.steps import call, text_response, tool_response


def results_of(messages: list[Any]) -> list[ToolResultMessage]:
    return [m for m in messages if isinstance(m, ToolResultMessage)]


def _refuse_constant(text: str) -> Any:
    raise ValueError(f"not JSON: {text}")


def strict_json(text: str) -> Any:
    """What the API parses: NaN and Infinity refused (out-of-range numbers are written as
    Infinity by any encoder that lets them through)."""
    return json.loads(text, parse_constant=_refuse_constant)


def wire_messages(model: ScriptedModel, n: int) -> str:
    """Request ``n`` (1-based) as the Anthropic encoder would put its messages on the wire."""
    return json.dumps(RequestEncoder(cache=False).messages(model.requests[n - 1].messages))


# -- case 5: NaN, Infinity and numbers out of range in tool input --------------------------------


ran: list[Any] = []


@tool
def set_limit(limit: float) -> str:
    """Set a limit."""
    ran.append(limit)
    return f"limit {limit}"


@pytest.mark.parametrize(
    ("raw", "shown"),
    [
        ('{"limit": 1e400}', "1e400"),
        ('{"limit": NaN}', "NaN"),
        ('{"limit": -Infinity}', "-Infinity"),
    ],
)
async def test_non_finite_number_in_tool_input_is_an_error_result_naming_field_and_value(
    raw: str, shown: str
) -> None:
    ran.clear()
    model = ScriptedModel(
        [tool_response(call("set_limit", raw, id="toolu_nan")), text_response("Fixed.")]
    )
    agent = Agent(model, tools=[set_limit])
    result = await agent.run("Set the limit")
    assert result.state is State.DONE and result.text == "Fixed."
    assert len(model.requests) == 2
    assert ran == []  # the tool does not run
    (answer,) = results_of(agent.messages)
    assert answer.tool_call_id == "toolu_nan" and answer.is_error
    assert f"the value of 'limit' is {shown}" in answer.text, answer.text
    body = wire_messages(model, 2)
    sent = strict_json(body)  # request 2 is strict JSON
    results = [b for m in sent for b in m["content"] if b["type"] == "tool_result"]
    assert [r["tool_use_id"] for r in results] == ["toolu_nan"]  # exactly one result
    uses = [b for m in sent for b in m["content"] if b["type"] == "tool_use"]
    assert [u["id"] for u in uses] == ["toolu_nan"]
    # The stored history is JSON itself: the call keeps its argument text.
    (stored,) = [m for m in agent.messages if isinstance(m, AssistantMessage) and m.tool_calls]
    assert stored.tool_calls[0].input is None and stored.tool_calls[0].raw_arguments == raw
    assert_valid_history(agent.messages)


async def test_non_finite_input_given_as_data_is_stored_as_text_and_answered() -> None:
    """A call built with a float NaN/inf input (a FunctionModel, a hand-made history) is the
    same fault: stored as argument text, answered with the error, never run."""
    block = ToolCallBlock(id="t1", name="set_limit", input={"limit": float("inf")})
    assert block.input is None and block.raw_arguments == '{"limit": Infinity}'
    ran.clear()
    history = [UserMessage("go"), AssistantMessage(content=[block], stop_reason="tool_use")]
    model = ScriptedModel([text_response("ok")])
    agent = Agent(model, tools=[set_limit], messages=history)
    result = await agent.run("again")
    assert result.state is State.DONE and ran == []
    strict_json(wire_messages(model, 1))


async def test_non_finite_input_is_answered_the_same_after_a_session_log_resume(
    tmp_path: Path,
) -> None:
    ran.clear()
    path = tmp_path / "s.jsonl"
    model = ScriptedModel(
        [tool_response(call("set_limit", '{"limit": 1e400}', id="toolu_big")), text_response("A")]
    )
    agent = Agent(model, tools=[set_limit], session=path)
    assert (await agent.run("Set the limit")).state is State.DONE
    agent.close()
    for line in path.read_text(encoding="utf-8").splitlines():
        strict_json(line)  # the log holds no non-JSON
    model2 = ScriptedModel([text_response("B")])
    resumed = Agent.resume(path, model=model2, tools=[set_limit])
    try:
        result = await resumed.run("And now?")
    finally:
        resumed.close()
    assert result.state is State.DONE and result.text == "B" and ran == []
    sent = strict_json(wire_messages(model2, 1))
    results = [b for m in sent for b in m["content"] if b["type"] == "tool_result"]
    assert [r["tool_use_id"] for r in results] == ["toolu_big"]
    assert_valid_history(resumed.messages)


async def test_thirty_digit_integer_reaches_the_tool_as_that_exact_int() -> None:
    seen: list[int] = []

    @tool
    def count(n: int) -> str:
        """Count."""
        seen.append(n)
        return "counted"

    digits = "123456789012345678901234567890"
    model = ScriptedModel(
        [tool_response(call("count", '{"n": ' + digits + "}", id="t30")), text_response("ok")]
    )
    agent = Agent(model, tools=[count])
    result = await agent.run("Count")
    assert result.state is State.DONE
    assert seen == [int(digits)] and type(seen[0]) is int
    assert digits in wire_messages(model, 2)


# -- case 6: tool_choice only in a request with tools --------------------------------------------


@tool
def lookup(key: str) -> str:
    """Look a key up."""
    return "r" * 400


@pytest.mark.parametrize("choice", [{"type": "any"}, {"type": "auto"}])
async def test_a_request_without_tools_never_carries_tool_choice(
    choice: dict[str, Any],
) -> None:
    history: list[Any] = [UserMessage("task")]
    for n in range(3):
        history.append(
            AssistantMessage(
                content=[ToolCallBlock(id=f"h{n}", name="lookup", input={"key": "k"})],
                stop_reason="tool_use",
            )
        )
        history.append(text_result_of(f"h{n}"))
    model = ScriptedModel(
        [
            text_response("SUMMARY"),  # the summary request
            tool_response(call("lookup", {"key": "a"}, id="c1")),
            text_response("answer"),
        ]
    )
    agent = Agent(
        model,
        tools=[lookup],
        messages=history,
        model_settings={"tool_choice": choice},
        compaction=Compaction(threshold=50, keep_recent=0),
    )
    result = await agent.run("next")
    assert result.state is State.DONE
    summary = model.requests[0]
    assert list(summary.tools) == [] and "tool_choice" not in summary.settings
    with_tools = [r for r in model.requests if r.tools]
    assert with_tools and all(r.settings["tool_choice"] == choice for r in with_tools)


async def test_final_turn_and_user_state_requests_without_tools_carry_no_tool_choice() -> None:
    model = ScriptedModel([text_response("a"), text_response("b"), text_response("final")])
    agent = Agent(
        model,
        model_settings={"tool_choice": {"type": "auto"}},
        max_turns=1,
        final_turn=True,
    )

    async def ask_again(run: Any) -> str:
        return str(await run.request_model())

    agent.machine.add_state("asking", ask_again)
    agent.machine.add_transition(
        TransitionSpec(
            "model_replied",
            (State.AWAITING_MODEL,),
            "asking",
            (lambda data: data.response is not None and data.response.text == "a",),
            label="ask_again",
        )
    )
    agent.machine.add_transition(
        TransitionSpec("model_replied", ("asking",), State.AWAITING_MODEL, label="asked")
    )
    await agent.run("go")
    assert len(model.requests) == 3
    assert [r.settings.get("tool_choice") for r in model.requests] == [None, None, None]


def text_result_of(call_id: str) -> ToolResultMessage:
    return ToolResultMessage(
        tool_call_id=call_id, tool_name="lookup", content=[TextBlock(text="r" * 400)]
    )


# -- case 7: a KeyboardInterrupt (or SystemExit) in a hook or a tool -----------------------------

# Bounds every wait on another thread or task in these tests: a regression fails the test with a
# clear value instead of hanging the session (nothing is asserted about time).
WAIT_SECONDS = 10.0
NEVER_RELEASED = "a was never released"

# What a tool or a hook may raise to stop the process: the same rule for both (`INTERRUPTS`).
INTERRUPT_TYPES = [KeyboardInterrupt, SystemExit]


def _batch_with_sync_sibling() -> tuple[ScriptedModel, Any, Any, threading.Event, threading.Event]:
    """A batch of sync tool ``a`` (its body runs, then it holds until ``release``) and tool
    ``b``."""
    a_ran, release = threading.Event(), threading.Event()

    @tool
    def a() -> str:
        """Do one thing, then hold until released."""
        a_ran.set()
        return "did 1" if release.wait(WAIT_SECONDS) else NEVER_RELEASED

    @tool
    def b() -> str:
        """Do b."""
        return "b done"

    model = ScriptedModel(
        [tool_response(call("a", id="ca"), call("b", id="cb")), text_response("never")]
    )
    return model, a, b, a_ran, release


@pytest.mark.parametrize("interrupt", INTERRUPT_TYPES, ids=lambda t: t.__name__)
@pytest.mark.parametrize("mode", ["parallel", "sequential"])
@pytest.mark.parametrize("hook", ["before_tool_call", "after_tool_call"])
async def test_keyboard_interrupt_in_a_tool_hook_is_recorded_and_siblings_get_the_grace(
    mode: str, hook: str, interrupt: type[BaseException]
) -> None:
    model, a, b, a_ran, release = _batch_with_sync_sibling()
    if mode == "sequential":
        release.set()  # a runs to its end before b starts
    name = interrupt.__name__

    async def interrupting(info: Any, *rest: Any) -> Any:
        if info.call.id == "cb":
            # a's body has run and a is still running: the abort releases it (in its grace).
            loop = asyncio.get_running_loop()
            if not await loop.run_in_executor(None, a_ran.wait, WAIT_SECONDS):
                raise AssertionError("tool a never started")
            info.signal.add_callback(release.set)
            raise interrupt
        return None

    agent = Agent(
        model,
        tools=[a, b],
        tool_execution=mode,  # type: ignore[arg-type]
        abort_grace_seconds=300,
        **{hook: interrupting},
    )
    errors: list[str | None] = []
    agent.subscribe(lambda e: errors.append(e.result.error) if e.type == "run_end" else None)
    with pytest.raises(interrupt):
        await agent.run("Go")
    assert agent.state is State.ABORTED
    ra, rb = results_of(agent.messages)
    assert (ra.tool_call_id, rb.tool_call_id) == ("ca", "cb")  # every call answered
    assert (ra.is_error, ra.text) == (False, "did 1")  # the sibling got the grace period
    done = (
        "The call was not run."
        if hook == "before_tool_call"
        else "The call may have partly completed; check its effects before retrying."
    )
    assert (rb.is_error, rb.text) == (
        True,
        f"Interrupted: the {hook} hook raised {name} and the run was aborted. {done}",
    )
    assert errors == [f"{name} raised in the {hook} hook of tool 'b' (call cb)"]
    assert len(model.requests) == 1
    assert agent.is_running is False
    assert_valid_history(agent.messages)


@pytest.mark.parametrize("interrupt", INTERRUPT_TYPES, ids=lambda t: t.__name__)
@pytest.mark.parametrize("mode", ["parallel", "sequential"])
async def test_interrupt_in_a_tool_is_recorded_and_the_sibling_keeps_its_result(
    mode: str, interrupt: type[BaseException]
) -> None:
    """Tool b itself raises it: the same rule as in a hook (a gets the grace period)."""
    model, a, _b, a_ran, release = _batch_with_sync_sibling()
    if mode == "sequential":
        release.set()  # a runs to its end before b starts
    name = interrupt.__name__

    @tool
    def b(ctx: ToolContext) -> str:
        """Raise the interrupt once a is running."""
        if not a_ran.wait(WAIT_SECONDS):
            return "tool a never started"
        ctx.signal.add_callback(release.set)  # the abort releases a (in its grace)
        raise interrupt

    agent = Agent(
        model,
        tools=[a, b],
        tool_execution=mode,  # type: ignore[arg-type]
        abort_grace_seconds=300,
    )
    errors: list[str | None] = []
    agent.subscribe(lambda e: errors.append(e.result.error) if e.type == "run_end" else None)
    with pytest.raises(interrupt):
        await agent.run("Go")
    assert agent.state is State.ABORTED
    ra, rb = results_of(agent.messages)
    assert (ra.tool_call_id, rb.tool_call_id) == ("ca", "cb")  # every call answered
    assert (ra.is_error, ra.text) == (False, "did 1")  # the sibling got the grace period
    assert (rb.is_error, rb.text) == (
        True,
        f"Interrupted: the tool raised {name} and the run was aborted. The call may have "
        "partly completed; check its effects before retrying.",
    )
    assert errors == [f"{name} raised in tool 'b' (call cb)"]
    assert len(model.requests) == 1
    assert agent.is_running is False
    assert_valid_history(agent.messages)


@pytest.mark.parametrize("interrupt", INTERRUPT_TYPES, ids=lambda t: t.__name__)
@pytest.mark.parametrize("hook", ["should_continue", "transform_context"])
async def test_keyboard_interrupt_in_a_run_hook_aborts_answers_every_call_then_propagates(
    hook: str, interrupt: type[BaseException]
) -> None:
    model, a, b, _a_ran, release = _batch_with_sync_sibling()
    release.set()
    errors: list[str | None] = []
    requests = 0

    def interrupting(*args: Any) -> Any:
        nonlocal requests
        if hook == "transform_context":
            requests += 1
            if requests == 1:
                return args[0]
        raise interrupt

    agent = Agent(model, tools=[a, b], **{hook: interrupting})  # type: ignore[arg-type]
    agent.subscribe(lambda e: errors.append(e.result.error) if e.type == "run_end" else None)
    with pytest.raises(interrupt):
        await agent.run("Go")
    assert agent.state is State.ABORTED
    ra, rb = results_of(agent.messages)
    assert (ra.text, rb.text) == ("did 1", "b done")  # every call answered
    assert errors == [f"{interrupt.__name__} raised in the {hook} hook"]
    assert len(model.requests) == 1
    assert_valid_history(agent.messages)


# -- case 8: an empty request ----------------------------------------------------------------------


@pytest.mark.parametrize("returned", [[], [AssistantMessage(content=[])]])
async def test_transform_context_returning_no_messages_fails_naming_the_hook(
    returned: list[Any],
) -> None:
    model = ScriptedModel([text_response("never sent")])
    agent = Agent(model, transform_context=lambda messages: list(returned))
    result = await agent.run("hello")
    assert result.state is State.FAILED
    assert model.requests == []  # refused before sending
    assert result.error is not None and "transform_context hook" in result.error, result.error
    assert "no message" in result.error or "empty" in result.error, result.error


# -- case 9: a user branch that leaves calls open --------------------------------------------------


def _has_calls(data: LoopData) -> bool:
    return data.response is not None and bool(data.response.tool_calls)


@pytest.mark.parametrize("into", ["awaiting_model", "user_state"])
async def test_user_branch_before_tool_calls_answers_every_call_in_the_stored_history(
    into: str, tmp_path: Path
) -> None:
    model = ScriptedModel(
        [tool_response(call("lookup", {"key": "k"}, id="open1")), text_response("answered")]
    )
    path = tmp_path / "s.jsonl"
    agent = Agent(model, tools=[lookup], session=path)
    dest: str = State.AWAITING_MODEL
    if into == "user_state":

        async def noting(run: Any) -> str:
            return str(await run.request_model())

        agent.machine.add_state("noting", noting)
        dest = "noting"
    agent.machine.add_transition(
        TransitionSpec(
            "model_replied",
            (State.AWAITING_MODEL,),
            dest,
            (_has_calls,),
            label="skip_tools",
            before="tool_calls",
        )
    )
    if into == "user_state":
        agent.machine.add_transition(
            TransitionSpec("model_replied", ("noting",), State.DONE, label="noted")
        )
    result = await agent.run("go")
    agent.close()
    assert result.state is State.DONE and result.text == "answered"
    assert_valid_history(agent.messages)  # the STORED history
    (answer,) = results_of(agent.messages)
    assert answer.tool_call_id == "open1" and answer.is_error
    assert answer.text == (
        f"Not run: the run took the branch 'skip_tools' into state {dest} instead of running "
        "this call."
    )
    # the request carried the same result as the history holds
    assert model.requests[1].messages[-1] == answer
    resumed = Agent.resume(path, model=ScriptedModel([]), tools=[lookup])
    resumed.close()
    assert resumed.messages == agent.messages  # the session log holds it too
    assert_valid_history(resumed.messages)


# -- case 10: message_end in declaration order -----------------------------------------------------


async def test_tool_result_message_end_after_append_in_declaration_order() -> None:
    a_may_finish = asyncio.Event()

    @tool
    async def first() -> str:
        """Finishes second."""
        async with asyncio.timeout(WAIT_SECONDS):  # a regression fails (an error result)
            await a_may_finish.wait()
        return "one"

    @tool
    async def second() -> str:
        """Finishes first."""
        return "two"

    model = ScriptedModel(
        [tool_response(call("first", id="tool-1"), call("second", id="tool-2")), text_response("x")]
    )
    agent = Agent(model, tools=[first, second])
    ends: list[str] = []
    message_ends: list[tuple[str, bool]] = []

    def on_event(event: Any) -> None:
        if isinstance(event, ToolExecutionEnd):
            ends.append(event.call.id)
            if event.call.id == "tool-2":
                a_may_finish.set()  # b has finished: now a may
        elif isinstance(event, MessageEnd) and isinstance(event.message, ToolResultMessage):
            appended = any(m is event.message for m in agent.messages)
            message_ends.append((event.message.tool_call_id, appended))

    agent.subscribe(on_event)
    result = await agent.run("go")
    assert result.state is State.DONE
    assert ends == ["tool-2", "tool-1"]  # completion order
    assert message_ends == [("tool-1", True), ("tool-2", True)]  # declaration order, appended
    assert [r.text for r in results_of(agent.messages)] == ["one", "two"]


@tool
def write(path: str) -> str:
    """Write a file."""
    return f"wrote {path}"


def _defer_writes(info: Any) -> Defer | None:
    return Defer("writes need review") if info.tool.name == "write" else None


def tool_result_lines(path: Path) -> list[dict[str, Any]]:
    """The ``tool_result`` lines of the session log at ``path``: each line's message."""
    lines = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    return [line["message"] for line in lines if line["type"] == "tool_result"]


@pytest.mark.parametrize("decided_in", ["same_process", "resumed"])
async def test_session_log_has_one_tool_result_line_per_call_including_a_deferred_one(
    decided_in: str, tmp_path: Path
) -> None:
    """Each result is logged once (when its call finished, not again on its message_end), and a
    deferred call's placeholder is never logged as its result: only the result its decision
    gave."""
    path = tmp_path / "s.jsonl"
    model = ScriptedModel(
        [
            tool_response(
                call("lookup", {"key": "a"}, id="c_a"),
                call("write", {"path": "b"}, id="c_b"),
                call("lookup", {"key": "c"}, id="c_c"),
            ),
            text_response("All three done."),
        ]
    )
    agent = Agent(model, tools=[lookup, write], before_tool_call=_defer_writes, session=path)
    first = await agent.run("Read a, write b, read c")
    assert first.state is State.AWAITING_APPROVAL
    held = tool_result_lines(path)
    assert sorted(m["tool_call_id"] for m in held) == ["c_a", "c_c"]  # no placeholder for c_b
    if decided_in == "resumed":
        agent.close()
        agent = Agent.resume(
            path,
            model=ScriptedModel([text_response("All three done.")]),
            tools=[lookup, write],
            before_tool_call=_defer_writes,
        )
    try:
        second = await agent.run(decisions={"c_b": Approve()})
    finally:
        agent.close()
    assert second.state is State.DONE and second.text == "All three done."
    logged = tool_result_lines(path)
    ids = sorted(m["tool_call_id"] for m in logged)
    assert ids == ["c_a", "c_b", "c_c"]  # exactly one line per call id
    (deferred,) = [m for m in logged if m["tool_call_id"] == "c_b"]
    assert [b["text"] for b in deferred["content"]] == ["wrote b"]  # its decision's result
    assert not deferred.get("is_error")
    resumed = Agent.resume(path, model=ScriptedModel([]), tools=[lookup, write])
    resumed.close()
    assert resumed.messages == agent.messages  # the log replays to the same history
