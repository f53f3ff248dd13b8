"""Per-run state apart from the agent's configuration, replayed from peer frameworks' reports.

Each test replays a public bug report about state that one agent's runs share (history, queued
input, subscribers, usage) or configuration changed while a run is in flight, and asserts what
ours documents instead: a run is claimed once (a second one is refused, nothing is shared), the
configuration is read once per run and applies from the next run, a subscriber gets every event
published from the one after it subscribed on, usage and limits count from a new prompt on,
and input left queued by an aborted run is delivered by the next run.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from statemachine_agent import (
    Agent,
    AgentBusyError,
    Deny,
    Event,
    RunEnd,
    State,
    ToolExecutionEnd,
    UsageLimits,
    UserMessage,
    tool,
)
from statemachine_agent.models import ScriptedModel, ToolDefinition
from statemachine_agent.testing import assert_valid_history
from statemachine_agent.testing.steps import call, text_response, tool_response


def user_texts(messages: Any) -> list[str]:
    """The text of each user message (prompts, steering, follow-ups), in order."""
    return [m.text for m in messages if isinstance(m, UserMessage)]


async def test_a_second_run_on_a_busy_agent_is_refused_and_the_first_runs_history_stays_whole() -> (
    None
):
    """strands-agents reported that a second invocation of one `Agent` while another is being
    processed corrupts the shared message history, so both and every later invocation fail
    (https://github.com/strands-agents/harness-sdk/issues/1176). Ours claims the agent when
    ``run()`` is called: a second ``run()`` (from this loop or another thread) and a history
    assignment raise `AgentBusyError` at once and change nothing; the first run's history is
    whole and the agent runs again afterwards."""
    entered, release = asyncio.Event(), asyncio.Event()

    @tool
    async def slow(path: str) -> str:
        """Read a file slowly."""
        entered.set()
        await release.wait()
        return f"contents of {path}"

    model = ScriptedModel(
        [
            tool_response(call("slow", {"path": "a.txt"}, id="s1")),
            text_response("a read"),
            text_response("b answered"),
        ]
    )
    agent = Agent(model, tools=[slow])
    first = agent.start("read a.txt")
    await entered.wait()

    with pytest.raises(AgentBusyError):
        agent.run("question b")
    with pytest.raises(AgentBusyError):
        await asyncio.to_thread(agent.run_sync, "question c")
    with pytest.raises(AgentBusyError):
        agent.messages = []
    assert agent.has_queued_input() is False  # the refused prompts were not queued either

    release.set()
    result = await first
    assert result.state is State.DONE
    assert user_texts(result.messages) == ["read a.txt"]
    assert [m.role for m in result.messages] == ["user", "assistant", "tool_result", "assistant"]
    assert result.text == "a read"
    assert model.calls == 2  # no request was made for the refused runs
    assert_valid_history(result.messages)

    second = await agent.run("question b")  # the agent is not left broken
    assert second.state is State.DONE
    assert second.text == "b answered"
    assert user_texts(second.new_messages) == ["question b"]
    assert_valid_history(second.messages)


async def test_configuration_changed_during_a_run_applies_from_the_next_run() -> None:
    """pi's coding agent reported tools activated during a run half-applied: the live agent state
    changed while the running loop held its own snapshot, so a tool enabled mid-run was offered
    but failed with "Tool not found" (https://github.com/earendil-works/pi/pull/4148, issue
    #4147). Ours documents one rule: the configuration is read once, when a run is claimed, and
    a change (assigned, or made in place on the agent's dicts and lists) applies from the next
    run, whole: this run's requests keep its system prompt, tools and provider options, its
    turn cap and hooks; the next run gets every change."""
    agent_ref: list[Agent] = []

    @tool
    async def late() -> str:
        """A tool added during the first run."""
        return "late ran"

    def deny_all(info: Any) -> Deny:
        return Deny("denied by the hook assigned mid-run")

    @tool
    async def reconfigure() -> str:
        """Change the agent's configuration."""
        agent = agent_ref[0]
        agent.system = "new system"
        agent.max_turns = 1
        agent.limits = UsageLimits(max_requests=1)
        agent.before_tool_call = deny_all
        agent.model_settings["temperature"] = 0.5  # in place
        if "late" not in agent.tools:  # in place, as pi's setActiveTools did
            agent.tools["late"] = late
            agent.tool_definitions.append(
                ToolDefinition(late.name, late.description, late.input_schema)
            )
        return "reconfigured"

    model = ScriptedModel(
        [
            tool_response(call("reconfigure", id="c1")),
            tool_response(call("reconfigure", id="c2")),
            text_response("first run done"),
            tool_response(call("late", id="l1")),
        ]
    )
    agent = Agent(model, tools=[reconfigure], system="old system", model_settings={"top_k": 5})
    agent_ref.append(agent)

    result = await agent.run("go")
    # The turn cap (1), the request limit (1) and the denying hook assigned in turn 1 did not
    # apply to this run: it made its three turns, and the second call ran.
    assert result.state is State.DONE
    assert result.turns == 3
    assert [m.text for m in result.messages if m.role == "tool_result"] == [
        "reconfigured",
        "reconfigured",
    ]
    for request in model.requests:  # all three requests of the first run
        assert request.system == "old system"
        assert [t.name for t in request.tools] == ["reconfigure"]
        assert request.settings == {"top_k": 5}
    assert_valid_history(result.messages)

    nxt = await agent.run("again")
    request = model.requests[3]
    assert request.system == "new system"
    assert [t.name for t in request.tools] == ["reconfigure", "late"]
    assert request.settings == {"top_k": 5, "temperature": 0.5}
    # The new hook denied the call, and the new cap (1 turn) ended the run.
    assert [m.text for m in nxt.new_messages if m.role == "tool_result"] == [
        "Denied: denied by the hook assigned mid-run"
    ]
    assert nxt.state is State.MAX_TURNS
    assert nxt.turns == 1
    assert model.calls == 4
    assert_valid_history(nxt.messages)


async def test_a_subscriber_added_during_a_run_gets_that_runs_events_from_the_next_one_on() -> None:
    """CopilotKit reported an inspector that subscribed to an agent but received no events during
    runs, because the run published to another instance than the one subscribed to
    (https://github.com/CopilotKit/CopilotKit/pull/5784, issue #5773). Ours: a run publishes to
    its agent's subscribers of each moment, so a subscriber added while a run is in flight gets
    every event of that run from the next one published on (none before, none lost, each
    stamped with the run's id), and unsubscribing mid-run stops them from the next event."""
    seen: list[Event] = []  # subscribed before the run: every event
    late_seen: list[Event] = []
    marks: dict[str, int] = {}
    agent_ref: list[Agent] = []
    unsubscribe_late: list[Any] = []

    @tool
    async def watch() -> str:
        """Subscribe a second observer mid-run."""
        marks["subscribed_at"] = len(seen)
        unsubscribe_late.append(agent_ref[0].subscribe(late_seen.append))
        return "watching"

    @tool
    async def unwatch() -> str:
        """Unsubscribe it."""
        unsubscribe_late[0]()
        marks["unsubscribed_at"] = len(seen)
        return "unwatched"

    model = ScriptedModel(
        [
            tool_response(call("watch", id="w1")),
            tool_response(call("unwatch", id="u1")),
            text_response("done"),
            text_response("second run"),
        ]
    )
    agent = Agent(model, tools=[watch, unwatch])
    agent_ref.append(agent)
    agent.subscribe(seen.append)

    result = await agent.run("observe")
    assert result.state is State.DONE
    start, stop = marks["subscribed_at"], marks["unsubscribed_at"]
    assert 0 < start < stop < len(seen)
    assert late_seen == seen[start:stop]  # from the next event on, in order, none lost
    assert isinstance(late_seen[0], ToolExecutionEnd)  # the subscribing call's own end
    assert late_seen[0].call.id == "w1"
    assert {e.run_id for e in late_seen} == {result.run_id}

    second = await agent.run("again")
    assert late_seen == seen[start:stop]  # unsubscribed: nothing of the next run
    assert isinstance(seen[-1], RunEnd)
    assert seen[-1].run_id == second.run_id != result.run_id


async def test_a_new_prompt_counts_usage_and_limits_from_zero_and_a_continuation_keeps_counting() -> (
    None
):
    """pydantic-ai users asked why a run's usage held nothing of the history it was given: a
    run's usage covers that run only, and carrying it on is explicit
    (https://github.com/pydantic/pydantic-ai/issues/2989). Ours: ``RunResult.usage`` holds the
    responses of that ``run()`` call, a new prompt counts its limits from zero (the previous
    run's requests do not count against it), a run continued without a prompt keeps counting
    (``counts``), and no response is counted twice."""
    usage = {"input_tokens": 100, "output_tokens": 10}

    @tool
    async def step() -> str:
        """One step."""
        return "stepped"

    model = ScriptedModel(
        [
            tool_response(call("step", id="a1"), usage=usage),
            text_response("first", usage=usage),
            tool_response(call("step", id="b1"), usage=usage),
            text_response("second", usage=usage),
            tool_response(call("step", id="c1"), usage=usage),
            tool_response(call("step", id="c2"), usage=usage),
            text_response("third", usage=usage),
        ]
    )
    agent = Agent(model, tools=[step], limits=UsageLimits(max_requests=2))

    first = await agent.run("one")
    second = await agent.run("two")  # would stop at once if the first run's requests counted
    for result, text in ((first, "first"), (second, "second")):
        assert result.state is State.DONE
        assert result.text == text
        assert (result.usage.input_tokens, result.usage.output_tokens) == (200, 20)
        assert (result.counts.requests, result.counts.usage.input_tokens) == (2, 200)

    agent.max_turns = 1
    capped = await agent.run("three")  # one turn, then max_turns
    agent.max_turns = 50
    agent.limits = UsageLimits(max_requests=3)
    continued = await agent.run()  # the same run: its counts go on
    assert capped.state is State.MAX_TURNS
    assert continued.state is State.DONE
    assert continued.text == "third"
    assert (capped.usage.input_tokens, continued.usage.input_tokens) == (100, 200)
    assert (continued.counts.requests, continued.counts.usage.input_tokens) == (3, 300)
    assert continued.counts.turns == 3
    # Each response is counted once over the four calls: 7 responses, 700 input tokens.
    runs = (first, second, capped, continued)
    assert sum(r.usage.input_tokens for r in runs) == 700 == 100 * model.calls


async def test_steering_queued_when_a_run_is_aborted_is_delivered_by_the_next_run_after_its_prompt() -> (
    None
):
    """openclaw (a pi-based agent core) reported that steering accepted during a tool batch and
    then an abort lost the message: drained from its queue into the loop's locals, never
    delivered and no longer queued (https://github.com/openclaw/openclaw/pull/128695, issue
    #128008). Ours keeps the queues in the agent's conversation, not in the run: input still
    queued when a run is aborted stays queued, and the next run delivers the steering right
    after its prompt and the follow-up when the model would stop."""
    agent_ref: list[Agent] = []

    @tool
    async def work() -> str:
        """Work; the user steers, queues a follow-up, then aborts."""
        agent = agent_ref[0]
        agent.steer("mind b.txt")
        agent.follow_up("then summarise")
        agent.abort("stopped by the user")
        return "worked"

    model = ScriptedModel(
        [
            tool_response(call("work", id="w1")),
            text_response("noted b.txt"),
            text_response("summary"),
        ]
    )
    agent = Agent(model, tools=[work])
    agent_ref.append(agent)

    aborted = await agent.run("start")
    assert aborted.state is State.ABORTED
    assert user_texts(aborted.messages) == ["start"]  # neither was delivered to the aborted run
    assert agent.has_queued_input()
    assert model.calls == 1
    assert_valid_history(aborted.messages)

    nxt = await agent.run("go on")
    assert nxt.state is State.DONE
    assert user_texts(nxt.new_messages) == ["go on", "mind b.txt", "then summarise"]
    assert user_texts(model.requests[1].messages)[-2:] == ["go on", "mind b.txt"]
    assert nxt.text == "summary"
    assert not agent.has_queued_input()
    assert_valid_history(nxt.messages)
