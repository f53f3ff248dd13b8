"""A worker process for the crash test: ``python durable_child.py DB RUN_ID``.

Launches DBOS on DB as executor ``crash-worker`` (a relaunch recovers the run it left PENDING),
runs (or, after a crash, waits for the recovered) run RUN_ID of `durable_agents.batch_agent`,
and prints its result as one JSON line."""

from __future__ import annotations

import asyncio
import json
import sys

from durable_agents import batch_agent

from statemachine_agent.durable import encode_result, launch, run, shutdown


async def main(db: str, run_id: str) -> None:
    await launch(db, batch_agent, executor_id="crash-worker", poll_seconds=0.1)
    try:
        result = await run("Use both tools.", run_id=run_id)
        print(json.dumps(encode_result(result)), flush=True)
    finally:
        shutdown()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2]))
