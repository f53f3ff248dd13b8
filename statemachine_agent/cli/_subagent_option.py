"""``run --subagent NAME=MODEL``: a sub-agent tool ``NAME`` (`Agent.as_tool`) whose child agent
runs on its own model with the workspace's read-only tools, so a call to it needs no permission.

Its activity shows indented under the parent's call in the live view, its events carry
``parent`` in the ``--json`` lines, and a session log records its run (``child`` lines); see
``docs/guides/subagents.md``.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Sequence
from pathlib import Path

import click

from .._agent import Agent
from .._errors import ToolDefinitionError
from .._tools import Tool
from ..workspace import GUARDED, READ_TOOLS, Workspace, workspace_tools
from ._model_option import load_model

subagent_option = click.option(
    "--subagent",
    "subagent_specs",
    multiple=True,
    metavar="NAME=MODEL",
    help="Add a sub-agent tool NAME: the agent can hand it a task, which it does with its own "
    "MODEL (as --model: an Anthropic model name or script:FILE) reading the workspace "
    "(list_files, read_file) and answers; its activity shows indented under the call. It only "
    "reads, so its calls need no permission. Repeatable.",
)

SUBAGENT_SYSTEM_PROMPT = """\
You are a sub-agent named {name}, called by another agent that works in the folder {root} (the \
workspace). You can only read it: list_files and read_file, with paths relative to the \
workspace. Look at what the task needs, then answer with a short, precise report of what you \
found; the calling agent reads your final answer."""
"""The child's system prompt (``{name}``: the tool's name, ``{root}``: the workspace folder)."""

SUBAGENT_DESCRIPTION = (
    "A sub-agent that reads the workspace (list_files, read_file; it changes nothing) to do the "
    "task given as prompt, and answers with its findings."
)
"""What the calling model is told the ``--subagent`` tool does."""

_TOOL_NAME = re.compile(r"[a-zA-Z0-9_-]{1,64}")
_TOOL_NAME_RULE = "1-64 letters, digits, '_' or '-' (the Messages API's rule for a tool name)"


def _bad(message: str) -> click.BadParameter:
    return click.BadParameter(message, param_hint="--subagent")


def subagent_tools(
    specs: Sequence[str],
    workspace: Path,
    *,
    max_turns: int,
    taken: Collection[str] = (*GUARDED, *READ_TOOLS),
) -> tuple[list[Tool], list[str]]:
    """The sub-agent tools of ``--subagent NAME=MODEL`` and the same options as command-line
    words (the continue and approve hints repeat them).

    Each tool is `Agent.as_tool` of a child `Agent` with the workspace's read-only tools
    (`READ_TOOLS`: ``list_files``, ``read_file``), `SUBAGENT_SYSTEM_PROMPT` and ``max_turns``
    turns a call; MODEL is read as ``--model`` is (`load_model`).

    Args:
        specs: the ``--subagent`` values, as given.
        workspace: the folder the child reads.
        max_turns: the child's turn cap per call.
        taken: tool names a sub-agent may not take (default: the workspace tools').

    Raises:
        click.BadParameter: naming ``--subagent``: a value without ``=``; a NAME that is not a
            tool name (1-64 letters, digits, ``_`` or ``-``), or that another tool or
            ``--subagent`` already has; a MODEL ``--model`` would refuse (no such script, a bad
            script, an Anthropic model name without ``ANTHROPIC_API_KEY``).
    """
    tools: list[Tool] = []
    words: list[str] = []
    names = set(taken)
    for spec in specs:
        name, equals, model_spec = (part.strip() for part in spec.partition("="))
        if not equals or not model_spec:
            raise _bad(
                f"{spec!r}: give NAME=MODEL, e.g. --subagent reader=claude-sonnet-4-6 or "
                "--subagent reader=script:reader.json"
            )
        if not _TOOL_NAME.fullmatch(name):
            raise _bad(f"{spec!r}: the sub-agent's name {name!r} must be {_TOOL_NAME_RULE}")
        if name in names:
            raise _bad(
                f"{spec!r}: a tool named {name!r} exists already; give the sub-agent another "
                f"name (taken: {', '.join(sorted(names))})"
            )
        try:
            model = load_model(model_spec)
        except click.UsageError as exc:  # a BadParameter, or no API key
            message = exc.message.replace("--model script:", f"--subagent {name}=script:")
            raise _bad(f"{spec!r}: {message}") from exc
        root = Workspace(workspace)
        read_only = [t for t in workspace_tools(root, sandbox="off") if t.name in READ_TOOLS]
        child = Agent(
            model,
            tools=read_only,
            system=SUBAGENT_SYSTEM_PROMPT.format(name=name, root=root.root),
            max_turns=max_turns,
        )
        try:
            tools.append(child.as_tool(name, SUBAGENT_DESCRIPTION))
        except ToolDefinitionError as exc:  # Tool's own check of the name, should it differ
            raise _bad(f"{spec!r}: {exc}") from exc
        names.add(name)
        words += ["--subagent", spec]
    return tools, words
