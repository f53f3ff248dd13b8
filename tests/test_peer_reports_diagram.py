"""Peers' bug reports about state-diagram rendering, replayed against our diagram code (issue 34).

Each test names the public report it replays, what the peer's library drew wrong, and what our
diagram must do instead. The Graphviz checks read Graphviz's own layout (``dot -Tjson``) of the
DOT text we emit, so they test what a reader sees, not our text alone.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess

import pytest

from statemachine_agent import LoopData, LoopMachine, Run, State, TransitionSpec, render_diagram

NO_DOT = "Graphviz's dot is not installed (CI installs it: apt-get install graphviz)"
needs_dot = pytest.mark.skipif(shutil.which("dot") is None, reason=NO_DOT)
MERMAID_ID = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
EDGE_LINE = re.compile(r"^\s*(\S+) --> (\S+)(?: : (.*))?$")


async def ask_again(run: Run) -> str:
    return await run.request_model()


def first_pass(data: LoopData) -> bool:
    return data.turns == 1


def later_pass(data: LoopData) -> bool:
    return data.turns > 1


def with_user_state(name: str) -> LoopMachine:
    """The built-in machine with one state a user added, entered after a tool batch."""
    machine = LoopMachine()
    machine.add_state(name, ask_again)
    machine.add_transition(
        TransitionSpec(
            "tools_finished",
            (State.EXECUTING_TOOLS,),
            name,
            (later_pass,),
            label="review",
            before="next_turn",
        )
    )
    machine.add_transition(TransitionSpec("model_replied", (name,), State.DONE, label="reviewed"))
    return machine


def two_user_states() -> LoopMachine:
    """Two user states, with two branches between the same pair and two self-loop branches."""
    machine = with_user_state("reviewing")
    machine.add_state("verifying", ask_again)
    for guard, label in ((first_pass, "check_once"), (later_pass, "check_again")):
        machine.add_transition(
            TransitionSpec(
                "model_replied",
                ("reviewing",),
                "verifying",
                (guard,),
                label=label,
                before="reviewed",
            )
        )
    machine.add_transition(
        TransitionSpec("model_replied", ("verifying",), State.DONE, label="verified")
    )
    for guard, label in ((first_pass, "retry_check_once"), (later_pass, "retry_check_again")):
        machine.add_transition(
            TransitionSpec(
                "model_replied",
                ("verifying",),
                "verifying",
                (guard,),
                label=label,
                before="verified",
            )
        )
    return machine


def mermaid_edges(text: str) -> dict[tuple[str, str], list[str]]:
    """The overview's edges as Mermaid draws them: (source, dest) -> the label's lines."""
    edges: dict[tuple[str, str], list[str]] = {}
    for line in text.splitlines():
        match = EDGE_LINE.match(line)
        if match and match.group(1) != "[*]":
            assert (match.group(1), match.group(2)) not in edges, f"pair drawn twice: {line}"
            edges[match.group(1), match.group(2)] = (match.group(3) or "").split("<br/>")
    return edges


def graphviz_layout(dot_text: str) -> tuple[dict, str]:
    """Graphviz's own reading of ``dot_text`` (its JSON layout) and what it wrote on stderr."""
    done = subprocess.run(
        ["dot", "-Tjson"], input=dot_text, capture_output=True, text=True, check=False, timeout=60
    )
    assert done.returncode == 0, f"dot rejected the diagram: {done.stderr.strip()}"
    return json.loads(done.stdout), done.stderr


@pytest.mark.parametrize("name", ["needs-review", "needs review"])
def test_mermaid_names_a_state_with_a_dash_or_space_by_a_safe_id_and_shows_its_name(
    name: str,
) -> None:
    """pytransitions/transitions#708: its Mermaid output used state names as Mermaid ids, so a
    state named with a space or a dash (``state A``, ``state-B``) gave invalid Mermaid (Mermaid's
    stateDiagram ids take no dash or space, mermaid-js/mermaid#3423). `add_state` takes any
    name; we expect every id in the Mermaid text (edge ends, composite members, notes) to be a
    plain identifier, and the state's real name shown as its description."""
    text = render_diagram(with_user_state(name))
    ids = set()
    for line in text.splitlines()[1:]:
        if " --> " in line:
            source, rest = line.strip().split(" --> ", 1)
            ids |= {source, rest.split(" : ", 1)[0]} - {"[*]"}
        elif line.lstrip().startswith("note right of "):
            ids.add(line.split("note right of ", 1)[1].split(" : ", 1)[0])
    unsafe = sorted(i for i in ids if not MERMAID_ID.fullmatch(i))
    assert not unsafe, f"state {name!r}: Mermaid ids that are not identifiers: {unsafe}"
    assert f'"{name}"' in text, f"state {name!r} is not shown by its name:\n{text}"


@needs_dot
@pytest.mark.parametrize(
    "name", ["needs-review", "needs review", "a:b", "node", "edge", "graph", "subgraph"]
)
def test_dot_draws_states_named_with_spaces_dashes_colons_or_dot_keywords_as_one_node_each(
    name: str,
) -> None:
    """pydot/pydot#111 (and dotnet-state-machine/stateless#382): node ids written unquoted, so a
    state named ``node`` or ``graph`` made Graphviz fail with a syntax error, and ``En cours``
    was read as two nodes. `add_state` takes any name; we expect Graphviz to accept our DOT and
    draw each such state as exactly one node showing its name."""
    layout, _ = graphviz_layout(render_diagram(with_user_state(name), format="dot"))
    labels = [obj.get("label", "") for obj in layout.get("objects", [])]
    assert sum(label.split("\n")[0] == name for label in labels) == 1, (name, labels)


def test_overview_keeps_every_branch_between_the_same_two_states_including_self_loops() -> None:
    """pytransitions/transitions#105 (and #121): several transitions between the same two states
    were drawn as one edge carrying one trigger; the others were lost (a self-loop showed only
    the last one defined). Our overview draws one edge per pair on purpose; we expect it to list
    every branch's label, in priority order, on that edge, a self-loop's too."""
    edges = mermaid_edges(render_diagram(two_user_states()))
    assert edges["reviewing", "verifying"] == ["check_once", "check_again"]
    assert edges["verifying", "verifying"] == ["retry_check_once", "retry_check_again"]
    assert edges["reviewing", "done"] == ["reviewed"]


def test_overview_draws_exactly_the_transitions_the_engine_can_fire() -> None:
    """langchain-ai/langgraph#4788 (and #4394): ``draw_mermaid`` drew edges to END from nodes
    that had none, so the picture promised paths the graph never takes. We expect the overview's
    edges, a composite's edge standing for each of its members, to be exactly the (source, dest)
    pairs of the machine's branches: none invented, none dropped, for the built-in machine and
    with user states added."""
    for machine in (LoopMachine(), two_user_states()):
        members = {group.name: {str(s) for s in group.states} for group in machine.groups.values()}
        drawn = {
            (member, dest)
            for source, dest in mermaid_edges(render_diagram(machine))
            for member in members.get(source, {source})
        }
        fired = {(str(src), str(spec.dest)) for spec in machine.specs for src in spec.sources}
        assert drawn == fired, (sorted(drawn - fired), sorted(fired - drawn))


@needs_dot
@pytest.mark.parametrize("detail", ["overview", "full"])
def test_graphviz_reads_our_composites_without_a_warning(detail: str) -> None:
    """pytransitions/transitions#296: HierarchicalGraphMachine drew an edge between a child state
    and its own parent cluster (``ltail``/``lhead`` into the cluster holding the other end), and
    Graphviz warned "tail is inside head cluster" and drew the arrow wrong. Our composites send
    edges from the group (``ended -> max_turns`` enters a member of ``ended`` itself); we expect
    Graphviz to lay out both views, built-in and with user states, without a single warning."""
    for machine in (LoopMachine(), two_user_states()):
        _, stderr = graphviz_layout(render_diagram(machine, format="dot", detail=detail))
        assert stderr.strip() == "", stderr
