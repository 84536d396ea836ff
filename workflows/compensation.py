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
    from workflows.contracts import CompensationOutcome, CompensationRequest

COMPENSATE_TOOL = "compensate_tool"


@workflow.defn(name="CompensationWorkflow")
class CompensationWorkflow:
    @workflow.run
    async def run(self, requests: list[CompensationRequest]) -> list[CompensationOutcome]:
        outcomes = []
        for request in reversed(requests):
            try:
                outcome = await workflow.execute_activity(
                    COMPENSATE_TOOL, request, result_type=CompensationOutcome,
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
