"""JSON-ready data from any value, never raising (events, a result's ``details``)."""

from __future__ import annotations

import math
from typing import Any

from pydantic_core import to_jsonable_python


def unserializable(value: Any) -> str:
    """The marker that stands for a value JSON cannot hold: ``"<unserializable _thread.lock>"``
    (the type's module, omitted for builtins, and qualified name; never the value's ``str()``)."""
    kind = type(value)
    where = "" if kind.__module__ == "builtins" else f"{kind.__module__}."
    return f"<unserializable {where}{kind.__qualname__}>"


def jsonable(value: Any, *, exclude_none: bool = False) -> Any:
    """``value`` as JSON-ready data (dicts, lists, str, int, finite float, bool, None).

    Pydantic's own serialization (``pydantic_core.to_jsonable_python``): a pydantic model or
    dataclass becomes a dict, a date its ISO text, a set a list, bytes UTF-8 text. What pydantic
    cannot serialize becomes the `unserializable` marker naming its type, item by item in a
    dict, list, tuple or set; NaN and infinities become None (as pydantic writes them in JSON).
    Never raises.

    Args:
        value: anything.
        exclude_none: leave out a pydantic model's fields that are None.
    """
    try:
        data = to_jsonable_python(
            value, fallback=unserializable, inf_nan_mode="null", exclude_none=exclude_none
        )
    except Exception:  # e.g. bytes that are not UTF-8, a custom serializer's own error
        if isinstance(value, dict):
            return {_key(k): jsonable(v, exclude_none=exclude_none) for k, v in value.items()}
        if isinstance(value, list | tuple | set | frozenset):
            return [jsonable(item, exclude_none=exclude_none) for item in value]
        return unserializable(value)
    return _finite(data)


def _key(key: Any) -> str:
    data = jsonable(key)
    return data if isinstance(data, str) else str(data)


def _finite(data: Any) -> Any:
    """``data`` with NaN and infinities as None (a model's own fields keep them otherwise)."""
    if isinstance(data, float):
        return data if math.isfinite(data) else None
    if isinstance(data, dict):
        return {k: _finite(v) for k, v in data.items()}
    if isinstance(data, list):
        return [_finite(item) for item in data]
    return data
