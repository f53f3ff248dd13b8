"""A user's guards, actions and enter/exit callbacks, checked: one that raises makes the run end
``failed`` naming it (`CallbackFailed`), as a raising hook does; an interrupt raised in one is
noted on the `LoopData` (for `record_interrupt`) and propagates. The built-in guards are not
wrapped: a bug in one propagates, as from an effect."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ._definition import TRANSITIONS, TransitionSpec
from ._guards import Guard, LoopData
from ._hooks import INTERRUPTS


class CallbackFailed(Exception):
    """A user's guard, transition action or enter/exit callback raised: the run ends ``failed``
    with this text (naming it and the exception) as its error, as for a raising hook."""


_OWN_GUARDS = frozenset(g for s in TRANSITIONS for g in s.guards)
"""The built-in guards: a bug in one propagates (as from an effect); a user's is checked
(`CallbackFailed`). The built-in actions are the bound names (`_machine.bind_steps`)."""


def callable_name(function: Callable[..., Any]) -> str:
    """``function``'s qualified name, for error texts."""
    return str(getattr(function, "__qualname__", None) or getattr(function, "__name__", function))


def checked(function: Callable[..., Any], where: str) -> Callable[..., Any]:
    """``function`` raising `CallbackFailed` for an exception, noting ``where`` an interrupt
    came from (on the `LoopData` or `Run` it gets, for `record_interrupt`)."""

    def wrapped(arg: Any, *args: Any) -> Any:
        try:
            return function(arg, *args)
        except Exception as exc:
            raise CallbackFailed(f"The {where} failed: {type(exc).__name__}: {exc}") from exc
        except INTERRUPTS:
            data = getattr(arg, "data", arg)  # a guard's LoopData, an action's Run
            if isinstance(data, LoopData):
                data.raised_in = f"the {where}"
            raise

    wrapped.__name__ = getattr(function, "__name__", "checked")
    wrapped.__qualname__ = callable_name(function)
    return wrapped


def checked_guard(guard: Guard, spec: TransitionSpec) -> Guard:
    if guard in _OWN_GUARDS:
        return guard
    where = f"guard {callable_name(guard)!r} of transition {spec.name!r} ({spec.trigger})"
    return checked(guard, where)


def checked_callback(callback: Any, which: str, state: str) -> Any:
    return checked(callback, f"{which} callback {callable_name(callback)!r} of state {state!r}")
