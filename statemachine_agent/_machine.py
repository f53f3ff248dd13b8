"""The agent loop's state machine: the engine that runs a definition (`_definition`).

A `LoopMachine` holds an agent's current state and a definition, built into a
`transitions.Machine` (the reference engine, `LoopMachine.fire_library`) and compiled into one
function per trigger and source (`LoopMachine.fire`): guards in order, then the source's exit
callbacks and the dest's enter callbacks, then the move. Every name in the definition (an
`EffectName`, an `ActionName`) is bound to its function when a definition is built
(`bind_steps`: the run layer binds them), and each `Fired` carries what firing it does, bound:
the callbacks, the action and the dest's effect. This module is the only importer of
`transitions`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any, cast

from transitions import Machine, MachineError

from ._checked import CallbackFailed, callable_name, checked, checked_callback, checked_guard
from ._definition import (
    ACTIVE,
    ENDED,
    GROUPS,
    STATES,
    TRANSITIONS,
    Action,
    ActionName,
    Effect,
    EffectName,
    Fired,
    StateGroup,
    StateSpec,
    TransitionSpec,
    expand_groups,
    placed,
    validate_definition,
)
from ._errors import MachineDefinitionError
from ._guards import NECESSARY, Guard, LoopData, MaxTokensPolicy
from ._states import TERMINAL_STATES, State, Trigger

__all__ = [  # re-exported for the modules that use them
    "ACTIVE",
    "ENDED",
    "GROUPS",
    "STATES",
    "TERMINAL_STATES",
    "TRANSITIONS",
    "Action",
    "CallbackFailed",
    "Effect",
    "Fired",
    "Guard",
    "LoopData",
    "MaxTokensPolicy",
    "State",
    "StateGroup",
    "StateSpec",
    "TransitionSpec",
    "Trigger",
    "bind_steps",
    "expand_groups",
    "validate_definition",
]

_BUILTIN: dict[str, State] = {state.value: state for state in State}

# -- binding the table's names -----------------------------------------------------------------

_STEPS: dict[str, Callable[..., Any]] = {}
"""The functions of the built-in effects and actions, by name (`bind_steps`)."""


def bind_steps(steps: Mapping[str, Callable[..., Any]]) -> None:
    """Bind every `EffectName` and `ActionName` to its function (the run layer does, when it is
    imported). Definitions built later resolve the table's names here.

    Raises:
        MachineDefinitionError: a name is missing, unknown, or bound to something not callable.
    """
    known = {*map(str, EffectName), *map(str, ActionName)}
    problems = [f"{name!r} is not a name of the table" for name in steps if name not in known]
    problems += [f"{name!r} is not bound" for name in sorted(known - set(steps))]
    problems += [
        f"{name!r} is bound to {f!r}, not a function"
        for name, f in steps.items()
        if not callable(f)
    ]
    if problems:
        raise MachineDefinitionError("cannot bind the table's names: " + "; ".join(problems))
    _STEPS.clear()
    _STEPS.update(steps)
    _SHARED.clear()  # built again with these functions


def _bound(value: Callable[..., Any] | str, what: str, problems: list[str]) -> Any:
    """``value`` itself, or the function its name is bound to (a problem noted when unbound)."""
    if not isinstance(value, str):
        return value
    function = _STEPS.get(value)
    if function is None:
        problems.append(
            f"{what} names {value!r}, which is not bound to a function "
            + (
                "(the run layer binds the table's names: import statemachine_agent)"
                if not _STEPS
                else f"(the bound names: {', '.join(sorted(_STEPS))})"
            )
        )
    return function


class _Holder:
    """The object `transitions` drives (its model): ``state`` is the agent's state."""

    __slots__ = ("state",)

    def __init__(self, state: str = State.IDLE.value) -> None:
        self.state = state


_Callbacks = dict[str, tuple[tuple[Callable[[LoopData], None], ...], tuple[Any, ...]]]
_Branches = tuple[tuple[tuple[Guard, ...], Fired], ...]
_Pick = Callable[[LoopData], "Fired | None"]
_Compiled = dict[tuple[str, str], _Pick]


class _Definition:
    """A validated definition, its names bound, and the `transitions.Machine` built from it,
    never changed after.

    Every `LoopMachine` that has not changed the definition shares one (`_shared_definition`):
    `transitions` drives many models on one machine, each agent's `_Holder` being one of them
    (through ``Event.trigger(model, ...)``; holders are not registered with ``add_model``, which
    would bind about thirty convenience methods to each and keep every agent alive in
    ``machine.models``). A change builds a new definition for that `LoopMachine` only.

    Raises:
        MachineDefinitionError: an effect or action names a function that is not bound.
    """

    __slots__ = (
        "callbacks",
        "checked_callbacks",
        "compiled",
        "complete",
        "effects",
        "groups",
        "machine",
        "specs",
        "states",
    )

    def __init__(
        self,
        states: dict[str, StateSpec],
        specs: tuple[TransitionSpec, ...],
        callbacks: _Callbacks | None = None,
        groups: tuple[StateGroup, ...] = GROUPS,
        *,
        complete: bool = False,
    ) -> None:
        self.states = states
        self.specs = specs
        self.groups = groups
        self.callbacks: _Callbacks = callbacks or {}
        self.complete = complete  # validated whole (`validate_definition(complete=True)`)
        problems: list[str] = []
        self.effects: dict[str, Effect | None] = {
            name: None if s.effect is None else _bound(s.effect, f"state {name!r}", problems)
            for name, s in states.items()
        }
        for spec in specs:
            if spec.action is not None:
                _bound(spec.action, f"transition {spec.name!r} ({spec.trigger})", problems)
        if problems:
            raise MachineDefinitionError("invalid state machine:\n" + "\n".join(problems))
        # Checked once, used by both engines: (exit callbacks, enter callbacks) by state.
        self.checked_callbacks = {
            name: (
                tuple(checked_callback(c, "on_exit", name) for c in exit_),
                tuple(checked_callback(c, "on_enter", name) for c in enter),
            )
            for name, (enter, exit_) in self.callbacks.items()
        }
        machine = Machine(
            model=None,
            states=[str(name) for name in states],
            initial=State.IDLE.value,
            auto_transitions=False,
            ignore_invalid_triggers=False,
        )
        for spec in specs:
            note = _noter(spec)
            for source in spec.sources:
                machine.add_transition(
                    str(spec.trigger),
                    str(source),
                    str(spec.dest),
                    conditions=[checked_guard(guard, spec) for guard in spec.guards],
                    after=[note],
                )
        for name, (exits, enters) in self.checked_callbacks.items():
            for callback in enters:
                machine.get_state(name).add_callback("enter", callback)
            for callback in exits:
                machine.get_state(name).add_callback("exit", callback)
        self.machine = machine
        self.compiled: _Compiled | None = _compile(machine, self)

    def fired(self, trigger: str, source: str, spec: TransitionSpec) -> Fired:
        """The `Fired` of ``spec`` from ``source``, with its callbacks, action and effect bound."""
        dest = str(spec.dest)
        state = self.states[dest]
        exits = self.checked_callbacks.get(source, ((), ()))[0]
        enters = self.checked_callbacks.get(dest, ((), ()))[1]
        return Fired(
            trigger,
            _BUILTIN.get(source, source),
            _BUILTIN.get(dest, dest),
            spec.name,
            spec,
            dest,
            _bound_action(spec),
            self.effects[dest],
            state.terminal or state.stops_run,
            (*exits, *enters),
        )

    def changed(
        self,
        *,
        states: dict[str, StateSpec] | None = None,
        specs: Sequence[TransitionSpec] | None = None,
        callbacks: _Callbacks | None = None,
        groups: tuple[StateGroup, ...] | None = None,
    ) -> _Definition:
        """A new definition with the given parts replaced (validated by the caller; its names
        are bound here).

        Raises:
            MachineDefinitionError: an effect or action names no bound function.
        """
        return _Definition(
            self.states if states is None else states,
            self.specs if specs is None else tuple(specs),
            self.callbacks if callbacks is None else callbacks,
            self.groups if groups is None else groups,
        )


_SHARED: list[_Definition] = []


def _shared_definition() -> _Definition:
    """The built-in definition, built and validated once per process (and again after
    `bind_steps`)."""
    if not _SHARED:
        states = {str(s.name): s for s in STATES}
        validate_definition(states.values(), TRANSITIONS, groups=GROUPS)
        _SHARED.append(_Definition(states, TRANSITIONS, complete=True))
    return _SHARED[0]


class LoopMachine:
    """The agent loop's state machine: a synchronous `transitions.Machine` over a definition
    (`STATES` and `TRANSITIONS` plus what a user added).

    Machines that keep the built-in definition share one `transitions.Machine` (an agent holds
    only its state); the first change (`add_transition`, `add_state`, `add_guard`, `on_enter`,
    `on_exit`) gives this machine a definition of its own, validated as it is made.

    Args:
        extra_transitions: transitions to add, each placed as `add_transition` places it.

    Raises:
        MachineDefinitionError: the definition is invalid (see `validate_definition`).
    """

    __slots__ = ("_definition", "_holder")

    def __init__(self, extra_transitions: Iterable[TransitionSpec] = ()) -> None:
        self._holder = _Holder()
        self._definition = _shared_definition()
        extra = tuple(extra_transitions)
        if extra:
            specs = list(TRANSITIONS)
            for spec in expand_groups(extra, GROUPS):
                specs = placed(specs, spec)
            validate_definition(self.states.values(), specs, groups=GROUPS)
            self._definition = self._definition.changed(specs=specs)
            self._definition.complete = True

    @property
    def states(self) -> dict[str, StateSpec]:
        """The states by name (read only: change them with `add_state`)."""
        return self._definition.states

    @property
    def specs(self) -> list[TransitionSpec]:
        """The transitions, in the order they are tried (a copy: change them with
        `add_transition`)."""
        return list(self._definition.specs)

    @property
    def groups(self) -> dict[str, StateGroup]:
        """The state groups by name (`GROUPS`, with the states `add_state` added joined)."""
        return {g.name: g for g in self._definition.groups}

    @property
    def shared(self) -> bool:
        """The built-in definition, shared with every other machine that has not changed it."""
        return self._definition is _shared_definition()

    @property
    def state(self) -> State | str:
        """The current state (a `State`, or the name of a state a user added)."""
        name = self._holder.state
        return _BUILTIN.get(name, name)

    def check_complete(self) -> None:
        """Check that every state can be reached from ``idle`` and left (once per definition; a
        run does it before it starts, when every addition is known).

        Raises:
            MachineDefinitionError: naming each unreachable state (add a transition into it) or
                state with no way out.
        """
        definition = self._definition
        if not definition.complete:
            validate_definition(
                definition.states.values(), definition.specs, groups=definition.groups
            )
            definition.complete = True

    def effect_of(self, state: str) -> Effect | None:
        """``state``'s effect, bound (None for ``idle``)."""
        return self._definition.effects[str(state)]

    def is_terminal(self, state: str) -> bool:
        """``state`` ends a run."""
        return self._definition.states[state].terminal

    def stops_run(self, state: str) -> bool:
        """``run()`` returns in ``state`` (a terminal state, or ``awaiting_approval``)."""
        spec = self._definition.states[state]
        return spec.terminal or spec.stops_run

    def fire(self, trigger: str, data: LoopData) -> Fired:
        """Run ``trigger`` with the guards reading ``data``: pick the transition, run the
        source's exit callbacks and the dest's enter callbacks (`on_exit`, `on_enter`), then
        move to the dest. The caller runs the transition's action and the dest's effect, both
        bound in the returned `Fired`.

        The transition is picked from a table compiled from the `transitions` machine when the
        definition was built (the same branches in the same order, the same guards, the same
        callbacks in the library's order; the machine's state is set as its own ``trigger``
        would): `transitions`' per-trigger bookkeeping and debug logging were the larger part
        of a turn's cost (benchmarks/README.md). One engine runs every definition, with callbacks or without.

        Raises:
            MachineDefinitionError: no transition of ``trigger`` leaves the current state, or none of
                their guards passed (a hole in the definition, i.e. a bug).
            CallbackFailed: a user's guard or callback raised (the state is unchanged).
        """
        compiled = self._definition.compiled
        if compiled is not None:
            source = self._holder.state
            pick = compiled.get((trigger, source))
            if pick is not None:
                fired = pick(data)
                if fired is not None:
                    if fired.callbacks:  # exit callbacks, then enter callbacks
                        for callback in fired.callbacks:
                            callback(data)
                    self._holder.state = fired.dest_name
                    return fired
                raise MachineDefinitionError(
                    f"no guard of trigger {trigger!r} passed in state {source!r}"
                )
        return self.fire_library(trigger, data)

    def fire_library(self, trigger: str, data: LoopData) -> Fired:
        """`fire` through `transitions`' own ``trigger`` (the reference the compiled table must
        equal, callbacks included).

        Raises:
            MachineDefinitionError: as `fire`.
        """
        source = self._holder.state
        event = self._definition.machine.events.get(str(trigger))
        if event is None:
            raise MachineDefinitionError(f"unknown trigger {trigger!r}")
        data.fired = None
        try:
            moved = event.trigger(self._holder, data)
        except MachineError as exc:
            raise MachineDefinitionError(
                f"trigger {trigger!r} cannot leave state {source!r}"
            ) from exc
        except BaseException:
            # A guard or an enter/exit callback raised: the transition did not happen.
            self._holder.state = source
            raise
        spec, data.fired = data.fired, None
        if not moved or spec is None:
            raise MachineDefinitionError(
                f"no guard of trigger {trigger!r} passed in state {source!r}"
            )
        return self._definition.fired(str(trigger), source, spec)

    def add_state(self, name: str, effect: Effect) -> None:
        """Add a non-terminal state whose ``effect`` (an async function of the `Run` returning
        the next trigger) runs each time it is entered. Add the transitions into and out of it
        with `add_transition`. It joins each group with ``joins_added_states`` (``active``), so
        that group's transitions (``abort``, ``fail``) leave it like any active state.

        Raises:
            MachineDefinitionError: the name is taken (by a state or a group), or ``effect`` is
                not callable.
        """
        if name in self.states or name in self.groups:
            kind = "state" if name in self.states else "group"
            raise MachineDefinitionError(f"a {kind} named {name!r} already exists")
        if not callable(effect):
            raise MachineDefinitionError(f"state {name!r} needs an effect (an async function)")
        joined = {g.name for g in self._definition.groups if g.joins_added_states}
        groups = tuple(
            replace(g, states=(*g.states, name)) if g.name in joined else g
            for g in self._definition.groups
        )
        specs = [
            replace(s, sources=(*s.sources, name)) if joined & set(s.groups) else s
            for s in self.specs
        ]
        # Not validated yet: a new state has no way in until a transition enters it.
        self._definition = self._definition.changed(
            states={**self.states, name: StateSpec(name, effect)}, specs=specs, groups=groups
        )

    def add_transition(self, spec: TransitionSpec) -> None:
        """Add a transition. It goes before the branch labelled ``spec.before`` or after the one
        labelled ``spec.after`` (same trigger); with neither, before every existing branch of its
        trigger from the same sources (so later additions are tried first: say where instead).
        A group's name among ``spec.sources`` (``"active"``) stands for its members
        (`expand_groups`).

        A new state's transitions may be added in any order (out of it before into it): that
        every state can be reached and left is checked when a run starts (`check_complete`).

        A guard that raises ends the run ``failed`` with an error naming the guard and the
        exception (the transition does not happen; every call is answered), as for a raising
        hook; a `KeyboardInterrupt` (or `SystemExit`) in it ends the run ``aborted``, then
        propagates. The same holds for the transition's ``action`` and for
        `on_enter`/`on_exit` callbacks.

        Raises:
            MachineDefinitionError: the definition would become invalid (naming the offending
                specs: unknown states, a state with no effect, shadowed branches, ...); the
                machine is unchanged.
        """
        groups = self._definition.groups
        specs = placed(self.specs, expand_groups((spec,), groups)[0])
        validate_definition(self.states.values(), specs, groups=groups, complete=False)
        self._definition = self._definition.changed(specs=specs)

    def add_guard(self, trigger: str, dest: str, guard: Guard) -> None:
        """Add ``guard`` to every transition of ``trigger`` into ``dest``.

        Raises:
            MachineDefinitionError: no such transition exists.
        """
        if not any(s.trigger == trigger and s.dest == dest for s in self.specs):
            raise MachineDefinitionError(f"no transition {trigger!r} -> {dest!r}")
        specs = [
            replace(s, guards=(*s.guards, guard)) if s.trigger == trigger and s.dest == dest else s
            for s in self.specs
        ]
        self._definition = self._definition.changed(specs=specs)

    def restore(self, state: str) -> None:
        """Put the machine in ``state`` without a transition (resuming a saved session).

        Raises:
            MachineDefinitionError: ``state`` is not ``idle``, terminal or ``awaiting_approval`` (a
                run cannot be resumed mid-flight).
        """
        spec = self.states.get(state, StateSpec(state))
        if state != State.IDLE and not (spec.terminal or spec.stops_run):
            raise MachineDefinitionError(f"cannot restore the mid-run state {state!r}")
        self._definition.machine.set_state(str(state), model=self._holder)

    def on_enter(self, state: str, callback: Callable[[LoopData], None]) -> None:
        """Call ``callback(data)`` each time ``state`` is entered (synchronously; no I/O). One
        that raises ends the run ``failed`` naming it, as a raising guard does (`add_transition`)."""
        self._add_callback(str(state), callback, 0)

    def on_exit(self, state: str, callback: Callable[[LoopData], None]) -> None:
        """Call ``callback(data)`` each time ``state`` is left (synchronously; no I/O). One that
        raises ends the run ``failed`` naming it, as a raising guard does (`add_transition`)."""
        self._add_callback(str(state), callback, 1)

    def _add_callback(self, state: str, callback: Callable[[LoopData], None], which: int) -> None:
        callbacks = dict(self._definition.callbacks)
        pair = list(callbacks.get(state, ((), ())))
        pair[which] = (*pair[which], callback)
        callbacks[state] = (pair[0], pair[1])
        self._definition = self._definition.changed(callbacks=callbacks)

    def state_callbacks(self, state: str) -> tuple[list[Any], list[Any]]:
        """The callbacks added with `on_enter` and `on_exit` for ``state``: ``(enter, exit)``."""
        enter, exit_ = self._definition.callbacks.get(str(state), ((), ()))
        return list(enter), list(exit_)


def _bound_action(spec: TransitionSpec) -> Action | None:
    """``spec``'s action: a name's bound function, or a user's function checked as a guard is
    (`CallbackFailed`)."""
    action = spec.action
    if action is None:
        return None
    if isinstance(action, str):
        return cast(Action, _STEPS[action])
    if action in _STEPS.values():
        return action
    return checked(
        action, f"action {callable_name(action)!r} of transition {spec.name!r} ({spec.trigger})"
    )


def _noter(spec: TransitionSpec) -> Callable[..., None]:
    """The ``after`` callback that tells `LoopMachine.fire_library` which spec fired."""

    def note(data: LoopData, *_args: Any) -> None:
        data.fired = spec

    note.spec = spec  # type: ignore[attr-defined]  # read by `_compile`
    return note


def _compile(machine: Machine, definition: _Definition) -> _Compiled | None:
    """The branches of each (trigger, source) in `transitions`' order: each one's guards (its
    conditions, all of which must be true) and the `Fired` it returns; None when a branch has a
    shape the table does not model (then the library's own trigger runs)."""
    table: dict[tuple[str, str], list[tuple[tuple[Guard, ...], Fired]]] = {}
    for trigger, event in machine.events.items():
        for source, transitions in event.transitions.items():
            branches = table.setdefault((trigger, source), [])
            for transition in transitions:
                if not all(c.target for c in transition.conditions):
                    return None  # a shape the table does not model: use the library's trigger
                spec = next(f.spec for f in transition.after if hasattr(f, "spec"))
                assert str(spec.dest) == str(transition.dest)
                guards = tuple(cast(Guard, c.func) for c in transition.conditions)
                branches.append((guards, definition.fired(trigger, source, spec)))
    return {key: _picker(tuple(branches)) for key, branches in table.items()}


def _picker(branches: _Branches) -> _Pick:
    """One function that tries ``branches`` in order: each one's guards in order, ``and``-ed
    (the first false one ends the branch, as `transitions` evaluates conditions), returning the
    first branch's `Fired` whose guards all pass, or None. The same steps as a loop over the
    branches, without the loop's own cost (the guards run on every turn). A guard with a
    condition in `NECESSARY` is called only when that condition holds (it is false otherwise):
    most built-in branches are for what a plain turn does not have (limits, a final turn, queued
    input, a deferred call)."""
    namespace: dict[str, Any] = {}
    lines = ["def pick(data):"]
    for i, (guards, fired) in enumerate(branches):
        namespace[f"fired_{i}"] = fired
        calls = []
        for j, guard in enumerate(guards):
            namespace[f"guard_{i}_{j}"] = guard
            if (needed := NECESSARY.get(guard)) is not None:
                calls.append(f"({needed})")  # false: the guard would be (no call)
            calls.append(f"guard_{i}_{j}(data)")
        if not calls:
            lines.append(f"    return fired_{i}")
            break
        lines.append(f"    if {' and '.join(calls)}:\n        return fired_{i}")
    else:
        lines.append("    return None")
    exec("\n".join(lines), namespace)
    return cast(_Pick, namespace["pick"])
