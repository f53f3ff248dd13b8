"""JSON as the standard defines it (RFC 8259, section 6): no ``NaN``, no ``Infinity``, no number
beyond the float range. `loads_strict` parses text refusing them; `holds_non_finite` and
`non_finite_at` find one in data already parsed. A leaf module: messages (which check a tool
call's input as it is built) and the protocol both read it."""

from __future__ import annotations

import json
import math
from typing import Any


class NonFiniteNumberError(ValueError):
    """JSON text holds ``NaN``, ``Infinity`` or a number beyond the float range (``1e400``): the
    JSON standard (RFC 8259, section 6) has no such value, and a request body holding one is
    refused (the SDK's encoder raises "Out of range float values are not JSON compliant").

    Attributes:
        path: where the value is, e.g. ``'limit'`` or ``'items[2].x'`` (``'(the whole value)'``
            at the top).
        text: the number as it was written (``1e400``, ``NaN``, ``-Infinity``).
    """

    def __init__(self, path: str, text: str) -> None:
        self.path = path
        self.text = text
        super().__init__(
            f"the value of {path} is {text}, a number JSON cannot hold (NaN, Infinity and "
            "numbers beyond the float range are not JSON)"
        )


class _NonFinite:
    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text


def _finite_float(text: str) -> float | _NonFinite:
    value = float(text)
    return value if math.isfinite(value) else _NonFinite(text)


def loads_strict(text: str) -> Any:
    """Parse JSON text as the standard defines it: like `json.loads`, except that ``NaN``,
    ``Infinity`` and numbers out of the float range are refused (integers keep every digit).

    Raises:
        NonFiniteNumberError: such a number, naming where it is and how it was written.
        ValueError: the text is not JSON (`json.JSONDecodeError`).
    """
    value = json.loads(text, parse_float=_finite_float, parse_constant=_NonFinite)
    if holds_non_finite(value):
        where = _find_non_finite(value, "")
        assert where is not None
        raise NonFiniteNumberError(*where)
    return value


def non_finite_at(value: Any) -> tuple[str, str] | None:
    """Where parsed data (dicts, lists, numbers) holds a float JSON cannot hold, and that
    float's text (``nan``, ``inf``), or None when it holds none."""
    return _find_non_finite(value, "") if holds_non_finite(value) else None


def holds_non_finite(value: Any) -> bool:
    """Whether parsed data (dicts, lists, numbers) holds a number JSON cannot hold:
    `_find_non_finite`'s walk without the paths it names (every tool call's input is scanned;
    few hold one)."""
    if isinstance(value, dict):
        items: Any = value.values()
    elif isinstance(value, list):
        items = value
    else:
        return isinstance(value, _NonFinite) or (
            isinstance(value, float) and not math.isfinite(value)
        )
    for item in items:  # noqa: SIM110 (a loop: no generator per scan)
        if isinstance(item, _CONTAINERS) and holds_non_finite(item):
            return True
    return False


_CONTAINERS = (dict, list, float, _NonFinite)  # what `holds_non_finite` looks into


def _find_non_finite(value: Any, path: str) -> tuple[str, str] | None:
    if isinstance(value, _NonFinite):
        return (repr(path) if path else "(the whole value)"), value.text
    if isinstance(value, float) and not math.isfinite(value):
        return (repr(path) if path else "(the whole value)"), json.dumps(value)
    if isinstance(value, dict):
        for key, item in value.items():
            found = _find_non_finite(item, f"{path}.{key}" if path else str(key))
            if found is not None:
                return found
    elif isinstance(value, list):
        for i, item in enumerate(value):
            found = _find_non_finite(item, f"{path}[{i}]")
            if found is not None:
                return found
    return None
