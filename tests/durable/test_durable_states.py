"""Endings of a durable run map onto the in-process engine's states: the same `RunResult` and
history as ``agent.run()`` gives (``done``, ``max_turns``, ``failed``), and an abort sent to the
run ends it ``aborted`` with every call answered."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("dbos", reason="the durable tests need the dbos extra")

from statemachine_agent import Agent, ModelError, State, ToolResultMessage, tool
from statemachine_agent._protocol import assert_valid_history
from statemachine_agent.durable import abort, launch, run, shutdown
from statemachine_agent.models import FunctionModel


def counting_model(turns: int) -> Callable[[list[Any], Any], Any]:
    def model(messages: list[Any], request: Any) -> Any:
        done = sum(isinstance(m, ToolResultMessage) for m in messages)
        if done < turns:
            return {
                "content": [
                    {"type": "tool_use", "id": f"c{done}", "name": "echo", "input": {"x": done}}
                ],
                "stop_reason": "tool_use",
            }
        return f"finished after {done}"

    return model


def echo(x: int) -> str:
    """Echo x."""
    return f"echo {x}"


def failing_model(messages: list[Any], request: Any) -> Any:
    if any(isinstance(m, ToolResultMessage) for m in messages):
        raise ModelError("the provider is down for good")
    return counting_model(5)(messages, request)


CASES: dict[str, Callable[[], Agent]] = {
    "done": lambda: Agent(FunctionModel(counting_model(2)), tools=[tool(echo)]),
    "max_turns": lambda: Agent(FunctionModel(counting_model(5)), tools=[tool(echo)], max_turns=2),
    "failed": lambda: Agent(FunctionModel(failing_model), tools=[tool(echo)], model_retries=0),
}


class Factory:
    def __init__(self) -> None:
        self.build: Callable[[], Agent] = CASES["done"]

    def __call__(self) -> Agent:
        return self.build()


@pytest.fixture
async def factory(tmp_path: Path) -> AsyncIterator[Factory]:
    subject = Factory()
    await launch(f"sqlite:///{tmp_path / 'runs.sqlite'}", subject, executor_id="states")
    try:
        yield subject
    finally:
        shutdown()


@pytest.mark.parametrize("ending", list(CASES))
async def test_durable_result_is_the_in_process_result(factory: Factory, ending: str) -> None:
    factory.build = CASES[ending]
    expected = await CASES[ending]().run("Go.")
    got = await run("Go.", run_id=f"same-{ending}")
    assert got.state == expected.state == State(ending)
    assert got.messages == expected.messages
    assert got.new_messages == expected.new_messages
    assert (got.turns, got.error, got.stop_reason, got.text) == (
        expected.turns,
        expected.error,
        expected.stop_reason,
        expected.text,
    )
    assert_valid_history(got.messages)


async def test_abort_sent_to_a_running_run_ends_it_aborted(factory: Factory) -> None:
    started, release = asyncio.Event(), asyncio.Event()

    async def hold(x: int) -> str:
        """Wait until released."""
        started.set()
        await release.wait()
        return f"held {x}"

    factory.build = lambda: Agent(FunctionModel(counting_model(5)), tools=[tool(hold, name="echo")])
    task = asyncio.ensure_future(run("Go.", run_id="to-abort"))
    await started.wait()
    await abort("to-abort", "stop, please")
    release.set()
    result = await task
    assert result.state == State.ABORTED
    assert result.error == "stop, please"
    assert result.turns == 1
    assert [m.content[0].text for m in result.messages if isinstance(m, ToolResultMessage)] == [  # type: ignore[union-attr]
        "held 0"
    ]
    assert_valid_history(result.messages)


@pytest.mark.parametrize("retries", [0, 1, 2])
async def test_tool_step_retries_only_when_the_tool_asks(
    factory: Factory, retries: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    from statemachine_agent.durable import _steps

    # Patched where the tool step reads it (the module that holds `DurableBatch`).
    monkeypatch.setattr(_steps, "STEP_RETRY_INTERVAL_SECONDS", 0.01)
    attempts: list[int] = []

    def flaky(x: int) -> str:
        """Fail twice, then work."""
        attempts.append(x)
        if len(attempts) <= 2:
            raise RuntimeError(f"flaky failure {len(attempts)}")
        return "worked"

    factory.build = lambda: Agent(
        FunctionModel(counting_model(1)), tools=[tool(step_retries=retries, name="echo")(flaky)]
    )
    result = await run("Go.", run_id=f"retries-{retries}")
    (answer,) = [m for m in result.messages if isinstance(m, ToolResultMessage)]
    if retries == 2:
        assert len(attempts) == 3
        assert (answer.content[0].text, answer.is_error) == ("worked", False)  # type: ignore[union-attr]
    else:  # no retries, or too few: the last failure is the result
        assert len(attempts) == retries + 1
        assert answer.is_error
        assert answer.content[0].text == f"RuntimeError: flaky failure {retries + 1}"  # type: ignore[union-attr]
    assert result.state == State.DONE
