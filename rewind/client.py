"""Starting runs and reading their status: the small client API the CLI wraps."""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta, timezone
from typing import Any

from pydantic import BaseModel
from temporalio.api.enums.v1 import WorkflowExecutionStatus
from temporalio.api.failure.v1 import Failure
from temporalio.client import Client, WorkflowHandle
from temporalio.common import WorkflowIDReusePolicy
from temporalio.exceptions import WorkflowAlreadyStartedError
from temporalio.service import RPCError, RPCStatusCode

from checkpoint_bridge.ids import validate_id
from rewind.config import Settings
from rewind.payloads import data_converter
from rewind.redaction import Redactor
from rewind.errors import ConfigError, RunExistsError, RunNotFoundError
from workflows.contracts import AgentInput, AgentResult, AgentStatus

WORKFLOW_NAME = "AgentWorkflow"


async def connect(settings: Settings) -> Client:
    try:
        return await Client.connect(
            settings.temporal_address,
            namespace=settings.namespace,
            data_converter=data_converter(
                settings.payload_url, settings.payload_threshold,
                encryption_keys=settings.encryption_keys, require_encryption=settings.require_encryption,
            ),
        )
    except RuntimeError as exc:
        raise ConfigError(
            f"cannot reach Temporal at {settings.temporal_address} ({exc}); start one with "
            "`rewind server` or set TEMPORAL_ADDRESS"
        ) from exc


def new_run_id() -> str:
    stamp = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
    return f"run-{stamp}-{uuid.uuid4().hex[:6]}"


def workflow_id_for(run_id: str, branch_id: str = "main") -> str:
    """The workflow id of one stored branch (`main`, `tech`, `main.r1`, ...) of a run."""
    return run_id if branch_id == "main" else f"{run_id}--{branch_id}"


async def branch_workflows(client: Client, run_id: str, name: str) -> list[tuple[str, WorkflowHandle[Any, AgentResult]]]:
    """(storage branch, handle) of every workflow that has carried branch `name`, oldest first.

    A rollback continues a branch in a new workflow under the next revision
    (`main`, then `main.r1`, ...), so the last one is the branch's current workflow.
    """
    from checkpoint_bridge.lineage import revision_branch

    found = []
    revision = 0
    while True:
        storage = revision_branch(name, revision)
        handle = client.get_workflow_handle(workflow_id_for(run_id, storage), result_type=AgentResult)
        try:
            await handle.describe()
        except RPCError as exc:
            if exc.status == RPCStatusCode.NOT_FOUND:
                return found
            raise
        found.append((storage, handle))
        revision += 1


async def start_run(client: Client, settings: Settings, agent_input: AgentInput) -> WorkflowHandle[Any, AgentResult]:
    validate_id("run", agent_input.run_id)
    validate_id("branch", agent_input.branch_id)
    # A secret pasted into the task or the system prompt must not reach history.
    redactor = Redactor.from_env()
    agent_input = agent_input.model_copy(update={
        "task": redactor.redact_text(agent_input.task),
        "system_prompt": redactor.redact_text(agent_input.system_prompt),
    })
    try:
        return await client.start_workflow(
            WORKFLOW_NAME,
            agent_input,
            id=workflow_id_for(agent_input.run_id, agent_input.branch_id),
            task_queue=settings.task_queue,
            result_type=AgentResult,
            # A run id names one run forever: its checkpoints and idempotency
            # keys derive from it, so a finished run's id is never reused.
            id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE,
        )
    except WorkflowAlreadyStartedError as exc:
        raise RunExistsError(
            f"a run with id {agent_input.run_id!r} (branch {agent_input.branch_id!r}) already exists; choose another --run-id"
        ) from exc


class RunView(BaseModel):
    """Everything `rewind status` shows: the live query plus what Temporal knows."""

    run_id: str
    workflow_status: str
    status: AgentStatus | None = None
    failure: str | None = None
    # A retrying activity (rate limit, flaky tool, dead worker) shows up here
    # before the workflow itself sees anything.
    pending: list[dict[str, Any]] = []


async def _failure_message(client: Client, failure: Failure) -> str:
    """A failure's message, decrypted when payload encryption moved it into encoded attributes."""
    copy = Failure()
    copy.CopyFrom(failure)
    try:
        error = await client.data_converter.decode_failure(copy)
    except Exception:  # a key this client lacks: show what the server has
        return failure.message
    return getattr(error, "message", None) or str(error)


_STATUS_NAMES = {v: k.replace("WORKFLOW_EXECUTION_STATUS_", "").lower() for k, v in WorkflowExecutionStatus.items()}


async def run_view(client: Client, run_id: str, branch_id: str = "main", *, query_timeout_s: float = 5.0) -> RunView:
    validate_id("run", run_id)
    validate_id("branch", branch_id)
    workflows = await branch_workflows(client, run_id, branch_id)
    if not workflows:
        raise RunNotFoundError(f"no run {run_id!r} (branch {branch_id!r}) in Temporal; check the id and --branch")
    handle = workflows[-1][1]
    desc = await handle.describe()
    view = RunView(run_id=run_id, workflow_status=_STATUS_NAMES.get(int(desc.raw_description.workflow_execution_info.status), "unknown"))
    for pa in desc.raw_description.pending_activities:
        entry: dict[str, Any] = {"activity": pa.activity_type.name, "attempt": pa.attempt}
        if pa.HasField("last_failure"):
            entry["last_failure"] = await _failure_message(client, pa.last_failure)
        view.pending.append(entry)
    try:
        view.status = await handle.query("status", result_type=AgentStatus, rpc_timeout=timedelta(seconds=query_timeout_s))
    except Exception as exc:  # no worker to answer, or the run failed before its first task
        view.failure = f"live status unavailable: {exc}"
    if view.workflow_status in {"failed", "terminated", "timed_out", "canceled"}:
        try:
            await handle.result()
        except Exception as exc:
            cause = getattr(exc, "cause", None)
            view.failure = str(cause or exc)
    return view


async def wait_for_outcome(handle: WorkflowHandle[Any, AgentResult], poll_s: float = 0.3) -> AgentResult:
    """The run's result, or its live status once it pauses for its budget."""
    import asyncio

    from temporalio.client import WorkflowExecutionStatus

    while True:
        desc = await handle.describe()
        if desc.status != WorkflowExecutionStatus.RUNNING:
            return await handle.result()
        try:
            status = await handle.query("status", result_type=AgentStatus, rpc_timeout=timedelta(seconds=5))
        except Exception:
            status = None
        if status is not None and status.state == "budget_exceeded":
            return AgentResult(status=status)
        await asyncio.sleep(poll_s)


__all__ = ["connect", "start_run", "run_view", "new_run_id", "workflow_id_for", "branch_workflows", "wait_for_outcome", "RunView"]
