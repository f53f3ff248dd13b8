"""OpenTelemetry tracing of an agent's runs (the optional extra: ``pip install
'statemachine-agent[otel]'``).

`instrument` subscribes to an agent's events and turns them into spans that follow the
OpenTelemetry GenAI semantic conventions: one ``invoke_agent`` span per run, one ``chat {model}``
span per model request and one ``execute_tool {name}`` span per tool call, both children of the
run's span. The machine's transitions are events of the run's span (``transition``, with source,
destination, trigger and label). An aborted, cancelled or failed run ends every span still open
with an error status naming why. Prompt, response and tool contents are recorded only with
``include_content=True``.

A chat span is the current span from its turn's start until its response is in: the request is
built (``transform_context``) and the model's stream is read in its context, so the spans a model
and its client open (the Anthropic SDK's own ``anthropic.messages.create``, an instrumented
httpx's) are its children, and the trace context a client sends with the request (the W3C
``traceparent`` header) is the run's trace. It stops being current when the response is in or
the run leaves the state that sent it (a refused request before compaction, say).

A tool call's span is the current span while its permission hook and its tool run (an async tool
in the batch's task, a sync one in its worker thread, which gets a copy of the context), so the
spans a tool opens are its children. A call deferred for approval has a span only where it runs:
the run that stops in ``awaiting_approval`` drops the span it had started for it (never ended,
so never exported) and names the pending call ids on its own span
(``statemachine_agent.pending_call_ids``); the run that decides them links its span to the
paused run's (a span link, ``statemachine_agent.link.type = "resumes"``). Every run's span
carries ``gen_ai.conversation.id``: ``conversation_id=``, else the one the agent's session log
records, else an id made per `instrument` call.

Across processes, through the session log: an instrumented agent with a session log records
there (a ``trace`` line, `statemachine_agent.session.SessionTrace`) its conversation id and, for a
run that stops in ``awaiting_approval``, the paused run's span context (trace id, span id, flags)
and pending call ids. An agent resumed from that log (`Agent.resume`) and instrumented takes the
same conversation id, and its run that decides the calls links to the paused run's span, with no
argument to pass. ``resumes=`` / ``conversation_id=`` hand them over without a log (or override
it).

Nothing is traced, and no event is built, for an agent that is not instrumented.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Sequence
from contextvars import Token
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

try:
    from opentelemetry import context as otel_context
    from opentelemetry import trace
    from opentelemetry.context import Context
    from opentelemetry.trace import (
        Link,
        Span,
        SpanContext,
        SpanKind,
        Status,
        StatusCode,
        TraceFlags,
    )
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        "statemachine_agent.otel needs OpenTelemetry: pip install 'statemachine-agent[otel]'"
    ) from exc

from ._events import (
    Event,
    MessageEnd,
    MessageStart,
    ModelRetry,
    ParentRef,
    RunEnd,
    RunStart,
    StateChanged,
    ToolExecutionEnd,
    ToolExecutionStart,
    TurnStart,
)
from ._execution import awaits_decision
from ._hooks import PendingCall
from ._messages import AssistantMessage, Usage
from ._states import State
from .session import PausedSpan, SessionLog, SessionTrace

if TYPE_CHECKING:
    from opentelemetry.trace import TracerProvider

    from ._agent import Agent

__all__ = ["Instrumentation", "instrument"]

_ENDED_BADLY = {State.ABORTED.value, State.FAILED.value}


_REQUEST_SETTINGS = {
    "max_tokens": "gen_ai.request.max_tokens",
    "temperature": "gen_ai.request.temperature",
    "top_p": "gen_ai.request.top_p",
    "top_k": "gen_ai.request.top_k",
    "stop_sequences": "gen_ai.request.stop_sequences",
}
"""Request settings (``Agent(model_settings=...)``, else the model's own attribute of the same
name, as ``AnthropicModel.max_tokens``) and the GenAI attributes of a chat span that give them."""


@dataclass
class _CurrentSpan:
    span: Span
    token: Token[Context] | None  # the context token of making it current (None: not current)


@dataclass
class _RunSpans:
    run: Span
    chat: _CurrentSpan | None = None
    tools: dict[str, _CurrentSpan] = field(default_factory=dict)
    nested: bool = False  # a sub-agent's run (its events carry ``parent``)


class Instrumentation:
    """Spans for the runs of one agent (made by `instrument`).

    Args:
        agent: the agent to trace.
        tracer_provider: where the spans go; the global provider when None.
        include_content: record prompts, responses, tool arguments and results (off by
            default: they may hold personal or secret data).
        conversation_id: ``gen_ai.conversation.id`` of every run's span (when None: the one
            the agent's session log records, else a new id).
        resumes: the span context of a paused run this agent resumes in another process
            (`Instrumentation.paused` there): the next run's span links to it. Within one
            process the link is made without it, and so it is for an agent resumed from a
            session log that recorded the paused run (see the module's docstring).

    Attributes:
        conversation_id: the ``gen_ai.conversation.id`` of the runs' spans.
        paused: the span context of the last run that stopped in ``awaiting_approval`` and was
            not resumed yet (None otherwise): what the resuming run links to.
    """

    def __init__(
        self,
        agent: Agent,
        *,
        tracer_provider: TracerProvider | None = None,
        include_content: bool = False,
        conversation_id: str | None = None,
        resumes: SpanContext | None = None,
    ) -> None:
        from . import __version__

        self._tracer = trace.get_tracer(
            "statemachine_agent", __version__, tracer_provider=tracer_provider
        )
        self._agent = agent
        self._content = include_content
        self._runs: dict[str, _RunSpans] = {}
        log = _log_of(agent)
        recorded = None if log is None else log.trace
        if conversation_id is None and recorded is not None:
            conversation_id = recorded.conversation_id
        self.conversation_id = conversation_id or uuid.uuid4().hex
        if (
            resumes is None
            and recorded is not None
            and recorded.paused is not None
            and agent.state == State.AWAITING_APPROVAL  # the recorded pause is still waiting
        ):
            resumes = _span_context(recorded.paused)
        self.paused: SpanContext | None = resumes
        model = agent.model
        self._provider = str(getattr(model, "provider_name", type(model).__name__.lower()))
        self._unsubscribe: Callable[[], None] | None = agent.subscribe(self._on_event)

    def close(self) -> None:
        """Stop tracing the agent (spans of a run in progress are ended first)."""
        if self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None
        for spans in list(self._runs.values()):
            self._end_all(spans, "tracing was stopped")
        self._runs.clear()

    # -- events -------------------------------------------------------------------------------

    def _on_event(self, event: Event) -> None:
        if isinstance(event, RunStart):
            self._run_start(event)
            return
        spans = self._runs.get(event.run_id)
        if spans is None:
            return
        if isinstance(event, StateChanged):
            if spans.chat is not None:  # the effect that sent the request has returned
                _make_not_current(spans.chat)
            spans.run.add_event(
                "transition",
                {
                    "statemachine_agent.transition.source": str(event.source),
                    "statemachine_agent.transition.destination": str(event.dest),
                    "statemachine_agent.transition.trigger": str(event.trigger),
                    "statemachine_agent.transition.label": event.label,
                },
            )
        elif isinstance(event, TurnStart):
            self._chat_start(spans, event.turn)
        elif isinstance(event, MessageStart) and spans.chat is not None:
            if event.model:
                spans.chat.span.set_attribute("gen_ai.response.model", event.model)
            if event.response_id:
                spans.chat.span.set_attribute("gen_ai.response.id", event.response_id)
        elif isinstance(event, ModelRetry) and spans.chat is not None:
            spans.chat.span.add_event(
                "retry",
                {
                    "statemachine_agent.retry.attempt": event.attempt,
                    "statemachine_agent.retry.delay_seconds": event.delay_seconds,
                    "error.type": event.error,
                },
            )
        elif isinstance(event, MessageEnd) and isinstance(event.message, AssistantMessage):
            self._chat_end(spans, event.message)
        elif isinstance(event, ToolExecutionStart):
            self._tool_start(spans, event)
        elif isinstance(event, ToolExecutionEnd):
            self._tool_end(spans, event)
        elif isinstance(event, RunEnd):
            self._run_end(event)

    def _run_start(self, event: RunStart) -> None:
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.provider.name": self._provider,
            "gen_ai.request.model": self._agent.model.name,
            "gen_ai.conversation.id": self.conversation_id,
            "statemachine_agent.run_id": event.run_id,
        }
        if self._content and event.prompt is not None:
            attributes["gen_ai.input.messages"] = _json([event.prompt])
        parent = event.parent
        if parent is not None:  # a sub-agent's run: under the parent's execute_tool span
            return self._nested_run_start(event, parent, attributes)
        links = []
        if self.paused is not None:  # this run decides the calls the paused run left pending
            links.append(Link(self.paused, {"statemachine_agent.link.type": "resumes"}))
            self.paused = None
        span = self._tracer.start_span(
            "invoke_agent", kind=SpanKind.INTERNAL, attributes=attributes, links=links
        )
        self._runs[event.run_id] = _RunSpans(span)

    def _nested_run_start(
        self, event: RunStart, parent: ParentRef, attributes: dict[str, Any]
    ) -> None:
        """A sub-agent's run (`Agent.as_tool`): its ``invoke_agent`` span is a child of the
        parent run's ``execute_tool`` span of the call running it (its model is the
        sub-agent's, not this agent's: ``gen_ai.request.model`` is left out)."""
        del attributes["gen_ai.request.model"]
        attributes["gen_ai.agent.name"] = parent.tool_name
        attributes["statemachine_agent.parent_run_id"] = parent.run_id
        attributes["statemachine_agent.parent_call_id"] = parent.call_id
        outer = self._runs.get(parent.run_id)
        held = None if outer is None else outer.tools.get(parent.call_id)
        context = None if held is None else trace.set_span_in_context(held.span)
        span = self._tracer.start_span(
            "invoke_agent", context=context, kind=SpanKind.INTERNAL, attributes=attributes
        )
        self._runs[event.run_id] = _RunSpans(span, nested=True)

    def _chat_start(self, spans: _RunSpans, turn: int) -> None:
        if spans.chat is not None:  # a request that never answered (refused as too long)
            _make_not_current(spans.chat)
            spans.chat.span.end()
        agent = self._agent
        model = agent.model.name
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": self._provider,
            "gen_ai.request.model": model,
            "gen_ai.conversation.id": self.conversation_id,
            "statemachine_agent.turn": turn,
        }
        for setting, name in _REQUEST_SETTINGS.items():
            value = agent.model_settings.get(setting, getattr(agent.model, setting, None))
            if isinstance(value, int | float | str) and not isinstance(value, bool):
                attributes[name] = value
            elif isinstance(value, list | tuple) and all(isinstance(v, str) for v in value):
                attributes[name] = list(value)
        span = self._tracer.start_span(
            f"chat {model}",
            context=trace.set_span_in_context(spans.run),
            kind=SpanKind.CLIENT,
            attributes=attributes,
        )
        # Current while the request is built and its stream read: the turn starts in the task
        # that sends the request, so what the model and its client open (their spans, the
        # traceparent header) belongs to this span.
        spans.chat = _CurrentSpan(span, otel_context.attach(trace.set_span_in_context(span)))

    def _chat_end(self, spans: _RunSpans, message: AssistantMessage) -> None:
        held, spans.chat = spans.chat, None
        if held is None:
            return
        _make_not_current(held)
        span = held.span
        if message.model:
            span.set_attribute("gen_ai.response.model", message.model)
        if message.stop_reason is not None:
            span.set_attribute("gen_ai.response.finish_reasons", [str(message.stop_reason)])
        for name, value in _usage_attributes(message.usage).items():
            span.set_attribute(name, value)
        if self._content:
            span.set_attribute("gen_ai.output.messages", _json([message]))
        if message.stop_reason in ("error", "aborted"):
            span.set_attribute("error.type", str(message.stop_reason))
            span.set_status(Status(StatusCode.ERROR, message.error or str(message.stop_reason)))
        span.end()

    def _tool_start(self, spans: _RunSpans, event: ToolExecutionStart) -> None:
        call = event.call
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": call.name,
            "gen_ai.tool.call.id": call.id,
            "gen_ai.tool.type": "function",
        }
        if self._content:
            attributes["gen_ai.tool.call.arguments"] = json.dumps(call.input, default=str)
        span = self._tracer.start_span(
            f"execute_tool {call.name}",
            context=trace.set_span_in_context(spans.run),
            kind=SpanKind.INTERNAL,
            attributes=attributes,
        )
        # Current while the call runs: the start event is emitted in the task that runs it.
        token = otel_context.attach(trace.set_span_in_context(span))
        spans.tools[call.id] = _CurrentSpan(span, token)

    def _tool_end(self, spans: _RunSpans, event: ToolExecutionEnd) -> None:
        held = spans.tools.pop(event.call.id, None)
        if held is None:
            return
        _make_not_current(held)
        span, result = held.span, event.result
        if awaits_decision(result):
            return  # deferred for approval: dropped unended; the call's span is where it runs
        if self._content:
            span.set_attribute("gen_ai.tool.call.result", result.text)
        if result.is_error:
            aborted = self._abort_reason(event.run_id)
            span.set_attribute("error.type", "aborted" if aborted else "tool_error")
            span.set_status(
                Status(
                    StatusCode.ERROR, f"the run was aborted: {aborted}" if aborted else result.text
                )
            )
        span.end()

    def _abort_reason(self, run_id: str) -> str | None:
        """The abort reason of the agent's run ``run_id`` if it was aborted, else None."""
        run = self._agent.current_run
        if run is None or run.id != run_id or not run.signal.aborted:
            return None
        return run.signal.reason or "aborted"

    def _run_end(self, event: RunEnd) -> None:
        spans = self._runs.pop(event.run_id, None)
        if spans is None:
            return
        result = event.result
        state = result.state.value
        run = spans.run
        run.set_attribute("statemachine_agent.state", state)
        run.set_attribute("statemachine_agent.turns", result.turns)
        if result.pending:
            run.set_attribute("statemachine_agent.pending_call_ids", [c.id for c in result.pending])
        if not spans.nested:  # a sub-agent's run is no pause of this agent's, nor its trace
            if result.pending:
                self.paused = run.get_span_context()
            self._record_trace(run.get_span_context(), result.pending)
        for name, value in _usage_attributes(result.usage).items():
            run.set_attribute(name, value)
        if self._content and result.state is State.DONE:
            run.set_attribute("gen_ai.output.messages", _json([result.text]))
        if state in _ENDED_BADLY:
            run.set_attribute("error.type", state)
            self._end_all(spans, result.error or state)
        else:
            self._end_all(spans, f"the run ended in {state}", run_too=False)
            run.end()

    def _record_trace(self, context: SpanContext, pending: Sequence[PendingCall]) -> None:
        """Record in the agent's session log, if it has one, the conversation id and the span
        of a run that stopped with ``pending`` calls: a ``trace`` line when the run paused, or
        when the log does not hold this conversation id yet."""
        log = _log_of(self._agent)
        if log is None:
            return
        paused = None
        if pending and context.is_valid:
            paused = PausedSpan(
                trace.format_trace_id(context.trace_id),
                trace.format_span_id(context.span_id),
                int(context.trace_flags),
                tuple(call.id for call in pending),
            )
        recorded = log.trace
        if (
            paused is None
            and recorded is not None
            and recorded.conversation_id == self.conversation_id
        ):
            return
        log.record_trace(SessionTrace(self.conversation_id, paused))

    def _end_all(self, spans: _RunSpans, reason: str, *, run_too: bool = True) -> None:
        """End every open span with an error status naming ``reason`` (the run's span last)."""
        held_spans = [*spans.tools.values(), *([spans.chat] if spans.chat else [])]
        for held in held_spans:
            _make_not_current(held)
        tools = [held.span for held in spans.tools.values()]
        chat = spans.chat.span if spans.chat is not None else None
        for span in (chat, *tools, spans.run if run_too else None):
            if span is not None and span.is_recording():
                span.set_status(Status(StatusCode.ERROR, reason))
                span.end()
        spans.chat = None
        spans.tools.clear()


def _make_not_current(held: _CurrentSpan) -> None:
    """Detach a span from the context it was made current in, when this is that context (a
    tool's end event comes from the task that ran the call, a chat's from the run's task; a
    batch ended otherwise leaves the call's task context, which ends with it, as it was)."""
    token, held.token = held.token, None
    if token is not None and trace.get_current_span() is held.span:
        otel_context.detach(token)


def instrument(
    agent: Agent,
    *,
    tracer_provider: TracerProvider | None = None,
    include_content: bool = False,
    conversation_id: str | None = None,
    resumes: SpanContext | None = None,
) -> Instrumentation:
    """Trace ``agent``'s runs with OpenTelemetry (see the module's docstring for the spans).

    Args:
        agent: the agent to trace.
        tracer_provider: where the spans go; the global provider (``opentelemetry.trace.
            set_tracer_provider``) when None.
        include_content: also record prompts, responses, tool arguments and tool results.
        conversation_id: ``gen_ai.conversation.id`` of the runs' spans (a new id when None).
        resumes: the span context of the paused run this agent resumes from another process
            (that process's `Instrumentation.paused`): the next run's span links to it.

    Returns:
        The `Instrumentation`; ``close()`` stops tracing.
    """
    return Instrumentation(
        agent,
        tracer_provider=tracer_provider,
        include_content=include_content,
        conversation_id=conversation_id,
        resumes=resumes,
    )


def _span_context(paused: PausedSpan) -> SpanContext:
    """The span context a session log's paused span names (a remote one: another process's)."""
    return SpanContext(
        trace_id=int(paused.trace_id, 16),
        span_id=int(paused.span_id, 16),
        is_remote=True,
        trace_flags=TraceFlags(paused.trace_flags),
    )


def _usage_attributes(usage: Usage) -> dict[str, int]:
    return {
        "gen_ai.usage.input_tokens": usage.input_tokens
        + usage.cache_read_tokens
        + usage.cache_write_tokens,
        "gen_ai.usage.output_tokens": usage.output_tokens,
        "gen_ai.usage.cache_read.input_tokens": usage.cache_read_tokens,
        "gen_ai.usage.cache_creation.input_tokens": usage.cache_write_tokens,
    }


def _json(items: list[Any]) -> str:
    out = []
    for item in items:
        dump = getattr(item, "model_dump", None)
        out.append(dump(mode="json", exclude_none=True) if dump is not None else item)
    return json.dumps(out, default=str)


def _log_of(agent: Agent) -> SessionLog | None:
    """The agent's session log (`Agent.session` is typed by the core's seam, not as the class)."""
    log = agent.session
    return log if isinstance(log, SessionLog) else None
