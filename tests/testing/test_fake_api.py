"""`FakeMessagesAPI` (issue 30, item 3): ScriptedModel's steps on the Messages API's real wire,
played through `AnthropicModel` and the real SDK; each request recorded; bad steps refused as
ScriptedModel refuses them."""

from __future__ import annotations

import asyncio
import inspect
import json
import re
import secrets
import urllib.error
import urllib.request
import warnings
from pathlib import Path
from typing import Any

import anthropic
import pytest
from docs.blocks import documentation_text, stated_output

from statemachine_agent import (
    Agent,
    AssistantMessage,
    Event,
    ModelRetry,
    State,
    TextBlock,
    ToolCallBlock,
    ToolResultMessage,
    UsageError,
    tool,
)
from statemachine_agent.models import ScriptedModel
from statemachine_agent.testing import FakeMessagesAPI


@tool
def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


CALL = {
    "content": [
        {"type": "text", "text": "Adding them."},
        {"type": "tool_use", "id": "t1", "name": "add", "input": {"a": 1, "b": 2}},
    ],
    "stop_reason": "tool_use",
    "usage": {"input_tokens": 12, "output_tokens": 7},
}
ANSWER = {"content": [{"type": "text", "text": "It is 3."}], "stop_reason": "end_turn"}
OVERLOADED = {"type": "overloaded_error", "message": "Overloaded"}
SOON = {"retry-after": "0.001"}  # seconds; the SDK waits as the header says
SAFETY_SECONDS = 60.0  # only ends a hung request; nothing is asserted about time


def retries_of(agent: Agent) -> list[ModelRetry]:
    seen: list[ModelRetry] = []

    def on_event(event: Event) -> None:
        if isinstance(event, ModelRetry):
            seen.append(event)

    agent.subscribe(on_event)
    return seen


async def test_a_response_streams_as_sse_with_text_and_tool_use_deltas() -> None:
    with FakeMessagesAPI([CALL]) as api:
        client = anthropic.AsyncAnthropic(base_url=api.url, api_key="test")
        async with client:
            stream = await client.messages.create(
                model="claude-sonnet-4-6",
                max_tokens=100,
                messages=[{"role": "user", "content": "1+2?"}],
                stream=True,
            )
            events = [event async for event in stream]
    kinds = [e.type for e in events]
    assert kinds[0] == "message_start" and kinds[-2:] == ["message_delta", "message_stop"]
    deltas = [e.delta for e in events if e.type == "content_block_delta"]
    text = [d.text for d in deltas if d.type == "text_delta"]
    arguments = [d.partial_json for d in deltas if d.type == "input_json_delta"]
    assert len(text) == 2 and "".join(text) == "Adding them."
    assert len(arguments) > 2 and "".join(arguments) == '{"a": 1, "b": 2}'
    starts = [e.content_block.type for e in events if e.type == "content_block_start"]
    assert starts == ["text", "tool_use"]
    final = events[-2]
    assert final.delta.stop_reason == "tool_use" and final.usage.output_tokens == 7


async def test_a_tool_use_run_through_anthropic_model_ends_done() -> None:
    with FakeMessagesAPI([CALL, ANSWER]) as api:
        async with api.model("claude-sonnet-4-6") as model:
            result = await Agent(model, tools=[add]).run("1+2?")
        assert api.remaining == 0
    assert result.state is State.DONE and result.text == "It is 3."
    call = result.new_messages[1]
    assert isinstance(call, AssistantMessage)
    assert call.tool_calls[0].input == {"a": 1, "b": 2}
    assert call.usage.input_tokens == 12 and call.model == "claude-sonnet-4-6"
    tool_result = result.new_messages[2]
    assert isinstance(tool_result, ToolResultMessage) and tool_result.text == "3"


async def test_every_request_body_is_recorded() -> None:
    with FakeMessagesAPI([CALL, ANSWER]) as api:
        async with api.model("claude-sonnet-4-6", max_tokens=99) as model:
            await Agent(model, tools=[add], system="Be brief.").run("1+2?")
    assert [r.path for r in api.requests] == ["/v1/messages", "/v1/messages"]
    first, second = (r.body for r in api.requests)
    assert first["model"] == "claude-sonnet-4-6" and first["max_tokens"] == 99
    assert first["stream"] is True and first["tools"][0]["name"] == "add"
    assert first["system"][0]["text"] == "Be brief."
    assert [m["role"] for m in first["messages"]] == ["user"]
    assert [m["role"] for m in second["messages"]] == ["user", "assistant", "user"]
    assert second["messages"][2]["content"][0]["tool_use_id"] == "t1"
    assert api.requests[0].headers["content-type"] == "application/json"  # names lower-cased


@pytest.mark.parametrize("status", [429, 529])
async def test_an_error_status_with_retry_after_is_retried_by_the_sdk(status: int) -> None:
    error = {"error": OVERLOADED, "status_code": status, "headers": SOON}
    with FakeMessagesAPI([error, ANSWER]) as api:
        async with api.model() as model:
            agent = Agent(model)
            retries = retries_of(agent)
            result = await agent.run("hi")
    assert result.state is State.DONE and result.text == "It is 3."
    assert len(api.requests) == 2  # the SDK sent it again; the engine saw one request
    assert [r.headers["x-stainless-retry-count"] for r in api.requests] == ["0", "1"]
    assert retries == []


@pytest.mark.parametrize(
    "step",
    [
        {"error": OVERLOADED, "status_code": 429},
        {"error": OVERLOADED},
        ANSWER,
    ],
    ids=["status-error", "mid-stream-error", "response"],
)
def test_a_steps_headers_are_sent_with_its_reply_whatever_its_kind(step: dict[str, Any]) -> None:
    # Read with a plain HTTP client (no SDK): what the server itself sends.
    status = step.get("status_code", 200)
    with FakeMessagesAPI([{**step, "headers": {"retry-after": "7"}}]) as api:
        request = urllib.request.Request(
            api.url + "/v1/messages",
            data=json.dumps({"model": "m", "max_tokens": 1, "messages": []}).encode(),
            headers={"content-type": "application/json"},
            method="POST",
        )
        try:
            with urllib.request.urlopen(request, timeout=SAFETY_SECONDS) as response:
                got = (response.status, response.headers.get("retry-after"), response.read())
        except urllib.error.HTTPError as error:
            got = (error.code, error.headers.get("retry-after"), error.read())
    assert got[:2] == (status, "7")
    if status != 200:
        assert json.loads(got[2])["error"] == {"type": "overloaded_error", "message": "Overloaded"}


async def test_an_error_status_past_the_sdk_retries_fails_the_run_counting_attempts() -> None:
    error = {"error": OVERLOADED, "status_code": 529, "headers": SOON}
    with FakeMessagesAPI([error, error, error]) as api:
        async with api.model(max_retries=2) as model:
            result = await Agent(model).run("hi")
        assert api.remaining == 0
    assert len(api.requests) == 3
    assert result.state is State.FAILED
    assert result.error is not None and "Overloaded (gave up after 3 attempts" in result.error


@pytest.mark.parametrize(
    ("status", "kind", "says"),
    [
        (400, "invalid_request_error", "messages: bad"),
        (401, "authentication_error", "check the API key"),
    ],
)
async def test_a_client_error_status_is_not_retried(status: int, kind: str, says: str) -> None:
    error = {"error": {"type": kind, "message": "messages: bad"}, "status_code": status}
    with FakeMessagesAPI([error, ANSWER]) as api:
        async with api.model() as model:
            result = await Agent(model).run("hi")
        assert api.remaining == 1
    assert len(api.requests) == 1
    assert result.state is State.FAILED and result.error is not None and says in result.error


async def test_a_mid_stream_error_event_is_retried_by_the_engine() -> None:
    with FakeMessagesAPI([{"error": OVERLOADED}, ANSWER]) as api:
        async with api.model() as model:
            agent = Agent(model, retry_backoff_seconds=0.0001)
            retries = retries_of(agent)
            result = await agent.run("hi")
    assert result.state is State.DONE and result.text == "It is 3."
    # Two requests of the engine's own, the SDK retried neither: the error came inside a 200.
    assert [r.headers["x-stainless-retry-count"] for r in api.requests] == ["0", "0"]
    assert [r.attempt for r in retries] == [1] and "Overloaded" in retries[0].error


async def test_a_final_mid_stream_error_event_fails_the_run() -> None:
    error = {"error": {"type": "invalid_request_error", "message": "prompt too long"}}
    with FakeMessagesAPI([error, ANSWER]) as api:
        async with api.model() as model:
            result = await Agent(model, retry_backoff_seconds=0.0001).run("hi")
    assert len(api.requests) == 1
    assert result.state is State.FAILED and result.error is not None
    assert "prompt too long" in result.error


@pytest.mark.parametrize("cut_after_events", [0, 1, 3])
async def test_a_cut_stream_is_retried_by_the_engine_and_its_partial_text_dropped(
    cut_after_events: int,
) -> None:
    # 0: the headers, then the connection drops; 1: message_start only; 3: mid-text.
    partial = {**ANSWER, "content": [{"type": "text", "text": "Half an answer"}]}
    with FakeMessagesAPI([{**partial, "cut_after_events": cut_after_events}, ANSWER]) as api:
        async with api.model() as model:
            agent = Agent(model, retry_backoff_seconds=0.0001)
            retries = retries_of(agent)
            result = await agent.run("hi")
    assert result.state is State.DONE and result.text == "It is 3."
    assert len(api.requests) == 2 and len(retries) == 1
    assert "Half" not in str(result.messages)


async def test_assistant_message_steps_and_delays_play_over_the_wire() -> None:
    call = AssistantMessage(
        content=[
            TextBlock(text="Adding."),
            ToolCallBlock(id="t1", name="add", input={"a": 2, "b": 2}),
            ToolCallBlock(id="t2", name="add", input=None, raw_arguments='{"a": 2, "b'),
        ],
        stop_reason="tool_use",
    )
    with FakeMessagesAPI([call, {**ANSWER, "delay_seconds": 0.01}]) as api:
        async with api.model() as model:
            result = await Agent(model, tools=[add]).run("2+2?")
    assert result.state is State.DONE and result.text == "It is 3."
    results = [m for m in result.new_messages if isinstance(m, ToolResultMessage)]
    assert [(r.tool_call_id, r.is_error) for r in results] == [("t1", False), ("t2", True)]
    assert results[0].text == "4"
    sent = result.new_messages[1]
    assert isinstance(sent, AssistantMessage) and sent.tool_calls[1].raw_arguments == '{"a": 2, "b'


async def test_an_exhausted_script_answers_a_clear_error() -> None:
    with FakeMessagesAPI([CALL]) as api:
        async with api.model() as model:
            result = await Agent(model, tools=[add]).run("1+2?")
        assert api.remaining == 0
    assert len(api.requests) == 2  # not retried: the server says so
    assert result.state is State.FAILED and result.error is not None
    assert "FakeMessagesAPI has no step left for request 2: the script holds 1 step(s)" in (
        result.error
    )


def test_remaining_counts_the_steps_not_yet_answered_and_add_appends() -> None:
    api = FakeMessagesAPI([CALL])
    assert api.remaining == 1
    api.add(ANSWER, ANSWER)
    assert api.remaining == 3


BAD_STEPS: list[Any] = [
    "just text",
    {"stop_reason": "end_turn"},
    {"content": "hello"},
    {"content": [{"type": "txt", "text": "typo"}]},
    {"content": [{"type": "tool_use", "name": "add", "input": {}}]},
    {"content": [], "delay_seconds": -1},
    {"error": "overloaded"},
]


@pytest.mark.parametrize("step", BAD_STEPS)
def test_a_bad_step_gets_the_usage_error_scripted_model_gives(step: Any) -> None:
    with pytest.raises(UsageError) as scripted:
        ScriptedModel([ANSWER, step])
    with pytest.raises(UsageError) as fake:
        FakeMessagesAPI([ANSWER, step])
    assert str(scripted.value).startswith("ScriptedModel step 2")
    assert str(fake.value) == str(scripted.value).replace("ScriptedModel", "FakeMessagesAPI")


@pytest.mark.parametrize(
    ("step", "says"),
    [
        ({**ANSWER, "headers": {"retry-after": 1}}, "headers must map names to strings"),
        ({**ANSWER, "cut_after_events": -1}, "cut_after_events must be an integer >= 0"),
        ({"error": OVERLOADED, "cut_after_events": 1}, "cut_after_events applies to a response"),
        ({"error": OVERLOADED, "status_code": 200}, "status_code must be an HTTP error status"),
    ],
)
def test_a_bad_wire_key_is_refused_naming_the_step(step: dict[str, Any], says: str) -> None:
    with pytest.raises(UsageError, match=f"^FakeMessagesAPI step 1: {says}"):
        FakeMessagesAPI([step])


def test_add_checks_its_steps_numbering_after_the_script() -> None:
    api = FakeMessagesAPI([ANSWER])
    with pytest.raises(UsageError, match=r"^FakeMessagesAPI step 3: needs 'content'"):
        api.add(ANSWER, {"stop_reason": "end_turn"})


async def test_an_abort_while_the_server_delays_its_answer_ends_the_run_aborted() -> None:
    # The server holds the answer an hour; closing it wakes the waiting answer, so the `with`
    # block ends at once (were it not, the test would time out).
    with FakeMessagesAPI([{**ANSWER, "delay_seconds": 3600}]) as api:
        async with api.model() as model:
            agent = Agent(model)
            handle = agent.start("hi")
            assert await asyncio.to_thread(api.wait_for_requests, 1)
            handle.abort("the test is done")
            result = await handle
    assert result.state is State.ABORTED and len(api.requests) == 1


def test_wait_for_requests_says_false_when_none_arrives_in_time() -> None:
    with FakeMessagesAPI([ANSWER]) as api:
        assert api.wait_for_requests(1, timeout_seconds=0) is False


def test_the_readme_example_prints_what_it_says(capsys: pytest.CaptureFixture[str]) -> None:
    readme = documentation_text()
    blocks = re.findall(r"^```python\n(.*?)^```", readme, re.M | re.S)
    ours = [b for b in blocks if "FakeMessagesAPI(" in b]
    assert len(ours) == 1
    exec(compile(ours[0], "README.md", "exec"), {"__name__": "readme_example"})
    printed = capsys.readouterr().out.splitlines()
    expected = stated_output(ours[0])
    assert printed == expected == ["done It is 3. 3", "t1 3"]


# -- a fresh user's findings on issue 30's FakeMessagesAPI ---------------------------------------

MAKERS = {"ScriptedModel": ScriptedModel, "FakeMessagesAPI": FakeMessagesAPI}


@pytest.mark.parametrize("owner", ["ScriptedModel", "FakeMessagesAPI"])
@pytest.mark.parametrize(
    ("typo", "suggests"),
    [
        ({"cut_after_event": 2}, "did you mean 'cut_after_events'?"),
        ({"retry_after": "1"}, "response headers go in 'headers'"),
        ({"stop_reasons": "end_turn"}, "did you mean 'stop_reason'?"),
        ({"delay_second": 0.1}, "did you mean 'delay_seconds'?"),
    ],
)
def test_an_unknown_step_key_is_refused_naming_the_key_the_step_and_the_known_keys(
    owner: str, typo: dict[str, Any], suggests: str
) -> None:
    key = next(iter(typo))
    with pytest.raises(UsageError) as refused:
        MAKERS[owner]([ANSWER, {**CALL, **typo}])
    message = str(refused.value)
    assert message.startswith(f"{owner} step 2: unknown key {key!r}")
    if owner == "FakeMessagesAPI" or "cut_after" not in key:
        assert suggests in message
    known = message.split("a step may hold only ")[1].split(", ")
    expected = {"content", "stop_reason", "usage", "error", "status_code", "delay_seconds"}
    assert expected <= set(known)
    assert ("cut_after_events" in known) is (owner == "FakeMessagesAPI")
    assert ("headers" in known) is (owner == "FakeMessagesAPI")


@pytest.mark.parametrize("key", ["cut_after_events", "headers"])
def test_scripted_model_refuses_a_wire_key_saying_it_is_fake_messages_apis(key: str) -> None:
    value: Any = 1 if key == "cut_after_events" else {"retry-after-ms": "1"}
    with pytest.raises(UsageError, match=f"^ScriptedModel step 1: unknown key '{key}'") as refused:
        ScriptedModel([{**ANSWER, key: value}])
    assert "is FakeMessagesAPI's: ScriptedModel has no HTTP wire" in str(refused.value)


def test_every_key_of_the_sdks_message_and_error_types_is_a_known_step_key() -> None:
    from statemachine_agent.models._offline import step_keys

    sdk = {*anthropic.types.Message.model_fields, *anthropic.types.ErrorResponse.model_fields}
    assert sdk <= set(step_keys())
    # A recorded response as the API sends it, every field present, plays as a step.
    full = {
        "id": "msg_01",
        "type": "message",
        "role": "assistant",
        "model": "claude-sonnet-4-6",
        "content": [{"type": "text", "text": "It is 3."}],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "stop_details": None,
        "usage": {"input_tokens": 3, "output_tokens": 4},
        "container": None,
        "context_management": None,
        "diagnostics": None,
    }
    error = {"type": "error", "error": OVERLOADED, "request_id": "req_01"}
    assert ScriptedModel([full, error]).remaining == 2
    with FakeMessagesAPI([full]) as api:
        result = Agent(api.model(max_retries=0)).run_sync("1+2?")
    assert (result.state, result.text) == (State.DONE, "It is 3.")


def test_every_recorded_response_and_error_body_is_a_valid_step(anthropic_fixtures: Path) -> None:
    import yaml

    bodies: list[dict[str, Any]] = []
    for cassette in sorted(anthropic_fixtures.glob("*.yaml")):
        for item in yaml.safe_load(cassette.read_text(encoding="utf-8"))["interactions"]:
            response = item["response"]
            text = response["body"]["string"] if "body" in response else None
            if text is not None and text.lstrip().startswith("{"):
                bodies.append(json.loads(text))
            elif "parsed_body" in response:
                bodies.append(response["parsed_body"])
    assert len(bodies) >= 6, "responses and an error recorded as JSON"
    assert {"id", "type", "role", "model", "usage", "stop_sequence"} <= set().union(*bodies)
    assert ScriptedModel(bodies).remaining == len(bodies)
    with FakeMessagesAPI(bodies) as api:
        assert api.remaining == len(bodies)


@pytest.mark.parametrize("owner", ["ScriptedModel", "FakeMessagesAPI"])
def test_a_response_without_stop_reason_goes_on_by_its_content_and_ends_done(owner: str) -> None:
    # Documented default (the API always sends a stop reason; a script may leave it out, and
    # the property suite draws such responses): its tool calls run; without any, the run is done.
    steps = [{"content": CALL["content"]}, {"content": [{"type": "text", "text": "It is 3."}]}]
    if owner == "ScriptedModel":
        result = Agent(ScriptedModel(steps), tools=[add]).run_sync("1+2?")
    else:
        with FakeMessagesAPI(steps) as api:
            result = Agent(api.model(max_retries=0), tools=[add]).run_sync("1+2?")
    assert (result.state, result.text, result.stop_reason) == (State.DONE, "It is 3.", None)
    outputs = [m for m in result.messages if isinstance(m, ToolResultMessage)]
    assert [(o.tool_call_id, o.text) for o in outputs] == [("t1", "3")]


def test_a_script_files_object_with_steps_is_accepted_as_the_cli_reads_it() -> None:
    demo = Path(__file__).resolve().parents[2] / "statemachine_agent" / "demo" / "script.json"
    script = json.loads(demo.read_text(encoding="utf-8"))  # {"prompt": ..., "steps": [...]}
    with FakeMessagesAPI(script) as api:
        assert api.remaining == len(script["steps"]) > 0
    assert ScriptedModel(script).remaining == len(script["steps"])
    with FakeMessagesAPI({"steps": [ANSWER]}) as api:
        result = Agent(api.model(max_retries=0)).run_sync("1+2?")
    assert (result.state, result.text) == (State.DONE, "It is 3.")


@pytest.mark.parametrize("owner", ["ScriptedModel", "FakeMessagesAPI"])
@pytest.mark.parametrize(
    ("script", "says"),
    [
        ("steps.json", "takes a list of steps (or a script object {'steps': [...]}), got str"),
        ({"content": []}, "got dict"),
        ({"steps": "x"}, "a script object's 'steps' must be a list of steps, got str"),
        ({"steps": [], "model": "x"}, "got also model"),
    ],
)
def test_a_script_that_is_not_a_list_of_steps_is_refused_saying_what_to_pass(
    owner: str, script: Any, says: str
) -> None:
    with pytest.raises(UsageError, match=f"^{owner}") as refused:
        MAKERS[owner](script)
    assert says in str(refused.value)


def test_a_server_not_started_refuses_url_model_and_waiting_saying_how_to_start_it() -> None:
    api = FakeMessagesAPI([ANSWER])
    try:
        for use in (lambda: api.url, api.model, lambda: api.wait_for_requests(1)):
            with pytest.raises(UsageError, match="not started") as refused:
                use()
            assert "with FakeMessagesAPI(steps) as api:" in str(refused.value)
            assert "api.start()" in str(refused.value)
    finally:
        api.close()


def test_start_and_close_serve_runs_as_a_pytest_fixture_would() -> None:
    api = FakeMessagesAPI([ANSWER, ANSWER])
    assert api.start() is api
    try:
        model = api.model(max_retries=0)
        first = Agent(model).run_sync("1+2?")
        second = Agent(model).run_sync("again")
    finally:
        api.close()
    assert [first.state, second.state] == [State.DONE, State.DONE]
    assert len(api.requests) == 2 and api.remaining == 0
    api.close()  # twice: nothing more to do
    with pytest.raises(UsageError, match="closed"):
        api.url  # noqa: B018
    with pytest.raises(UsageError, match="closed: make a new FakeMessagesAPI"):
        api.start()
    again = FakeMessagesAPI([ANSWER]).start()
    try:
        with pytest.raises(UsageError, match="already started"):
            again.start()
    finally:
        again.close()


def test_the_deprecated_model_warning_points_at_the_users_line_in_both_paths() -> None:
    from statemachine_agent.models import AnthropicModel

    names = [f"claude-retired-{secrets.token_hex(4)}" for _ in range(2)]
    table = {name: "June 1st, 2027" for name in names}
    with FakeMessagesAPI([]) as api, warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        line = inspect.currentframe().f_lineno + 1  # type: ignore[union-attr]
        api.model(names[0], deprecated_models=table)
        AnthropicModel(names[1], api_key="test", deprecated_models=table)
    found = [(w.category, w.filename, w.lineno) for w in caught if "deprecated" in str(w.message)]
    assert found == [(FutureWarning, __file__, line), (FutureWarning, __file__, line + 1)]
