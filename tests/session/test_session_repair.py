"""The cases handed over by issue 4 ("Session log"), one named test each (case 4, the crash test,
is in test_session_crash.py; case 2 kills a real process, hang_child.py)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from statemachine_agent import (
    Agent,
    AssistantMessage,
    State,
    TextBlock,
    ToolCallBlock,
    ToolExecutionEnd,
    ToolResultMessage,
    UserMessage,
    tool,
)
from statemachine_agent._messages import MESSAGE_ADAPTER, Message
from statemachine_agent.models import ScriptedModel
from statemachine_agent.session import (
    FORMAT,
    NO_RESULT_RECORDED,
    VERSION,
    compact_history,
    kept_window_start,
    read_session,
)
from statemachine_agent.testing import assert_valid_history
from statemachine_agent.testing.steps import call, text_response, tool_response

from .killing import LogLines, complete_lines, load_script, marker_counts, run_and_kill

ISSUE_TEXT = (
    "no result recorded: the run ended before this call finished; it may or may not have run; "
    "check before retrying"
)


HANG_CHILD = Path(__file__).with_name("hang_child.py")
hang_child = load_script(HANG_CHILD)


def write_log(path: Path, messages: list[Message]) -> None:
    """A log as a process that died right after logging ``messages`` leaves it."""
    lines: list[dict[str, Any]] = [
        {"type": "header", "format": FORMAT, "version": VERSION, "model": "m", "tools": []}
    ]
    lines.append({"type": "run_start", "time": 0})
    for message in messages:
        lines.append(
            {"type": "message", "message": MESSAGE_ADAPTER.dump_python(message, mode="json")}
        )
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))


def close(agent: Agent) -> None:
    """Close the agent's log: a log has one writer at a time (its lock)."""
    assert agent.session is not None
    agent.session.close()


def results_in_log(path: Path, call_id: str) -> int:
    count = 0
    for line in path.read_text().splitlines():
        body = json.loads(line)
        if body.get("message", {}).get("tool_call_id") == call_id:
            count += 1
    return count


INSPECT = UserMessage("inspect config")
READING = AssistantMessage(
    content=[
        TextBlock(text="Reading."),
        ToolCallBlock(id="toolu_cfg", name="read_file", input={"path": "cfg.yml"}),
    ],
    stop_reason="tool_use",
)


@tool
def read_file(path: str) -> str:
    """Read a file."""
    return f"contents of {path}"


def test_the_repair_result_text_is_the_documented_one() -> None:
    assert NO_RESULT_RECORDED == ISSUE_TEXT


async def test_a_dangling_call_is_answered_first_after_its_assistant_message(
    tmp_path: Path,
) -> None:
    log = tmp_path / "s.jsonl"
    write_log(log, [INSPECT, READING])
    model = ScriptedModel([text_response("cfg.yml could not be confirmed; checking again.")])
    agent = Agent.resume(log, model=model, tools=[read_file])

    assert [m.role for m in agent.messages] == ["user", "assistant", "tool_result"]
    repair = agent.messages[2]
    assert isinstance(repair, ToolResultMessage)
    assert repair.tool_call_id == "toolu_cfg" and repair.tool_name == "read_file"
    assert repair.is_error and repair.text == ISSUE_TEXT
    assert agent.state is State.ABORTED  # the run the process died in
    assert_valid_history(agent.messages, request=True)

    # "continue": a run without a prompt sends a valid request ending with the repaired result.
    result = await agent.run()
    assert result.state is State.DONE
    request = model.requests[0].messages
    assert_valid_history(request, request=True)
    assert list(request) == [INSPECT, READING, repair]

    # A second load adds no second result.
    assert results_in_log(log, "toolu_cfg") == 1
    again = read_session(log)
    assert again.repairs == []
    assert again.messages == agent.messages
    close(agent)  # a log has one writer at a time
    resumed = Agent.resume(log, model=ScriptedModel([]), tools=[read_file])
    assert resumed.messages == agent.messages
    assert results_in_log(log, "toolu_cfg") == 1


def test_a_repaired_result_goes_before_a_later_user_message(tmp_path: Path) -> None:
    log = tmp_path / "s.jsonl"
    hello = UserMessage("hello?")
    write_log(log, [INSPECT, READING, hello])
    agent = Agent.resume(log, model=ScriptedModel([]), tools=[read_file])
    assert [m.role for m in agent.messages] == ["user", "assistant", "tool_result", "user"]
    assert agent.messages[2].text == ISSUE_TEXT
    assert agent.messages[3] == hello
    assert_valid_history(agent.messages, request=True)
    size = log.stat().st_size
    close(agent)  # a log has one writer at a time
    again = Agent.resume(log, model=ScriptedModel([]), tools=[read_file])
    assert again.messages == agent.messages
    assert log.stat().st_size == size  # the second load wrote nothing
    assert results_in_log(log, "toolu_cfg") == 1


async def test_a_process_dying_during_a_call_leaves_the_call_answered_on_resume(
    tmp_path: Path,
) -> None:
    """The same case produced by a real agent whose process dies while read_file runs."""
    log = tmp_path / "s.jsonl"
    started = asyncio.Event()

    @tool(name="read_file")
    async def hanging_read(path: str) -> str:
        """Read a file (never finishes)."""
        started.set()
        await asyncio.Event().wait()
        return "unreachable"

    model = ScriptedModel(
        [tool_response(call("read_file", {"path": "cfg.yml"}, id="toolu_cfg"), text="Reading.")]
    )
    agent = Agent(model, tools=[hanging_read], session=log)
    task = asyncio.create_task(agent.run("inspect config"))
    await started.wait()
    assert agent.session is not None
    agent.session.close()  # the process dies here: nothing more reaches the log
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)

    resumed = Agent.resume(log, model=ScriptedModel([text_response("ok")]), tools=[read_file])
    assert [m.role for m in resumed.messages] == ["user", "assistant", "tool_result"]
    assert resumed.messages[1].text == "Reading."
    assert resumed.messages[2].text == ISSUE_TEXT
    assert resumed.state is State.ABORTED
    assert (await resumed.run("continue")).state is State.DONE
    assert_valid_history(resumed.messages)
    assert results_in_log(log, "toolu_cfg") == 1


def test_a_killed_parallel_batch_keeps_finished_results_and_repairs_only_the_hung_call(
    tmp_path: Path,
) -> None:
    """Case 2 with a real kill: hang_child.py runs the batch in a subprocess, which is SIGKILLed
    once the log holds the results of c1 and c2 while c3 hangs; resume runs in this process."""
    log, markers = tmp_path / "s.jsonl", tmp_path / "markers.txt"

    def two_results_logged(lines: LogLines) -> bool:
        logged = {
            line["message"]["tool_call_id"] for line in lines if line["type"] == "tool_result"
        }
        return logged >= {"c1", "c2"}

    assert run_and_kill(HANG_CHILD, log, markers, two_results_logged), "the child did not hang"
    logged = complete_lines(log)
    order = [line["message"]["tool_call_id"] for line in logged if line["type"] == "tool_result"]
    assert order == ["c2", "c1"]  # completion order, each the moment it finished
    assert not any(line["type"] == "run_end" for line in logged)
    ran_at_kill = markers.read_text()
    starts, ends = marker_counts(markers, "start"), marker_counts(markers, "end")
    assert starts["c1"] == starts["c2"] == ends["c1"] == ends["c2"] == 1
    assert starts["c3"] <= 1 and ends["c3"] == 0

    agent = hang_child.make_agent(log, markers)
    assert agent.state is State.ABORTED  # the run the process died in
    results = [m for m in agent.messages if isinstance(m, ToolResultMessage)]
    assert [r.tool_call_id for r in results] == ["c1", "c2", "c3"]  # declaration order
    assert [r.text for r in results] == ["slow 1", "fast 2", ISSUE_TEXT]
    assert [r.is_error for r in results] == [False, False, True]
    assert_valid_history(agent.messages, request=True)
    assert [results_in_log(log, c) for c in ("c1", "c2", "c3")] == [1, 1, 1]
    assert read_session(log).repairs == []  # the repair is in the log: a second load adds nothing

    result = agent.run_sync()  # finish the run: the model sees the kept and repaired results
    assert result.state is State.DONE, result.error
    assert list(agent.model.requests[0].messages[-3:]) == results
    assert agent.messages[-1].text == hang_child.FINAL
    assert_valid_history(agent.messages)
    assert markers.read_text() == ran_at_kill  # no tool ran again after resume
    assert [results_in_log(log, c) for c in ("c1", "c2", "c3")] == [1, 1, 1]


async def test_a_cancelled_parallel_batch_logs_results_in_completion_order(tmp_path: Path) -> None:
    """Case 2 simulated in one process (the log closed, then the run cancelled), observed through
    the agent's events rather than a marker file."""
    log = tmp_path / "s.jsonl"
    finished: list[str] = []
    both_done = asyncio.Event()
    fast_done = asyncio.Event()

    @tool
    async def slow(n: int) -> str:
        """Finishes second: after fast's end event (an order, not a delay)."""
        await fast_done.wait()
        return f"slow {n}"

    @tool
    def fast(n: int) -> str:
        """Finishes first."""
        return f"fast {n}"

    @tool
    async def hang(n: int) -> str:
        """Never finishes."""
        await asyncio.Event().wait()
        return "unreachable"

    def on_event(event: object) -> None:
        if isinstance(event, ToolExecutionEnd):
            finished.append(event.call.id)
            if event.call.id == "c2":
                fast_done.set()
            if len(finished) == 2:
                both_done.set()

    model = ScriptedModel(
        [
            tool_response(
                call("slow", {"n": 1}, id="c1"),
                call("fast", {"n": 2}, id="c2"),
                call("hang", {"n": 3}, id="c3"),
            )
        ]
    )
    agent = Agent(model, tools=[slow, fast, hang], session=log)
    agent.subscribe(on_event)
    task = asyncio.create_task(agent.run("three at once"))
    await both_done.wait()
    assert agent.session is not None
    agent.session.close()  # killed while c3 hangs
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    assert finished[:2] == ["c2", "c1"]
    logged = [json.loads(line) for line in log.read_text().splitlines()]
    order = [b["message"]["tool_call_id"] for b in logged if b["type"] == "tool_result"]
    assert order == ["c2", "c1"]  # completion order, each the moment it finished

    resumed = Agent.resume(log, model=ScriptedModel([]), tools=[slow, fast, hang])
    results = [m for m in resumed.messages if isinstance(m, ToolResultMessage)]
    assert [r.tool_call_id for r in results] == ["c1", "c2", "c3"]  # declaration order
    assert [r.text for r in results] == ["slow 1", "fast 2", ISSUE_TEXT]
    assert [r.is_error for r in results] == [False, False, True]
    assert_valid_history(resumed.messages, request=True)
    assert read_session(log).repairs == []


def test_the_compaction_window_moves_to_a_turn_boundary(tmp_path: Path) -> None:
    t1 = ToolCallBlock(id="t1", name="t", input={})
    t2 = ToolCallBlock(id="t2", name="t", input={})
    history: list[Message] = [
        UserMessage("q"),
        AssistantMessage(content=[t1], stop_reason="tool_use"),
        ToolResultMessage(tool_call_id="t1", tool_name="t", content=[TextBlock(text="r1")]),
        AssistantMessage(content=[t2], stop_reason="tool_use"),
        ToolResultMessage(tool_call_id="t2", tool_name="t", content=[TextBlock(text="r2")]),
        AssistantMessage(content=[TextBlock(text="done")], stop_reason="end_turn"),
        UserMessage("next"),
    ]
    assert_valid_history(history)
    # The window of 4 would open on t2's call (a response right after t1's result: a turn
    # boundary, issue 13); a window of 3 would open on t2's result, so it moves to "done".
    assert kept_window_start(history, keep_last=4) == 3
    assert kept_window_start(history, keep_last=3) == 5
    compacted = compact_history(history, "asked q; ran t twice; done", keep_last=3)
    assert [m.role for m in compacted] == ["user", "assistant", "user"]
    assert compacted[1:] == history[5:]
    assert not any(isinstance(m, ToolResultMessage) for m in compacted)  # no orphan result
    kept = compact_history(history, "asked q; ran t once", keep_last=4)
    assert kept[1:] == history[3:]  # t2's call and its result stay together
    assert_valid_history(compacted, request=True)
