"""`fast_init`: a cheaper ``__init__`` for the frozen, slotted dataclasses built on every turn."""

from __future__ import annotations

import dataclasses
import inspect
from typing import Any


def fast_init(cls: type[Any], unset: tuple[str, ...] = ()) -> None:
    """Give the frozen, slotted dataclass ``cls`` an ``__init__`` with the dataclass's own
    signature (positional and keyword-only fields, defaults, default factories) that writes each
    field through its slot descriptor.

    The ``__init__`` ``dataclasses`` generates for a frozen class looks ``__setattr__`` up on
    ``object`` for every field, a large part of building such an object, and the engine builds
    several every turn (the figures: benchmarks/README.md, "Why the code is shaped this way").
    The instances are the same (fields,
    equality, hashing, ``repr``, ``dataclasses.replace``, frozen to their readers).

    ``unset``: fields with a default that the ``__init__`` leaves unset when it is given the
    default itself; ``cls`` must read such an empty slot as its default (a ``__getattr__``,
    which Python calls only when the slot is empty). For fields stamped later, or rarely set.
    """
    params: list[str] = ["self"]
    keyword: list[str] = []
    body: list[str] = []
    namespace: dict[str, Any] = {"_MISSING": dataclasses.MISSING}
    for f in dataclasses.fields(cls):
        owner = next(k for k in cls.__mro__ if f.name in vars(k))
        namespace[f"_set_{f.name}"] = vars(owner)[f.name].__set__
        if f.default is not dataclasses.MISSING:
            namespace[f"_default_{f.name}"] = f.default
            param = f"{f.name}=_default_{f.name}"
            if f.name in unset:
                (keyword if f.kw_only else params).append(param)
                body.append(
                    f"    if {f.name} is not _default_{f.name}:\n        _set_{f.name}(self, {f.name})"
                )
                continue
        elif f.default_factory is not dataclasses.MISSING:
            namespace[f"_factory_{f.name}"] = f.default_factory
            param = f"{f.name}=_MISSING"
            body.append(f"    if {f.name} is _MISSING:\n        {f.name} = _factory_{f.name}()")
        else:
            param = f.name
        (keyword if f.kw_only else params).append(param)
        body.append(f"    _set_{f.name}(self, {f.name})")
    signature = ", ".join([*params, *(["*", *keyword] if keyword else [])])
    exec(f"def __init__({signature}):\n" + "\n".join(body), namespace)
    init = namespace["__init__"]
    init.__signature__ = inspect.signature(cls.__init__)  # as documented: ``settings=<factory>``
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    init.__module__ = cls.__module__
    cls.__init__ = init
