"""CompensationWorkflow: undo the side effects of rolled-back steps, durably.

Runs each compensation as an activity, latest effect first, so a crash in the
middle resumes where it stopped; each compensation has its own idempotency
key, so none runs twice.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from workflows.vocabulary.contracts import CompensationOutcome, CompensationRequest
    from workflows.vocabulary.wire import (
        COMPENSATE_TOOL,
        COMPENSATION_WORKFLOW,
        TOOL_QUEUES_PATCH,
        tool_task_queue,
    )


@workflow.defn(name=COMPENSATION_WORKFLOW)
class CompensationWorkflow:
    @workflow.run
    async def run(self, requests: list[CompensationRequest]) -> list[CompensationOutcome]:
        outcomes = []
        routed = workflow.patched(TOOL_QUEUES_PATCH)
        for request in reversed(requests):
            queue = tool_task_queue(workflow.info().task_queue, request.tool_name) if routed else None
            try:
                outcome = await workflow.execute_activity(
                    COMPENSATE_TOOL, request, result_type=CompensationOutcome, task_queue=queue,
                    **({"schedule_to_start_timeout": timedelta(minutes=5)} if routed else {}),
                    start_to_close_timeout=timedelta(minutes=5), heartbeat_timeout=timedelta(seconds=10),
                    retry_policy=RetryPolicy(maximum_attempts=5),
                )
            except ActivityError as err:
                cause = err.cause or err
                outcome = CompensationOutcome(
                    tool_name=request.tool_name, original_key=request.original_key,
                    compensation_key=request.compensation_key, status="failed", error=str(cause),
                )
            outcomes.append(outcome)
        return outcomes
