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


def test_every_type_in_a_public_signature_is_exported() -> None:
    """Types a user meets in the signatures of the public API can be imported from the package."""
    import inspect
    import typing

    import statemachine_agent.session
    from statemachine_agent import Agent, LoopMachine, Run, TransitionSpec

    exported = {
        getattr(module, name)
        for module in (statemachine_agent, statemachine_agent.models, statemachine_agent.session)
        for name in module.__all__
    }
    owners = [Agent.__init__, Agent.run, Agent.resume, Agent.restore, Agent.subscribe, Run]
    owners += [LoopMachine.add_state, LoopMachine.add_transition, LoopMachine.fire]
    missing = set()
    for owner in owners:
        import collections.abc

        namespace = {**vars(collections.abc), **vars(statemachine_agent)}
        hints = (
            typing.get_type_hints(owner, localns=namespace) if not inspect.isclass(owner) else {}
        )
        for hint in hints.values():
            for part in (hint, *typing.get_args(hint)):
                module = getattr(part, "__module__", "")
                if (
                    inspect.isclass(part)
                    and module.startswith("statemachine_agent")
                    and part not in exported
                ):
                    missing.add(part.__name__)
    assert missing == set()
    for name in (
        "AfterToolCall",
        "Allow",
        "BeforeToolCall",
        "Deny",
        "MaxTokensPolicy",
        "SessionLog",
        "ShouldContinue",
        "ToolCallInfo",
        "ToolExecution",
        "TransformContext",
        "TurnInfo",
        "Effect",
        "Guard",
        "StateSpec",
        "Trigger",
    ):
        assert name in statemachine_agent.__all__, name
    assert TransitionSpec in exported
