"""Hand a dead worker's run to a live one at once, not after the sticky timeout.

Temporal keeps each run's workflow cached on the worker that ran its last
workflow task, and sends the run's next task to that worker's own (sticky)
queue. When the worker is killed in the middle of a call, the call is retried
on another worker after its heartbeat timeout, but the workflow task that
follows the retried call still goes to the dead worker's queue and waits out
the sticky schedule-to-start timeout there (2 s by default) before any worker
may take it.

So an attempt that starts because the previous attempt timed out (the
previous worker died, or was too stalled to beat) asks the server to forget
the run's stickiness: the next workflow task goes to the shared task queue,
where a live worker takes it and replays the history, as it would have to
after the sticky timeout anyway. An attempt retried after an ordinary error
keeps the stickiness: its worker is alive and still holds the run.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import activity
from temporalio.api.common.v1 import WorkflowExecution
from temporalio.api.workflowservice.v1 import DescribeWorkflowExecutionRequest, ResetStickyTaskQueueRequest

# The call's completion waits for this at most so long.
_RPC_TIMEOUT = timedelta(seconds=3)


async def release_stickiness_after_timeout() -> bool:
    """True when the run's stickiness was reset; never raises (an optimisation only)."""
    info = activity.info()
    if info.is_local or info.attempt <= 1:
        return False
    try:
        service = activity.client().workflow_service
        execution = WorkflowExecution(workflow_id=info.workflow_id, run_id=info.workflow_run_id)
        description = await service.describe_workflow_execution(
            DescribeWorkflowExecutionRequest(namespace=info.workflow_namespace, execution=execution), timeout=_RPC_TIMEOUT)
        previous = next((p.last_failure for p in description.pending_activities
                         if p.activity_id == info.activity_id), None)
        if previous is None or not previous.HasField("timeout_failure_info"):
            return False
        await service.reset_sticky_task_queue(
            ResetStickyTaskQueueRequest(namespace=info.workflow_namespace, execution=execution), timeout=_RPC_TIMEOUT)
        activity.logger.info("the previous attempt of this call timed out: the run's next workflow task "
                             "goes to the shared task queue (its worker may be dead)")
        return True
    except Exception as exc:  # the run only waits for the sticky timeout, as without this
        activity.logger.warning(f"could not hand the run over from a timed-out attempt's worker: {exc}")
        return False
