"""Issue 30, item 2: one `AnthropicModel` serves any number of event loops (``run_sync`` twice,
``asyncio.run`` twice, a thread's own loop, a sub-agent run with ``run_sync`` inside a tool),
through the real SDK against the local replay server, and leaves no connection of a dead loop
behind (no "Event loop is closed", no unclosed-resource warning)."""

from __future__ import annotations

import asyncio
import gc
import logging
import sys
import threading
import warnings
from collections.abc import Iterator
from typing import Any

import anthropic
import pytest

from statemachine_agent import (
    Agent,
    RunResult,
    State,
    TextBlock,
    ToolResultMessage,
    UsageError,
    tool,
)
from statemachine_agent.models import AnthropicModel, FunctionModel

from .replay_server import MODEL, ReplayServer, Reply, reply, says
from .replay_server import anthropic_model as make_model


def calls_delegate(call_id: str, question: str) -> Reply:
    block = {"type": "tool_use", "id": call_id, "name": "delegate", "input": {"question": question}}
    return reply([block], "tool_use")


def texts(body: dict[str, Any]) -> list[tuple[str, str]]:
    """(role, text) of each message of a request body whose content is text."""
    out = []
    for message in body["messages"]:
        content = message["content"]
        if isinstance(content, str):
            out.append((message["role"], content))
        else:
            joined = "".join(b.get("text", "") for b in content if b["type"] == "text")
            out.append((message["role"], joined))
    return out


@pytest.fixture
def no_stray_resources(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Collects, until the test ends (after a garbage collection), every warning and every
    exception raised where nothing could catch it (``sys.unraisablehook``: a ``__del__``, a
    finalizer), and asserts there were none: no "Event loop is closed", no unclosed socket or
    transport of a dead loop. The test may look at the list too. Garbage left by earlier tests
    is collected first, so what is reported is this test's own."""
    gc.collect()
    seen: list[str] = []
    monkeypatch.setattr(
        sys,
        "unraisablehook",
        lambda u: seen.append(f"unraisable: {u.exc_type.__name__}: {u.exc_value}"),
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        yield seen
        gc.collect()
    seen += [f"{w.category.__name__}: {w.message}" for w in caught]
    assert seen == []


def test_two_run_sync_calls_in_a_row_both_finish_done(no_stray_resources: list[str]) -> None:
    with ReplayServer([says("answer 1"), says("answer 2")]) as server:
        agent = Agent(make_model(server))
        first = agent.run_sync("prompt 1")
        second = agent.run_sync("prompt 2")

    assert (first.state, first.error, first.text) == (State.DONE, None, "answer 1")
    assert (second.state, second.error, second.text) == (State.DONE, None, "answer 2")
    assert len(server.requests) == 2
    assert texts(server.requests[1].body) == [
        ("user", "prompt 1"),
        ("assistant", "answer 1"),
        ("user", "prompt 2"),
    ]


def test_three_asyncio_run_calls_in_one_process_reuse_one_model(
    no_stray_resources: list[str],
) -> None:
    with ReplayServer([says("one"), says("two"), says("three")]) as server:
        model = make_model(server)
        agent = Agent(model)
        results = [asyncio.run(agent.run(p)) for p in ("a", "b", "c")]
        asyncio.run(model.aclose())

    assert [(r.state, r.text) for r in results] == [
        (State.DONE, "one"),
        (State.DONE, "two"),
        (State.DONE, "three"),
    ]
    assert len(server.requests) == 3
    assert [t for _, t in texts(server.requests[2].body)] == ["a", "one", "b", "two", "c"]


def test_a_model_closed_with_aclose_is_used_again_on_the_same_loop(
    no_stray_resources: list[str],
) -> None:
    # aclose closes the loop's client: the next run on that loop gets a new one, not the closed.
    async def run_close_run_close(model: AnthropicModel) -> list[RunResult]:
        results = [await Agent(model).run("a")]
        await model.aclose()
        results.append(await Agent(model).run("b"))
        await model.aclose()
        await model.aclose()  # again: nothing left to close, no error
        return results

    with ReplayServer([says("before aclose"), says("after aclose")]) as server:
        model = make_model(server)
        results = asyncio.run(run_close_run_close(model))

    assert [(r.state, r.error, r.text) for r in results] == [
        (State.DONE, None, "before aclose"),
        (State.DONE, None, "after aclose"),
    ]
    assert len(server.requests) == 2


def test_a_thread_with_its_own_loop_then_the_main_thread(no_stray_resources: list[str]) -> None:
    with ReplayServer(
        [says("from the thread"), says("from a loop run by hand"), says("main")]
    ) as server:
        model = make_model(server)
        results: list[RunResult] = []

        def in_a_thread() -> None:
            results.append(asyncio.run(Agent(model).run("thread")))
            # A loop driven by hand (no asyncio.run): closed with aclose before the loop is.
            loop = asyncio.new_event_loop()
            try:
                results.append(loop.run_until_complete(Agent(model).run("by hand")))
                loop.run_until_complete(model.aclose())
            finally:
                loop.close()

        worker = threading.Thread(target=in_a_thread)
        worker.start()
        worker.join()
        results.append(Agent(model).run_sync("main"))

    assert [(r.state, r.error, r.text) for r in results] == [
        (State.DONE, None, "from the thread"),
        (State.DONE, None, "from a loop run by hand"),
        (State.DONE, None, "main"),
    ]
    assert len(server.requests) == 3


async def test_a_sub_agent_run_with_run_sync_inside_a_tool_answers_both_delegations(
    server: ReplayServer, no_stray_resources: list[str]
) -> None:
    # One model serves the parent (this test's loop) and the child (a new loop per run_sync, in
    # the sync-tool thread) at the same time.
    model = server.closing(make_model(server))
    child = Agent(model)

    @tool
    def delegate(question: str) -> str:
        """Ask the sub-agent."""
        result = child.run_sync(question)
        return f"{result.state.value}: {result.text}"

    server.add(
        calls_delegate("toolu_1", "first question"),
        says("child answer 1"),
        calls_delegate("toolu_2", "second question"),
        says("child answer 2"),
        says("parent done"),
    )
    result = await Agent(model, tools=[delegate]).run("delegate twice")

    assert (result.state, result.error, result.text) == (State.DONE, None, "parent done")
    tool_results = [m for m in result.messages if isinstance(m, ToolResultMessage)]
    assert [m.content for m in tool_results] == [
        [TextBlock(text="done: child answer 1")],
        [TextBlock(text="done: child answer 2")],
    ]
    assert len(server.requests) == 5
    # The child's second run continues its own session: its first exchange, then the question.
    assert texts(server.requests[3].body) == [
        ("user", "first question"),
        ("assistant", "child answer 1"),
        ("user", "second question"),
    ]


def test_a_client_passed_in_serves_one_loop_and_a_second_loop_fails_saying_why(
    no_stray_resources: list[str],
) -> None:
    with ReplayServer([says("first"), says("not sent")]) as server, asyncio.Runner() as owner:
        client = anthropic.AsyncAnthropic(api_key="test", base_url=server.url, max_retries=0)
        agent = Agent(AnthropicModel(MODEL, client=client))
        first = owner.run(agent.run("one"))
        second = agent.run_sync("two")  # another loop
        owner.run(client.close())  # the owner closes it, on its loop

    assert (first.state, first.text) == (State.DONE, "first")
    assert second.state is State.FAILED
    assert second.error is not None
    assert "client=" in second.error and "another event loop" in second.error
    assert "api_key=" in second.error  # what to do instead
    assert len(server.requests) == 1


def test_a_client_passed_in_on_a_second_loop_logs_its_usage_error_without_a_traceback(
    no_stray_resources: list[str], caplog: pytest.LogCaptureFixture
) -> None:
    with ReplayServer([says("first")]) as server, asyncio.Runner() as owner:
        client = anthropic.AsyncAnthropic(api_key="test", base_url=server.url, max_retries=0)
        agent = Agent(AnthropicModel(MODEL, client=client))
        owner.run(agent.run("one"))
        with caplog.at_level(logging.DEBUG, logger="statemachine_agent"):
            second = agent.run_sync("two")  # another loop: the documented UsageError
        owner.run(client.close())

    assert second.state is State.FAILED and second.error is not None
    logged = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(logged) == 1, [r.getMessage() for r in logged]
    assert logged[0].exc_info is None  # an explained failure: its message, not a traceback
    assert "refused the request" in logged[0].getMessage()
    assert "another event loop" in logged[0].getMessage()


@pytest.mark.parametrize(
    ("raised", "traceback"),
    [(UsageError("pass api_key= instead"), False), (ValueError("a bug in the model"), True)],
)
def test_a_models_usage_error_is_logged_plainly_and_an_unexpected_one_with_its_traceback(
    raised: Exception, traceback: bool, caplog: pytest.LogCaptureFixture
) -> None:
    def model(messages: object, request: object) -> str:
        raise raised

    with caplog.at_level(logging.DEBUG, logger="statemachine_agent"):
        result = Agent(FunctionModel(model)).run_sync("hi")
    assert result.state is State.FAILED and str(raised) in (result.error or "")
    logged = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(logged) == 1 and str(raised) in logged[0].getMessage() + str(logged[0].exc_info)
    assert (logged[0].exc_info is not None) is traceback


async def test_aclose_closes_the_client_of_a_loop_still_running_in_another_thread(
    server: ReplayServer,
) -> None:
    model = make_model(server)
    server.add(says("in the other loop"))
    other = asyncio.new_event_loop()
    running = threading.Thread(target=other.run_forever)
    running.start()
    try:
        result = await asyncio.wrap_future(
            asyncio.run_coroutine_threadsafe(Agent(model).run("hi"), other)
        )
        clients = [
            await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(_client_of(model), other))
        ]
        await model.aclose()
        assert clients[0].is_closed()
    finally:
        other.call_soon_threadsafe(other.stop)
        running.join()
        other.close()
    assert result.text == "in the other loop"


async def _client_of(model: AnthropicModel) -> anthropic.AsyncAnthropic:
    return model.client
