"""Issue 33, cases 1, 2 and 6: the CLI as a person uses it, each case as a real process (a
pseudo-terminal through pexpect where a terminal matters)."""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from docs.blocks import documentation_text
from rich.console import Console

from statemachine_agent._events import StateChanged
from statemachine_agent.cli._execute import PIPE_CLOSED
from statemachine_agent.cli._view import LiveView
from statemachine_agent.session import read_session
from statemachine_agent.workspace import PREVIEW_LINES, Workspace, preview_call

pexpect = pytest.importorskip(
    "pexpect", reason="pexpect is not installed (a dev dependency: pip install -e '.[dev]')"
)

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
GREEN_FG = re.compile(r"\x1b\[(?:[0-9;]*;)?32m")
CODE = "from statemachine_agent.cli import main; main()"
README = Path(__file__).resolve().parents[2] / "README.md"


def call(call_id: str, name: str, **args: Any) -> dict[str, Any]:
    return {"type": "tool_use", "id": call_id, "name": name, "input": args}


def script(tmp_path: Path, *batches: list[dict[str, Any]], name: str = "script.json") -> str:
    steps: list[dict[str, Any]] = [{"content": b, "stop_reason": "tool_use"} for b in batches]
    steps.append({"content": [{"type": "text", "text": "Done."}], "stop_reason": "end_turn"})
    path = tmp_path / name
    path.write_text(json.dumps(steps))
    return f"script:{path}"


def cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """The CLI as a process without a terminal (stdin closed, output piped)."""
    return subprocess.run(
        [sys.executable, "-c", CODE, *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        env={**os.environ, "COLUMNS": "100"},
        timeout=120,
    )


def spawn(args: list[str], cwd: Path) -> Any:
    env = {**os.environ, "TERM": "xterm-256color", "COLUMNS": "100", "LINES": "30"}
    env.pop("NO_COLOR", None)
    return pexpect.spawn(
        sys.executable, ["-c", CODE, *args], cwd=str(cwd), env=env, encoding="utf-8",
        timeout=60, dimensions=(30, 100),
    )  # fmt: skip


def flat(text: str) -> str:
    return " ".join(ANSI.sub("", text).split())


# -- case 1: approvals and results are not blind ------------------------------------------------


def test_edit_prompt_shows_the_unified_diff_colored_in_a_terminal(
    folder: Path, tmp_path: Path
) -> None:
    (folder / "code.py").write_text("def f():\n    return 1\n\nprint(f())\n")
    model = script(
        tmp_path,
        [call("e1", "edit_file", path="code.py", old_text="return 1", new_text="return 2")],
    )
    child = spawn(["run", "Fix it", "-w", str(folder), "-m", model, "--no-sandbox"], tmp_path)
    child.expect(r"Allow the agent to edit code\.py")
    shown = child.before
    plain = ANSI.sub("", shown)
    assert "--- a/code.py" in plain and "+++ b/code.py" in plain
    assert "-    return 1" in plain and "+    return 2" in plain
    added = next(line for line in shown.splitlines() if "+    return 2" in line)
    assert GREEN_FG.search(added), repr(added)  # colored: the terminal has colors
    child.sendline("y")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0
    assert (folder / "code.py").read_text().startswith("def f():\n    return 2\n")


def test_edit_preview_is_trimmed_with_a_note_past_the_size(folder: Path) -> None:
    (folder / "big.txt").write_text("".join(f"line {i}\n" for i in range(100)))
    old = "".join(f"line {i}\n" for i in range(10, 60))
    new = "".join(f"LINE {i}\n" for i in range(10, 60))
    preview = preview_call(
        "edit_file", {"path": "big.txt", "old_text": old, "new_text": new}, Workspace(folder)
    )
    assert preview is not None and preview.kind == "diff"
    assert len(preview.text.splitlines()) == PREVIEW_LINES
    assert re.fullmatch(r"… \d+ more lines of the diff not shown", preview.note)


@pytest.mark.parametrize(
    ("extra", "note"),
    [(0, ""), (1, "… 1 more line of the new file not shown"),
     (2, "… 2 more lines of the new file not shown")],
    ids=["exactly_the_size", "one_line_past", "two_lines_past"],
)  # fmt: skip
def test_write_preview_notes_every_line_past_the_size_even_one(extra: int, note: str) -> None:
    content = "".join(f"row {i}\n" for i in range(PREVIEW_LINES + extra))
    preview = preview_call("write_file", {"path": "new.txt", "content": content})
    assert preview is not None and preview.kind == "file"
    assert preview.text.splitlines() == [f"row {i}" for i in range(PREVIEW_LINES)]
    assert preview.note == note


def test_edit_preview_of_a_diff_one_line_past_the_size_notes_that_line(folder: Path) -> None:
    # Replacing the whole file gives a diff of 3 header lines (---, +++, @@), one - line per
    # old line and one + line per new line: sized to be PREVIEW_LINES + 1 lines long.
    removed = (PREVIEW_LINES - 2) // 2
    old = "".join(f"old {i}\n" for i in range(removed))
    new = "".join(f"new {i}\n" for i in range(PREVIEW_LINES - 2 - removed))
    (folder / "f.txt").write_text(old)
    preview = preview_call(
        "edit_file", {"path": "f.txt", "old_text": old, "new_text": new}, Workspace(folder)
    )
    assert preview is not None and preview.kind == "diff"
    assert len(preview.text.splitlines()) == PREVIEW_LINES
    assert preview.note == "… 1 more line of the diff not shown"


@pytest.mark.parametrize("replace_all", [False, True], ids=["first_only", "replace_all"])
def test_edit_preview_replaces_what_the_edit_will_replace(folder: Path, replace_all: bool) -> None:
    # Without replace_all the preview changes one occurrence (and notes that the tool will
    # refuse a non-unique old_text); with it, every one.
    (folder / "twice.py").write_text("a = 1\nb = 2\nc = 3\nd = 4\ne = 5\nf = 6\ng = 7\na = 1\n")
    arguments = {"path": "twice.py", "old_text": "a = 1", "new_text": "a = 9",
                 "replace_all": replace_all}  # fmt: skip
    preview = preview_call("edit_file", arguments, Workspace(folder))
    assert preview is not None and preview.kind == "diff"
    if replace_all:
        assert preview.note == ""
    else:  # and the tool will refuse it: the prompt says so
        assert preview.note == (
            "(old_text occurs 2 times in twice.py: the edit will fail unless replace_all is "
            "set; the first occurrence is shown)"
        )
    body = preview.text.splitlines()[2:]  # past the ---/+++ header
    removed = [line for line in body if line.startswith("-")]
    added = [line for line in body if line.startswith("+")]
    pairs = 2 if replace_all else 1
    assert removed == ["-a = 1"] * pairs and added == ["+a = 9"] * pairs


def test_write_prompt_shows_the_new_files_head_and_a_command_prompt_the_command(
    folder: Path, tmp_path: Path
) -> None:
    content = "".join(f"row {i}\n" for i in range(60))
    command = "python3 -c 'print(1)'\necho second-line"
    model = script(tmp_path, [call("w1", "write_file", path="new.txt", content=content)],
                   [call("r1", "run_command", command=command)])  # fmt: skip
    child = spawn(["run", "Write", "-w", str(folder), "-m", model, "--no-sandbox"], tmp_path)
    child.expect(r"y/n")
    plain = ANSI.sub("", child.before)
    assert "Allow the agent to write new.txt (60 lines)?" in plain
    assert "row 0" in plain and f"row {PREVIEW_LINES - 1}" in plain
    assert f"row {PREVIEW_LINES}\n" not in plain.replace("\r", "")
    assert f"… {60 - PREVIEW_LINES} more lines of the new file not shown" in plain
    child.sendline("y")
    child.expect(r"y/n")
    asked = ANSI.sub("", child.before)
    assert "Allow the agent to run the command" in asked and "echo second-line" in asked
    child.sendline("n")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0


def test_live_view_shows_a_failing_commands_last_lines(folder: Path, tmp_path: Path) -> None:
    command = "python3 -c \"import sys; [print(f'out {i}') for i in range(30)]; sys.exit(1)\""
    model = script(tmp_path, [call("r1", "run_command", command=command)])
    done = cli(
        "run", "Test", "-w", str(folder), "-m", model, "--allow", "run_command", cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "! run_command" in out and "exit code 1" in out
    assert "out 29" in out and "out 22" in out  # the last lines, where an error is
    assert "out 5\n" not in out
    assert "(… 22 lines before)" in out


def test_live_view_shows_a_tool_results_first_lines(folder: Path, tmp_path: Path) -> None:
    (folder / "words.txt").write_text("alpha\nbeta\nalpha2\ngamma\nalpha3\nalpha4\n")
    model = script(tmp_path, [call("r1", "run_command", command="grep -n alpha words.txt")])
    done = cli(
        "run", "Find", "-w", str(folder), "-m", model, "--allow", "run_command", cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr
    assert "✓ run_command grep -n alpha words.txt" in done.stdout
    assert "1:alpha" in done.stdout and "3:alpha2" in done.stdout and "5:alpha3" in done.stdout
    assert "(+1 line)" in done.stdout


# -- case 2: advice that is true and usable ------------------------------------------------------


def _logged_run(folder: Path, tmp_path: Path, log: Path) -> None:
    model = script(tmp_path, [call("c1", "read_file", path="hello.txt")], name="first.json")
    done = cli(
        "run", "Read it", "-w", str(folder), "-m", model, "--session", str(log), cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr


def test_corrupt_session_advice_names_run_repair_which_resumes_losing_nothing(
    folder: Path, tmp_path: Path
) -> None:
    log = tmp_path / "mid.jsonl"
    _logged_run(folder, tmp_path, log)
    lines = log.read_bytes().splitlines(keepends=True)
    broken = b'{"type": "message", "message": {"role": "us\n'
    log.write_bytes(b"".join([*lines[:5], broken, *lines[5:]]))
    model = script(tmp_path, name="second.json")
    args = ["run", "Go on", "-w", str(folder), "-m", model, "--session", str(log)]
    refused = cli(*args, cwd=tmp_path)
    assert refused.returncode == 1
    message = flat(refused.stderr)
    assert "strict=False" not in message
    assert "add --repair to this command" in message and f"check {log} --fix" in message
    repaired = cli(*args, "--repair", cwd=tmp_path)
    assert repaired.returncode == 0, repaired.stderr
    assert f"Moved 1 unreadable line(s) of {log} (line 6) to {log}.unreadable" in flat(
        repaired.stdout
    )
    assert (tmp_path / "mid.jsonl.unreadable").read_bytes() == broken  # nothing lost
    assert log.read_bytes().startswith(b"".join(lines))  # every other line, unchanged
    checked = cli("check", str(log), cwd=tmp_path)
    assert checked.returncode == 0, checked.stdout


def test_check_fix_moves_unreadable_lines_aside_and_checks_the_rest(
    folder: Path, tmp_path: Path
) -> None:
    log = tmp_path / "run.jsonl"
    _logged_run(folder, tmp_path, log)
    with log.open("ab") as handle:
        handle.write(b"not json\n")
    plain = cli("check", str(log), cwd=tmp_path)
    assert plain.returncode == 1 and f"check {log} --fix" in flat(plain.stdout)
    fixed = cli("check", str(log), "--fix", cwd=tmp_path)
    assert fixed.returncode == 0, fixed.stdout
    assert (tmp_path / "run.jsonl.unreadable").read_bytes() == b"not json\n"


def test_a_second_check_fix_adds_to_the_unreadable_file_losing_nothing(
    folder: Path, tmp_path: Path
) -> None:
    log = tmp_path / "run.jsonl"
    _logged_run(folder, tmp_path, log)
    side = tmp_path / "run.jsonl.unreadable"
    for bad in (b"first bad line\n", b"second bad line\n"):
        with log.open("ab") as handle:
            handle.write(bad)
        fixed = cli("check", str(log), "--fix", cwd=tmp_path)
        assert fixed.returncode == 0, fixed.stdout
    assert side.read_bytes() == b"first bad line\nsecond bad line\n"  # both, in order


@pytest.mark.parametrize(
    ("cut_after", "closed_as"),
    [("final_answer", "done"), ("tool_calls", "aborted")],
    ids=["after_the_last_state_change", "mid_run"],
)
def test_check_and_resume_agree_on_how_an_unended_run_is_closed(
    folder: Path, tmp_path: Path, cut_after: str, closed_as: str
) -> None:
    log = tmp_path / "torn.jsonl"
    _logged_run(folder, tmp_path, log)
    lines = log.read_bytes().splitlines(keepends=True)
    last = next(i for i, line in enumerate(lines) if f'"label":"{cut_after}"'.encode() in line)
    log.write_bytes(b"".join(lines[: last + 1]))  # the process died before the run's end line
    checked = cli("check", str(log), cwd=tmp_path)
    assert checked.returncode == 1
    said = flat(checked.stdout)
    if closed_as == "done":
        assert "resume records its end as 'done'" in said and "as aborted" not in said
    else:
        assert "resume records it as aborted" in said
    model = script(tmp_path, name="second.json")
    resumed = cli(
        "run", "Go on", "-w", str(folder), "-m", model, "--session", str(log), cwd=tmp_path
    )
    assert resumed.returncode == 0, resumed.stderr
    ends = [r.body["state"] for r in read_session(log).records if r.type == "run_end"]
    assert ends[0] == closed_as  # what resume wrote for the unended run: what check said


@pytest.mark.parametrize("stopped_in", ["failed", "awaiting_approval"])
def test_check_and_resume_agree_on_a_run_torn_after_it_stopped_short_of_done(
    folder: Path, tmp_path: Path, stopped_in: str
) -> None:
    # A run returns in any of the run stops, not only `done`: torn after the machine reached
    # `failed` (a model error) or `awaiting_approval` (a deferred call), its end is that state.
    log = tmp_path / "torn.jsonl"
    if stopped_in == "failed":
        steps = [{"error": {"type": "invalid_request_error", "message": "bad"}, "status_code": 400}]
        (tmp_path / "first.json").write_text(json.dumps(steps))
        model, first_exit = f"script:{tmp_path / 'first.json'}", 1
    else:  # no terminal to ask and a session log: the call waits for a person's decision
        model = script(tmp_path, [call("w1", "write_file", path="new.txt", content="x")],
                       name="first.json")  # fmt: skip
        first_exit = 4
    first = cli("run", "Go", "-w", str(folder), "-m", model, "--session", str(log), cwd=tmp_path)
    assert first.returncode == first_exit, first.stderr
    lines = log.read_bytes().splitlines(keepends=True)
    assert json.loads(lines[-1])["type"] == "run_end" and json.loads(lines[-1])["state"] == (
        stopped_in
    )
    log.write_bytes(b"".join(lines[:-1]))  # the process died before the run's end line
    checked = cli("check", str(log), cwd=tmp_path)
    assert checked.returncode == 1
    said = flat(checked.stdout)
    assert f"resume records its end as '{stopped_in}'" in said and "as aborted" not in said
    copy = tmp_path / "copy.jsonl"  # check --fix closes it as resume would
    copy.write_bytes(log.read_bytes())
    fixed = cli("check", str(copy), "--fix", cwd=tmp_path)
    assert fixed.returncode == 0, fixed.stdout
    assert f"recorded the end of the run the process died in as '{stopped_in}'" in flat(
        fixed.stdout
    )
    assert [r.body["state"] for r in read_session(copy).records if r.type == "run_end"] == [
        stopped_in
    ]
    then = script(tmp_path, name="second.json")
    if stopped_in == "failed":
        resumed = cli("run", "Go on", "-w", str(folder), "-m", then, "--session", str(log),
                      cwd=tmp_path)  # fmt: skip
    else:
        resumed = cli("approve", str(log), "--call", "w1", "-w", str(folder), "-m", then,
                      cwd=tmp_path)  # fmt: skip
    assert resumed.returncode == 0, resumed.stderr
    ends = [r.body["state"] for r in read_session(log).records if r.type == "run_end"]
    assert ends == [stopped_in, "done"]  # what resume wrote for the unended run: what check said


def test_ctrl_c_at_a_prompt_is_recorded_as_an_interrupt_not_a_denial(
    folder: Path, tmp_path: Path
) -> None:
    log = tmp_path / "run.jsonl"
    model = script(tmp_path, [call("w1", "write_file", path="after.txt", content="x")])
    child = spawn(["run", "Write", "-w", str(folder), "-m", model, "--session", str(log)], tmp_path)
    child.expect(r"y/n")
    child.sendintr()
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 130  # aborted
    data = read_session(log)
    assert data.state is not None and data.state.value == "aborted"
    result = next(m for m in data.messages if m.role == "tool_result")
    assert "Interrupted by the user (Ctrl-C)" in result.text
    assert "declined to let you" not in result.text
    assert not (folder / "after.txt").exists()


def test_replay_and_the_live_view_mark_a_failing_command_alike(
    folder: Path, tmp_path: Path
) -> None:
    log = tmp_path / "run.jsonl"
    model = script(tmp_path, [call("r1", "run_command", command="exit 1")])
    live = cli(
        "run", "Fail", "-w", str(folder), "-m", model, "--yes", "--session", str(log), cwd=tmp_path
    )
    assert "! run_command exit 1 — exit code 1" in live.stdout
    replay = cli("replay", str(log), cwd=tmp_path)
    assert "← ! run_command exit code 1" in replay.stdout
    assert "✓ run_command" not in replay.stdout


# -- case 6: small things a newcomer trips on ----------------------------------------------------


class _ThreadRecordingStream(io.StringIO):
    """A terminal that records which threads write to it."""

    def __init__(self) -> None:
        super().__init__()
        self.writers: set[int] = set()

    def write(self, text: str) -> int:
        self.writers.add(threading.get_ident())
        return super().write(text)

    def isatty(self) -> bool:
        return True


def test_live_view_never_writes_the_terminal_on_the_event_loops_thread() -> None:
    # The cause of the demo's "event subscriber ... took 29 ms" warning: the view printed and
    # refreshed the terminal inside its event handler, on the loop's thread.
    stream = _ThreadRecordingStream()
    console = Console(file=stream, force_terminal=True, width=100)
    view = LiveView(console)
    with view:
        stream.writers.clear()
        for n in range(20):
            view.handle(StateChanged("idle", "awaiting_model", "start", f"step {n}"))
        caller = threading.get_ident()
        view._flush()
        assert caller not in stream.writers
    assert "step 19" in ANSI.sub("", stream.getvalue())


def test_demo_prints_no_slow_subscriber_warning(tmp_path: Path) -> None:
    child = spawn(["demo", "--into", str(tmp_path / "demo"), "--delay", "0"], tmp_path)
    child.expect(pexpect.EOF)
    child.close()
    output = ANSI.sub("", child.before)
    assert child.exitstatus == 0, output
    # The view's own subscriber (its status line) is never the slow one. (On a heavily loaded
    # machine the session log's subscriber can still pass 20 ms: reported separately.)
    assert "LiveView.handle" not in output, output


def test_denial_reasons_are_printed_whole_without_a_terminal(folder: Path, tmp_path: Path) -> None:
    model = script(tmp_path, [call("w1", "write_file", path="x.txt", content="x")])
    done = cli("run", "Write", "-w", str(folder), "-m", model, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "The user can allow it by running again with --yes or --allow write_file." in flat(
        done.stdout
    )
    assert "…" not in done.stdout


def test_json_into_a_closed_pipe_exits_quietly(folder: Path, tmp_path: Path) -> None:
    # The command waits for a file the test creates after closing the pipe, so the run still
    # has events to write when its reader is gone.
    model = script(
        tmp_path, [call("r1", "run_command", command="while [ ! -e go ]; do sleep 0.05; done")]
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", CODE, "run", "Wait", "-w", str(folder), "-m", model, "--yes",
         "--no-sandbox", "--json"],
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert proc.stdout is not None and proc.stderr is not None
    first = json.loads(proc.stdout.readline())
    assert first["type"] == "run_start"
    proc.stdout.close()  # `| head -1`
    (folder / "go").touch()
    errors = proc.stderr.read().decode()
    assert proc.wait(timeout=120) in (0, 141)
    assert "Traceback" not in errors and "BrokenPipeError" not in errors, errors


def test_json_into_a_closed_pipe_aborts_the_run_before_its_next_call(
    folder: Path, tmp_path: Path
) -> None:
    # `... --json | head -1` stops the run as `git log | head` stops git: once the reader is
    # gone, no later tool call runs (here a write the model asks for in its next turn).
    log = tmp_path / "run.jsonl"
    model = script(
        tmp_path,
        [call("r1", "run_command", command="while [ ! -e go ]; do sleep 0.05; done")],
        [call("w1", "write_file", path="marker.txt", content="ran after the pipe closed")],
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", CODE, "run", "Wait", "-w", str(folder), "-m", model, "--yes",
         "--no-sandbox", "--json", "--session", str(log)],
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert proc.stdout is not None and proc.stderr is not None
    assert json.loads(proc.stdout.readline())["type"] == "run_start"
    proc.stdout.close()  # `| head -1`
    (folder / "go").touch()
    errors = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 141, errors  # as a shell reports SIGPIPE
    assert not (folder / "marker.txt").exists()
    data = read_session(log)
    assert data.state is not None and data.state.value == "aborted"
    ends = [r.body for r in read_session(log).records if r.type == "run_end"]
    assert len(ends) == 1 and ends[0]["state"] == "aborted"
    assert PIPE_CLOSED in json.dumps(ends[0]), ends[0]


def test_readme_states_run_command_confinement_once_and_truly() -> None:
    text = " ".join(documentation_text().split())
    assert "is **not** confined to `DIR`" not in text
    assert "sandboxed (the default where `bwrap` works) it writes only inside `DIR`" in text


def test_readme_examples_write_session_logs_of_their_own_names() -> None:
    blocks = re.findall(r"^```python\n(.*?)^```", documentation_text(), re.M | re.S)
    names = [name for block in blocks for name in re.findall(r'session="([^"]+)"', block)]
    assert names and len(names) == len(set(names)), names


def test_readme_gives_the_test_commands_timing_on_two_cores() -> None:
    """The README links the suite's time on two cores to the benchmarks page, where it is stated
    (figures live in one place)."""
    readme = README.read_text(encoding="utf-8")
    assert "on two cores ([its time](docs/benchmarks.md#the-test-suite-and-the-oracle))" in readme
    benchmarks = (README.parent / "benchmarks" / "README.md").read_text(encoding="utf-8")
    section = benchmarks.split("## The test suite and the oracle", 1)[1].split("\n## ", 1)[0]
    assert re.search(
        r"whole suite \(the README's test command.*?\d+\s+minutes on two cores", section, re.S
    )
