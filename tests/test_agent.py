"""The driver loop beyond the issue's cases: stop reasons, failures, hooks, events, misuse."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

from statemachine_agent import (
    Agent,
    AgentBusyError,
    AssistantMessage,
    Event,
    ModelRetry,
    RunEnd,
    RunStart,
    State,
    StateChanged,
    StopReason,
    ToolExecutionEnd,
    ToolExecutionStart,
    ToolResultMessage,
    TurnEnd,
    TurnInfo,
    TurnStart,
    UsageError,
    UserMessage,
    tool,
)
from statemachine_agent.models import FunctionModel, ModelRequest, ScriptedModel, ToolDefinition
from statemachine_agent.testing import assert_valid_history
from statemachine_agent.testing.steps import call, error_step, text_response, tool_response


@tool
def echo(text: str) -> str:
    """Echo the text."""
    return text


def results(messages: list[Any]) -> list[ToolResultMessage]:
    return [m for m in messages if isinstance(m, ToolResultMessage)]


def pairs_ok(events: list[Event]) -> bool:
    starts = [e.call.id for e in events if isinstance(e, ToolExecutionStart)]
    ends = [e.call.id for e in events if isinstance(e, ToolExecutionEnd)]
    turns = [e.turn for e in events if isinstance(e, TurnStart)]
    turn_ends = [e.turn for e in events if isinstance(e, TurnEnd)]
    runs = sum(isinstance(e, RunStart) for e in events)
    run_ends = sum(isinstance(e, RunEnd) for e in events)
    return sorted(starts) == sorted(ends) and turns == turn_ends and runs == run_ends


async def test_pause_turn_sends_content_back_without_a_user_message() -> None:
    paused = {
        "content": [
            {"type": "server_tool_use", "id": "srv1", "name": "web_search", "input": {"q": "x"}}
        ],
        "stop_reason": "pause_turn",
    }
    model = ScriptedModel([paused, text_response("Found it.")])
    result = await Agent(model).run("search")
    assert result.state is State.DONE
    second = model.requests[1].messages
    assert isinstance(second[-1], AssistantMessage)
    assert second[-1].stop_reason == StopReason.PAUSE_TURN
    assert sum(isinstance(m, UserMessage) for m in second) == 1
    assert result.text == "Found it."


async def test_max_tokens_continue_policy_asks_to_continue() -> None:
    model = ScriptedModel(
        [text_response("Part one", stop_reason="max_tokens"), text_response(" and two.")]
    )
    result = await Agent(model).run("write")
    assert result.state is State.DONE and model.calls == 2
    assert isinstance(model.requests[1].messages[-1], UserMessage)
    assert result.error is None


async def test_max_tokens_stop_policy_reports_truncation() -> None:
    model = ScriptedModel([text_response("Part one", stop_reason="max_tokens")])
    result = await Agent(model, max_tokens_policy="stop").run("write")
    assert result.state is State.DONE and model.calls == 1
    assert "truncated" in (result.error or "")


async def test_continuations_are_capped() -> None:
    model = ScriptedModel([text_response(f"p{i}", stop_reason="max_tokens") for i in range(5)])
    result = await Agent(model, max_continuations=2).run("write")
    assert model.calls == 3 and result.state is State.DONE


async def test_truncated_trailing_tool_call_is_never_executed() -> None:
    ran: list[str] = []

    @tool
    def write(text: str) -> str:
        """Write."""
        ran.append(text)
        return "ok"

    model = ScriptedModel(
        [
            tool_response(call("write", {"text": "partial"}, id="w"), stop_reason="max_tokens"),
            text_response("retrying later"),
        ]
    )
    result = await Agent(model, tools=[write]).run("go")
    assert ran == []
    (res,) = results(result.messages)
    assert res.is_error and "truncated" in res.text
    assert result.state is State.DONE


async def test_refusal_ends_done_with_details_and_runs_no_tool() -> None:
    ran: list[str] = []

    @tool
    def act() -> str:
        """Act."""
        ran.append("x")
        return "done"

    model = ScriptedModel(
        [
            tool_response(
                call("act", {}, id="a"),
                stop_reason="refusal",
                stop_details={"category": "cyber", "explanation": "no"},
            )
        ]
    )
    result = await Agent(model, tools=[act]).run("hack")
    assert result.state is State.DONE and ran == []
    assert result.refusal == {"category": "cyber", "explanation": "no"}
    assert results(result.messages)[0].text.startswith("Not executed")
    assert_valid_history(result.messages)


async def test_unknown_stop_reason_is_kept() -> None:
    model = ScriptedModel([text_response("hm", stop_reason="brand_new_reason")])
    result = await Agent(model).run("go")
    assert result.state is State.DONE and result.stop_reason == "brand_new_reason"


async def test_empty_tool_use_response_ends_with_a_clear_outcome() -> None:
    model = ScriptedModel([{"content": [], "stop_reason": "tool_use"}])
    result = await Agent(model).run("go")
    assert result.state is State.DONE
    assert "no tool call" in (result.error or "")
    assert not any(isinstance(m, UserMessage) and not m.content for m in result.messages)


async def test_retryable_error_is_retried_then_succeeds() -> None:
    model = ScriptedModel([error_step(), text_response("ok")])
    agent = Agent(model, retry_backoff_seconds=0.001)
    retries: list[Event] = []
    agent.subscribe(lambda e: retries.append(e) if isinstance(e, ModelRetry) else None)
    result = await agent.run("go")
    assert result.state is State.DONE and result.text == "ok" and model.calls == 2
    assert retries == [ModelRetry(attempt=1, delay_seconds=0.001, error="Overloaded")]
    assert [m.role for m in result.messages] == ["user", "assistant"]  # the failure left nothing


async def test_retries_spent_end_failed_with_attempts() -> None:
    model = ScriptedModel([error_step(), error_step(), error_step()])
    result = await Agent(model, model_retries=2, retry_backoff_seconds=0.001).run("go")
    assert result.state is State.FAILED
    assert "3 attempt(s)" in (result.error or "") and "overloaded_error" in (result.error or "")
    assert_valid_history(result.messages)


async def test_auth_error_fails_without_retry() -> None:
    model = ScriptedModel(
        [error_step("authentication_error", "invalid x-api-key"), text_response("x")]
    )
    result = await Agent(model, retry_backoff_seconds=0.001).run("go")
    assert result.state is State.FAILED and model.calls == 1
    assert "ANTHROPIC_API_KEY" in (result.error or "")


async def test_script_exhausted_is_a_clear_failure() -> None:
    model = ScriptedModel([tool_response(call("echo", {"text": "x"}))])
    result = await Agent(model, tools=[echo]).run("go")
    assert result.state is State.FAILED
    assert "no step 2" in (result.error or "")


async def test_should_continue_false_ends_in_max_turns() -> None:
    model = ScriptedModel([tool_response(call("echo", {"text": "x"})), text_response("x")])

    def stop(info: TurnInfo) -> bool:
        return False

    result = await Agent(model, tools=[echo], should_continue=stop).run("go")
    assert result.state is State.MAX_TURNS and model.calls == 1 and result.turns == 1
    assert result.error == (
        "Stopped after 1 turn(s): the should_continue hook returned False. The last action was a "
        "tool batch (echo) whose results are recorded. To continue, call run() again without a "
        "prompt and a higher limit, e.g. await agent.run(max_turns=11)."
    )
    assert [m.role for m in result.messages] == ["user", "assistant", "tool_result"]


async def test_run_hook_that_raises_ends_failed_with_valid_history() -> None:
    model = ScriptedModel([tool_response(call("echo", {"text": "x"})), text_response("x")])

    def broken(info: TurnInfo) -> bool:
        raise RuntimeError("hook bug")

    result = await Agent(model, tools=[echo], should_continue=broken).run("go")
    assert result.state is State.FAILED and model.calls == 1
    assert result.error == "The should_continue hook failed: RuntimeError: hook bug"
    assert [(m.role, m.text) for m in result.messages] == [
        ("user", "go"),
        ("assistant", ""),
        ("tool_result", "x"),
    ]
    assert_valid_history(result.messages)

    def bad_transform(messages: list[Any]) -> list[Any]:
        raise RuntimeError("transform bug")

    model2 = ScriptedModel([text_response("x")])
    result2 = await Agent(model2, transform_context=bad_transform).run("go")
    assert result2.state is State.FAILED and model2.calls == 0
    assert result2.error == "The transform_context hook failed: RuntimeError: transform bug"
    (user, failure) = result2.messages
    assert isinstance(user, UserMessage) and user.text == "go"
    assert isinstance(failure, AssistantMessage) and failure.stop_reason == StopReason.ERROR
    assert failure.content == [] and failure.error == result2.error
    assert_valid_history(result2.messages)


async def test_tool_hooks_that_raise_give_error_results() -> None:
    ran: list[str] = []

    @tool
    def record(text: str) -> str:
        """Record."""
        ran.append(text)
        return text

    def before(info: Any) -> None:
        raise RuntimeError("before bug")

    model = ScriptedModel(
        [tool_response(call("record", {"text": "x"}, id="r")), text_response("x")]
    )
    agent = Agent(model, tools=[record], before_tool_call=before)
    events: list[Event] = []
    agent.subscribe(events.append)
    result = await agent.run("go")
    assert ran == []
    (res,) = results(result.messages)
    assert (res.tool_call_id, res.is_error) == ("r", True)
    assert res.text == (
        "The before_tool_call hook failed (RuntimeError: before bug); the call was not completed."
    )
    assert [e.result for e in events if isinstance(e, ToolExecutionEnd)] == [res]
    assert result.state is State.DONE and result.text == "x"
    assert_valid_history(result.messages)


async def test_before_hook_can_change_arguments_and_after_hook_replace_result() -> None:
    def before(info: Any) -> dict[str, Any]:
        return {"text": info.arguments["text"].upper()}

    def after(info: Any, result: ToolResultMessage) -> ToolResultMessage:
        return result.model_copy(update={"tool_call_id": "wrong-id", "details": {"seen": True}})

    model = ScriptedModel([tool_response(call("echo", {"text": "hi"}, id="e")), text_response("x")])
    result = await Agent(model, tools=[echo], before_tool_call=before, after_tool_call=after).run(
        "go"
    )
    (res,) = results(result.messages)
    assert res.text == "HI" and res.details == {"seen": True} and res.tool_call_id == "e"
    assert_valid_history(result.messages)


async def test_validation_reports_every_field_error_and_the_arguments() -> None:
    @tool
    def book(city: str, nights: int, guests: int) -> str:
        """Book."""
        return "booked"

    model = ScriptedModel(
        [tool_response(call("book", {"nights": "many", "guests": "two"})), text_response("x")]
    )
    result = await Agent(model, tools=[book]).run("go")
    text = results(result.messages)[0].text
    assert "3 error(s)" in text
    assert "city" in text and "nights" in text and "guests" in text
    assert '"nights": "many"' in text


async def test_tool_timeout_gives_an_error_result() -> None:
    @tool(timeout_seconds=0.05)
    async def hang() -> str:
        """Hang."""
        await asyncio.sleep(10)
        return "never"

    model = ScriptedModel([tool_response(call("hang", {})), text_response("x")])
    result = await Agent(model, tools=[hang]).run("go")
    text = results(result.messages)[0].text
    assert text.startswith("Timed out") and "0.05 s" in text


async def test_events_pair_up_and_state_changes_are_reported() -> None:
    model = ScriptedModel(
        [tool_response(call("echo", {"text": "a"}), call("nope", {})), text_response("done")]
    )
    agent = Agent(model, tools=[echo])
    events: list[Event] = []
    unsubscribe = agent.subscribe(events.append)
    await agent.run("go")
    unsubscribe()
    assert pairs_ok(events)
    path = [(e.source, e.dest) for e in events if isinstance(e, StateChanged)]
    assert path == [
        ("idle", "awaiting_model"),
        ("awaiting_model", "executing_tools"),
        ("executing_tools", "awaiting_model"),
        ("awaiting_model", "done"),
    ]


async def test_a_str_prompt_is_stored_as_the_user_message_it_stands_for() -> None:
    agent = Agent(ScriptedModel([text_response("done")]))
    await agent.run("go")
    prompt, expected = agent.messages[0], UserMessage("go")
    assert prompt == expected
    assert prompt.model_dump() == expected.model_dump()
    assert prompt.model_fields_set == expected.model_fields_set == {"content"}
    assert prompt.content[0].model_fields_set == expected.content[0].model_fields_set


async def test_async_event_iterator() -> None:
    model = ScriptedModel([text_response("hi")])
    agent = Agent(model)
    seen: list[str] = []

    async def collect() -> None:
        async for event in agent.events():
            seen.append(event.type)
            if isinstance(event, RunEnd):
                return

    collector = asyncio.create_task(collect())
    await asyncio.sleep(0)  # the collector runs up to its first wait: it is subscribed
    await agent.run("go")
    await collector
    assert seen == [
        "run_start",
        "message_end",
        "state_changed",
        "turn_start",
        "message_start",
        "message_delta",
        "message_end",
        "state_changed",
        "turn_end",
        "run_end",
    ]


async def test_subscriber_that_raises_does_not_stop_the_run() -> None:
    agent = Agent(ScriptedModel([text_response("hi")]))

    def bad(event: Event) -> None:
        raise RuntimeError("subscriber bug")

    agent.subscribe(bad)
    seen: list[str] = []
    agent.subscribe(lambda e: seen.append(e.type))  # later subscribers still get every event
    result = await agent.run("go")
    assert result.state is State.DONE and result.text == "hi"
    assert seen[0] == "run_start" and seen[-1] == "run_end" and len(seen) == 10


async def test_running_twice_at_once_is_misuse() -> None:
    requested = asyncio.Event()
    release = asyncio.Event()

    async def respond(messages: Any, request: ModelRequest) -> str:
        requested.set()
        await release.wait()
        return "hi"

    agent = Agent(FunctionModel(respond))
    task = asyncio.create_task(agent.run("go"))
    await requested.wait()
    with pytest.raises(AgentBusyError):
        await agent.run("again")
    release.set()
    result = await task
    assert result.state is State.DONE and result.text == "hi"
    assert [m.text for m in result.messages] == ["go", "hi"]  # the refused run added nothing


async def test_continue_without_anything_to_continue_is_misuse() -> None:
    agent = Agent(ScriptedModel([text_response("hi")]))
    with pytest.raises(UsageError, match="pass a prompt"):
        await agent.run()
    await agent.run("go")
    with pytest.raises(UsageError, match="pass a prompt"):
        await agent.run()


async def test_abort_from_another_thread() -> None:
    started = asyncio.Event()

    @tool
    async def slow() -> str:
        """Sleep."""
        started.set()
        await asyncio.Event().wait()  # only the abort's cancellation ends it
        return "x"

    agent = Agent(
        ScriptedModel([tool_response(call("slow", {}, id="s")), text_response("x")]),
        tools=[slow],
        abort_grace_seconds=0.1,
    )
    task = asyncio.create_task(agent.run("go"))
    await started.wait()
    thread = threading.Thread(target=agent.abort, args=("from a thread",))
    thread.start()
    result = await task
    thread.join()
    assert result.state is State.ABORTED and result.error == "from a thread"
    (res,) = results(result.messages)
    assert res.tool_call_id == "s" and res.is_error and res.text.startswith("Interrupted")


async def test_cooperative_tool_sees_the_signal() -> None:
    from statemachine_agent import ToolContext

    stopped: list[bool] = []
    started = asyncio.Event()

    @tool
    async def worker(ctx: ToolContext) -> str:
        """Work until aborted."""
        started.set()
        await ctx.signal.wait()
        stopped.append(True)
        return "stopped cleanly"

    agent = Agent(
        ScriptedModel([tool_response(call("worker", {})), text_response("x")]),
        tools=[worker],
        abort_grace_seconds=5,
    )
    task = asyncio.create_task(agent.run("go"))
    await started.wait()
    agent.abort()
    result = await task
    assert stopped == [True]
    assert result.state is State.ABORTED and result.error == "aborted by the caller"
    # It finished inside the grace period, so its own result is kept.
    assert results(result.messages)[0].text == "stopped cleanly"


async def test_cancel_during_model_request_records_and_reraises() -> None:
    agent = Agent(ScriptedModel([text_response("late", delay_seconds=30)]))
    requesting = asyncio.Event()
    agent.subscribe(lambda e: requesting.set() if isinstance(e, TurnStart) else None)
    task = asyncio.create_task(agent.run("go"))
    await requesting.wait()  # the run is in its request (the response is 30 s away)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert agent.state is State.ABORTED
    assert_valid_history(agent.messages)
    assert agent.messages[-1].stop_reason == StopReason.ABORTED  # type: ignore[union-attr]


async def test_function_model_and_progress_updates() -> None:
    from statemachine_agent import ToolContext, ToolExecutionUpdate

    @tool
    async def work(ctx: ToolContext) -> str:
        """Work."""
        ctx.progress({"percent": 50})
        return "done"

    def respond(messages: Any, request: ModelRequest) -> Any:
        if isinstance(messages[-1], UserMessage):
            return tool_response(call("work", {}, id="w"))
        return "All done."

    agent = Agent(FunctionModel(respond), tools=[work])
    updates: list[Any] = []
    agent.subscribe(
        lambda e: updates.append(e.update) if isinstance(e, ToolExecutionUpdate) else None
    )
    result = await agent.run("go")
    assert updates == [{"percent": 50}] and result.text == "All done."


async def test_duplicate_tool_call_id_from_the_model_fails_clearly() -> None:
    model = ScriptedModel(
        [
            tool_response(call("echo", {"text": "a"}, id="same")),
            tool_response(call("echo", {"text": "b"}, id="same")),
        ]
    )
    result = await Agent(model, tools=[echo]).run("go")
    assert result.state is State.FAILED and "reuses tool-call id" in (result.error or "")
    assert_valid_history(result.messages)


async def test_a_response_giving_two_of_its_calls_one_id_fails_clearly() -> None:
    """Two calls sharing an id within one response (not only across responses) fail the run
    before either runs: their results could not be told apart."""
    ran: list[str] = []

    def job(text: str) -> str:
        """Records ``text``."""
        ran.append(text)
        return text

    model = ScriptedModel(
        [
            tool_response(
                call("job", {"text": "a"}, id="twice"), call("job", {"text": "b"}, id="twice")
            ),
            text_response("done"),
        ]
    )
    result = await Agent(model, tools=[job]).run("go")
    assert result.state is State.FAILED
    assert "reuses tool-call id(s) twice" in (result.error or "")
    assert ran == []
    assert_valid_history(result.messages)


async def test_usage_adds_up_over_the_run() -> None:
    usage = {"input_tokens": 10, "output_tokens": 5, "cache_read_input_tokens": 3}
    model = ScriptedModel(
        [
            tool_response(call("echo", {"text": "a"}), usage=usage),
            text_response("ok", usage=usage),
        ]
    )
    result = await Agent(model, tools=[echo]).run("go")
    assert result.usage.input_tokens == 20 and result.usage.cache_read_tokens == 6


def test_run_sync_refuses_inside_a_loop() -> None:
    agent = Agent(ScriptedModel([text_response("hi")]))

    async def inner() -> None:
        with pytest.raises(UsageError):
            agent.run_sync("go")

    asyncio.run(inner())
    assert agent.run_sync("go").state is State.DONE


async def test_a_change_to_the_agents_settings_in_place_applies_from_the_next_run() -> None:
    # The run keeps copies of the agent's model settings and tool definitions: a change made in
    # place during the run (here by a tool) is sent from the next run on, not half-way through.
    agent: Agent

    @tool
    def tweak() -> str:
        """Change the agent's settings in place."""
        agent.model_settings["temperature"] = 0.5
        agent.tool_definitions.append(ToolDefinition("other", "Another tool.", {"type": "object"}))
        return "ok"

    model = ScriptedModel(
        [tool_response(call("tweak")), text_response("done"), text_response("again")]
    )
    agent = Agent(model, tools=[tweak], model_settings={"temperature": 0.0})
    await agent.run("go")
    first, second = model.requests
    assert first.settings == second.settings == {"temperature": 0.0}
    assert len(first.tools) == len(second.tools) == 1
    await agent.run("again")
    assert model.requests[2].settings == {"temperature": 0.5}
    assert len(model.requests[2].tools) == 2


async def test_a_prompt_of_a_str_subclass_is_stored_as_a_plain_str() -> None:
    class Prompt(str):
        pass

    agent = Agent(ScriptedModel([text_response("done")]))
    await agent.run(Prompt("go"))
    prompt = agent.messages[0]
    assert prompt == UserMessage("go")
    assert type(prompt.content[0].text) is str  # as validation stores it
