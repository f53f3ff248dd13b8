"""Bug reports filed against other agent loops (and the Anthropic SDK), replayed against this one.

Each test reduces one public report to a small run and asserts what we expect instead. The
first group (issue 30's subject: a model client that survives event loops) plays through
`AnthropicModel` and the real SDK against the local replay server; the second group (issue 31's
subject: tools as users write them) is a scripted run, or the real SDK where the report is
about the wire. The cases issues 30 and 31 already name are tested elsewhere; these are others.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import gc
import sys
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from models.replay_server import ReplayServer, Reply, message, reply, says, sse
from models.replay_server import anthropic_model as new_model

from statemachine_agent import (
    Agent,
    RunResult,
    State,
    ToolDefinitionError,
    ToolResultMessage,
    tool,
)
from statemachine_agent.models import AnthropicModel, ScriptedModel
from statemachine_agent.testing import assert_valid_history
from statemachine_agent.testing.steps import call, text_response, tool_response

# -- helpers --------------------------------------------------------------------------------------


def calls(id: str, name: str, arguments: dict[str, Any]) -> Reply:
    return reply([{"type": "tool_use", "id": id, "name": name, "input": arguments}], "tool_use")


def results(messages: list[Any]) -> list[ToolResultMessage]:
    return [m for m in messages if isinstance(m, ToolResultMessage)]


def wire_results(body: dict[str, Any]) -> list[dict[str, Any]]:
    """The ``tool_result`` blocks of a recorded request body."""
    return [
        block
        for message in body["messages"]
        if isinstance(message["content"], list)
        for block in message["content"]
        if block.get("type") == "tool_result"
    ]


@pytest.fixture
def replay() -> Iterator[ReplayServer]:
    """A running replay server for tests that drive their own event loops (``run_sync``)."""
    with ReplayServer() as running:
        yield running


# == A. A model client that survives event loops ===================================================


def test_run_sync_works_after_the_app_closed_the_threads_current_loop(
    replay: ReplayServer,
) -> None:
    """pydantic/pydantic-ai#6849: ``run_sync`` scheduled its run on the thread's current event
    loop, so an application (or a library) that had closed that loop made every later
    ``run_sync`` fail with "Event loop is closed" before the run began.

    Expected: ``run_sync`` never depends on the thread's current loop: with a closed loop set as
    current, the run ends ``done`` with the model's answer after exactly one request (and the
    model can be closed afterwards).
    """
    model = new_model(replay)
    replay.add(says("Hello."))
    stale = asyncio.new_event_loop()
    asyncio.set_event_loop(stale)
    stale.close()
    try:
        result = Agent(model).run_sync("Say hello.")
    finally:
        asyncio.set_event_loop(None)

    assert result.state is State.DONE, result.error
    assert result.text == "Hello."
    assert len(replay.requests) == 1
    asyncio.run(model.aclose())  # and the model closes afterwards, in a loop of its own


async def test_run_sync_inside_an_async_tool_is_an_error_result_naming_await_not_a_hang(
    server: ReplayServer,
) -> None:
    """pydantic/pydantic-ai#3899 (fixed by pydantic/pydantic-ai#7277): a tool that delegated to a
    sub-agent with ``run_sync`` froze the whole run (a nested ``run_until_complete`` on the
    parent's loop) instead of failing.

    Expected: an ``async def`` tool that calls ``run_sync`` gets an error result that says to use
    ``await agent.run()``, the sub-agent sends nothing and is left free (it can run right after),
    and the parent run goes on to ``done`` with 2 requests, the second answering the call.
    """
    shared = server.closing(new_model(server))
    helper = Agent(shared)

    @tool
    async def delegate(question: str) -> str:
        """Ask the helper agent.

        Args:
            question: what to ask.
        """
        return helper.run_sync(question).text

    server.add(calls("toolu_d1", "delegate", {"question": "2+2?"}), says("I will answer myself."))
    result = await Agent(shared, tools=[delegate]).run("Ask the helper what 2+2 is.")

    assert result.state is State.DONE, result.error
    assert len(server.requests) == 2  # none from the helper
    (answer,) = results(result.messages)
    assert answer.is_error
    assert "await agent.run()" in answer.text
    (sent,) = wire_results(server.requests[1].body)
    assert sent["tool_use_id"] == "toolu_d1" and sent["is_error"] is True
    assert not helper.is_running and helper.messages == []
    server.add(says("4"))
    assert (await helper.run("2+2?")).text == "4"


async def test_one_model_serves_a_background_loop_while_its_first_loop_is_still_alive(
    server: ReplayServer,
) -> None:
    """pydantic/pydantic-ai#748: a model first used on one event loop, then driven on a
    long-lived loop in a background thread (``asyncio.run_coroutine_threadsafe``), failed with
    "Event loop is closed" / "attached to a different loop": the HTTP client's pooled connection
    belonged to the first loop, which was still alive, so nothing told the pool it was stale.

    Expected: three runs of one agent and one `AnthropicModel`, on the test's loop, then on a
    background thread's loop, then on the test's loop again, all end ``done``; exactly 3
    requests, the third carrying both earlier exchanges.
    """
    agent = Agent(server.closing(new_model(server)))
    server.add(says("one"), says("two"), says("three"))
    background = asyncio.new_event_loop()
    thread = threading.Thread(target=background.run_forever, daemon=True)
    thread.start()
    try:
        first = await agent.run("First.")
        future = asyncio.run_coroutine_threadsafe(agent.run("Second."), background)
        second = await asyncio.wrap_future(future)
        third = await agent.run("Third.")
    finally:
        background.call_soon_threadsafe(background.stop)
        await asyncio.get_running_loop().run_in_executor(None, thread.join)
        background.close()

    assert [first.state, second.state, third.state] == [State.DONE] * 3, (
        first.error,
        second.error,
        third.error,
    )
    assert [first.text, second.text, third.text] == ["one", "two", "three"]
    assert len(server.requests) == 3
    assert [m["role"] for m in server.requests[2].body["messages"]] == [
        "user",
        "assistant",
        "user",
        "assistant",
        "user",
    ]


def test_closing_a_model_after_its_run_loop_is_gone_raises_and_reports_nothing(
    replay: ReplayServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """anthropics/anthropic-sdk-python#807: the SDK's HTTP client wrapper scheduled its own close
    on whatever loop was running when it was collected; with more than one event loop in a
    process the close ran against a dead loop and logged "RuntimeError: Event loop is closed".

    Expected: after a ``run_sync`` (whose loop is closed when it returns), ``await
    model.aclose()`` in a new loop returns without raising, nothing reaches that loop's exception
    handler, and collecting the model afterwards raises nothing unraisable.
    """
    model = new_model(replay)
    replay.add(says("Done."))
    result = Agent(model).run_sync("Finish.")
    reported: list[dict[str, Any]] = []
    unraisable: list[Any] = []
    monkeypatch.setattr(sys, "unraisablehook", unraisable.append)

    async def close(closing: AnthropicModel) -> None:
        asyncio.get_running_loop().set_exception_handler(lambda _loop, ctx: reported.append(ctx))
        await closing.aclose()

    asyncio.run(close(model))
    del model
    gc.collect()

    assert result.state is State.DONE, result.error
    assert reported == []
    assert [repr(u.exc_value) for u in unraisable] == []


def test_parallel_sub_agents_in_worker_threads_share_one_model(replay: ReplayServer) -> None:
    """NousResearch/hermes-agent#2214: parallel sub-agents run in a thread pool, each with
    ``asyncio.run``, shared cached async clients; connections opened on one worker's loop were
    reused on another's (or closed after it), failing with "Event loop is closed".

    Expected: two sub-agents sharing one `AnthropicModel`, each in its own worker thread with
    ``run_sync`` and held mid-run at the same moment (a tool waits on a barrier), both end
    ``done`` with one answer each; a later ``run_sync`` on the main thread with the same model
    ends ``done`` too; exactly 5 requests (and the model can be closed afterwards).
    """
    model = new_model(replay)
    both_mid_run = threading.Barrier(2)

    @tool
    def meet() -> str:
        """Wait for the other worker."""
        both_mid_run.wait()
        return "met"

    replay.add(
        calls("toolu_w1", "meet", {}),
        calls("toolu_w2", "meet", {}),
        says("A"),
        says("B"),
        says("main"),
    )

    def worker() -> RunResult:
        try:
            return Agent(model, tools=[meet]).run_sync("Meet.")
        finally:
            both_mid_run.abort()  # a run that ended without meeting must not hold the other

    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        workers = [run.result() for run in [pool.submit(worker) for _ in range(2)]]
    last = Agent(model).run_sync("And you?")

    assert [w.state for w in workers] == [State.DONE, State.DONE], [w.error for w in workers]
    assert sorted(w.text for w in workers) == ["A", "B"]
    assert last.state is State.DONE and last.text == "main", last.error
    assert len(replay.requests) == 5
    asyncio.run(model.aclose())  # and the model closes afterwards, in a loop of its own


# == B. Tools as users write them ==================================================================


def greet(greeting: str, name: str) -> str:
    """Greet someone.

    Args:
        greeting: the greeting word.
        name: who to greet.
    """
    return f"{greeting}, {name}!"


async def test_a_functools_partial_is_a_tool_with_its_functions_description() -> None:
    """pydantic/pydantic-ai#2347 (also langchain-ai/langchain#27500): a ``functools.partial``
    could not be a tool: schema generation raised on it (a partial has no ``__name__`` and is not
    a function for ``get_type_hints``), or the description became the boilerplate docstring of
    ``functools.partial`` itself.

    Expected: ``tool(partial(greet, "Hello"), name="say_hello")`` is a tool whose description is
    ``greet``'s docstring, whose schema holds only the unbound parameter ``name``, and a scripted
    call of it returns ``"Hello, Ada!"`` and the run ends ``done``. Without ``name=`` it is
    either a tool named after ``greet`` or a `ToolDefinitionError` asking for a name: no
    ``AttributeError`` / ``TypeError`` from `tool`.
    """
    hello = tool(functools.partial(greet, "Hello"), name="say_hello")
    assert hello.name == "say_hello"
    assert hello.description == "Greet someone."
    assert set(hello.input_schema["properties"]) == {"name"}
    assert hello.input_schema["required"] == ["name"]

    model = ScriptedModel(
        [tool_response(call("say_hello", {"name": "Ada"}, id="p1")), text_response("Greeted.")]
    )
    result = await Agent(model, tools=[hello]).run("Greet Ada.")
    assert result.state is State.DONE, result.error
    (answer,) = results(result.messages)
    assert (answer.is_error, answer.text) == (False, "Hello, Ada!")

    try:
        unnamed = tool(functools.partial(greet, "Hello"))
    except ToolDefinitionError as exc:
        assert "name" in str(exc)
    else:
        assert unnamed.name == "greet"


class Inventory:
    def __init__(self) -> None:
        self.stock = {"apple": 3}

    def count(self, item: str) -> int:
        """Count an item in stock.

        Args:
            item: the item's name.
        """
        return self.stock[item]


async def test_a_bound_method_is_a_tool_without_self_in_its_schema() -> None:
    """openai/openai-agents-python#94 (also huggingface/smolagents#681): a method used as a tool
    leaked ``self`` into the JSON schema (the API refused it: "schema for 'self' must have a
    'type' key"), or the call failed for want of ``self``.

    Expected: ``tool(Inventory().count)`` has a schema holding only ``item``, a scripted call
    runs on that instance (result ``"3"``, the run ``done``), and the unbound function
    ``Inventory.count`` is refused with a `ToolDefinitionError` naming ``self``.
    """
    inventory = Inventory()
    count = tool(inventory.count)
    assert count.name == "count"
    assert count.description == "Count an item in stock."
    assert set(count.input_schema["properties"]) == {"item"}
    assert "self" not in str(count.input_schema)

    model = ScriptedModel(
        [tool_response(call("count", {"item": "apple"}, id="m1")), text_response("3 apples.")]
    )
    result = await Agent(model, tools=[count]).run("How many apples?")
    assert result.state is State.DONE, result.error
    (answer,) = results(result.messages)
    assert (answer.is_error, answer.text) == (False, "3")

    with pytest.raises(ToolDefinitionError, match="'self'"):
        tool(Inventory.count)


def no_argument_call_stream(with_empty_delta: bool) -> Reply:
    """A streamed ``tool_use`` of a tool without parameters, as the API sends it: the block
    starts with ``"input": {}`` and its only ``input_json_delta`` (if any) is empty."""
    block = {"type": "tool_use", "id": "toolu_now", "name": "now", "input": {}}
    deltas = [{"type": "input_json_delta", "partial_json": ""}] if with_empty_delta else []
    events: list[dict[str, Any]] = [
        {
            "type": "message_start",
            "message": message(
                [], None, id="msg_now", usage={"input_tokens": 5, "output_tokens": 1}
            ),
        },
        {"type": "content_block_start", "index": 0, "content_block": block},
        *({"type": "content_block_delta", "index": 0, "delta": d} for d in deltas),
        {"type": "content_block_stop", "index": 0},
        {
            "type": "message_delta",
            "delta": {"stop_reason": "tool_use", "stop_sequence": None},
            "usage": {"output_tokens": 3},
        },
        {"type": "message_stop"},
    ]
    return Reply(body=sse(events))


@pytest.mark.parametrize("with_empty_delta", [False, True], ids=["no-delta", "empty-delta"])
async def test_a_streamed_call_without_arguments_runs_with_empty_input(
    server: ReplayServer, with_empty_delta: bool
) -> None:
    """microsoft/autogen#6661 (fixed by microsoft/autogen#6979): a streamed tool call of a tool
    without parameters carries no (or one empty) ``input_json_delta``; the accumulated argument
    text was ``""`` instead of the block's ``{}``, and parsing it failed when the tool was run.

    Expected: through the real SDK, both stream shapes run the tool once with no arguments
    (result ``"12:00"``), the run ends ``done`` with 2 requests, and request 2 echoes the call
    with ``"input": {}`` and exactly one result for it.
    """
    ran: list[str] = []

    @tool
    def now() -> str:
        """The time."""
        ran.append("now")
        return "12:00"

    server.add(no_argument_call_stream(with_empty_delta), says("It is noon."))
    result = await Agent(server.closing(new_model(server)), tools=[now]).run("Time?")

    assert result.state is State.DONE, result.error
    assert ran == ["now"]
    (answer,) = results(result.messages)
    assert (answer.is_error, answer.text) == (False, "12:00")
    assert len(server.requests) == 2
    echoed = server.requests[1].body["messages"][1]["content"]
    assert [b for b in echoed if b["type"] == "tool_use"] == [
        {"type": "tool_use", "id": "toolu_now", "name": "now", "input": {}}
    ]
    assert [b["tool_use_id"] for b in wire_results(server.requests[1].body)] == ["toolu_now"]


async def test_a_list_argument_sent_as_json_text_is_an_error_result_naming_the_field() -> None:
    """earendil-works/pi#5697 (also earendil-works/pi#9931): models served by some stacks send an
    array parameter as a JSON-encoded string (``{"queries": "[\\"a\\", \\"b\\"]"}``); the
    validator's error did not make the shape plain, and a ``str`` parameter that happened to
    hold JSON text was at risk of being "coerced" by a fix.

    Expected: the tool does not run with a string; the call gets an error result naming the
    field ``queries`` and showing the arguments received; the model's corrected call runs with
    the list, and a ``str`` parameter holding JSON text reaches the tool unchanged; the run ends
    ``done`` with 3 requests.
    """
    ran: list[tuple[list[str], str]] = []

    @tool
    def search(queries: list[str], note: str = "") -> str:
        """Search for each query.

        Args:
            queries: the queries.
            note: a free-text note.
        """
        ran.append((queries, note))
        return f"{len(queries)} hits"

    model = ScriptedModel(
        [
            tool_response(call("search", {"queries": '["a", "b"]'}, id="j1")),
            tool_response(call("search", {"queries": ["a", "b"], "note": '{"k": 1}'}, id="j2")),
            text_response("Two hits."),
        ]
    )
    result = await Agent(model, tools=[search]).run("Search a and b.")

    assert result.state is State.DONE, result.error
    assert ran == [(["a", "b"], '{"k": 1}')]
    first, second = results(result.messages)
    assert first.is_error
    assert "- queries:" in first.text
    assert '\\"a\\"' in first.text  # the arguments received, as JSON
    assert (second.is_error, second.text) == (False, "2 hits")
    assert len(model.requests) == 3


async def test_a_run_cancelled_during_its_only_tool_call_takes_a_new_prompt() -> None:
    """pydantic/pydantic-ai#7977 (fixed by pydantic/pydantic-ai#7993): cancelling a run while its
    first (or only) tool call was running left the call unanswered in the history, so the next
    prompt was refused ("the message history contains unprocessed tool calls"); whether it
    worked depended on whether a sibling call had finished first.

    Expected: cancelling the task running the only call raises `asyncio.CancelledError` to the
    canceller; the history is valid (the call has its result); the agent is free; the next
    prompt runs to ``done`` and its request answers the call exactly once, before the prompt.
    """
    started = asyncio.Event()

    @tool
    async def slow() -> str:
        """A long job."""
        started.set()
        await asyncio.Event().wait()  # runs until cancelled
        return "never"

    model = ScriptedModel(
        [tool_response(call("slow", {}, id="c1")), text_response("Starting over.")]
    )
    agent = Agent(model, tools=[slow], abort_grace_seconds=0)
    task = asyncio.create_task(agent.run("Do the long job."))
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task

    assert not agent.is_running
    assert_valid_history(agent.messages)
    (answer,) = results(agent.messages)
    assert answer.tool_call_id == "c1" and answer.is_error

    result = await agent.run("Never mind; start over.")
    assert result.state is State.DONE, result.error
    assert result.text == "Starting over."
    sent = model.requests[1].messages
    assert [m.role for m in sent] == ["user", "assistant", "tool_result", "user"]
    assert [m.tool_call_id for m in results(list(sent))] == ["c1"]
