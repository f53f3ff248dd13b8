"""The README's short tour: an offline agent with one tool and a scripted model."""

from statemachine_agent import Agent, tool
from statemachine_agent.models import ScriptedModel


@tool
def list_files() -> str:
    """List the files in the workspace."""
    return "README.md, src/index.ts"


model = ScriptedModel(
    [
        {
            "content": [{"type": "tool_use", "id": "t1", "name": "list_files", "input": {}}],
            "stop_reason": "tool_use",
        },
        {
            "content": [
                {"type": "text", "text": "The workspace contains README.md and src/index.ts."}
            ],
            "stop_reason": "end_turn",
        },
    ]
)

if __name__ == "__main__":
    agent = Agent(model, tools=[list_files], max_turns=20)
    result = agent.run_sync("List the files in the workspace")
    print(result.state, result.text)
