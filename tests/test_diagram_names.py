"""State names and labels that are not plain identifiers, in the Mermaid and DOT we emit (issue 34,
peer reports): the whole kind behind the reports' own tests at the end of this file. A name or
label may hold any character; our text must keep Mermaid's and Graphviz's syntax intact and show it as is.

The Mermaid rules come from its ``stateDiagram`` grammar (ids end at a space, dash, colon or
brace; ``:`` and ``;`` end a label; ``#name;`` is an entity code); the DOT ones from Graphviz's
language reference (a quoted string escapes ``"``; keywords are case-insensitive).
"""

from __future__ import annotations

import html
import json
import re
import shutil
import subprocess

import pytest

from statemachine_agent import LoopData, LoopMachine, Run, State, TransitionSpec, render_diagram
from statemachine_agent._diagram import MERMAID_WORDS, mermaid_ids, mermaid_text

NO_DOT = "Graphviz's dot is not installed (CI installs it: apt-get install graphviz)"
needs_dot = pytest.mark.skipif(shutil.which("dot") is None, reason=NO_DOT)
IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
ODD_NAMES = ("needs-review", "needs review", 'say "hi"', "a:b", "state", "Default_x", "s_1")
NASTY_LABEL = 'go: 1; #x "q" 50% <b> {c} & direction LR'


async def ask_again(run: Run) -> str:
    return await run.request_model()


def later_pass(data: LoopData) -> bool:
    return data.turns > 1


def chain_of_states(names: tuple[str, ...], label: str = "review") -> LoopMachine:
    """The built-in machine with ``names`` added as a chain after a tool batch, each branch
    labelled ``label`` plus its number, the last one ending the run."""
    machine = LoopMachine()
    source: str = State.EXECUTING_TOOLS
    for number, name in enumerate(names):
        machine.add_state(name, ask_again)
        machine.add_transition(
            TransitionSpec(
                "model_replied" if number else "tools_finished",
                (source,),
                name,
                (later_pass,),
                label=f"{label} {number}",
                before=None if number else "next_turn",
            )
        )
        source = name
    machine.add_transition(TransitionSpec("model_replied", (source,), State.DONE, label="end"))
    return machine


def mermaid_decoded(text: str) -> str:
    """What Mermaid shows for ``text``: ``#58;`` is the character 58, ``#quot;`` the entity."""
    return re.sub(
        r"#(\w+);",
        lambda m: chr(int(m[1])) if m[1].isdigit() else html.unescape(f"&{m[1]};"),
        text,
    )


def test_mermaid_gives_every_state_a_distinct_plain_id_even_against_s_1_and_mermaid_words() -> None:
    """A name that is a plain identifier and no Mermaid word is its own id; every other name
    gets ``s_N``, skipping an ``s_N`` a state already has, and is declared with its real name."""
    names = list(ODD_NAMES)
    ids = mermaid_ids(names)
    assert ids == {
        "needs-review": "s_2",  # s_1 is a state's own name
        "needs review": "s_3",
        'say "hi"': "s_4",
        "a:b": "s_5",
        "state": "s_6",  # a Mermaid keyword, in any case
        "Default_x": "s_7",  # Mermaid's lexer takes "default" off the front of a token
        "s_1": "s_1",
    }
    text = str(render_diagram(chain_of_states(ODD_NAMES)))
    for name in ODD_NAMES[:-1]:
        assert f'state "{mermaid_text(name)}" as {ids[name]}\n' in text
    assert "        s_1\n" in text  # a plain name stays bare in its composite
    drawn = {w for line in text.splitlines() if " --> " in line for w in line.split()[:3:2]}
    assert all(IDENTIFIER.fullmatch(i) for i in drawn - {"[*]"}), sorted(drawn)
    assert not {i.lower() for i in drawn} & MERMAID_WORDS


def test_mermaid_writes_colon_semicolon_hash_quote_and_markup_as_entity_codes() -> None:
    """Mermaid ends a label at ``:`` or ``;``, reads ``#...;`` as an entity code, ``"`` as the end
    of a name, ``%%`` as a comment and ``direction LR`` as a statement anywhere on a line: each is
    written as an entity code and shown back as the character."""
    expected = "go#58; 1#59; #35;x #quot;q#quot; 50#37; #lt;b#gt; #123;c#125; #38; directio#110; LR"
    assert mermaid_text(NASTY_LABEL) == expected
    assert mermaid_decoded(mermaid_text(NASTY_LABEL)) == NASTY_LABEL
    text = str(render_diagram(chain_of_states(("needs review",), label=NASTY_LABEL)))
    assert f"executing_tools --> s_1 : {expected} 0\n" in text
    assert 'state "needs review" as s_1\n' in text
    for line in text.splitlines():
        if " : " in line:
            label = re.sub(r"#\w+;|<br/>", "", line.split(" : ", 1)[1])
            assert not set(label) & set(':;"%{}<>#'), line  # nothing Mermaid reads as syntax


def test_mermaid_of_the_built_in_machine_is_unchanged_by_the_escaping() -> None:
    """Plain names and labels are written as they were: no ``s_N``, no entity code."""
    for detail in ("overview", "full"):
        text = str(render_diagram(detail=detail))  # type: ignore[call-overload]
        assert " as s_" not in text and "#58;" not in text and "state idle" not in text
        assert "    state active {\n        awaiting_model\n" in text


@needs_dot
def test_dot_quotes_every_id_and_escapes_quotes_and_backslashes_in_names() -> None:
    """Graphviz reads ``"`` inside a quoted id as its end and ``\\`` as an escape: a name with
    either, one named ``__start__`` (our start point's id) and DOT keywords in any case each
    draw one node whose text is the name, and Graphviz says nothing on stderr."""
    names = ('say "hi"', "back\\", 'end"\\', "__start__", "Node", "STRICT", "\\N")
    dot = str(render_diagram(chain_of_states(names), format="dot"))
    done = subprocess.run(
        ["dot", "-Tsvg"], input=dot, capture_output=True, text=True, check=False, timeout=60
    )
    assert done.returncode == 0 and done.stderr == "", done.stderr
    texts = [html.unescape(t) for t in re.findall(r"<text[^>]*>([^<]*)</text>", done.stdout)]
    for name in names:
        assert texts.count(name) == 1, (name, texts)
    assert texts.count("") == 0  # the start point has no text; no stray empty node either
    layout = subprocess.run(
        ["dot", "-Tjson"], input=dot, capture_output=True, text=True, check=True, timeout=60
    )
    objects = json.loads(layout.stdout)["objects"]
    starts = [o for o in objects if o.get("shape") == "point"]
    assert len(starts) == 1 and starts[0]["name"] != "__start__"  # never merged with the state


NO_DOT = "Graphviz's dot is not installed (CI installs it: apt-get install graphviz)"


needs_dot = pytest.mark.skipif(shutil.which("dot") is None, reason=NO_DOT)


MERMAID_ID = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


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
