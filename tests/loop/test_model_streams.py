"""How the loop reads a model's stream: offline models call their function when the stream is
read and stay ended; a stream that raises before it is read is retried."""

from __future__ import annotations

from typing import Any

import pytest

from statemachine_agent import (
    Agent,
    AssistantMessage,
    State,
    TextBlock,
)
from statemachine_agent._errors import ModelRetryableError
from statemachine_agent.models import FunctionModel, ScriptedModel
from statemachine_agent.models._base import ResponseComplete


async def test_the_offline_models_call_their_function_when_the_stream_is_read() -> None:
    """As an async generator did: nothing is asked until the first event is read, and what the
    function raises comes out of that read."""
    from statemachine_agent.models import ModelRequest, ResponseComplete

    asked: list[int] = []

    def respond(_messages: Any, _request: Any) -> str:
        asked.append(1)
        if len(asked) > 1:
            raise ValueError("second")
        return "hello"

    model = FunctionModel(respond)
    stream = model.stream(ModelRequest([]))
    assert asked == []
    events = [event async for event in stream]
    assert asked == [1] and isinstance(events[-1], ResponseComplete)
    assert events[-1].message.text == "hello"
    failing = model.stream(ModelRequest([]))
    with pytest.raises(ValueError, match="second"):
        await failing.__anext__()
    with pytest.raises(StopAsyncIteration):  # ended, as an async generator that raised
        await failing.__anext__()
    assert len(asked) == 2  # the function was not asked again
    scripted = ScriptedModel([])
    exhausted = scripted.stream(ModelRequest([]))
    assert scripted.calls == 1  # counted when asked, as before
    with pytest.raises(Exception, match="no step 1"):
        await exhausted.__anext__()


async def test_an_offline_stream_stays_ended_once_it_has_ended() -> None:
    """As an async generator did: once the response's events are read, the stream raises
    `StopAsyncIteration` again and again, and neither replays nor calls the function again."""
    from statemachine_agent.models import ModelRequest

    asked: list[int] = []

    def respond(_messages: Any, _request: Any) -> str:
        asked.append(1)
        return "hello"

    for model in (FunctionModel(respond), ScriptedModel([AssistantMessage(content=[])])):
        stream = model.stream(ModelRequest([]))
        events = [event async for event in stream]
        assert events
        for _ in range(2):
            with pytest.raises(StopAsyncIteration):
                await stream.__anext__()
    assert asked == [1]


class EagerModel:
    """A Model whose stream() validates eagerly (a plain def, like ScriptedModel.stream)."""

    name = "eager"

    def __init__(self):
        self.n = 0

    def stream(self, request):
        self.n += 1
        if self.n == 1:
            raise ModelRetryableError("overloaded", kind="overloaded")
        return self._gen()

    async def _gen(self):
        yield ResponseComplete(
            AssistantMessage(content=[TextBlock(text="hi")], stop_reason="end_turn")
        )


async def test_a_model_stream_raising_before_it_is_read_is_retried_with_every_turn_ended():
    agent = Agent(EagerModel(), retry_backoff_seconds=0.01)
    events = []
    agent.subscribe(events.append)
    result = await agent.run("hi")
    assert result.state is State.DONE and result.text == "hi"
    assert agent.model.n == 2  # the failed attempt and its retry
    kinds = [e.type for e in events]
    # Before the fix: a turn_start without its turn_end, and no run_end.
    assert kinds.count("model_retry") == 1
    assert kinds.count("turn_start") == kinds.count("turn_end") == 1
    assert kinds[0] == "run_start" and kinds[-1] == "run_end" and kinds.count("run_end") == 1
    assert [m.role for m in result.messages] == ["user", "assistant"]
