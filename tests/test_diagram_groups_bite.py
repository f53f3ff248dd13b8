"""Issue 34: what a mutation check found untested (an added state joins only the groups that take
added states; an overview edge names each trigger once; --agent prefers the working folder)."""

from __future__ import annotations

import os
import textwrap
from pathlib import Path

import pytest
from test_diagram_views import always, review, run_cli, user_folder  # noqa: F401

from statemachine_agent import LoopData, LoopMachine, MachineDefinitionError, TransitionSpec
from statemachine_agent._diagram import diagram_graph


def test_an_added_state_joins_only_the_groups_that_take_added_states() -> None:
    machine = LoopMachine()
    machine.add_state("reviewing", review)
    leaving = {
        (str(s.trigger), s.name) for s in machine.specs if "reviewing" in map(str, s.sources)
    }
    assert leaving == {("abort", "abort"), ("fail", "fail")}  # not start, from a working state
    machine.add_transition(
        TransitionSpec("model_replied", ("awaiting_model",), "reviewing", (always,))
    )
    machine.fire("start", LoopData())
    assert machine.fire("model_replied", LoopData()).dest == "reviewing"
    with pytest.raises(MachineDefinitionError):
        machine.fire("start", LoopData())


def test_an_overview_edge_names_each_trigger_once() -> None:
    edges = {(e.source, e.dest): e for e in diagram_graph(detail="overview").edges}
    assert edges[("awaiting_model", "awaiting_model")].trigger == "model_replied"
    assert edges[("ended", "max_turns")].trigger == "start"
    for edge in edges.values():
        triggers = edge.trigger.split(", ")
        assert len(triggers) == len(set(triggers)), edge


def test_cli_agent_prefers_the_working_folder_over_an_installed_module(
    user_folder: Path,  # noqa: F811 (the fixture)
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    installed = tmp_path / "site"  # an installed package of the same name, without `agent`
    (installed / "mybot").mkdir(parents=True)
    (installed / "mybot" / "__init__.py").write_text("", encoding="utf-8")
    (installed / "mybot" / "app.py").write_text(textwrap.dedent("number = 1\n"), encoding="utf-8")
    paths = [str(installed), *os.environ.get("PYTHONPATH", "").split(os.pathsep)]
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in paths if p))
    done = run_cli(user_folder, "diagram", "--agent", "mybot.app:agent")
    assert done.returncode == 0, done.stderr
    assert "executing_tools --> reviewing : review_first\n" in done.stdout
