"""The names a durable run is known by in DBOS: the application, its pinned version, the queue,
the workflow, the message topics and the event. Runs recorded by a worker are recovered by
name, so these strings never change with the code's layout (``WORKFLOW_NAME`` is given to
``DBOS.workflow`` explicitly, not derived from the function's module or ``__qualname__``)."""

from __future__ import annotations

from .. import __version__

APP_NAME = "statemachine-agent"
"""The DBOS application name every worker and client uses."""
APP_VERSION = f"statemachine-agent-{__version__}"
"""The pinned DBOS application version: runs are recovered by workers of the same release."""
QUEUE_NAME = "statemachine-agent-runs"
"""The DBOS queue `submit` puts runs on and workers serve."""
WORKFLOW_NAME = "statemachine_agent.durable.agent_run"
"""The registered name of the run workflow."""
ABORT_TOPIC = "statemachine-agent.abort"
"""The name of an abort request (see `abort`): the key of the workflow attribute that holds its
reason (`ABORT_ATTRIBUTE`, the same string)."""
ABORT_ATTRIBUTE = ABORT_TOPIC
"""The DBOS workflow attribute `abort` sets to the reason; the run's worker reads it."""
DECISION_TOPIC = "statemachine-agent.decisions"
"""The DBOS message topic a run in ``awaiting_approval`` waits on (see `send_decisions`); an
abort is sent there too, so it also reaches a waiting run."""
PENDING_EVENT = "statemachine-agent.pending"
"""The DBOS event holding the calls a run waits for decisions on (empty when it is not
waiting; see `pending`)."""
APPROVAL_TIMEOUT_SECONDS = 7 * 24 * 3600.0
"""How long a run waits for decisions by default (7 days) before it ends ``aborted``."""
