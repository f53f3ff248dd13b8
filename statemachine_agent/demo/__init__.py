"""The offline demo's material: a small Python project with a real failing test (``project/``)
and the model side of a session that fixes it (``script.json``: the prompt and the
Anthropic-shaped responses a `ScriptedModel` plays back). Every tool call it makes is real."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

PROJECT = Path(__file__).parent / "project"
"""The bundled project (copy it before use; never run its tests in place)."""
SCRIPT = Path(__file__).parent / "script.json"


def demo_script() -> tuple[str, list[dict[str, Any]]]:
    """The demo's prompt and its model steps."""
    data = json.loads(SCRIPT.read_text(encoding="utf-8"))
    return str(data["prompt"]), list(data["steps"])


__all__ = ["PROJECT", "SCRIPT", "demo_script"]
