"""Running the compensations of rolled-back side effects (`rewind rollback --compensate`)."""

from __future__ import annotations

import hashlib
from dataclasses import asdict, dataclass
from typing import Any

from temporalio.client import Client
from temporalio.common import WorkflowIDReusePolicy
from temporalio.exceptions import WorkflowAlreadyStartedError

from workflows.vocabulary.contracts import CompensationOutcome, CompensationRequest
from workflows.vocabulary.wire import COMPENSATION_WORKFLOW


@dataclass
class SideEffect:
    """A side-effecting tool call that completed (read from Temporal history)."""

    step: int
    tool_name: str
    arguments: dict[str, Any]
    output: Any
    idempotency_key: str
    workflow_id: str


def compensation_key(original_key: str) -> str:
    """The compensation's own idempotency key, derived from the effect it undoes."""
    return "comp-" + hashlib.sha256(f"compensate:{original_key}".encode()).hexdigest()[:40]


async def run_compensations(
    client: Client, task_queue: str, run_id: str, branch: str, step: int, effects: list[SideEffect]
) -> list[dict[str, Any]]:
    """Undo `effects` (latest first) in one durable CompensationWorkflow; asking again
    for the same effects returns that workflow's outcome instead of running anything twice."""
    requests = [
        CompensationRequest(
            tool_name=e.tool_name, arguments=e.arguments, output=e.output, original_key=e.idempotency_key,
            compensation_key=compensation_key(e.idempotency_key), run_id=run_id, branch_id=branch, step=e.step,
        )
        for e in effects
    ]
    digest = hashlib.sha256("|".join(r.compensation_key for r in requests).encode()).hexdigest()[:12]
    workflow_id = f"{run_id}--{branch}--compensate-{step}-{digest}"
    try:
        outcomes: list[CompensationOutcome] = await client.execute_workflow(
            COMPENSATION_WORKFLOW, requests, id=workflow_id,
            task_queue=task_queue, result_type=list[CompensationOutcome],
            id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE,
        )
    except WorkflowAlreadyStartedError:
        # The same set of effects is compensated by one workflow: asking again
        # returns that workflow's outcome instead of running anything twice.
        outcomes = await client.get_workflow_handle(workflow_id, result_type=list[CompensationOutcome]).result()
    by_key = {o.original_key: o for o in outcomes}
    return [{**asdict(e), **by_key[e.idempotency_key].model_dump()} for e in effects if e.idempotency_key in by_key]
