"""Context projection: the one place a history becomes what a provider may receive (rule 4 of
`_protocol`).

The stored history records what happened; the projection repairs what a provider would reject:
- whitespace-only text blocks and then-empty messages are dropped;
- an aborted or errored assistant message keeps only its text (never a partial tool call), and is
  dropped when it is the last message;
- a call without a result gets a synthetic error result, results are put in declaration order, and
  results answering no call of the assistant message before them are dropped;
- consecutive assistant messages (a ``pause_turn`` continuation) are joined into one; an aborted
  or errored one followed by another response is dropped, never joined to it.

`ContextProjector` does this incrementally: a prefix that ended on the user side with every call
answered never changes, so each request projects and checks only the new tail.
"""

from __future__ import annotations

from collections.abc import Sequence

from ._errors import InvalidHistoryError
from ._messages import (
    AssistantMessage,
    Message,
    StopReason,
    TextBlock,
    ToolResultMessage,
    UserMessage,
    text_result,
)
from ._protocol import (
    EMPTY_OUTPUT,
    INCOMPLETE_STOP_REASONS,
    NO_RESULT,
    find_violations,
    is_blank,
    is_user_side,
    without_blank_text,
)


def _has_blank(blocks: Sequence[object]) -> bool:
    # A loop rather than ``any(generator)`` (SIM110): called for every message projected.
    for block in blocks:  # noqa: SIM110
        if is_blank(block):
            return True
    return False


def _clean_assistant(message: AssistantMessage, incomplete: bool) -> AssistantMessage | None:
    content = message.content
    if incomplete:  # aborted or errored: its text only
        content = without_blank_text([b for b in content if isinstance(b, TextBlock)])
    elif _has_blank(content):
        content = without_blank_text(content)
    else:
        return message if content else None
    if not content:
        return None
    return message.model_copy(update={"content": content})


def _clean_user(message: UserMessage) -> UserMessage | None:
    if not _has_blank(message.content):
        return message if message.content else None
    content = without_blank_text(message.content)
    return message.model_copy(update={"content": content}) if content else None


def _clean_result(message: ToolResultMessage) -> ToolResultMessage:
    if not _has_blank(message.content):
        return message
    content = without_blank_text(message.content, EMPTY_OUTPUT)
    return message.model_copy(update={"content": content})


def _join(first: AssistantMessage, second: AssistantMessage) -> AssistantMessage:
    return second.model_copy(
        update={"content": [*first.content, *second.content], "usage": first.usage + second.usage}
    )


def project(
    messages: Sequence[Message], start: int = 0, call_ids: set[str] | None = None
) -> list[Message]:
    """Project ``messages[start:]`` (``messages[:start]`` must end on the user side with every
    call answered) to what a provider may receive. Unchanged messages are the same objects.
    The ids of the projected calls are added to ``call_ids`` when it is given."""
    out: list[Message] = []
    n = len(messages)
    i = start
    while i < n:
        message = messages[i]
        i += 1
        role = message.role  # (not isinstance: see `_messages`)
        if role == "tool_result":
            continue  # an orphan: its call is not in the assistant message before its batch
        if role == "user":
            assert isinstance(message, UserMessage)
            cleaned_user = _clean_user(message)
            if cleaned_user is not None:
                out.append(cleaned_user)
            continue
        assert isinstance(message, AssistantMessage)
        incomplete = message.stop_reason in INCOMPLETE_STOP_REASONS  # (read once: see `_messages`)
        cleaned = _clean_assistant(message, incomplete)
        if cleaned is None:
            previous_kept = out[-1] if out else None
            if (
                isinstance(previous_kept, AssistantMessage)
                and previous_kept.stop_reason == StopReason.PAUSE_TURN
                and not incomplete
            ):
                # An empty continuation ended the paused response: joined to it (as a
                # continuation with content is), the response is complete, and what follows
                # answers a finished turn rather than a paused one.
                out[-1] = previous_kept.model_copy(update={"stop_reason": message.stop_reason})
            continue
        if incomplete and (i == n or isinstance(messages[i], AssistantMessage)):
            continue  # cut off and then replaced by what follows: never joined to a response
        if out and out[-1].role == "assistant":
            previous = out.pop()
            assert isinstance(previous, AssistantMessage)
            if (
                previous.stop_reason not in INCOMPLETE_STOP_REASONS
            ):  # a pause_turn continuation is joined
                cleaned = _join(previous, cleaned)
        out.append(cleaned)
        calls = cleaned.tool_calls
        if not calls:
            continue
        wanted: set[str] = set()
        for call in calls:  # (a loop: see `_messages`)
            wanted.add(call.id)
        if call_ids is not None:
            call_ids |= wanted
        found: dict[str, ToolResultMessage] = {}
        while i < n:
            result = messages[i]
            if not isinstance(result, ToolResultMessage):
                break
            call_id = result.tool_call_id
            if call_id in wanted and call_id not in found:
                found[call_id] = _clean_result(result)
            i += 1
        for call in calls:
            out.append(found.get(call.id) or text_result(call, NO_RESULT, is_error=True))
    return out


class ContextProjector:
    """Projects and checks a growing history, doing the work once per message.

    ``project(history)`` returns the request's messages; the returned list is valid until the next
    call and must not be changed. The protocol check (`find_violations`) runs on every message
    that came from outside (a history the agent was given, restored or compacted); a tail that
    only the engine appended since the last check (``appended``, the agent's count of its own
    appends: a response it normalized, results it built in declaration order, queued input) is
    projected but not checked again.
    """

    def __init__(self) -> None:
        self._source: Sequence[Message] | None = None
        self._done = 0  # source messages whose projection is final
        self._last: Message | None = None
        self._out: list[Message] = []
        self._ids: set[str] = set()
        self._mark: int | None = None  # the engine's append count at the last full check

    def _reset(self, history: Sequence[Message]) -> None:
        self._source, self._done, self._last = history, 0, None
        self._out, self._ids, self._mark = [], set(), None

    def project(self, history: Sequence[Message], appended: int | None = None) -> list[Message]:
        """Project ``history`` for a request.

        Args:
            history: the agent's history.
            appended: how many messages the engine has appended to it so far (None: check
                everything).

        Raises:
            InvalidHistoryError: the projection still breaks the protocol (e.g. a tool-call id used
                twice), naming every problem, instead of a 400 from the provider.
        """
        if (
            history is not self._source
            or len(history) < self._done
            or (self._done and history[self._done - 1] is not self._last)
        ):
            self._reset(history)
        tail_ids: set[str] = set()
        tail = project(history, self._done, tail_ids)
        trusted = (
            appended is not None
            and self._mark is not None
            and appended - self._mark == len(history) - self._done
        )
        if not trusted:
            problems = find_violations(
                tail, request=True, prior_ids=self._ids, offset=len(self._out)
            )
            if problems:
                raise InvalidHistoryError(problems)
        if history and is_user_side(history[-1]):
            self._out.extend(tail)
            self._ids |= tail_ids
            self._done, self._last = len(history), history[-1]
            self._mark = appended
            return self._out
        return [*self._out, *tail]


def dropped_by_projection(returned: Sequence[Message], projected: Sequence[Message]) -> list[str]:
    """What the projection of the ``transform_context`` hook's output dropped that made the
    request invalid: tool results whose calls are not in the output (each result must follow
    the assistant message holding its call). Empty when it dropped none."""
    kept = {c.id for m in projected if isinstance(m, AssistantMessage) for c in m.tool_calls}
    orphans = [
        m.tool_call_id
        for m in returned
        if isinstance(m, ToolResultMessage) and m.tool_call_id not in kept
    ]
    if not orphans:
        return []
    only = "only " if len(orphans) == len(returned) else ""
    return [
        f"the transform_context hook returned {only}{len(orphans)} tool result(s) whose calls "
        f"were missing ({', '.join(orphans)}), dropped from the request: keep each tool result "
        "with the assistant message holding its call, after a user message"
    ]
