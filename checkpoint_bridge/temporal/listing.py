"""What Temporal's visibility lists of Rewind's runs: one entry per workflow execution
(a branch's workflow, each of its continued-as-new runs, a rollback's revision, a
sub-agent's child), with the run and branch it carries and how it stands.

Plain ListWorkflowExecutions calls, the request `client.list_workflows(query)` makes,
so a command that only lists (`rewind runs`, `rewind pending`) needs the service
client alone (rewind/temporal/connect.py, `Connection`). The run and branch come
from the search attributes RewindRunId / RewindBranch (workflows/loop/run_index.py), else
from the memo when it is plain JSON (a cluster where the attributes could not be
registered), else from the workflow id.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from temporalio.api.common.v1 import WorkflowExecution
from temporalio.api.enums.v1 import HistoryEventFilterType, WorkflowExecutionStatus
from temporalio.api.workflowservice.v1 import GetWorkflowExecutionHistoryRequest, ListWorkflowExecutionsRequest

from workflows.vocabulary.wire import AGENT_WORKFLOW, PIPELINE_WORKFLOW, SA_BRANCH, SA_RUN_ID, SA_STATE

if TYPE_CHECKING:
    from temporalio.client import Client

# Every workflow that is a run or a branch of one: the agent loop's and pipelines'.
RUN_WORKFLOWS_QUERY = f"(WorkflowType = '{AGENT_WORKFLOW}' OR WorkflowType = '{PIPELINE_WORKFLOW}')"

_STATUS = {v: k.removeprefix("WORKFLOW_EXECUTION_STATUS_").lower() for k, v in WorkflowExecutionStatus.items()}


@dataclass(frozen=True)
class ListedWorkflow:
    """One workflow execution as visibility lists it."""

    workflow_id: str
    execution_run_id: str  # Temporal's run id of this execution
    workflow_type: str
    run_id: str  # Rewind's run it belongs to
    branch_id: str  # the stored branch it carries (`main`, `main.r1`, `tech`, `main.s3-call_1`)
    status: str  # running, completed, failed, canceled, terminated, continued_as_new, timed_out
    state: str | None  # RewindState (running, waiting_for_approval, budget_exceeded, ...), when indexed
    started: datetime
    closed: datetime | None
    task_queue: str
    task: str | None  # the memo's task, when plain JSON (a pipeline run's says `pipeline NAME`)


def rfc3339(moment: datetime) -> str:
    """A time as visibility queries take it."""
    return moment.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


async def list_workflows(client: Client, query: str = RUN_WORKFLOWS_QUERY, *, page_size: int = 1000) -> list[ListedWorkflow]:
    """Every execution the visibility `query` lists, through all its pages."""
    found: list[ListedWorkflow] = []
    token = b""
    while True:
        page = await client.workflow_service.list_workflow_executions(
            ListWorkflowExecutionsRequest(namespace=client.namespace, page_size=page_size, next_page_token=token,
                                          query=query),
            retry=True)
        found += [_listed(info) for info in page.executions]
        token = page.next_page_token
        if not token:
            return found


def _listed(info: Any) -> ListedWorkflow:
    attributes = info.search_attributes.indexed_fields
    memo = info.memo.fields
    workflow_id = info.execution.workflow_id
    run_id = _plain(attributes.get(SA_RUN_ID)) or _plain(memo.get("run_id")) or workflow_id
    branch = _plain(attributes.get(SA_BRANCH)) or _plain(memo.get("branch_id")) or "main"
    return ListedWorkflow(
        workflow_id=workflow_id, execution_run_id=info.execution.run_id, workflow_type=info.type.name,
        run_id=run_id, branch_id=branch, status=_STATUS.get(int(info.status), "unknown"),
        state=_plain(attributes.get(SA_STATE)),
        started=info.start_time.ToDatetime(tzinfo=timezone.utc),
        closed=info.close_time.ToDatetime(tzinfo=timezone.utc) if info.HasField("close_time") else None,
        task_queue=info.task_queue, task=_plain(memo.get("task")),
    )


def _plain(payload: Any) -> str | None:
    """A payload's string when it is plain JSON (a search attribute's always is; a memo's is
    unless a codec encrypted it), else None."""
    if payload is None or payload.metadata.get("encoding") != b"json/plain":
        return None
    try:
        value = json.loads(payload.data)
    except ValueError:
        return None
    if isinstance(value, list) and len(value) == 1:  # a keyword attribute as the server may return it
        value = value[0]
    return value if isinstance(value, str) and value else None


async def close_reason(client: Client, workflow: ListedWorkflow) -> str | None:
    """Why a closed execution ended otherwise than completed, from its close event: a
    failure's message (as the server holds it), a termination's reason, a timeout."""
    history = await client.workflow_service.get_workflow_execution_history(
        GetWorkflowExecutionHistoryRequest(
            namespace=client.namespace,
            execution=WorkflowExecution(workflow_id=workflow.workflow_id, run_id=workflow.execution_run_id),
            skip_archival=True,
            history_event_filter_type=HistoryEventFilterType.HISTORY_EVENT_FILTER_TYPE_CLOSE_EVENT),
        retry=True)
    for event in history.history.events:
        if event.HasField("workflow_execution_failed_event_attributes"):
            failure = event.workflow_execution_failed_event_attributes.failure
            return failure.message or None
        if event.HasField("workflow_execution_terminated_event_attributes"):
            reason = event.workflow_execution_terminated_event_attributes.reason
            return f"terminated: {reason}" if reason else "terminated"
        if event.HasField("workflow_execution_timed_out_event_attributes"):
            return "timed out (the workflow's execution timeout)"
    return None


__all__ = ["ListedWorkflow", "RUN_WORKFLOWS_QUERY", "list_workflows", "close_reason", "rfc3339"]
