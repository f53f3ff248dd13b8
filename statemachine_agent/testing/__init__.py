"""Testing helpers: the protocol checker, hypothesis strategies and the stateful test kit."""

from __future__ import annotations

from .._protocol import assert_valid_history, find_violations

__all__ = ["assert_valid_history", "find_violations"]
