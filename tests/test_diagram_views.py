"""Issue 34: groups in the definition drawn as composites, the overview and the full view, the
user's own machine (CLI ``--agent``, ``agent.diagram()`` in Jupyter), the README's diagram."""

from __future__ import annotations

import itertools
import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from statemachine_agent import (
    Agent,
    LoopData,
    LoopMachine,
    MachineDefinitionError,
    Run,
    State,
    TransitionSpec,
    UsageError,
    render_diagram,
)
from statemachine_agent._diagram import Diagram, diagram_graph, to_dot
from statemachine_agent._machine import GROUPS, TRANSITIONS, validate_definition
from statemachine_agent.models import ScriptedModel

HAVE_DOT = shutil.which("dot") is not None
NO_DOT = "Graphviz's dot is not installed (CI installs it: apt-get install graphviz)"
ROOT = Path(__file__).resolve().parents[1]
ACTIVE = ("awaiting_model", "executing_tools", "compacting")
ENDED = ("aborted", "done", "failed", "max_turns")


async def review(run: Run) -> str:
    return "model_replied"


def always(data: LoopData) -> bool:
    return True


def wants_review(data: LoopData) -> bool:
    return data.turns > 1


def wants_summary(data: LoopData) -> bool:
    return data.turns > 5


def two_user_states() -> LoopMachine:
    """The built-in machine with two states a user added, each with its ways in and out."""
    machine = LoopMachine()
    machine.add_state("reviewing", review)
    machine.add_transition(
        TransitionSpec("tools_finished", ("executing_tools",), "reviewing", (wants_review,))
    )
    machine.add_state("summarizing", review)
    machine.add_transition(
        TransitionSpec("model_replied", ("reviewing",), "summarizing", (wants_summary,))
    )
    machine.add_transition(
        TransitionSpec("model_replied", ("reviewing",), "done", after="wants_summary")
    )
    machine.add_transition(TransitionSpec("model_replied", ("summarizing",), "done"))
    return machine


# -- case 1: groups are data of the table, used by the engine and the diagram --------------------


def test_groups_are_table_data_that_the_engine_rows_expand() -> None:
    groups = {g.name: tuple(map(str, g.states)) for g in GROUPS}
    assert groups == {"active": ACTIVE, "ended": ENDED}
    by_label = {(t.trigger, t.label): t for t in TRANSITIONS}
    for key in (("abort", "abort"), ("fail", "fail")):
        assert tuple(map(str, by_label[key].sources)) == ACTIVE
        assert by_label[key].groups == ("active",)
    for label in ("usage_limit", "turn_limit", "start"):
        start = by_label[("start", label)]
        assert tuple(map(str, start.sources)) == ("idle", *ENDED)
        assert start.groups == ("ended",)
    # The engine fires them from every member.
    for state in ENDED:
        machine = LoopMachine()
        machine.restore(state)
        assert machine.fire("start", LoopData()).dest == State.AWAITING_MODEL


def test_a_state_the_user_adds_joins_active_so_abort_and_fail_leave_it() -> None:
    machine = LoopMachine()
    machine.add_state("reviewing", review)
    machine.add_transition(
        TransitionSpec("model_replied", ("awaiting_model",), "reviewing", (always,))
    )
    assert machine.groups["active"].states == (*ACTIVE, "reviewing")
    assert machine.groups["ended"].states == ENDED
    for trigger, dest in (("abort", State.ABORTED), ("fail", State.FAILED)):
        machine.restore("idle")
        machine.fire("start", LoopData())
        assert machine.fire("model_replied", LoopData()).dest == "reviewing"
        assert machine.fire(trigger, LoopData()).dest == dest
    drawn = str(Diagram(machine))
    assert "        reviewing\n    }" in drawn.split("state ended")[0]  # inside the composite


def test_a_transition_may_name_a_group_among_its_sources() -> None:
    machine = LoopMachine()
    machine.add_state("reviewing", review)
    machine.add_transition(
        TransitionSpec("tools_finished", ("executing_tools",), "reviewing", (wants_review,))
    )
    machine.add_transition(TransitionSpec("model_replied", ("reviewing",), "done"))
    machine.add_transition(
        TransitionSpec("abort", ("active",), State.DONE, (wants_summary,), label="quiet_abort")
    )
    added = next(s for s in machine.specs if s.label == "quiet_abort")
    assert tuple(map(str, added.sources)) == (*ACTIVE, "reviewing")
    assert added.groups == ("active",)
    assert "active --> done : quiet_abort" in str(Diagram(machine))


def test_a_group_transition_that_misses_a_member_is_refused() -> None:
    abort = next(t for t in TRANSITIONS if t.label == "abort")
    broken = [t for t in TRANSITIONS if t is not abort]
    broken.append(
        TransitionSpec("abort", ACTIVE[:2], State.ABORTED, label="abort", groups=("active",))
    )
    with pytest.raises(MachineDefinitionError, match="does not leave 'compacting'"):
        validate_definition(State, broken)


def test_a_state_named_like_a_group_is_refused() -> None:
    with pytest.raises(MachineDefinitionError, match="a group named 'active' already exists"):
        LoopMachine().add_state("active", review)


def test_groups_are_drawn_as_composites_with_their_transitions_once() -> None:
    for detail in ("overview", "full"):
        mermaid = str(render_diagram(detail=detail))  # type: ignore[arg-type]
        dot = str(render_diagram(format="dot", detail=detail))  # type: ignore[arg-type]
        assert "    state active {\n        awaiting_model\n" in mermaid
        assert "    state ended {\n        done\n" in mermaid
        assert 'subgraph "cluster_active" {' in dot and 'subgraph "cluster_ended" {' in dot
        graph = diagram_graph(detail=detail)  # type: ignore[arg-type]
        aborts = [e for e in graph.edges if e.dest == "aborted" and "abort" in e.labels]
        assert [e.source for e in aborts] == ["active"]
        starts = [e.source for e in graph.edges if "start" in e.labels]
        assert starts == ["ended", "idle"]  # not once per terminal state
        assert '"active" -> "aborted" [label=' in dot and 'ltail="cluster_active"' in dot


# -- case 2: the overview and the full detail ---------------------------------------------------


def test_overview_draws_one_edge_per_pair_labelled_with_the_branch_labels() -> None:
    graph = diagram_graph(detail="overview")
    pairs = [(e.source, e.dest) for e in graph.edges]
    assert len(pairs) == len(set(pairs))
    edge = {(e.source, e.dest): e for e in graph.edges}
    loop = edge[("awaiting_model", "awaiting_model")]
    assert loop.lines == (
        "final_turn",
        "pause_turn",
        "max_tokens",
        "queued_input",
        "output_missing",
    )
    assert edge[("awaiting_model", "max_turns")].lines == (
        "final_answer_at_limit",
        "usage_limit",
        "turn_limit",
        "continuation_limit",
    )
    drawn = {line for e in graph.edges for line in e.lines}
    assert drawn == {t.name for t in TRANSITIONS}  # every label, and only the labels
    mermaid = str(render_diagram())
    assert (
        "awaiting_model --> awaiting_model : "
        "final_turn<br/>pause_turn<br/>max_tokens<br/>queued_input<br/>output_missing\n"
    ) in mermaid
    edges = [line for line in mermaid.splitlines() if " --> " in line and " : " in line]
    assert len(edges) == len(graph.edges)
    assert not any("[" in line.split(" : ", 1)[1] for line in edges)  # no guards in it
    dot = str(render_diagram(format="dot"))
    assert '"executing_tools" -> "failed" [label="output_invalid\nhook_failed"];' in dot


def test_full_detail_keeps_every_guarded_branch_with_its_guards() -> None:
    graph = diagram_graph(detail="full")
    loops = [e.text for e in graph.edges if e.source == e.dest == "awaiting_model"]
    assert loops == [
        "model_replied [final_turn_wanted and usage_limit_on_reply]",
        "model_replied [final_turn_wanted and turn_limit_before_continuing]",
        "model_replied [can_continue_pause_turn]",
        "model_replied [can_continue_max_tokens]",
        "model_replied [has_queued_input]",
        "model_replied [can_retry_output]",
    ]
    ungrouped = sum(len(t.sources) for t in TRANSITIONS if not t.groups)
    assert len(graph.edges) == ungrouped + 3 * 2 + 2  # start x3 from ended and idle; abort, fail
    mermaid = str(render_diagram(detail="full"))
    assert "awaiting_model --> done : model_replied [else]" in mermaid
    assert "ended --> awaiting_model : start [else]" in mermaid


def test_unknown_detail_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match="unknown diagram detail 'some'"):
        render_diagram(detail="some")  # type: ignore[arg-type]
    with pytest.raises(UsageError, match="use overview or full"):
        Agent(ScriptedModel([])).diagram(detail="branches")  # type: ignore[arg-type]


def label_and_state_boxes(
    dot_text: str,
) -> tuple[dict[str, tuple[float, ...]], dict[str, tuple[float, ...]]]:
    """Graphviz's own layout (``dot -Tjson``): each state's box and each edge label's box
    (``x0, y0, x1, y1`` in points), a label's from the text lines Graphviz placed."""
    done = subprocess.run(
        ["dot", "-Tjson"], input=dot_text.encode(), capture_output=True, check=True
    )
    layout = json.loads(done.stdout)
    states: dict[str, tuple[float, ...]] = {}
    for obj in layout.get("objects", []):
        if "nodes" in obj or str(obj.get("name", "")).startswith("cluster"):
            continue  # a cluster, not a state
        x, y = map(float, obj["pos"].split(","))
        w, h = float(obj["width"]) * 72, float(obj["height"]) * 72
        states[obj["name"]] = (x - w / 2, y - h / 2, x + w / 2, y + h / 2)
    labels: dict[str, tuple[float, ...]] = {}
    for edge in layout.get("edges", []):
        size, xs, ys = 14.0, [], []
        for op in edge.get("_ldraw_", []):
            if op["op"] == "F":
                size = float(op["size"])
            elif op["op"] == "T":
                (x, y), width = op["pt"], float(op["width"])
                left = {"l": x, "c": x - width / 2, "r": x - width}[op["align"]]
                xs += [left, left + width]
                ys += [y - 0.25 * size, y + 0.8 * size]  # descent below, ascent above the base
        if xs:
            labels[f"{edge['_gvid']}:{edge.get('label', '')}"] = (
                min(xs),
                min(ys),
                max(xs),
                max(ys),
            )
    return states, labels


def intersect(a: tuple[float, ...], b: tuple[float, ...]) -> bool:
    return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]


@pytest.mark.skipif(not HAVE_DOT, reason=NO_DOT)
@pytest.mark.parametrize("machine", [None, "two_user_states"])
def test_overview_labels_overlap_neither_each_other_nor_a_state_in_graphviz_layout(
    machine: str | None,
) -> None:
    source = two_user_states() if machine else None
    graph = diagram_graph(source, detail="overview")
    states, labels = label_and_state_boxes(to_dot(graph))
    assert len(labels) == len(graph.edges)  # every edge of the overview is labelled
    if machine:
        assert {"reviewing", "summarizing"} <= set(states)
    clashes = [
        (a, b) for (a, p), (b, q) in itertools.combinations(labels.items(), 2) if intersect(p, q)
    ]
    assert clashes == []
    covered = [(a, s) for a, p in labels.items() for s, q in states.items() if intersect(p, q)]
    assert covered == []


# -- case 3: the user's own machine --------------------------------------------------------------

USER_PACKAGE = """
from statemachine_agent import Agent, LoopData, LoopMachine, TransitionSpec
from statemachine_agent.models import ScriptedModel


async def review(run):
    return "model_replied"


def wants_review(data: LoopData) -> bool:
    return data.turns > 1


def build() -> Agent:
    agent = Agent(ScriptedModel([]))
    agent.machine.add_state("reviewing", review)
    agent.machine.add_transition(
        TransitionSpec("tools_finished", ("executing_tools",), "reviewing", (wants_review,),
                       label="review_first")
    )
    agent.machine.add_transition(TransitionSpec("model_replied", ("reviewing",), "done"))
    return agent


agent = build()
machine = build().machine
number = 7
"""


def run_cli(folder: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``statemachine-agent`` as the console script runs it: ``-P`` keeps Python from putting the
    working folder on the path (``python -m`` and ``-c`` would), so the CLI must do it."""
    code = "import sys; from statemachine_agent.cli import main; sys.exit(main())"
    paths = [str(ROOT), *os.environ.get("PYTHONPATH", "").split(os.pathsep)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in paths if p)}  # this checkout
    return subprocess.run(
        [sys.executable, "-P", "-c", code, *args],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.fixture
def user_folder(tmp_path: Path) -> Path:
    package = tmp_path / "mybot"
    package.mkdir()
    (package / "__init__.py").write_text("", encoding="utf-8")
    (package / "app.py").write_text(textwrap.dedent(USER_PACKAGE), encoding="utf-8")
    return tmp_path


@pytest.mark.parametrize("attr", ["agent", "machine", "build"])
def test_cli_draws_the_users_agent_machine_or_factory_from_the_working_folder(
    user_folder: Path, attr: str
) -> None:
    done = run_cli(user_folder, "diagram", "--agent", f"mybot.app:{attr}")
    assert done.returncode == 0, done.stderr
    assert "executing_tools --> reviewing : review_first\n" in done.stdout
    assert "        reviewing\n    }" in done.stdout  # a user state joins the active composite
    assert "    class idle current\n" in done.stdout  # the current state is marked
    full = run_cli(user_folder, "diagram", "--agent", f"mybot.app:{attr}", "--detail", "full")
    assert "executing_tools --> reviewing : tools_finished [wants_review]\n" in full.stdout


@pytest.mark.parametrize(
    ("reference", "message"),
    [
        ("mybot.app", "is not MODULE:ATTR"),
        ("nobot.app:agent", "cannot import 'nobot'"),
        ("mybot.app:missing", "module 'mybot.app' has no attribute 'missing'"),
        ("mybot.app:number", "is a int, not an Agent, a LoopMachine or a function"),
    ],
)
def test_cli_agent_reference_errors_say_what_to_fix(
    user_folder: Path, reference: str, message: str
) -> None:
    done = run_cli(user_folder, "diagram", "--agent", reference)
    assert done.returncode == 2
    assert message in done.stderr and "--agent" in done.stderr
    assert "Traceback" not in done.stderr


def live_agent() -> Agent:
    agent = Agent(ScriptedModel([{"content": [{"type": "text", "text": "hi"}]}]))
    agent.run_sync("hello")
    return agent


@pytest.mark.skipif(not HAVE_DOT, reason=NO_DOT)
def test_agent_diagram_shows_in_jupyter_as_svg_with_graphviz() -> None:
    shown: Any = live_agent().diagram()
    svg = shown._repr_svg_()
    assert svg.startswith("<svg") and 'id="state_done"' in svg
    assert "#ffe08a" in svg.split('id="state_done"')[1].split("</g>")[0]  # done is lit
    assert shown._repr_markdown_() is None  # Jupyter shows the SVG


def test_agent_diagram_shows_in_jupyter_as_mermaid_without_graphviz(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    shown: Any = live_agent().diagram()
    monkeypatch.setattr(shutil, "which", lambda _name: None)
    assert shown._repr_svg_() is None
    markdown = shown._repr_markdown_()
    assert markdown.startswith("```mermaid\nstateDiagram-v2\n") and markdown.endswith("```\n")
    assert "    class done current\n" in markdown


def test_agent_diagram_str_is_mermaid_with_the_current_state_marked() -> None:
    agent = live_agent()
    assert str(agent.diagram()) == render_diagram(agent)
    assert "    class done current\n" in str(agent.diagram())
    assert str(agent.diagram(detail="full")) == render_diagram(agent, detail="full")
    assert "current=done" in repr(agent.diagram())


# -- case 5: the README shows the machine ---------------------------------------------------------


def test_readme_shows_the_overview_as_mermaid_and_svg_with_a_two_line_legend() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    committed = (ROOT / "diagrams" / "agent_loop.mmd").read_text(encoding="utf-8")
    assert committed == render_diagram()
    assert f"```mermaid\n{committed}```" in readme
    assert "![The agent loop's state machine (overview)](diagrams/agent_loop.svg)" in readme
    legend = readme.split("```mermaid\n" + committed + "```\n")[1].lstrip("\n").split("\n\n")[0]
    assert legend.startswith("Legend:") and len(legend.splitlines()) == 2


NO_DOT = "Graphviz's dot is not installed (CI installs it: apt-get install graphviz)"


needs_dot = pytest.mark.skipif(shutil.which("dot") is None, reason=NO_DOT)


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


def two_user_states_with_self_loops() -> LoopMachine:
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


def test_overview_keeps_every_branch_between_the_same_two_states_including_self_loops() -> None:
    """pytransitions/transitions#105 (and #121): several transitions between the same two states
    were drawn as one edge carrying one trigger; the others were lost (a self-loop showed only
    the last one defined). Our overview draws one edge per pair on purpose; we expect it to list
    every branch's label, in priority order, on that edge, a self-loop's too."""
    edges = mermaid_edges(render_diagram(two_user_states_with_self_loops()))
    assert edges["reviewing", "verifying"] == ["check_once", "check_again"]
    assert edges["verifying", "verifying"] == ["retry_check_once", "retry_check_again"]
    assert edges["reviewing", "done"] == ["reviewed"]


def test_overview_draws_exactly_the_transitions_the_engine_can_fire() -> None:
    """langchain-ai/langgraph#4788 (and #4394): ``draw_mermaid`` drew edges to END from nodes
    that had none, so the picture promised paths the graph never takes. We expect the overview's
    edges, a composite's edge standing for each of its members, to be exactly the (source, dest)
    pairs of the machine's branches: none invented, none dropped, for the built-in machine and
    with user states added."""
    for machine in (LoopMachine(), two_user_states_with_self_loops()):
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
    for machine in (LoopMachine(), two_user_states_with_self_loops()):
        _, stderr = graphviz_layout(render_diagram(machine, format="dot", detail=detail))
        assert stderr.strip() == "", stderr


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
