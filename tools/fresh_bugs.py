"""Issue 40, item 3: sixteen fresh protocol-breaking bugs, written from the package's code alone.

The list was written by a helper who did not read ``tests/`` nor the older bug lists
(``tools/plant_bugs.py``'s ``BUGS``, ``tools/mutate.py``'s mutations): each bug is one exact
search/replace in the package, the kind a maintainer writes by accident (an off-by-one, a wrong
comparison, a swapped call, a wrong variable, a dropped branch), and each changes what a user
of the loop sees (a result's text, its order or its call, a stop state, a limit, a resumed
history). Each was first confirmed by hand, with a throwaway script outside the repository, to
change such an outcome.

Moved since the list was written (same bug, same place, new spelling): bug 13's
``compact_history`` now lives in ``_cuts.py`` (it was ``session/_compaction.py``); the other
fifteen edits apply to main as written (each ``old`` text occurs exactly once).

Plant them with ``tools/plant_bugs.py --bugs fresh`` (``tests/property`` alone, profile ``ci``)
or ``tools/plant_bugs.py --bugs fresh --full`` (the README's whole test command, with ``-x``).

Figures AFTER the property suite was made to bite on the survivors' kinds (branch prop40, commit
c70b32b's package and tests; 2026-12-02, 2 shared cores, load average 6-9): the oracle's new
scenario classes are ``readdressed_result`` (a tool or an after hook returns a result message
built for another call id), ``request_after_pause`` (every request of every scenario is compared
with the oracle's projection of the history it was sent with, ``_oracle/requests.py``),
``compaction`` (an agent compacting mid-run, keeping two turns: ``RunResult.new_messages``,
``messages``, ``usage`` checked), ``reopen`` / ``reopen_awaiting_approval`` (the session log
closed and resumed whole after every run: the same history, state and pending ids).

(a, after) ``tests/property`` alone, profile ``ci``: 16 of 16 caught (unplanted: passed in
214.5 s; before the change the same command took 70.6 s unplanted at a lighter load, 128 s at
this load for the suite of 40 tests). Columns as below::

    1  caught      58.4    42.7  2/2/1  test_the_engine_matches_the_oracle
    2  caught      34.9    17.5  1/1/0  test_the_engine_matches_the_oracle
    3  caught      43.5    28.1  1/2/2  test_the_engine_matches_the_oracle
    4  caught     170.1    18.0  3/3/2  TestPlainAgent::runTest
    5  caught      48.7    28.6  3/2/2  test_the_engine_matches_the_oracle           (new)
    6  caught      25.4    13.8  1/2/1  test_the_engine_matches_the_oracle
    7  caught      44.1    31.2  2/3/0  test_the_engine_matches_the_oracle           (new)
    8  caught      41.0    26.9  1/1/2  test_the_engine_matches_the_oracle
    9  caught      18.5     6.7  1/1/0  test_the_engine_matches_the_oracle
   10  caught      69.1       -  ?      test_approval_decisions_approve_edit_deny_and_pa
   11  caught      28.4    17.6  2/2/2  test_the_engine_matches_the_oracle
   12  caught      35.3    22.3  2/2/2  test_the_engine_matches_the_oracle
   13  caught      83.8       -  ?      test_after_a_mid_run_compaction_new_messages_... (named)
   14  caught      78.3       -  ?      test_after_a_mid_run_compaction_new_messages_... (new, named)
   15  caught      22.7    13.8  2/2/2  test_the_engine_matches_the_oracle           (new)
   16  caught      16.7     8.8  3/2/2  test_the_engine_matches_the_oracle           (new)

Caught before: 11 (1-4, 6, 8-13). Caught after only: 5, 7, 15, 16 by the generated scenarios
(the readdressed-result, request-projection and reopen classes), 14 by the named compaction
test of ``tests/property/test_oracle_addressing_and_resume.py`` (the generated ``compaction`` class checks
the same rule but did not reach 14's case within the ci budget before -x stopped at the named
test; its first compacting run's cut must fall before a later run's prompt). By hand, each of
5, 7, 14, 15, 16 fails its named test in ``tests/property/test_oracle_addressing_and_resume.py``.

(b) the whole suite (``--full``): not run (the session's time went to (a)).

BEFORE (the first measurement, on the package of commit 084e6be, branch w40's base; harness
``tools/plant_bugs.py --bugs fresh --show``, 2 shared cores, load average 6-9).

(a) ``tests/property`` alone, profile ``ci``: 11 of 16 measured caught
(unplanted: tests/property passed in 169.2 s).
Columns: number, outcome, wall seconds, the failing test's own seconds, shrunk example size
(runs/responses/calls), first failing test::

    1  caught     121.9    44.5  2/2/0           test_the_engine_matches_the_oracle_through_the_re
    2  caught      40.0    24.6  1/2/1           test_the_engine_matches_the_oracle
    3  caught      35.0    18.2  1/2/2           test_the_engine_matches_the_oracle
    4  caught     157.5    24.9  3/3/2           TestPlainAgent::runTest
    5  SURVIVED   127.7       -                  -
    6  caught      29.0    16.2  1/2/1           test_the_engine_matches_the_oracle
    7  SURVIVED   125.5       -                  -
    8  caught      59.8    44.1  1/2/2           test_the_engine_matches_the_oracle
    9  caught      19.4     7.0  1/1/0           test_the_engine_matches_the_oracle
    10  caught      67.6       -  ?               test_approval_decisions_approve_edit_deny_and_pa
    11  caught      28.5    12.9  3/2/3           test_the_engine_matches_the_oracle
    12  caught      27.3    11.6  3/2/2           test_the_engine_matches_the_oracle
    13  caught     168.7    93.9  1/2/2           test_with_compaction_on_any_script_leaves_a_vali
    14  SURVIVED    54.4       -                  -
    15  SURVIVED    54.9       -                  -
    16  SURVIVED    60.9       -                  -

(b) the whole suite (``--full``): not run in the measuring session (its time ran out after (a));
run ``tools/plant_bugs.py --bugs fresh --full 5`` plus a sample of caught ones to fill it in.

"""

from __future__ import annotations

from plant_bugs import Bug, Edit


def _e(file: str, old: str, new: str, why: str) -> tuple[tuple[Edit, ...], str]:
    return (Edit(file, old, new),), why


_FRESH: tuple[tuple[int, str, tuple[tuple[Edit, ...], str]], ...] = (
    # -- engine -----------------------------------------------------------------------------
    (
        1,
        "follow-up delivered before queued steering",
        _e(
            "_effects.py",
            "    run.deliver_steering() or run.deliver_follow_up()\n",
            "    run.deliver_follow_up() or run.deliver_steering()\n",
            "with steering and a follow-up queued together when the model would stop, the "
            "follow-up is sent first and the steering message a turn later",
        ),
    ),
    (
        2,
        "turn cap checked one turn late before a continuation",
        _e(
            "_guards.py",  # was _machine.py (issue 35 split the guards out)
            "    return data.turns + 1 >= data.max_turns and (\n",
            "    return data.turns >= data.max_turns and (\n",
            "a pause_turn / max_tokens continuation or queued input at the last allowed turn "
            "sends one more request: the run makes max_turns + 1 turns",
        ),
    ),
    # -- execution --------------------------------------------------------------------------
    (
        3,
        "a tool stopping through raise_if_aborted counted as its own cancellation",
        _e(
            "_execution.py",
            "            if self._signal.aborted:  # a tool that stopped on the abort by raising\n"
            "                return text_result(call, INTERRUPTED, is_error=True)\n",
            "",
            "a tool that stops cooperatively (ctx.signal.raise_if_aborted()) is answered "
            '"CancelledError: the tool raised asyncio.CancelledError itself" and a warning is '
            'logged, instead of "Interrupted while running"',
        ),
    ),
    (
        4,
        "sequential batch goes on after a terminating denial",
        _e(
            "_execution.py",
            "                if self._signal.aborted or self._terminated:\n",
            "                if self._signal.aborted:\n",
            "in a sequential batch, the calls after one denied with Deny(terminate=True) still "
            "run (their results are the tools' output, not \"an earlier call of this batch "
            'ended the run")',
        ),
    ),
    (
        5,
        "a returned result message keeps its own call id",
        _e(
            "_call_results.py",  # was _execution.py (issue 35 split the result conversions out)
            '                "tool_call_id": call.id,\n                "tool_name": call.name,\n',
            '                "tool_name": call.name,\n',
            "a ToolResultMessage returned by a tool or an after_tool_call hook keeps the id it "
            "was built with: the call is answered under another call's id (or not at all)",
        ),
    ),
    # -- protocol / projection --------------------------------------------------------------
    (
        6,
        "dangling-call repair answers calls that have results",
        _e(
            "_protocol.py",
            "                for call in message.tool_calls\n"
            "                if call.id not in answered\n",
            "                for call in message.tool_calls\n",
            "a run that ends right after a tool batch (max_turns, should_continue False) gets a "
            "second, error result for every call already answered",
        ),
    ),
    (
        7,
        "a pause_turn continuation replaces the paused response in the request",
        _e(
            "_context.py",
            "                previous.stop_reason not in INCOMPLETE_STOP_REASONS\n",
            "                previous.stop_reason in INCOMPLETE_STOP_REASONS\n",
            "consecutive responses (a pause_turn and its continuation) are not joined: the "
            "paused response's content is dropped from every later request",
        ),
    ),
    # -- limits -----------------------------------------------------------------------------
    (
        8,
        "max_tool_calls checked per call instead of per batch",
        _e(
            "_limits.py",
            "tool_calls + wanted > self.max_tool_calls",
            "tool_calls + 1 > self.max_tool_calls",
            "a batch that takes the run past max_tool_calls is run in full (the limit only "
            "stops the next batch)",
        ),
    ),
    (
        9,
        "max_requests off by one",
        _e(
            "_limits.py",
            "requests + 1 > self.max_requests",
            "requests > self.max_requests",
            "a run with max_requests=N sends N + 1 (paid) requests before it stops in max_turns",
        ),
    ),
    # -- approval ---------------------------------------------------------------------------
    (
        10,
        "decisions applied in the order given, not by call id",
        _e(
            "_effects.py",
            "    for call in pending.calls:\n        decision = decisions.get(call.id)\n",
            "    for call, decision in zip(pending.calls, decisions.values(), strict=False):\n",
            "run(decisions={...}) applies the first decision given to the first pending call: "
            "deciding only the second call (or listing them in another order) approves or "
            "denies the wrong call",
        ),
    ),
    (
        11,
        "a decided batch's results in the order they were held",
        _e(
            "_effects.py",
            "    _append_results(run, [held[c.id] for c in response.tool_calls])\n",
            "    _append_results(run, list(held.values()))\n",
            "when an earlier call waited for approval and a later one already ran, the results "
            "are appended later-call first: out of declaration order",
        ),
    ),
    (
        12,
        "an approval's edited arguments ignored",
        _e(
            "_effects.py",
            "call.arguments if decision.arguments is None else decision.arguments",
            "call.arguments if decision.arguments is None else call.arguments",
            "Approve(arguments={...}) runs the call with the model's arguments, not the "
            "person's edit",
        ),
    ),
    # -- compaction -------------------------------------------------------------------------
    (
        13,
        "compaction drops the first kept message",
        _e(
            "_cuts.py",  # was session/_compaction.py; compact_history moved into the core
            "UserMessage(SUMMARY_PREFIX + summary), *messages[start:]]",
            "UserMessage(SUMMARY_PREFIX + summary), *messages[start + 1 :]]",
            "the first message of the kept window (a prompt, or a response whose results "
            "follow) is lost: the history loses a message or the compaction fails",
        ),
    ),
    (
        14,
        "a run's new messages shifted after a mid-run compaction",
        _e(
            "_compacting.py",
            "    run.start = max(1, run.start - start + 1)\n",
            "    run.start = max(1, run.start - start)\n",
            "after automatic compaction, RunResult.new_messages starts one message early (it "
            "holds a message of an earlier run, or the summary)",
        ),
    ),
    # -- session log / resume ---------------------------------------------------------------
    (
        15,
        "a resumed log loses its batch waiting for decisions",
        _e(
            "session/_read.py",
            "        if waiting and index == len(spine) - 1 and message.tool_calls:\n",
            "        if waiting and index == len(spine) and message.tool_calls:\n",
            "Agent.resume of a log that ended in awaiting_approval has no pending calls: they "
            'are answered "no result recorded" and the decision cannot be given',
        ),
    ),
    (
        16,
        "the log writes a deferred call's placeholder, not the results",
        _e(
            "session/_log.py",  # the sub-agents change spelled the test the other way round
            "            if awaits_decision(finished):\n                return None\n",
            "            if not awaits_decision(finished):\n                return None\n",
            "results are no longer written the moment each call ends (a crash mid-batch loses "
            'finished results, which a resume then answers "no result recorded"), and a '
            '"Awaiting approval" placeholder is logged as a deferred call\'s result',
        ),
    ),
)

BUGS: tuple[Bug, ...] = tuple(Bug(n, name, edits) for n, name, (edits, _why) in _FRESH)
"""The sixteen fresh bugs, in `tools/plant_bugs.py`'s format."""

WHY: dict[int, str] = {n: why for n, _name, (_edits, why) in _FRESH}
"""What a user would observe, per bug number."""

AREAS: dict[int, str] = {
    **dict.fromkeys((1, 2), "engine"),
    **dict.fromkeys((3, 4, 5), "execution"),
    **dict.fromkeys((6, 7), "protocol/projection"),
    **dict.fromkeys((8, 9), "limits"),
    **dict.fromkeys((10, 11, 12), "approval"),
    **dict.fromkeys((13, 14), "compaction"),
    **dict.fromkeys((15, 16), "session log/resume"),
}
