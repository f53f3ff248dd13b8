"""``--model``: an Anthropic model name, or ``script:FILE`` for an offline run (`load_model`)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import click

from .._errors import UsageError
from .._messages import StopReason
from ..models._base import Model
from ..models._offline import ScriptedModel, script_steps

API_STOP_REASONS = tuple(
    reason.value for reason in StopReason if reason not in (StopReason.ABORTED, StopReason.ERROR)
)
"""The stop reasons a script step may give: the Messages API's."""


def load_model(spec: str) -> Model:
    """The model for ``--model``: ``script:FILE`` (a JSON list of `ScriptedModel` steps, or an
    object with a ``steps`` list and at most a ``prompt`` besides, read by the same rule as
    `ScriptedModel`'s: `script_steps`) or an Anthropic model name.

    Raises:
        click.BadParameter: the script cannot be read, holds no steps, is an object with a key
            besides ``steps`` and ``prompt`` (`script_steps`' message), or a step is malformed
            or has a stop reason the Messages API does not send (the message names the step);
            or ``spec`` is the path of an existing file (it suggests ``script:FILE``).
        click.UsageError: a model name is given but ``ANTHROPIC_API_KEY`` is not set.
    """
    if spec.startswith("script:"):
        path = Path(spec.removeprefix("script:")).expanduser()
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise click.BadParameter(
                f"cannot read the script {path}: {exc}", param_hint="--model"
            ) from exc
        try:  # the form ScriptedModel reads: a list of steps, or an object {"steps": [...]}
            steps = script_steps(data, str(path))
        except UsageError as exc:
            if isinstance(data, dict) and "steps" in data:  # e.g. a key besides steps and prompt
                raise click.BadParameter(str(exc), param_hint="--model") from exc
            raise click.BadParameter(
                f"{path} must hold a JSON list of steps (Anthropic-shaped responses), or an "
                'object {"steps": [...]}',
                param_hint="--model",
            ) from exc
        if not steps:
            raise click.BadParameter(
                f"{path} holds no steps: a script needs at least one response (for example "
                '{"content": [{"type": "text", "text": "Done."}], "stop_reason": "end_turn"}).',
                param_hint="--model",
            )
        for number, step in enumerate(steps, 1):
            reason = step.get("stop_reason") if isinstance(step, dict) else None
            if reason is not None and reason not in API_STOP_REASONS:
                raise click.BadParameter(
                    f"{path}: step {number}: unknown stop_reason {reason!r}; the known stop "
                    f"reasons are {', '.join(API_STOP_REASONS)}",
                    param_hint="--model",
                )
        try:
            return ScriptedModel(steps, name=f"script:{path.name}")
        except UsageError as exc:  # a malformed step; the message names it
            raise click.BadParameter(f"{path}: {exc}", param_hint="--model") from exc
    if Path(spec).expanduser().is_file():
        raise click.BadParameter(
            f"{spec} is a file, not a model name: to play it back as a script, use "
            f"--model script:{spec}",
            param_hint="--model",
        )
    if not os.environ.get("ANTHROPIC_API_KEY"):
        raise click.UsageError(
            f"--model {spec} needs an Anthropic API key, and ANTHROPIC_API_KEY is not set.\n"
            "Set it first (export ANTHROPIC_API_KEY=sk-ant-...; get a key at "
            "console.anthropic.com), or run offline with --model script:FILE."
        )
    from ..models import AnthropicModel  # imported on use: it loads the anthropic SDK

    model: Model = AnthropicModel(spec)
    return model
