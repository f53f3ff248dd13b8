"""`AgentBase`: what `Agent` shows of its conversation, events and lifecycle: the history and
its state, queued input, subscriptions, and closing. It holds the agent's `Conversation`, its
`EventBus` and the `RunClaim` on its current run; `Agent` adds the configuration and runs."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Self

from ._accounting import ContextUsage
from ._bus import EventBus
from ._compacting import context_window
from ._context import project
from ._conversation import Conversation, DeliveryMode, as_user, held_batch
from ._diagram import Detail, Diagram
from ._errors import AgentBusyError
from ._events import Event
from ._handles import DEFAULT_MAX_QUEUE, EventStream, RunClaim
from ._hooks import PendingCall
from ._limits import RunCounts
from ._machine import LoopMachine
from ._messages import Message, ToolResultMessage, Usage, UserMessage
from ._run import Run
from ._session_seam import SessionLogLike
from ._sources import ToolTable
from ._states import State
from .models._base import Model, ModelRequest, ToolDefinition


class AgentBase:
    """The history, queued input, events and lifecycle of an `Agent` (see there).

    Args:
        messages: the history to start from.
        steering_mode, follow_up_mode: see `Agent`.

    Attributes:
        conversation: the history, call ids, context meter, queued input and held batch.
        bus: the event subscribers.
    """

    model: Model
    owns_model: bool
    system: str | None
    model_settings: dict[str, Any]
    tool_definitions: list[ToolDefinition]
    tool_table: ToolTable | None
    machine: LoopMachine
    session: SessionLogLike | None

    def __init__(
        self,
        messages: Sequence[Message],
        steering_mode: DeliveryMode,
        follow_up_mode: DeliveryMode,
    ) -> None:
        self.conversation = Conversation(
            messages, steering_mode=steering_mode, follow_up_mode=follow_up_mode
        )
        self.bus = EventBus()
        self._claims = RunClaim()

    def close(self) -> None:
        """Close the session log, if any (its lock and file are released; with ``fsync`` its
        last lines are synced first). The agent can still run, unlogged. The model is closed by
        `aclose` when the agent owns it; otherwise it is its owner's to close.

        An agent dropped without closing releases its log when it is collected (the agent holds
        no reference cycle to it); a callback of yours that refers to the agent makes a cycle,
        released only when the garbage collector runs, so close agents you are done with.

        Raises:
            AgentBusyError: a run is in progress (abort it and await it first).
        """
        with self._claims.lock:
            if self._claims.running:
                raise AgentBusyError("cannot close the agent while a run is in progress")
            if self.session is not None:
                self.session.close()

    async def aclose(self) -> None:
        """`close`, then stop the tool sources (an MCP server's process or connection:
        `ToolTable.aclose`), then, when the agent owns its model (``owns_model=True``), close
        the model (``await model.aclose()``: the HTTP client it made).

        Raises:
            AgentBusyError: a run is in progress.
        """
        self.close()
        if self.tool_table is not None:
            await self.tool_table.aclose()
        aclose = getattr(self.model, "aclose", None) if self.owns_model else None
        if aclose is not None:
            await aclose()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    async def __aenter__(self) -> Self:
        """Connect the tool sources and list their tools (stopping them again on a failure).

        Raises:
            ToolDefinitionError, AgentError: as `ToolTable.refresh` (a clash, a source that
                cannot list its tools, naming it).
        """
        table = self.tool_table
        if table is not None:
            try:
                await table.refresh()
            except BaseException:
                await table.aclose()
                raise
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    # -- public state -------------------------------------------------------------------------

    @property
    def state(self) -> State | str:
        """The machine's current state (a `State`, or the name of a state a user added)."""
        return self.machine.state

    def diagram(self, *, detail: Detail = "overview") -> Diagram:
        """This agent's state diagram (its machine with the states, transitions and callbacks
        added), the current state marked: Jupyter shows it (SVG with Graphviz, Mermaid
        without), ``str()`` gives the Mermaid text.

        Args:
            detail: ``overview`` (one edge per pair of states, labelled with the branches'
                labels) or ``full`` (every guarded branch with its guards).

        Raises:
            UsageError: ``detail`` is unknown.
        """
        return Diagram(self, detail=detail)

    def restore(
        self,
        messages: Sequence[Message],
        state: State,
        *,
        pending: tuple[Sequence[PendingCall], Sequence[ToolResultMessage]] | None = None,
        counts: RunCounts | None = None,
    ) -> None:
        """Put back a saved history and state (``idle``, terminal or ``awaiting_approval``), as a
        session log does.

        Args:
            messages: the history (for ``awaiting_approval``, ending with the held batch's
                assistant message).
            state: the state to be in.
            pending: for ``awaiting_approval``: the calls waiting for a decision and the results
                the batch already has.
            counts: what the last run counted toward its limits (`RunResult.counts`): a run
                continued without a prompt goes on from them, as in the process that ran it.
                None: zero.

        Raises:
            AgentBusyError: a run is in progress.
            MachineDefinitionError: ``state`` is mid-run (a run cannot be resumed mid-flight).
            UsageError: ``awaiting_approval`` without pending calls, or they do not belong to the
                last message.
        """
        if self._claims.running:
            raise AgentBusyError("cannot restore the history while a run is in progress")
        batch = held_batch(messages, pending) if state is State.AWAITING_APPROVAL else None
        self.conversation.held = None  # the history below replaces the old batch's too
        self.messages = messages
        self.machine.restore(state)
        self.conversation.held = batch
        self._claims.counts = counts if counts is not None else RunCounts()

    @property
    def pending(self) -> list[PendingCall]:
        """The deferred calls waiting for a decision (in ``awaiting_approval``), in declaration
        order."""
        held = self.conversation.held
        return [] if held is None else list(held.calls)

    @property
    def messages(self) -> list[Message]:
        """The history (do not mutate it; assign a new list between runs instead)."""
        return self.conversation.messages

    @messages.setter
    def messages(self, messages: Sequence[Message]) -> None:
        """Replace the history between runs (`Conversation.replace`: in ``awaiting_approval`` the
        new history must still end with the response whose calls wait for a decision).

        Raises:
            AgentBusyError: a run is in progress.
            UsageError: calls await approval and the new history does not end with their
                response (it would drop them, and approving them would leave results without
                their calls).
        """
        if self._claims.running:
            raise AgentBusyError("cannot replace the history while a run is in progress")
        self.conversation.replace(messages)

    @property
    def steering_mode(self) -> DeliveryMode:
        """How steering is delivered: ``"all"`` or ``"one_at_a_time"`` (assignable)."""
        return self.conversation.steering_mode

    @steering_mode.setter
    def steering_mode(self, mode: DeliveryMode) -> None:
        self.conversation.steering_mode = mode

    @property
    def follow_up_mode(self) -> DeliveryMode:
        """How follow-ups are delivered: ``"one_at_a_time"`` or ``"all"`` (assignable)."""
        return self.conversation.follow_up_mode

    @follow_up_mode.setter
    def follow_up_mode(self, mode: DeliveryMode) -> None:
        self.conversation.follow_up_mode = mode

    @property
    def context_usage(self) -> ContextUsage:
        """How much of the model's context window the history uses: the tokens the provider
        counted for the last request plus an estimate of what was added since (see
        `ContextUsage`; the whole history is estimated before the first response)."""
        return self.conversation.usage(context_window(self.model))

    async def count_context(self) -> ContextUsage:
        """Count the context the next request would use with the model's token-counting
        endpoint (``model.count_tokens(request)``, e.g. `AnthropicModel.count_tokens`) instead
        of estimating it; the count becomes the meter's reported figure. A model without one
        gives `context_usage` (the estimate).

        Raises:
            ModelError: the count failed.
        """
        count = getattr(self.model, "count_tokens", None)
        if count is None:
            return self.context_usage
        messages = self.messages
        projected = project(messages)
        table = self.tool_table
        tools = self.tool_definitions if table is None else table.definitions
        request = ModelRequest(projected, self.system, tools, self.model_settings)
        tokens = int(await count(request))
        self.conversation.meter.counted(messages, Usage(input_tokens=tokens))  # every message
        return self.context_usage

    @property
    def is_running(self) -> bool:
        """A run is in progress."""
        return self._claims.running

    @property
    def current_run(self) -> Run | None:
        """The run in progress (claimed, not yet ended), or None."""
        return self._claims.run

    # -- events -------------------------------------------------------------------------------

    def subscribe(self, callback: Callable[[Event], Any]) -> Callable[[], None]:
        """Call ``callback(event)`` for every event, synchronously and in order, on the thread
        running the agent (the event loop's). Returns an unsubscribe function.

        Every subscriber registered when an event is emitted receives it; subscribing or
        unsubscribing (even from inside a callback) takes effect from the next event. A callback
        that raises is logged and does not stop the run. A callback holds up the run and every
        agent on its loop while it runs: one that takes longer than `SLOW_SUBSCRIBER_SECONDS`
        is logged once at warning level. Consume slowly (or asynchronously) through `events`.

        Raises:
            TypeError: ``callback`` is async (it would never be awaited; use `events`).
        """
        return self.bus.subscribe(callback)

    def events(self, *, max_queue: int = DEFAULT_MAX_QUEUE) -> EventStream:
        """An async iterator over events, subscribed when called (before the first iteration):
        ``async for event in agent.events(): ...``. Events are handed to the consumer's loop
        thread-safely, whichever thread runs the agent.

        Args:
            max_queue: how many events may wait for the consumer; beyond it the oldest waiting
                event is dropped for each new one (counted in the stream's ``dropped``; ``seq``
                shows the gap).

        Raises:
            UsageError: ``max_queue`` is below 1.
        """
        return EventStream(self.bus.subscribe, max_queue)

    # -- queued input and abort ---------------------------------------------------------------

    def steer(self, message: str | UserMessage) -> None:
        """Queue input delivered after the current tool batch's results, before the next model
        request (or right after the current response when it has no tool calls). Input still
        queued when a run ends (an abort) is delivered by the next run, right after its prompt."""
        self.conversation.steering.append(as_user(message))

    def follow_up(self, message: str | UserMessage) -> None:
        """Queue input delivered when the model would otherwise stop (one per stop)."""
        self.conversation.follow_ups.append(as_user(message))

    def has_queued_input(self) -> bool:
        """Steering or follow-up messages are waiting to be delivered."""
        return self.conversation.has_queued_input()

    def clear_queues(self) -> tuple[list[UserMessage], list[UserMessage]]:
        """Remove every queued message; returns them: ``(steering, follow_ups)``, each in the
        order it was queued."""
        return self.conversation.clear_queues()
