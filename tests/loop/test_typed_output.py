"""Typed output (``output_type``): what ``output_invalid`` quotes."""

from __future__ import annotations

from pydantic import BaseModel

from statemachine_agent import (
    Agent,
    State,
)
from statemachine_agent.models import ScriptedModel
from statemachine_agent.testing.steps import call, text_response, tool_response


class Invoice(BaseModel):
    """An invoice."""

    number: str
    total: float


async def test_output_invalid_quotes_the_last_validation_error() -> None:
    model = ScriptedModel(
        [
            tool_response(call("final_result", {"number": "A-1", "total": "abc"}, id="o1")),
            tool_response(call("final_result", {"number": "A-1"}, id="o2")),
        ]
    )
    agent = Agent(model, output_type=Invoice, output_retries=1)
    result = await agent.run("Read the invoice.")
    assert result.state is State.FAILED
    assert result.error == (
        "The model gave no valid final result after 2 invalid attempt(s) (output_retries=1); "
        "the last validation error: Invalid arguments for tool 'final_result' (1 error(s)):\n"
        "- total: Field required\n"
        'Arguments received: {"number": "A-1"}\n'
        "Fix the arguments and call the tool again.. Raise output_retries, or check that the "
        "output type's schema is one the model can fill."
    )
    assert "the last error is in the history" not in result.error


async def test_output_invalid_after_a_text_answer_quotes_it() -> None:
    model = ScriptedModel([text_response("The total is 12."), text_response("It is 12, really.")])
    agent = Agent(model, output_type=Invoice, output_retries=1)
    result = await agent.run("Read the invoice.")
    assert result.state is State.FAILED
    assert result.error is not None
    assert "the last answer was text, not a final_result call: 'It is 12, really.'" in result.error


def broken(q: str) -> str:
    """Always fail.

    Args:
        q: anything.
    """
    raise RuntimeError("broken tool says no")


async def test_output_invalid_quotes_final_results_error_not_another_tools() -> None:
    """When ``final_result`` is called beside another tool that fails, ``output_invalid`` quotes
    the last ``final_result`` validation error, never the other tool's error."""
    model = ScriptedModel(
        [
            tool_response(
                call("final_result", {"number": f"A-{n}"}, id=f"o{n}"),
                call("broken", {"q": str(n)}, id=f"b{n}"),
            )
            for n in (1, 2)
        ]
    )
    agent = Agent(model, tools=[broken], output_type=Invoice, output_retries=1)
    result = await agent.run("Read the invoice.")
    assert result.state is State.FAILED, result
    assert result.error is not None
    assert "- total: Field required" in result.error
    assert 'Arguments received: {"number": "A-2"}' in result.error
    assert "broken tool says no" not in result.error
