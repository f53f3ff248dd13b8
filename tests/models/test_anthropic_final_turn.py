"""Issue 16, case 3 on the wire: the final turn reaches the Messages API with ``tool_choice``
none, the tools still declared (the history holds their calls) and the instruction in the system
prompt (the real SDK against the local replay server)."""

from __future__ import annotations

from statemachine_agent import FINAL_TURN_PROMPT, Agent, State, tool

from .replay_server import ReplayServer, closing_model, reply

MODEL = "claude-sonnet-4-6"


@tool
def ping() -> str:
    """Answer a ping."""
    return "pong"


async def test_final_turn_sends_tool_choice_none(server: ReplayServer) -> None:
    call = {"type": "tool_use", "id": "toolu_1", "name": "ping", "input": {}}
    server.add(
        reply([call], "tool_use", MODEL),
        reply([{"type": "text", "text": "Pinged."}], "end_turn", MODEL),
    )
    model = closing_model(server, MODEL)
    agent = Agent(model, tools=[ping], system="Be brief.", max_turns=1, final_turn=True)
    result = await agent.run("ping")
    assert (result.state, result.text) == (State.MAX_TURNS, "Pinged.")
    first, final = (r.body for r in server.requests)
    assert "tool_choice" not in first
    assert final["tool_choice"] == {"type": "none"}
    assert [t["name"] for t in final["tools"]] == ["ping"]
    system = final["system"]
    text = system if isinstance(system, str) else "".join(b["text"] for b in system)
    assert text == f"Be brief.\n\n{FINAL_TURN_PROMPT}"
