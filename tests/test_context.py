"""Context projection: what a provider may receive, incrementally."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from statemachine_agent import (
    AssistantMessage,
    InvalidHistoryError,
    StopReason,
    TextBlock,
    ThinkingBlock,
    ToolCallBlock,
    ToolResultMessage,
    UserMessage,
)
from statemachine_agent._context import ContextProjector, project
from statemachine_agent._protocol import NO_RESULT
from statemachine_agent.testing import find_violations


def calls(*ids: str) -> AssistantMessage:
    return AssistantMessage(
        content=[ToolCallBlock(id=i, name="f", input={}) for i in ids], stop_reason="tool_use"
    )


def result(i: str) -> ToolResultMessage:
    return ToolResultMessage(tool_call_id=i, tool_name="f", content=[TextBlock(text=i)])


def test_repairs() -> None:
    history = [
        UserMessage(content=[TextBlock(text=" "), TextBlock(text="q")]),
        AssistantMessage(
            content=[TextBlock(text=""), *calls("a", "b").content], stop_reason="tool_use"
        ),
        result("b"),
        result("x"),  # orphan
        UserMessage("steer"),
        AssistantMessage(
            content=[TextBlock(text="partial"), ToolCallBlock(id="p", name="f", input={})],
            stop_reason=StopReason.ABORTED,
        ),
        UserMessage("again"),
        AssistantMessage(content=[TextBlock(text="cut")], stop_reason=StopReason.ABORTED),
    ]
    out = project(history)
    assert [m.role for m in out] == [
        "user",
        "assistant",
        "tool_result",
        "tool_result",
        "user",
        "assistant",
        "user",
    ]
    assert out[0].content == [TextBlock(text="q")]
    assert [r.tool_call_id for r in out[2:4]] == ["a", "b"]
    assert out[2].text == NO_RESULT and out[2].is_error
    assert out[5].content == [TextBlock(text="partial")]  # text only; trailing aborted one dropped
    assert not find_violations(out, request=True)


def test_a_stray_result_inside_a_batch_does_not_hide_the_results_after_it() -> None:
    """A result answering no call of the response (a stray, e.g. in a hand-edited history) is
    dropped alone: the batch's results after it are still sent, not replaced by NO_RESULT."""
    history = [UserMessage("q"), calls("a", "b"), result("x"), result("a"), result("b")]
    out = project(history)
    assert [m.role for m in out] == ["user", "assistant", "tool_result", "tool_result"]
    assert [(r.tool_call_id, r.text, r.is_error) for r in out[2:]] == [
        ("a", "a", False),
        ("b", "b", False),
    ]
    assert out[2] is history[3] and out[3] is history[4]
    assert not find_violations(out, request=True)


def test_pause_turn_continuation_is_joined() -> None:
    first = AssistantMessage(content=[TextBlock(text="a")], stop_reason="pause_turn")
    second = AssistantMessage(content=[TextBlock(text="b")], stop_reason="end_turn")
    out = project([UserMessage("q"), first, second, UserMessage("next")])
    assert [m.role for m in out] == ["user", "assistant", "user"]
    assert out[1].text == "ab"


def test_projector_is_incremental_and_detects_replacement() -> None:
    history: list = [UserMessage("q"), calls("a"), result("a")]
    projector = ContextProjector()
    first = projector.project(history)
    assert len(first) == 3
    history += [calls("b"), result("b")]
    second = projector.project(history)
    assert len(second) == 5 and second[0] is history[0]
    assert projector.project(list(history[:3])) == history[:3]  # a new list starts over


def test_projector_raises_on_duplicate_ids() -> None:
    history = [UserMessage("q"), calls("a"), result("a"), calls("a"), result("a")]
    with pytest.raises(InvalidHistoryError, match="appears twice"):
        ContextProjector().project(history)


def test_an_aborted_partial_is_never_joined_to_the_next_response() -> None:
    aborted = AssistantMessage(content=[TextBlock(text="partial")], stop_reason=StopReason.ABORTED)
    new = AssistantMessage(
        content=[ThinkingBlock(thinking="t", signature="S"), *calls("a").content],
        stop_reason="tool_use",
    )
    out = project([UserMessage("q"), aborted, new, result("a")])
    assert [m.role for m in out] == ["user", "assistant", "tool_result"]
    assert out[1] is new  # starts with its thinking block, as the API requires
    paused = AssistantMessage(content=[TextBlock(text="p")], stop_reason="pause_turn")
    out = project([UserMessage("q"), paused, aborted, new, result("a")])
    assert [b.type for b in out[1].content] == ["text", "thinking", "tool_call"]


@pytest.mark.parametrize(
    "between",
    [result("x"), UserMessage(content=[TextBlock(text=" ")])],
    ids=["a_stray_result", "a_blank_user_message"],
)
def test_an_aborted_partial_is_never_joined_to_a_response_after_a_dropped_message(
    between: ToolResultMessage | UserMessage,
) -> None:
    """An aborted partial followed by a message the projection drops (a stray result, a blank
    user message) and then a new response is still replaced by that response, never joined to
    it: the new response keeps its thinking block first, as the API requires."""
    aborted = AssistantMessage(content=[TextBlock(text="partial")], stop_reason=StopReason.ABORTED)
    new = AssistantMessage(
        content=[ThinkingBlock(thinking="t", signature="S"), *calls("a").content],
        stop_reason="tool_use",
    )
    out = project([UserMessage("q"), aborted, between, new, result("a")])
    assert [m.role for m in out] == ["user", "assistant", "tool_result"]
    assert out[1] is new
    assert not find_violations(out, request=True)


def test_an_empty_continuation_ends_the_paused_response_so_a_follow_up_may_follow_it() -> None:
    """A ``pause_turn`` response continued by an empty ``end_turn`` one (dropped from requests: the
    API refuses empty messages) is a finished turn: the follow-up after it is sent as answering a
    complete response, never as a user message after a paused one (found by the kit's stateful
    test: steering and a follow-up queued together with a paused response)."""
    from statemachine_agent import Agent
    from statemachine_agent.models import ScriptedModel

    model = ScriptedModel(
        [
            {"content": [{"type": "text", "text": "ok"}], "stop_reason": "pause_turn"},
            {"content": [], "stop_reason": "end_turn"},
            {"content": [{"type": "text", "text": "fin"}], "stop_reason": "end_turn"},
        ]
    )
    agent = Agent(model)
    agent.steer("ok")
    agent.follow_up("and then?")
    result = agent.run_sync("do the task")
    assert (result.state, result.text, len(model.requests)) == ("done", "fin", 3)
    for request in model.requests:
        assert find_violations(request.messages, request=True) == []
    assert [m.role for m in model.requests[2].messages] == ["user", "user", "assistant", "user"]


# -- the projection's shortcuts give what the plain algorithm gives -----------------------------
# `project` takes a response's calls from the one pass that looks for blank text, and a batch whose
# results follow in declaration order as they are. The reference below is the plain algorithm
# (each call's first result in its batch, else a synthetic one); every history must project the
# same, object for object.


def _reference_project(messages: list[Any], start: int = 0) -> list[Any]:
    from statemachine_agent._messages import text_result
    from statemachine_agent._protocol import EMPTY_OUTPUT, is_blank, without_blank_text

    def clean(message: Any, placeholder: str | None = None) -> Any:
        if not any(is_blank(b) for b in message.content):
            return message
        content = without_blank_text(message.content, placeholder)
        return message.model_copy(update={"content": content}) if content else None

    incomplete_reasons = (StopReason.ABORTED, StopReason.ERROR)
    out: list[Any] = []
    i = start
    while i < len(messages):
        message = messages[i]
        i += 1
        if isinstance(message, ToolResultMessage):
            continue
        if isinstance(message, UserMessage):
            if (cleaned := clean(message)) is not None and cleaned.content:
                out.append(cleaned)
            continue
        incomplete = message.stop_reason in incomplete_reasons
        if incomplete:
            texts = [b for b in message.content if isinstance(b, TextBlock)]
            content = without_blank_text(texts)
            cleaned = message.model_copy(update={"content": content}) if content else None
        else:
            cleaned = clean(message)
            cleaned = cleaned if cleaned is not None and cleaned.content else None
        if cleaned is None:
            last = out[-1] if out else None
            paused = isinstance(last, AssistantMessage) and last.stop_reason == "pause_turn"
            if paused and not incomplete:
                out[-1] = last.model_copy(update={"stop_reason": message.stop_reason})
            continue
        if incomplete and (i == len(messages) or isinstance(messages[i], AssistantMessage)):
            continue
        if out and isinstance(out[-1], AssistantMessage):
            previous = out.pop()
            if previous.stop_reason not in incomplete_reasons:
                cleaned = cleaned.model_copy(
                    update={
                        "content": [*previous.content, *cleaned.content],
                        "usage": previous.usage + cleaned.usage,
                    }
                )
        out.append(cleaned)
        found: dict[str, Any] = {}
        while i < len(messages) and isinstance(messages[i], ToolResultMessage):
            r = messages[i]
            if r.tool_call_id in {c.id for c in cleaned.tool_calls}:
                found.setdefault(r.tool_call_id, clean(r, EMPTY_OUTPUT))
            i += 1
        for call in cleaned.tool_calls:
            out.append(found.get(call.id) or text_result(call, NO_RESULT, is_error=True))
    return out


def _same_projection(got: list[Any], want: list[Any], history: list[Any]) -> bool:
    """Equal messages, each the history's own object exactly when the reference's is."""
    if got != want:
        return False
    for g, w in zip(got, want, strict=True):
        if type(g) is not type(w):
            return False
        if any(w is m for m in history) and g is not w:
            return False
        if g is not w and any(g is m for m in history):
            return False
    return True


_IDS = ["a", "b", "c"]
_texts = st.sampled_from(["x", " ", ""]).map(lambda t: TextBlock(text=t))
_calls = st.sampled_from(_IDS).map(lambda i: ToolCallBlock(id=i, name="f", input={}))
_blocks = st.one_of(_texts, _calls, st.just(ThinkingBlock(thinking="t", signature="S")))
_stops = st.sampled_from(
    ["end_turn", "tool_use", "max_tokens", "pause_turn", "aborted", "error", "refusal", "other"]
)
_assistants = st.builds(
    lambda content, stop: AssistantMessage(content=content, stop_reason=stop),
    st.lists(_blocks, max_size=3),
    _stops,
)
_results = st.builds(
    lambda i, content: ToolResultMessage(tool_call_id=i, tool_name="f", content=content),
    st.sampled_from(_IDS),
    st.lists(_texts, max_size=2),
)
_users = st.lists(_texts, max_size=2).map(lambda content: UserMessage(content=content))


@st.composite
def _batches(draw: st.DrawFn) -> list[Any]:
    """A response with calls and its results as the engine appends them, sometimes changed
    (a result missing, repeated, swapped or stray; a blank one; ids repeated)."""
    ids = draw(st.lists(st.sampled_from(_IDS), min_size=1, max_size=3))
    response = AssistantMessage(
        content=[
            *draw(st.lists(_texts, max_size=1)),
            *(ToolCallBlock(id=i, name="f") for i in ids),
        ],
        stop_reason=draw(_stops),
    )
    results = [
        ToolResultMessage(tool_call_id=i, tool_name="f", content=draw(st.lists(_texts, max_size=1)))
        for i in ids
    ]
    change = draw(st.sampled_from(["none", "none", "drop", "repeat", "swap", "stray"]))
    if change == "drop":
        del results[draw(st.integers(0, len(results) - 1))]
    elif change == "repeat":
        results.append(results[draw(st.integers(0, len(results) - 1))])
    elif change == "swap":
        results.reverse()
    elif change == "stray":
        results.insert(draw(st.integers(0, len(results))), draw(_results))
    return [response, *results]


_histories = st.lists(
    st.one_of(
        _batches(),
        _users.map(lambda m: [m]),
        _assistants.map(lambda m: [m]),
        _results.map(lambda m: [m]),
    ),
    max_size=8,
).map(lambda chunks: [m for chunk in chunks for m in chunk])


_REPEATED_ID = [
    UserMessage("q"),
    AssistantMessage(content=[*calls("a", "a").content], stop_reason="tool_use"),
    result("a"),
    result("a"),
]


@example(_REPEATED_ID, 0)  # each call of a repeated id gets the first result (as the API refuses)
@given(_histories, st.integers(0, 10))
def test_the_projection_is_the_plain_algorithm_for_every_history(
    history: list[Any], start: int
) -> None:
    start = min(start, len(history))
    got = project(history, start)
    assert _same_projection(got, _reference_project(history, start), history)


class _ReferenceProjector:
    """`ContextProjector` as the plain algorithm: the tail projected by `_reference_project`, the
    call ids of each final part gathered as it is added."""

    def __init__(self) -> None:
        self.source: Any = None
        self.done, self.last, self.out, self.ids, self.mark = 0, None, [], set(), None

    def project(self, history: list[Any], appended: int | None) -> list[Any]:
        if (
            history is not self.source
            or len(history) < self.done
            or (self.done and history[self.done - 1] is not self.last)
        ):
            self.__init__()  # type: ignore[misc]
            self.source = history
        tail = _reference_project(history, self.done)
        ids = {c.id for m in tail if isinstance(m, AssistantMessage) for c in m.tool_calls}
        trusted = (
            appended is not None
            and self.mark is not None
            and appended - self.mark == len(history) - self.done
        )
        if not trusted:
            problems = find_violations(tail, request=True, prior_ids=self.ids, offset=len(self.out))
            if problems:
                raise InvalidHistoryError(problems)
        if history and history[-1].role != "assistant":
            self.out += tail
            self.ids |= ids
            self.done, self.last, self.mark = len(history), history[-1], appended
            return self.out
        return [*self.out, *tail]


_steps = st.tuples(st.sampled_from(["engine", "outside", "replace", "copy"]), _histories)


@given(st.lists(_steps, min_size=1, max_size=5))
def test_the_incremental_projection_is_the_plain_algorithm(
    steps: list[tuple[str, list[Any]]],
) -> None:
    """A history grown step by step (by the engine, which counts its appends, or from outside;
    a message replaced in place; a copy of the list) projects as the plain algorithm does, and
    raises the same problems; a tail the engine's count trusts included."""
    projector, reference = ContextProjector(), _ReferenceProjector()
    history: list[Any] = [UserMessage("q")]
    appended = 0
    for how, tail in steps:
        if how == "copy":
            history = list(history)
        if how == "replace" and tail:
            history[-1] = tail[0]
        else:
            history += tail
        if how == "engine":
            appended += len(tail)
        try:
            want = reference.project(history, appended)
        except InvalidHistoryError as exc:
            with pytest.raises(InvalidHistoryError) as raised:
                projector.project(history, appended)
            assert raised.value.violations == exc.violations
            continue
        assert _same_projection(projector.project(history, appended), want, history)


def test_projector_finds_an_id_reused_across_checks_of_a_grown_history() -> None:
    # The prior ids are gathered from every message of the final projection, the first one of each
    # part added since the last check included.
    history: list = [UserMessage("q")]
    projector = ContextProjector()
    projector.project(history)
    history += [calls("a"), result("a")]
    projector.project(history)
    history += [UserMessage("more"), calls("a"), result("a")]
    with pytest.raises(InvalidHistoryError, match="appears twice"):
        projector.project(history)
