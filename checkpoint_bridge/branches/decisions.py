"""Deciding on tool calls that wait for approval, from outside the run.

A decision is the `decide_tool_call` update of the branch's current
workflow: the run's validator refuses a call that is not waiting or is
already decided, and edited arguments are checked by a worker that holds the
tool, so a refused decision changes nothing and says why in one line.
Listing every waiting call asks each open run for its status.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError

from checkpoint_bridge.temporal.runs import branch_workflows, open_runs, pollers, query_wait_s
from workflows.vocabulary.errors import DecisionRefusedError, RunNotFoundError
from workflows.vocabulary.ids import validate_id
from workflows.vocabulary.wire import DECIDE_UPDATE, STATUS_QUERY

if TYPE_CHECKING:
    # Imported where they are used: `rewind pending` with no open run needs neither the
    # SDK's Client nor the workflow contracts.
    from temporalio.client import Client

    from workflows.vocabulary.contracts import ApprovalDecision, ApprovalRecord, PendingApproval

# A decision waits at most this long for a worker to take it.
DECISION_TIMEOUT_S = 30.0


async def decide(client: Client, run_id: str, decision: ApprovalDecision, *, branch: str = "main",
                 timeout_s: float = DECISION_TIMEOUT_S) -> ApprovalRecord:
    """Deliver `decision` to the run's current workflow; the recorded decision, or DecisionRefusedError.
    A call that waits inside one of the branch's sub-agents is decided there (`branch` names the caller)."""
    from temporalio.client import WorkflowUpdateFailedError, WorkflowUpdateRPCTimeoutOrCancelledError

    from workflows.vocabulary.contracts import ApprovalRecord

    validate_id("run", run_id)
    validate_id("branch", branch)
    branch = await _waiting_in(client, run_id, branch, decision.tool_call_id) or branch
    workflows = await branch_workflows(client, run_id, branch)
    if not workflows:
        raise RunNotFoundError(f"no run {run_id!r} (branch {branch!r}) in Temporal; check the id and --branch")
    handle = workflows[-1][1]
    desc = await handle.describe()
    _refuse_if_ended(desc, run_id, branch)
    queue = desc.raw_description.execution_config.task_queue.name
    if queue and not await pollers(client, queue, workflows=True):
        raise DecisionRefusedError(
            f"no worker polls task queue {queue!r}, so run {run_id!r} cannot take the decision now; start a worker "
            "(the call keeps waiting) and decide again")
    try:
        return await asyncio.wait_for(
            handle.execute_update(DECIDE_UPDATE, decision, result_type=ApprovalRecord,
                                  rpc_timeout=timedelta(seconds=timeout_s)),
            timeout_s)
    except WorkflowUpdateFailedError as exc:
        cause = exc.cause
        message = cause.message if isinstance(cause, ApplicationError) else str(cause or exc)
        hint = " (a call of another branch needs --branch: `rewind pending` shows it)" if "is waiting" in message else ""
        raise DecisionRefusedError(f"run {run_id!r} refused the decision on {decision.tool_call_id!r}: {message}{hint}") from None
    except (asyncio.TimeoutError, WorkflowUpdateRPCTimeoutOrCancelledError, RPCError) as exc:
        # The run may have ended meanwhile ("update was aborted by closing workflow"): then
        # nothing can deliver the decision any more, and that is the answer.
        try:
            _refuse_if_ended(await handle.describe(), run_id, branch)
        except RPCError:
            pass
        # Not refused, not confirmed either: Temporal may still deliver it to a worker that
        # picks the run up later (a dead worker's polls stay listed for a while).
        why = (f"no worker took it within {timeout_s:g} s"
               if isinstance(exc, (asyncio.TimeoutError, WorkflowUpdateRPCTimeoutOrCancelledError)) else str(exc))
        raise DecisionRefusedError(
            f"the decision on {decision.tool_call_id!r} of run {run_id!r} is not confirmed ({why}); Temporal may "
            f"still deliver it when a worker runs the run again: start one and check `rewind status {run_id}` "
            "before deciding again") from None

def _refuse_if_ended(desc: Any, run_id: str, branch: str) -> None:
    if desc.status is None or desc.status.name != "RUNNING":
        ended = desc.status.name.lower() if desc.status else "closed"
        raise DecisionRefusedError(f"run {run_id!r} (branch {branch!r}) has ended ({ended}); nothing waits for a decision "
                                   "there (a call of another branch needs --branch: `rewind pending` shows it)")


async def _waiting_in(client: Client, run_id: str, branch: str, call: str, depth: int = 0) -> str | None:
    """The branch where `call` waits: `branch` itself or one of its running sub-agents' (nested); None: neither."""
    from workflows.vocabulary.contracts import AgentStatus

    workflows = await branch_workflows(client, run_id, branch)
    if not workflows or depth > 8:
        return None
    try:
        status = await workflows[-1][1].query(STATUS_QUERY, result_type=AgentStatus, rpc_timeout=timedelta(seconds=5))
    except Exception:  # noqa: BLE001 - no worker answers: deciding on `branch` says why
        return None
    if any(p.tool_call_id == call for p in status.pending_approvals):
        return branch
    for sub in status.subagents:
        if sub.state not in ("completed", "failed", "refused", "cancelled"):
            found = await _waiting_in(client, run_id, sub.branch_id, call, depth + 1)
            if found is not None:
                return found
    return None


@dataclass
class Pending:
    waiting: list[PendingApproval]  # oldest request first
    unanswered: list[str]  # workflow ids of open runs that did not answer (no worker, or not started)


async def pending_approvals(client: Client, *, query_timeout_s: float = 5.0, concurrency: int = 16) -> Pending:
    """Every tool call waiting for a decision, across the open runs."""
    runs = await open_runs(client)
    if not runs:
        return Pending([], [])
    from workflows.vocabulary.contracts import AgentStatus

    handles = [(client.get_workflow_handle(workflow_id, run_id=run_id), queue) for workflow_id, run_id, queue in runs]
    queues = {queue for _, _, queue in runs}
    limit = asyncio.Semaphore(concurrency)
    # A queue with no worker, or only workers of this machine that exited: no long wait.
    wait_s = {queue: query_wait_s(await pollers(client, queue, workflows=True), query_timeout_s) for queue in queues}

    unanswered: list[str] = []

    async def waiting(handle: Any, queue: str) -> list[PendingApproval]:
        async with limit:
            try:
                status = await handle.query(STATUS_QUERY, result_type=AgentStatus,
                                            rpc_timeout=timedelta(seconds=wait_s[queue]))
            except Exception:  # noqa: BLE001 - not started yet, or no worker answers
                unanswered.append(handle.id)
                return []
            return list(status.pending_approvals)

    found = [p for ps in await asyncio.gather(*(waiting(h, q) for h, q in handles)) for p in ps]
    return Pending(sorted(found, key=lambda p: (p.requested_at, p.run_id, p.tool_call_id)), sorted(unanswered))


__all__ = ["decide", "pending_approvals", "Pending", "DECISION_TIMEOUT_S"]
