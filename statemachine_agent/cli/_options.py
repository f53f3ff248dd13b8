"""The run command's options turned into values, each refused with a usage error naming the option
when it is wrong: the prompt (`check_prompt`), the sandbox (`resolve_sandbox`), ``--approve`` and
``--deny`` (`parse_decisions`)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import click

from .._errors import UsageError
from .._hooks import Approve, Decision, Deny
from ..workspace import (
    DEFAULT_HIDDEN,
    Sandbox,
    SandboxStatus,
    SandboxUnavailableError,
    check_sandbox,
)


def check_prompt(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """The PROMPT argument's click callback.

    Raises:
        click.BadParameter: the prompt is empty or only whitespace.
    """
    if value is not None and not value.strip():
        raise click.BadParameter(
            'it is empty; say what the agent should do, e.g. "Make the tests pass"', ctx, param
        )
    return value


def resolve_sandbox(
    mode: str | None,
    *,
    no_sandbox: bool = False,
    allow_network: bool = False,
    writable: Sequence[Path] = (),
    hide: Sequence[str] = (),
) -> tuple[SandboxStatus, list[str]]:
    """The ``run_command`` sandbox the options ask for, checked on this machine; and the same
    options as command-line words (for the continue hint).

    Raises:
        click.UsageError: ``--no-sandbox`` with another ``--sandbox`` mode, or
            ``--sandbox=require`` and bubblewrap is missing or fails (exit code 2; the message
            names bubblewrap and how to install it).
    """
    if no_sandbox and mode not in (None, "off"):
        raise click.UsageError(f"--no-sandbox contradicts --sandbox={mode}; give one of them.")
    chosen = "off" if no_sandbox else (mode or "auto")
    # Relative paths are relative to the current folder (not the workspace); ~ stays as given.
    writable = [path.resolve() for path in writable]
    hide = [path if path.startswith("~") else str(Path(path).resolve()) for path in hide]
    config = Sandbox.model_validate(
        {
            "mode": chosen,
            "allow_network": allow_network,
            "writable": tuple(writable),
            "hidden": (*DEFAULT_HIDDEN, *hide),
        }
    )
    try:
        status = check_sandbox(config, warn=False)
    except SandboxUnavailableError as exc:
        raise click.UsageError(
            f"{exc}\nOr run with --sandbox=auto to run commands unsandboxed with a warning, or "
            "--no-sandbox."
        ) from exc
    except UsageError as exc:
        raise click.BadParameter(str(exc), param_hint="--writable") from exc
    flags = ["--no-sandbox"] if chosen == "off" else []
    if chosen == "require":
        flags += ["--sandbox", "require"]
    if allow_network:
        flags.append("--allow-network")
    for extra in writable:
        flags += ["--writable", str(extra)]
    for hidden in hide:
        flags += ["--hide", hidden]
    return status, flags


def parse_decisions(approve: Sequence[str], deny: Sequence[str]) -> dict[str, Decision]:
    """``--approve ID`` and ``--deny ID:REASON`` as decisions.

    Raises:
        click.BadParameter: a ``--deny`` without a reason, or one call decided twice.
    """
    decisions: dict[str, Decision] = {}
    for call_id in approve:
        decisions[call_id.strip()] = Approve()
    for item in deny:
        call_id, _, reason = item.partition(":")
        if not call_id.strip() or not reason.strip():
            raise click.BadParameter(
                f"{item!r}: give ID:REASON, e.g. --deny c2:'not today'", param_hint="--deny"
            )
        if call_id.strip() in decisions:
            raise click.BadParameter(f"call {call_id.strip()!r} is decided twice")
        decisions[call_id.strip()] = Deny(reason.strip())
    return decisions
