"""Compact storage of the models a history keeps (issue 39): one immutable fields set shared by
every instance of a class with the same names (`shared`), plain holder classes whose instances'
dicts share their keys (`holder`), and functions building a model already stored that way
(`builder`). `_messages` uses them for its messages and blocks (its "compact storage" comment
says why); nothing here knows the message classes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from pydantic import BaseModel


class SharedFieldsSet(set[str]):
    """The names of the fields set on a kept message, shared by every message of its class set
    with the same names. A ``set``, as pydantic needs, that refuses changes (so sharing it is
    safe); a copy is a plain ``set`` of its own."""

    __slots__ = ()

    def _refuse(self, *_args: Any) -> Any:
        raise TypeError(
            "the fields set of a message in a history is shared and cannot be changed; "
            "use set(message.model_fields_set) for a copy"
        )

    add = discard = remove = pop = clear = update = _refuse
    intersection_update = difference_update = symmetric_difference_update = _refuse
    __ior__ = __iand__ = __isub__ = __ixor__ = _refuse

    def __copy__(self) -> set[str]:
        return set(self)

    def __deepcopy__(self, _memo: Any) -> set[str]:
        return set(self)

    def __reduce__(self) -> tuple[Any, ...]:
        return (set, (sorted(self),))

    def __repr__(self) -> str:
        return repr(set(self))


_SHARED_SETS: dict[frozenset[str], SharedFieldsSet] = {}  # at most 2**fields per class


def shared(names: Iterable[str]) -> SharedFieldsSet:
    """The one shared fields set of ``names``, made the first time it is asked for."""
    key = frozenset(names)
    shared = _SHARED_SETS.get(key)
    if shared is None:
        shared = _SHARED_SETS[key] = SharedFieldsSet(key)
    return shared


_HOLDERS: dict[type, type] = {}


def holder(cls: type) -> type:
    """The plain class whose instances' dicts share their keys, for ``cls``'s fields."""
    holder = _HOLDERS.get(cls)
    if holder is None:
        namespace = {"__module__": __name__, "__doc__": None}
        holder = _HOLDERS[cls] = type(f"_{cls.__name__}Fields", (), namespace)
    return holder


def builder(
    cls: type[BaseModel], fields_set: tuple[str, ...], *, into: bool = False
) -> Callable[..., Any]:
    """A function building a ``cls`` already kept compactly from the values of all its fields
    (positional, in declaration order) set as ``fields_set`` names. It does what
    ``cls.model_construct(fields_set, **values)`` does, without its per-field loop, so it is
    only for values already of the fields' types (the engine's own tool results, a
    constructor's usual call; anything else goes through validation). ``into``: the function
    fills the instance given as its first argument (an ``__init__``'s ``self``) instead."""
    names = tuple(cls.model_fields)
    lines = [
        f"def build({'instance_, ' if into else ''}{', '.join(names)}):",
        "    held = Holder()",
        *(f"    held.{name} = {name}" for name in names),
        *(() if into else ("    instance_ = new(cls)",)),
        "    setattr_(instance_, '__dict__', held.__dict__)",
        "    setattr_(instance_, '__pydantic_fields_set__', fields_set)",
        "    setattr_(instance_, '__pydantic_extra__', None)",
        "    setattr_(instance_, '__pydantic_private__', None)",
        "    return instance_",
    ]
    shared_set = shared(fields_set)
    namespace: dict[str, Any] = {
        "Holder": holder(cls),
        "new": object.__new__,
        "cls": cls,
        "setattr_": object.__setattr__,
        "fields_set": shared_set,
    }
    exec("\n".join(lines), namespace)  # generated from the field names above
    built: Callable[..., Any] = namespace["build"]
    return built
