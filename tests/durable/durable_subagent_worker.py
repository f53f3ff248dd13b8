"""A registered worker serving the queue with `durable_subagents.parent_agent`:
``python durable_subagent_worker.py DB EXECUTOR_ID``. It prints one line once it serves,
``worker ID serving; took over: RUN_ID ...`` (the runs of gone workers it took over), then serves
until it is killed."""

from __future__ import annotations

import asyncio
import sys

from durable_subagents import parent_agent

from statemachine_agent.durable import launch


async def main(db: str, executor_id: str) -> None:
    took = await launch(db, parent_agent, executor_id=executor_id, poll_seconds=0.1, register=True)
    print(f"worker {executor_id} serving; took over: {' '.join(took.run_ids)}", flush=True)
    await asyncio.Event().wait()  # serve until killed


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2]))
