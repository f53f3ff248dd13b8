"""Hooks: ``before_tool_call`` / ``after_tool_call`` and ``transform_context``, what they may
change and what their failures become."""

from __future__ import annotations

from typing import Any

import pytest
from loop_helpers import roles

from statemachine_agent import (
    Agent,
    Deny,
    Event,
    Interrupted,
    State,
    ToolCallInfo,
    ToolExecutionEnd,
    ToolResultMessage,
    tool,
)
from statemachine_agent.models import ScriptedModel
from statemachine_agent.testing import assert_valid_history
from statemachine_agent.testing.steps import call, text_response, tool_response


def result_texts(messages: list[Any]) -> list[tuple[str, str, bool]]:
    return [
        (m.tool_call_id, m.text, m.is_error) for m in messages if isinstance(m, ToolResultMessage)
    ]


async def test_an_after_tool_call_hook_raising_gives_the_documented_error_result() -> None:
    @tool
    def echo(text: str) -> str:
        """Echo."""
        return text

    def after(info: ToolCallInfo, result: ToolResultMessage) -> None:
        raise RuntimeError("after bug")

    model = ScriptedModel([tool_response(call("echo", {"text": "x"}, id="e")), text_response("ok")])
    agent = Agent(model, tools=[echo], after_tool_call=after)
    events: list[Event] = []
    agent.subscribe(events.append)
    result = await agent.run("go")
    assert result_texts(result.messages) == [
        (
            "e",
            "The after_tool_call hook failed (RuntimeError: after bug); the call was not "
            "completed.",
            True,
        )
    ]
    assert result.state is State.DONE and result.text == "ok" and result.error is None
    assert roles(result.messages) == ["user", "assistant", "tool_result", "assistant"]
    ends = [e for e in events if isinstance(e, ToolExecutionEnd)]
    assert [e.result.text for e in ends] == [result_texts(result.messages)[0][1]]
    assert_valid_history(result.messages)


async def test_arguments_changed_by_a_before_hook_are_validated_again() -> None:
    ran: list[Any] = []

    @tool
    def repeat(text: str, times: int) -> str:
        """Repeat."""
        ran.append((text, times))
        return text * times

    def before(info: ToolCallInfo) -> dict[str, Any]:
        if info.call.id == "bad":
            return {"text": "x", "times": "many"}  # not an int: must be refused
        return {"text": "y", "times": "2"}  # a numeric string: validated (coerced) to 2

    model = ScriptedModel(
        [
            tool_response(
                call("repeat", {"text": "a", "times": 1}, id="bad"),
                call("repeat", {"text": "b", "times": 1}, id="good"),
            ),
            text_response("ok"),
        ]
    )
    result = await Agent(model, tools=[repeat], before_tool_call=before).run("go")
    assert ran == [("y", 2)]
    (bad, good) = result_texts(result.messages)
    assert bad[0] == "bad" and bad[2] is True
    assert bad[1].startswith("Invalid arguments for tool 'repeat'") and "times" in bad[1]
    assert '"times": "many"' in bad[1]
    assert good == ("good", "yy", False)
    assert result.state is State.DONE
    assert_valid_history(result.messages)


@tool
def lookup(key: str) -> str:
    """Look a key up."""
    return f"value of {key}"


@pytest.mark.parametrize("keep", [1, 2], ids=["lone_result", "whole_batch_of_results"])
def test_transform_context_keeping_only_tool_results_names_the_hook_and_the_dropped_results(
    keep: int,
) -> None:
    calls = [call("lookup", {"key": f"k{i}"}, id=f"c{i}") for i in range(1, keep + 1)]
    model = ScriptedModel([tool_response(*calls), text_response("never")])
    agent = Agent(model, tools=[lookup], transform_context=lambda m: m[-keep:])
    result = agent.run_sync("go")
    assert result.state is State.FAILED
    assert len(model.requests) == 1  # the second request was refused before sending
    ids = ", ".join(f"c{i}" for i in range(1, keep + 1))
    assert result.error is not None
    assert (
        f"the transform_context hook returned only {keep} tool result(s) whose calls were "
        f"missing ({ids}), dropped from the request"
    ) in result.error, result.error
    assert_valid_history(result.messages)


def tool_texts(messages: list[Any]) -> list[str]:
    return [m.text for m in messages if isinstance(m, ToolResultMessage)]


# Found by a review: a should_continue hook failing after a terminating denial keeps the denial's reason
async def test_a_terminating_denials_reason_survives_a_failing_should_continue() -> None:
    from statemachine_agent import Deny

    @tool
    async def w() -> str:
        """Write."""
        return "ok"

    def deny(info: object) -> Deny:
        return Deny("not here", terminate=True)

    def broken(info: object) -> bool:
        raise RuntimeError("hook bug")

    agent = Agent(
        ScriptedModel([tool_response(call("w", id="a")), text_response("x")]),
        tools=[w],
        before_tool_call=deny,
        should_continue=broken,
    )
    result = await agent.run("go")
    assert result.state is State.ABORTED
    assert result.error == (
        "A tool call was denied and ended the run: not here. "
        "The should_continue hook failed: RuntimeError: hook bug"
    )
    assert tool_texts(result.messages) == ["Denied: not here"]


@pytest.mark.parametrize("mode", ["parallel", "sequential"])
async def test_an_interrupted_decision_with_terminate_ends_the_run_like_a_terminating_denial(
    mode: str,
) -> None:
    # `Interrupted` is a `Deny` whose reason is sent as given; its ``terminate`` is a denial's:
    # the batch's other calls are answered unrun and the run ends aborted with the reason.
    ran: list[str] = []

    @tool
    def w(path: str) -> str:
        """Write."""
        ran.append(path)
        return "ok"

    def prompt(info: ToolCallInfo) -> Interrupted | None:
        if info.call.id == "second":
            return Interrupted("Interrupted at the permission prompt.", terminate=True)
        return None

    model = ScriptedModel(
        [
            tool_response(
                call("w", {"path": "a"}, id="first"),
                call("w", {"path": "b"}, id="second"),
                call("w", {"path": "c"}, id="third"),
            ),
            text_response("never requested"),
        ]
    )
    agent = Agent(
        model,
        tools=[w],
        before_tool_call=prompt,
        tool_execution=mode,  # type: ignore[arg-type]
    )
    result = await agent.run("go")
    assert (result.state, model.calls) == (State.ABORTED, 1)
    assert result.error == (
        "A tool call was denied and ended the run: Interrupted at the permission prompt."
    )
    texts = result_texts(result.messages)
    assert texts[1] == ("second", "Interrupted at the permission prompt.", True)
    assert texts[0][0] == "first" and texts[2][0] == "third"
    if mode == "sequential":
        assert ran == ["a"]
        assert texts[2] == ("third", "Not run: an earlier call of this batch ended the run.", True)
    assert_valid_history(result.messages)
