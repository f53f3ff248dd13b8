"""The curated public surface: sorted __all__, every name importable, stable names present."""

from __future__ import annotations

import statemachine_agent
import statemachine_agent.models
import statemachine_agent.testing


def _isort_key(name: str) -> tuple[int, str]:
    # The order ruff's RUF022 keeps: CONSTANTS, then Classes, then functions, each alphabetical.
    if name.isupper():
        return (0, name)
    return (1, name) if name[:1].isupper() else (2, name)


def _check(module: object) -> None:
    names = module.__all__  # type: ignore[attr-defined]
    assert names == sorted(names, key=_isort_key), f"{module!r}.__all__ is not sorted"
    for name in names:
        assert hasattr(module, name), name


def test_all_is_sorted_and_importable() -> None:
    for module in (statemachine_agent, statemachine_agent.models, statemachine_agent.testing):
        _check(module)


def test_stable_names_from_design_section_5() -> None:
    for name in (
        "Agent",
        "RunResult",
        "State",
        "StopReason",
        "tool",
        "Tool",
        "ToolContext",
        "UserMessage",
        "AssistantMessage",
        "ToolResultMessage",
        "TextBlock",
        "ToolCallBlock",
        "ThinkingBlock",
        "Usage",
    ):
        assert name in statemachine_agent.__all__
    for name in ("AnthropicModel", "ScriptedModel", "FunctionModel"):
        assert name in statemachine_agent.models.__all__
    assert "assert_valid_history" in statemachine_agent.testing.__all__
