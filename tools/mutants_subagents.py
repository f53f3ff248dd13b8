"""Fourteen realistic one-line bugs in the sub-agents of issue 37, for
``tools/plant_bugs.py --bugs subagents``: each is planted alone in a temporary copy of the
repository and the sub-agent tests (see `TESTS`) must catch it.

The bugs are exact search/replace edits (`Edit`, paths relative to the package) against the
sub-agent code: the tool and its run tree (``_subagent.py``: usage into the parent, limits in the
tree, the parent's abort, the error result, typed output, persistent conversation, `ParentRef`,
event order, the durable step prefix), the session log's ``child`` lines and their resume
(``session/_read.py``, ``session/_log.py``), OTel nesting (``otel.py``), the live view
(``cli/_view.py``) and the HTML replay (``session/html/page.js``).

Run ``tools/plant_bugs.py --bugs subagents --copy-in ..`` (outside /tmp, as for the MCP list).

Measured (issue 37's tests as merged): 11 caught, 3 survived (5, 9, 10). The tests added for
them (tests/subagents/test_subagent_typed_output.py, test_subagent_session_tree.py) catch all
fourteen. The baseline also showed the HTML fold's chips built only by the queued ``toggle``
event (a click on a chip right after opening found none): page.js now builds the fold on the
summary's click (tests/session/test_html_child_fold.py).
"""

from __future__ import annotations

from plant_bugs import Bug, Edit


def _e(file: str, old: str, new: str) -> tuple[Edit, ...]:
    return (Edit(file, old, new),)


TESTS = (
    "tests/subagents",
    "tests/durable/test_durable_subagent.py",
    "tests/durable/test_durable_subagent_abort.py",
    "tests/durable/test_durable_subagent_postgres.py",
    "tests/session/test_html_child_run.py",
    "tests/session/test_html_child_crash.py",
    "tests/session/test_html_child_fold.py",
    "tests/tracing",
)
"""What runs against each bug (from the repository root)."""

BUGS: tuple[Bug, ...] = (
    Bug(
        1,
        "the child's requests charged to the parent with the parent's own counted again",
        _e(
            "_subagent.py",
            "    pdata.requests += data.requests - seed.requests\n",
            "    pdata.requests += data.requests\n",
        ),
    ),
    Bug(
        2,
        "the parent's limit counted from the child's start (a limit hit inside the child missed)",
        _e(
            "_subagent.py",
            "            values.append(getattr(theirs, name))\n",
            "            values.append(getattr(theirs, name) + used)\n",
        ),
    ),
    Bug(
        3,
        "the parent's abort during the child's run not reaching the child",
        _e(
            "_subagent.py",
            "        remove = ctx.signal.add_callback(abort_child)\n",
            "        remove = lambda: None  # noqa: E731\n",
        ),
    ),
    Bug(
        4,
        "the child's error result not saying why",
        _e(
            "_subagent.py",
            'return self._failure(result, result.error or "no reason was recorded", parent)',
            'return self._failure(result, "no reason was recorded", parent)',
        ),
    ),
    Bug(
        5,
        "a typed output returned as the child's text",
        _e(
            "_subagent.py",
            "                return result.output\n",
            "                return result.text\n",
        ),
    ),
    Bug(
        6,
        "persistent=True ignored: every call starts from an empty history",
        _e(
            "_subagent.py",
            "runner = _SubAgent(agent, name, input_type, persistent, max_turns)",
            "runner = _SubAgent(agent, name, input_type, False, max_turns)",
        ),
    ),
    Bug(
        7,
        "a grandchild's ParentRef overwritten by the child's",
        _e(
            "_subagent.py",
            "        if event.parent is None:\n            object.__setattr__",
            "        if True:\n            object.__setattr__",
        ),
    ),
    Bug(
        8,
        "the child's events forwarded later (after the parent's own)",
        _e(
            "_subagent.py",
            "        bus.publish(event)\n",
            "        asyncio.get_running_loop().call_soon(bus.publish, event)\n",
        ),
    ),
    Bug(
        9,
        "a grandchild's logged run read as the parent's child (flattened)",
        _e(
            "session/_read.py",
            "        (runs[parent_run].children if parent_run in runs else top)[call_id] = child\n",
            "        top[call_id] = child\n",
        ),
    ),
    Bug(
        10,
        "resume not closing a child run cut between its calls",
        _e(
            "session/_log.py",
            "        if child.repairs or child.run_open:\n",
            "        if child.repairs:\n",
        ),
    ),
    Bug(
        11,
        "durable child steps named by the tool, not the call (two calls' steps collide)",
        _e(
            "_subagent.py",
            'prefix = f"{parent.settings.step_prefix}{ctx.call_id}/"',
            'prefix = f"{parent.settings.step_prefix}{ctx.tool_name}/"',
        ),
    ),
    Bug(
        12,
        "the child's invoke_agent span under the parent's invoke_agent, not its execute_tool",
        _e(
            "otel.py",
            "        held = None if outer is None else outer.tools.get(parent.call_id)\n",
            "        held = outer\n",
        ),
    ),
    Bug(
        13,
        "a grandchild indented as a child in the live view",
        _e(
            "cli/_view.py",
            "        depth = outer.depth + 1 if outer is not None else 1\n",
            "        depth = 1\n",
        ),
    ),
    Bug(
        14,
        "the HTML replay lighting the chip before the child's chosen state",
        _e(
            "session/html/page.js",
            '  mark(chips[k], "current");\n',
            '  mark(chips[k - 1], "current");\n',
        ),
    ),
)
