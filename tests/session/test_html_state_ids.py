"""The replay page's element ids for states and groups whose names are not plain identifiers
(issue 34, peer reports): ``state_NAME`` would hold a space or a quote (no valid id) and
``needs-review`` / ``needs_review`` could not be told apart, so the page looks a step's state up
by the id its model gives (`element_id`), and both drawings use the same ids."""

from __future__ import annotations

import re
import shutil
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from statemachine_agent import Agent, LoopData, Run, State, TransitionSpec
from statemachine_agent._diagram import (
    DiagramGraph,
    diagram_graph,
    element_id,
    render_image,
    to_dot,
)
from statemachine_agent.models import ScriptedModel
from statemachine_agent.session import _html, _html_diagram, page_model, read_session
from statemachine_agent.testing.steps import text_response

NO_DOT = "Graphviz's dot is not installed (CI installs it: apt-get install graphviz)"
NAMES = ("needs review", "needs-review", "needs_review", 'say "hi"', "a:b", "ünï", "x-2d-y")
# An XML id (an NCName, which SVG needs) and an HTML id (no whitespace), with nothing a CSS
# selector must escape.
VALID_ID = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*")


async def ask_again(run: Run) -> str:
    return await run.request_model()


def first_reply(data: LoopData) -> bool:
    return data.turns == 0  # no turn completed yet


def graph_with(names: tuple[str, ...]) -> DiagramGraph:
    """The overview of the built-in machine with ``names`` added as states after the model's
    first reply (each joins the ``active`` group)."""
    agent = Agent(ScriptedModel([]))
    for name in names:
        agent.machine.add_state(name, ask_again)
        agent.machine.add_transition(
            TransitionSpec(
                "model_replied",
                (State.AWAITING_MODEL,),
                name,
                (first_reply,),
                label=f"to {name}",
                before="final_answer",
            )
        )
        agent.machine.add_transition(TransitionSpec("model_replied", (name,), State.DONE))
    return diagram_graph(agent.machine, detail="overview")


def svg_ids(svg: str) -> list[str]:
    """Every ``id`` in ``svg``, read by an XML parser (it fails on an SVG that is not XML)."""
    return [e.attrib["id"] for e in ET.fromstring(svg).iter() if "id" in e.attrib]


def test_state_element_ids_are_valid_and_unique_for_names_with_a_space_dash_or_quote() -> None:
    ids = [element_id("state", name) for name in NAMES]
    assert ids[:3] == ["state_needs-20-review", "state_needs-2d-review", "state_needs_review"]
    assert all(VALID_ID.fullmatch(i) for i in ids), ids
    assert len(set(ids)) == len(ids)  # "x-2d-y" is not the encoding of another name
    assert element_id("state", "awaiting_model") == "state_awaiting_model"  # plain: unchanged
    assert element_id("group", "my group") == "group_my-20-group"


@pytest.mark.parametrize("drawing", ["simple", "graphviz"])
def test_both_drawings_give_each_odd_state_one_element_under_its_element_id(drawing: str) -> None:
    graph = graph_with(NAMES)
    if drawing == "simple":
        svg = _html_diagram.simple_svg(graph)
    elif shutil.which("dot") is None:
        pytest.skip(NO_DOT)
    else:
        svg = render_image(to_dot(graph, element_ids=True), "svg").decode()
    ids = svg_ids(svg)
    for name in NAMES:
        assert ids.count(element_id("state", name)) == 1, (name, ids)
    assert ids.count("state_awaiting_model") == 1 and ids.count("group_active") == 1
    node_ids = [i for i in ids if i.startswith(("state_", "group_"))]
    assert all(VALID_ID.fullmatch(i) for i in node_ids), node_ids
    assert len(set(node_ids)) == len(node_ids)


def test_a_step_into_an_odd_state_carries_the_element_id_the_page_looks_up(
    tmp_path: Path,
) -> None:
    """The page lights ``document.getElementById(step.node)``: the model gives each step the id
    of its state's element, for a built-in state and for one named with a space and a quote."""
    name = 'needs "a" review'
    agent = Agent(
        ScriptedModel([text_response("first"), text_response("second")]),
        session=tmp_path / "odd.jsonl",
    )
    agent.machine.add_state(name, ask_again)
    agent.machine.add_transition(
        TransitionSpec(
            "model_replied",
            (State.AWAITING_MODEL,),
            name,
            (first_reply,),
            label="review",
            before="final_answer",
        )
    )
    agent.machine.add_transition(TransitionSpec("model_replied", (name,), State.DONE))
    assert str(agent.run_sync("go").state) == "done"
    assert agent.session is not None
    agent.session.close()
    steps = page_model(read_session(tmp_path / "odd.jsonl"))["steps"]
    assert [(s["dest"], s["node"]) for s in steps] == [
        ("awaiting_model", "state_awaiting_model"),
        (name, "state_needs-20--22-a-22--20-review"),
        ("done", "state_done"),
    ]
    page_js = (Path(_html.__file__).parent / "html" / "page.js").read_text(encoding="utf-8")
    assert "document.getElementById(step.node)" in page_js
