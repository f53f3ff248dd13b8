"""Issue 14: faults taken from bug reports against other agent loops, each reduced to a small input
and run through `AnthropicModel` and the real SDK against the local replay server."""

from __future__ import annotations

import json
import os
import warnings
from pathlib import Path
from typing import Any

import anthropic
import httpx2
import pytest

from statemachine_agent import (
    Agent,
    AssistantMessage,
    State,
    StopReason,
    TextBlock,
    ToolCallBlock,
    ToolResultMessage,
    UsageLimits,
    UserMessage,
    tool,
)
from statemachine_agent._errors import ToolDefinitionError, UsageError
from statemachine_agent._protocol import STOPPED_NOT_RUN, TRUNCATED
from statemachine_agent.models import AnthropicModel, ModelRequest, ToolDefinition
from statemachine_agent.models import anthropic as anthropic_module
from statemachine_agent.session import read_session
from statemachine_agent.testing import assert_valid_history

from .replay_server import MODEL, ReplayServer, load_sse, reply
from .replay_server import closing_model as model

# The SDK's own text for a connection error (whatever the installed version says).
SDK_CONNECTION_TEXT = str(anthropic.APIConnectionError(request=httpx2.Request("POST", "http://x")))


def text(value: str) -> dict[str, Any]:
    return {"type": "text", "text": value}


# -- case 5: the continuation policy --------------------------------------------------------------


async def test_policy_stop_never_sends_another_request_after_a_cut_tool_call(
    server: ReplayServer, anthropic_fixtures: Path
) -> None:
    ran: list[str] = []

    @tool
    def make_file(filename: str, lines_of_text: list[str]) -> str:
        """Write a file."""
        ran.append(filename)
        return "written"

    server.add(load_sse(anthropic_fixtures / "04_anthropic-sdk_stream_max_tokens_mid_tool_use.sse"))
    agent = Agent(model(server), tools=[make_file], max_tokens_policy="stop")
    result = await agent.run("Write my tax guide.")

    assert len(server.requests) == 1  # no further request
    assert ran == []
    assert result.state is State.DONE
    assert result.stop_reason == StopReason.MAX_TOKENS
    assert result.error == (
        "The response was truncated (stop reason max_tokens) and was not continued "
        "(max_tokens_policy or max_continuations)."
    )
    response, answer = result.messages[1], result.messages[2]
    assert isinstance(response, AssistantMessage) and response.tool_calls[0].truncated
    assert isinstance(answer, ToolResultMessage)
    assert answer.tool_call_id == response.tool_calls[0].id
    assert answer.is_error and answer.text == TRUNCATED
    assert result.messages[-1] is answer


async def test_policy_stop_answers_a_complete_call_of_a_cut_response_without_running_it(
    server: ReplayServer,
) -> None:
    ran: list[str] = []

    @tool
    def read(path: str) -> str:
        """Read a file."""
        ran.append(path)
        return "contents"

    first = {"type": "tool_use", "id": "toolu_1", "name": "read", "input": {"path": "a"}}
    second = {"type": "tool_use", "id": "toolu_2", "name": "read", "input": {"path": "b"}}
    server.add(reply([text("Reading both."), first, second], "max_tokens"))
    result = await Agent(model(server), tools=[read], max_tokens_policy="stop").run("Read a, b.")

    assert len(server.requests) == 1 and ran == []
    assert result.state is State.DONE
    answers = [m for m in result.messages if isinstance(m, ToolResultMessage)]
    assert [(a.tool_call_id, a.is_error, a.text) for a in answers] == [
        ("toolu_1", True, STOPPED_NOT_RUN),
        ("toolu_2", True, TRUNCATED),  # the last call of a max_tokens response is cut
    ]


async def test_policy_stop_leaves_a_response_cut_by_the_context_window_no_calls_to_count(
    server: ReplayServer,
) -> None:
    """``max_tokens_policy="stop"`` holds for every truncating stop reason, not only
    ``max_tokens``: the calls of a response cut by ``model_context_window_exceeded`` are not to
    be run, so they count against no ``max_tool_calls`` limit and the run ends ``done`` at the
    context window (not ``max_turns`` at a usage limit)."""
    ran: list[str] = []

    @tool
    def read(path: str) -> str:
        """Read a file."""
        ran.append(path)
        return "contents"

    first = {"type": "tool_use", "id": "toolu_1", "name": "read", "input": {"path": "a"}}
    second = {"type": "tool_use", "id": "toolu_2", "name": "read", "input": {"path": "b"}}
    server.add(reply([text("Reading both."), first, second], "model_context_window_exceeded"))
    agent = Agent(
        model(server),
        tools=[read],
        max_tokens_policy="stop",
        limits=UsageLimits(max_tool_calls=1),
    )
    result = await agent.run("Read a, b.")

    assert len(server.requests) == 1 and ran == []
    assert result.state is State.DONE and result.limit_exceeded is None
    assert result.stop_reason == StopReason.MODEL_CONTEXT_WINDOW_EXCEEDED
    assert result.error is not None and "context window" in result.error
    answers = [m for m in result.messages if isinstance(m, ToolResultMessage)]
    assert [(a.tool_call_id, a.is_error) for a in answers] == [
        ("toolu_1", True),
        ("toolu_2", True),
    ]
    assert_valid_history(result.messages)


async def test_policy_stop_answers_the_cut_call_before_queued_input(
    server: ReplayServer,
) -> None:
    call = {"type": "tool_use", "id": "toolu_q", "name": "read", "input": {"path": "a"}}
    server.add(reply([call], "max_tokens"), reply([text("Shorter, then.")], "end_turn"))
    agent = Agent(model(server), tools=[read], max_tokens_policy="stop")
    agent.follow_up("Keep it short.")
    result = await agent.run("Read a.")

    # The follow-up is the user's own request: it is sent, after the cut call's answer.
    assert result.state is State.DONE and len(server.requests) == 2
    assert [m.role for m in result.messages] == [
        "user",
        "assistant",
        "tool_result",
        "user",
        "assistant",
    ]
    assert_valid_history(result.messages)
    sent = server.requests[1].body["messages"]
    assert [b["type"] for b in sent[2]["content"]] == ["tool_result", "text"]


async def test_policy_continue_result_text_is_the_whole_answer(
    server: ReplayServer,
) -> None:
    server.add(
        reply([text("The first half of the answer")], "max_tokens"),
        reply([text(" and the rest.")], "end_turn"),
    )
    result = await Agent(model(server), max_tokens_policy="continue").run("Explain.")

    assert result.state is State.DONE
    assert len(server.requests) == 2
    assert result.text == "The first half of the answer and the rest."


# -- case 1: thinking signed by another model -----------------------------------------------------

OPUS, SONNET = "claude-opus-4-7", "claude-sonnet-4-6"
THINKING = {"type": "enabled", "budget_tokens": 2048}
OPUS_THINKING = {"type": "thinking", "thinking": "Which file first?", "signature": "sig-opus-1"}
OPUS_REDACTED = {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix/LafPsn4a"}
OPUS_CALL = {"type": "tool_use", "id": "toolu_o1", "name": "read", "input": {"path": "a.txt"}}


@tool
def read(path: str) -> str:
    """Read a file."""
    return f"contents of {path}"


async def opus_session(server: ReplayServer, log: Path) -> None:
    """A finished run on model A (thinking on): a thinking tool call, then a thinking answer."""
    server.add(
        reply([OPUS_THINKING, OPUS_REDACTED, text("Reading it."), OPUS_CALL], "tool_use", OPUS),
        reply(
            [{**OPUS_THINKING, "signature": "sig-opus-2"}, text("It says hi.")], "end_turn", OPUS
        ),
    )
    agent = Agent(model(server, OPUS, thinking=THINKING), tools=[read], session=log)
    result = await agent.run("What does a.txt say?")
    assert result.state is State.DONE
    assert agent.session is not None
    agent.session.close()


def kinds(message: dict[str, Any]) -> list[str]:
    return [block["type"] for block in message["content"]]


async def test_resumed_on_another_model_sends_no_thinking_of_finished_turns(
    server: ReplayServer, tmp_path: Path
) -> None:
    log = tmp_path / "run.jsonl"
    await opus_session(server, log)
    server.add(reply([text("Still hi.")], "end_turn", SONNET))
    resumed = Agent.resume(log, model=model(server, SONNET, thinking=THINKING), tools=[read])
    result = await resumed.run("And now?")
    assert resumed.session is not None
    resumed.session.close()

    assert result.state is State.DONE
    sent = server.requests[2].body
    assert sent["model"] == SONNET
    assert sent["thinking"] == THINKING  # a new turn: B thinks as configured
    messages = sent["messages"]
    assert [kinds(m) for m in messages] == [
        ["text"],
        ["text", "tool_use"],  # A's thinking and redacted thinking are not sent to B
        ["tool_result"],
        ["text"],
        ["text"],
    ]
    assert messages[1]["content"][0]["text"] == "Reading it."
    assert messages[1]["content"][1]["id"] == "toolu_o1"
    assert "sig-opus" not in str(sent)


async def test_resumed_on_the_same_model_keeps_thinking_byte_for_byte(
    server: ReplayServer, tmp_path: Path
) -> None:
    log = tmp_path / "run.jsonl"
    await opus_session(server, log)
    server.add(reply([text("Still hi.")], "end_turn", OPUS))
    resumed = Agent.resume(log, model=model(server, OPUS, thinking=THINKING), tools=[read])
    await resumed.run("And now?")
    assert resumed.session is not None
    resumed.session.close()

    sent = server.requests[2].body
    assert sent["thinking"] == THINKING
    assert sent["messages"][1]["content"][:2] == [OPUS_THINKING, OPUS_REDACTED]
    assert sent["messages"][3]["content"][0] == {**OPUS_THINKING, "signature": "sig-opus-2"}
    # The same bytes model A itself was sent in its own second request.
    assert server.requests[1].body["messages"][1] == sent["messages"][1]


async def test_model_changed_inside_an_unfinished_tool_turn_sends_it_without_thinking(
    server: ReplayServer,
) -> None:
    # Model A asked for a tool; its result is in; the run continues on model B (as after a
    # resume mid-turn). B cannot verify A's signature, and the API requires the turn's thinking:
    # the request leaves A's thinking out and turns thinking off for this turn only.
    server.add(
        reply([OPUS_THINKING, OPUS_CALL], "tool_use", OPUS),
        reply([text("It says hi.")], "end_turn", SONNET),
        reply([text("Bye.")], "end_turn", SONNET),
    )
    first = Agent(model(server, OPUS, thinking=THINKING), tools=[read], max_turns=1)
    stopped = await first.run("What does a.txt say?")
    assert stopped.state is State.MAX_TURNS
    agent = Agent(model(server, SONNET, thinking=THINKING), tools=[read], messages=stopped.messages)
    result = await agent.run()

    assert result.state is State.DONE and result.text == "It says hi."
    continued = server.requests[1].body
    assert continued["thinking"] == {"type": "disabled"}
    assert [kinds(m) for m in continued["messages"]] == [["text"], ["tool_use"], ["tool_result"]]
    # The next prompt is a new turn: thinking as configured again.
    await agent.run("Thanks.")
    assert server.requests[2].body["thinking"] == THINKING


# -- case 2: lone surrogates ----------------------------------------------------------------------

FS_NAME = os.fsdecode(b"caf\xe9.txt")  # 'caf\udce9.txt' on a UTF-8 system
CUT_EMOJI = "bold \ud835 text"


async def test_lone_surrogates_are_sent_as_valid_utf8_and_logged_as_they_are(
    server: ReplayServer, tmp_path: Path
) -> None:
    assert "\udce9" in FS_NAME

    @tool
    def list_files() -> str:
        """List the files."""
        return FS_NAME

    @tool
    def style() -> str:
        """The style."""
        return CUT_EMOJI

    calls = [
        {"type": "tool_use", "id": "toolu_l", "name": "list_files", "input": {}},
        {"type": "tool_use", "id": "toolu_s", "name": "style", "input": {}},
    ]
    server.add(reply(calls, "tool_use"), reply([text("Done.")], "end_turn"))
    server.add(reply([text("Again.")], "end_turn"))
    log = tmp_path / "run.jsonl"
    agent = Agent(model(server), tools=[list_files, style], system=f"Root: {FS_NAME}", session=log)
    result = await agent.run(f"Open {FS_NAME}")
    assert result.state is State.DONE

    sent = server.requests[1].body  # the SDK encoded it; the server parsed it as UTF-8
    assert sent["system"][0]["text"] == "Root: caf\ufffd.txt"
    assert sent["messages"][0]["content"][0]["text"] == "Open caf\ufffd.txt"
    results = sent["messages"][2]["content"]
    assert [r["content"][0]["text"] for r in results] == ["caf\ufffd.txt", "bold \ufffd text"]
    # The history and the session log keep the text as the tools returned it.
    answers = [m for m in result.messages if isinstance(m, ToolResultMessage)]
    assert [a.text for a in answers] == [FS_NAME, CUT_EMOJI]
    assert agent.session is not None
    agent.session.close()
    logged = [m for m in read_session(log).messages if isinstance(m, ToolResultMessage)]
    assert [a.text for a in logged] == [FS_NAME, CUT_EMOJI]
    # Later requests on the same agent work too.
    again = await Agent.resume(log, model=model(server), tools=[list_files, style]).run("More")
    assert again.state is State.DONE


def test_every_text_of_a_request_is_made_valid() -> None:
    # Steering, tool arguments echoed back, settings and tool descriptions: one body, checked
    # without a server (the SDK's own encoder is what refused the body before).
    body_model = AnthropicModel(
        MODEL, api_key="test", extra_body={"metadata": {"user_id": "\udce9"}}
    )
    history = [
        UserMessage(f"steer {FS_NAME}"),
        AssistantMessage(
            content=[ToolCallBlock(id="t1", name="read", input={"path": FS_NAME, FS_NAME: 1})],
            stop_reason="tool_use",
            model=MODEL,
        ),
        ToolResultMessage(tool_call_id="t1", tool_name="read", content=[TextBlock(text="ok")]),
        UserMessage(CUT_EMOJI + " \ud83d\ude00"),  # a pair held as two code points: joined
    ]
    tools = [ToolDefinition("read", f"Read {FS_NAME}", {"type": "object", "properties": {}})]
    body = body_model.body(ModelRequest(history, system=CUT_EMOJI, tools=tools))
    # Sent as UTF-8 JSON: a lone surrogate raised UnicodeEncodeError in the SDK's encoder before.
    text_sent = json.dumps(body, ensure_ascii=False)
    text_sent.encode("utf-8")  # raises UnicodeEncodeError on a lone surrogate
    assert "\udce9" not in text_sent and "\ud835" not in text_sent
    assert body["messages"][1]["content"][0]["input"] == {
        "path": "caf\ufffd.txt",
        "caf\ufffd.txt": 1,
    }
    assert body["messages"][2]["content"][-1]["text"] == "bold \ufffd text \U0001f600"
    assert body["metadata"] == {"user_id": "\ufffd"}
    assert body["tools"][0]["description"] == "Read caf\ufffd.txt"
    assert history[1].tool_calls[0].input["path"] == FS_NAME  # the history is untouched


# -- case 3: a client tool with a server tool's name ----------------------------------------------


async def test_client_tool_named_like_a_server_tool_is_a_usage_error_before_any_request(
    server: ReplayServer,
) -> None:
    @tool
    def web_search(query: str) -> str:
        """Search the web."""
        return "results"

    search = model(server, server_tools=[{"type": "web_search_20250305", "name": "web_search"}])
    with pytest.raises(UsageError, match="'web_search'") as info:
        Agent(search, tools=[web_search])
    assert "server tool" in str(info.value)
    assert server.requests == []


def test_server_tool_names_are_checked_against_the_api_rules() -> None:
    with pytest.raises(UsageError, match="'name'"):
        AnthropicModel(MODEL, api_key="test", server_tools=[{"type": "web_search_20250305"}])
    with pytest.raises(UsageError, match="'web search'"):
        AnthropicModel(MODEL, api_key="test", server_tools=[{"type": "x", "name": "web search"}])
    twice = [{"type": "web_search_20250305", "name": "web_search"}] * 2
    with pytest.raises(UsageError, match="two server tools are named 'web_search'"):
        AnthropicModel(MODEL, api_key="test", server_tools=twice)
    checker = AnthropicModel(MODEL, api_key="test")
    for bad in ("read\n", "", "a" * 65, "read file"):
        with pytest.raises(UsageError, match="not valid for the Anthropic API"):
            checker.check_tools([ToolDefinition(bad, "d", {"type": "object"})])


def test_a_tool_name_with_a_trailing_newline_is_refused_when_defined() -> None:
    def read_file(path: str) -> str:
        """Read."""
        return path

    with pytest.raises(ToolDefinitionError, match="1-64 letters"):
        tool(read_file, name="read\n")


# -- case 6: an unreachable endpoint --------------------------------------------------------------


async def test_unreachable_base_url_named_with_its_environment_variable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("ANTHROPIC_BASE_URL", "http://127.0.0.1:9")
    unreachable = AnthropicModel(MODEL, api_key="any", max_retries=0)
    try:
        result = await Agent(unreachable).run("hi")
    finally:
        await unreachable.aclose()

    assert result.state is State.FAILED
    assert result.error is not None
    assert "could not reach http://127.0.0.1:9" in result.error
    assert "ANTHROPIC_BASE_URL" in result.error
    assert SDK_CONNECTION_TEXT not in result.error
    assert result.error.lower().count("connection error") <= 1  # said once, in the kind


async def test_unreachable_url_without_the_variable_names_only_the_url(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("ANTHROPIC_BASE_URL", raising=False)
    unreachable = AnthropicModel(MODEL, api_key="any", base_url="http://127.0.0.1:9", max_retries=0)
    try:
        result = await Agent(unreachable).run("hi")
    finally:
        await unreachable.aclose()
    assert result.error is not None
    assert "could not reach http://127.0.0.1:9" in result.error
    assert "ANTHROPIC_BASE_URL" not in result.error


@pytest.mark.parametrize("error", [httpx2.ConnectError, httpx2.ReadError])
async def test_a_connection_error_without_text_names_its_type_not_the_sdks_generic_text(
    error: type[httpx2.TransportError],
) -> None:
    # The transport fails with an empty message: the SDK's own text ("Connection error.") says
    # nothing the message does not, so the underlying error's type is named instead.
    def fail(request: httpx2.Request) -> httpx2.Response:
        raise error("", request=request)

    client = anthropic.AsyncAnthropic(
        api_key="test",
        base_url="http://127.0.0.1:9",
        max_retries=0,
        http_client=anthropic.DefaultAsyncHttpxClient(transport=httpx2.MockTransport(fail)),
    )
    async with client:
        result = await Agent(AnthropicModel(MODEL, client=client)).run("hi")

    assert result.state is State.FAILED and result.error is not None
    assert result.error.endswith(f"could not reach http://127.0.0.1:9 ({error.__name__})")
    assert SDK_CONNECTION_TEXT not in result.error


# -- case 7: current model names, one deprecation warning -----------------------------------------


OLD_MODEL = "claude-replay-retired"
OLD_MODEL_TABLE = {OLD_MODEL: "June 1st, 2099"}  # the test's own table: no SDK's list is read


@pytest.fixture
def warned_of_nothing(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """No model warned about yet in this process (the package warns once per model)."""
    monkeypatch.setattr(anthropic_module, "_warned_deprecated", set())
    return monkeypatch


@pytest.fixture
def old_model_listed(warned_of_nothing: pytest.MonkeyPatch) -> None:
    """`OLD_MODEL` in the package's own table of deprecated models, for this test only."""
    warned_of_nothing.setitem(anthropic_module.DEPRECATED_MODELS, OLD_MODEL, "June 1st, 2099")


def warnings_when_made(*names: str, **kwargs: Any) -> list[str]:
    """The text of each warning raised while an `AnthropicModel` of each of ``names`` is made
    (``kwargs`` go to each)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for name in names:
            AnthropicModel(name, api_key="test", **kwargs)
    return [str(w.message) for w in caught]


async def test_a_deprecated_model_warns_once_not_per_request(
    server: ReplayServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(anthropic_module, "_warned_deprecated", set())
    for _ in range(3):
        server.add(reply([text("ok")], "end_turn", OLD_MODEL))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        agent = Agent(model(server, OLD_MODEL, deprecated_models=OLD_MODEL_TABLE))
        Agent(model(server, OLD_MODEL, deprecated_models=OLD_MODEL_TABLE))  # a second model
        for prompt in ("one", "two", "three"):
            assert (await agent.run(prompt)).state is State.DONE
    about = [w for w in caught if "end-of-life" in str(w.message)]
    assert len(server.requests) == 3
    assert len(about) == 1
    assert issubclass(about[0].category, FutureWarning)
    assert OLD_MODEL in str(about[0].message) and "June 1st, 2099" in str(about[0].message)
    assert "claude-sonnet-4-6" in str(about[0].message)  # what to use instead


def test_the_package_table_of_deprecated_models_can_be_extended(
    old_model_listed: None,
) -> None:
    caught = warnings_when_made(OLD_MODEL, "claude-replay-current")
    assert [text.split(" is deprecated")[0] for text in caught] == [f"The model {OLD_MODEL!r}"]


def test_a_model_not_in_the_table_gets_no_warning(
    warned_of_nothing: pytest.MonkeyPatch,
) -> None:
    assert warnings_when_made(OLD_MODEL, deprecated_models={}) == []


def test_an_empty_deprecated_models_table_turns_the_warning_off(
    old_model_listed: None,
) -> None:
    # The package's table lists the model: ``deprecated_models={}`` still means "none".
    assert warnings_when_made(OLD_MODEL, deprecated_models={}) == []


def test_a_deprecated_models_table_replaces_the_package_table_not_merges(
    old_model_listed: None,
) -> None:
    own = {"claude-replay-own": "July 1st, 2099"}
    caught = warnings_when_made(OLD_MODEL, "claude-replay-own", deprecated_models=own)
    assert [text.split(" and will")[0] for text in caught] == [
        "The model 'claude-replay-own' is deprecated"
    ]


def test_the_sdks_per_request_warning_for_a_listed_model_is_silenced_in_this_package(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # What the SDK warns on each request for a model it lists, attributed (stacklevel) to the
    # engine's frame in this package; another model's warning, or one elsewhere, stays.
    monkeypatch.setattr(anthropic_module, "_warned_deprecated", set())

    def sdk_warning(name: str, module: str) -> None:
        warnings.warn_explicit(
            f"The model '{name}' is deprecated and will reach end-of-life on June 1st, 2099.",
            DeprecationWarning,
            f"{module}.py",
            1,
            module=module,
        )

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        AnthropicModel(OLD_MODEL, api_key="test", deprecated_models=OLD_MODEL_TABLE)
        caught.clear()  # our own, once
        sdk_warning(OLD_MODEL, "statemachine_agent._responses")
        sdk_warning("claude-replay-other", "statemachine_agent._responses")
        sdk_warning(OLD_MODEL, "user_code")
    assert [(str(w.message).split("'")[1], w.filename) for w in caught] == [
        ("claude-replay-other", "statemachine_agent._responses.py"),
        (OLD_MODEL, "user_code.py"),
    ]


def test_readme_and_package_name_a_current_model() -> None:
    root = Path(__file__).resolve().parents[2]
    texts = [root / "README.md", *sorted((root / "statemachine_agent").rglob("*.py"))]
    stale = [str(p.relative_to(root)) for p in texts if "claude-sonnet-4-5" in p.read_text()]
    assert stale == []
    assert 'AnthropicModel("claude-sonnet-4-6"' in (root / "README.md").read_text()
