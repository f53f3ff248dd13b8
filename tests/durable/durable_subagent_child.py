"""A worker process for the sub-agent crash test: ``python durable_subagent_child.py DB RUN_ID``
(as ``durable_child.py``, with `durable_subagents.parent_agent`)."""

from __future__ import annotations

import asyncio
import json
import sys

from durable_subagents import parent_agent

from statemachine_agent.durable import encode_result, launch, run, shutdown


async def main(db: str, run_id: str) -> None:
    await launch(db, parent_agent, executor_id="subagent-worker", poll_seconds=0.1)
    try:
        result = await run("Research otters.", run_id=run_id)
        print(json.dumps(encode_result(result)), flush=True)
    finally:
        shutdown()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2]))
