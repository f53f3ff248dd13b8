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
    ToolCallBlock,
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
    without_blank_text,
)


def _text_only(message: AssistantMessage) -> AssistantMessage | None:
    """An aborted or errored response as it is sent: its text only (never a partial tool call),
    or None when no text is left."""
    content = without_blank_text([b for b in message.content if isinstance(b, TextBlock)])
    return message.model_copy(update={"content": content}) if content else None


def _has_blank(blocks: Sequence[object]) -> bool:
    # A loop rather than ``any(generator)`` (SIM110): called for every message projected.
    for block in blocks:  # noqa: SIM110
        if is_blank(block):
            return True
    return False


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


def project(messages: Sequence[Message], start: int = 0) -> list[Message]:
    """Project ``messages[start:]`` (``messages[:start]`` must end on the user side with every
    call answered) to what a provider may receive. Unchanged messages are the same objects."""
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
        calls: list[ToolCallBlock] = []  # the calls sent (a partial response's are not)
        cleaned: AssistantMessage | None
        if incomplete:
            cleaned = _text_only(message)
        else:
            content = message.content
            blank = False
            for block in content:  # one pass: its calls, and whether a text is blank
                if isinstance(block, ToolCallBlock):
                    calls.append(block)
                elif is_blank(block):
                    blank = True
            if blank:
                content = without_blank_text(content)
                cleaned = message.model_copy(update={"content": content}) if content else None
            else:
                cleaned = message if content else None
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
            # (A kept response with calls is followed by their results: the one before holds
            # no call, so a joined message's calls are ``calls``.)
            previous = out.pop()
            assert isinstance(previous, AssistantMessage)
            if (
                previous.stop_reason not in INCOMPLETE_STOP_REASONS
            ):  # a pause_turn continuation is joined
                cleaned = _join(previous, cleaned)
        out.append(cleaned)
        if not calls:
            continue
        # The results as the engine appends them: one for each call, in declaration order.
        # Taken as they are when the ids are distinct: each is then its call's first result in
        # the batch, as below (a result after them answers a call already answered: an orphan).
        kept: list[Message] = []
        j = i
        for call in calls:  # (a loop: see `_messages`)
            if j == n:
                break
            result = messages[j]
            if not isinstance(result, ToolResultMessage) or result.tool_call_id != call.id:
                break
            kept.append(_clean_result(result))
            j += 1
        else:
            if len(calls) == 1 or _distinct(calls):
                out += kept
                i = j
                continue
        # Any other batch: each call's first result in it, else a synthetic error result.
        wanted: set[str] = set()
        for call in calls:
            wanted.add(call.id)
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


def _distinct(calls: Sequence[ToolCallBlock]) -> bool:
    ids: set[str] = set()
    for call in calls:
        ids.add(call.id)
    return len(ids) == len(calls)


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
        self._ids: set[str] = set()  # the call ids of ``_out[:_idsdone]``
        self._idsdone = 0
        self._lag: int | None = None  # the engine's append count less ``_done``, at the last check

    def _reset(self, history: Sequence[Message]) -> None:
        self._source, self._done, self._last = history, 0, None
        self._out, self._ids, self._idsdone, self._lag = [], set(), 0, None

    def _prior_ids(self) -> set[str]:
        """The tool-call ids of the final projection (gathered only when a check needs them)."""
        ids, out = self._ids, self._out
        for message in out[self._idsdone :]:
            if isinstance(message, AssistantMessage):
                for call in message.tool_calls:
                    ids.add(call.id)
        self._idsdone = len(out)
        return ids

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
        done = self._done
        if (
            history is not self._source
            or len(history) < done
            or (done and history[done - 1] is not self._last)
        ):
            self._reset(history)
            done = 0
        tail = project(history, done)
        size = len(history)
        # Trusted: every message after ``done`` is one the engine appended itself.
        if appended is None or appended - size != self._lag:
            problems = find_violations(
                tail, request=True, prior_ids=self._prior_ids(), offset=len(self._out)
            )
            if problems:
                raise InvalidHistoryError(problems)
        if size and history[-1].role != "assistant":  # on the user side (`is_user_side`)
            self._out += tail
            self._done, self._last = size, history[-1]
            self._lag = None if appended is None else appended - size
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
