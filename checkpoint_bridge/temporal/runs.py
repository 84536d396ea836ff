"""The Temporal side of runs and branches: start one, find a branch's workflows,
read the result of one that completed, list the open runs, ask which workers
poll a queue.

Fork and rollback start workflows too, so this sits beside them in the
bridge and takes what it needs as arguments (the task queue, a redaction
function) instead of reading settings: the CLI and the client API on the top
floor pass their settings down.

The reads (`branch_executions`, `completed_result`, `open_runs`, `pollers`)
are plain calls of the workflow service, the requests the SDK's Client would
make (with its retries), and need only `client.namespace`,
`client.workflow_service` and `client.data_converter`: so `rewind status` of a
finished run and `rewind pending` answer without the SDK's Client, whose
import is most of such a command's time (rewind/temporal/connect.py,
`Connection`). This module imports no more of the SDK than its service client
at the top, and the workflow contracts only where a function uses them.
"""

from __future__ import annotations

import asyncio
import difflib
import warnings
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Callable

from temporalio.api.common.v1 import WorkflowExecution
from temporalio.api.enums.v1 import HistoryEventFilterType, WorkflowExecutionStatus
from temporalio.api.workflowservice.v1 import (
    DescribeWorkflowExecutionRequest,
    DescribeWorkflowExecutionResponse,
    GetWorkflowExecutionHistoryRequest,
)
from temporalio.common import WorkflowIDReusePolicy
from temporalio.exceptions import WorkflowAlreadyStartedError
from temporalio.service import RPCError, RPCStatusCode

from checkpoint_bridge.checkpoints.lineage import is_revision_name, revision_branch, split_revision
from checkpoint_bridge.temporal.listing import RUN_WORKFLOWS_QUERY, list_workflows
from workflows.vocabulary.errors import RunExistsError, UsageError
from workflows.vocabulary.ids import echo, validate_id, workflow_id_for
from workflows.vocabulary.wire import AGENT_WORKFLOW, DESCRIBE_TOOLS_WORKFLOW, PIPELINE_WORKFLOW, tool_task_queue

if TYPE_CHECKING:
    from temporalio.client import Client, WorkflowHandle

    from workflows.vocabulary.contracts import AgentInput, AgentResult, AgentSpec, DescribeToolsResponse


async def describe(client: Client, workflow_id: str) -> DescribeWorkflowExecutionResponse | None:
    """DescribeWorkflowExecution of the workflow's latest run, as `handle.describe()` asks it
    (its `raw_description`); None when Temporal has no such workflow."""
    try:
        return await client.workflow_service.describe_workflow_execution(
            DescribeWorkflowExecutionRequest(namespace=client.namespace,
                                             execution=WorkflowExecution(workflow_id=workflow_id)),
            retry=True)
    except RPCError as exc:
        if exc.status == RPCStatusCode.NOT_FOUND:
            return None
        raise


async def branch_executions(client: Client, run_id: str, name: str) -> list[tuple[str, DescribeWorkflowExecutionResponse]]:
    """(storage branch, its workflow's description) of every workflow that has carried
    branch `name`, oldest first.

    A rollback continues a branch in a new workflow under the next revision
    (`main`, then `main.r1`, ...), so the last one is the branch's current workflow.
    """
    validate_id("run", run_id)
    validate_id("branch", name)
    if is_revision_name(name):  # one revision, named exactly (`main.r0` is `main` itself)
        storage = revision_branch(*split_revision(name))
        found = await describe(client, workflow_id_for(run_id, storage))
        return [] if found is None else [(storage, found)]
    executions = []
    revision = 0
    while True:
        storage = revision_branch(name, revision)
        found = await describe(client, workflow_id_for(run_id, storage))
        if found is None:
            return executions
        executions.append((storage, found))
        revision += 1


async def branch_workflows(client: Client, run_id: str, name: str) -> list[tuple[str, WorkflowHandle[Any, AgentResult]]]:
    """(storage branch, handle) of every workflow that has carried branch `name`, oldest
    first (see `branch_executions`)."""
    from workflows.vocabulary.contracts import AgentResult

    return [(storage, client.get_workflow_handle(workflow_id_for(run_id, storage), result_type=AgentResult))
            for storage, _ in await branch_executions(client, run_id, name)]


async def completed_result(client: Client, description: DescribeWorkflowExecutionResponse, result_type: type) -> Any:
    """`handle.result()` of a workflow whose `description` says it completed: its close
    event's result, decoded by the client's converter, in one history call. A close event
    that is not a plain completion (one that started another run since) is the SDK's to
    follow: then this is `handle.result()` itself."""
    info = description.workflow_execution_info
    if info.status != WorkflowExecutionStatus.WORKFLOW_EXECUTION_STATUS_COMPLETED:
        raise ValueError(f"workflow {info.execution.workflow_id!r} has not completed")
    history = await client.workflow_service.get_workflow_execution_history(
        GetWorkflowExecutionHistoryRequest(
            namespace=client.namespace, execution=WorkflowExecution(workflow_id=info.execution.workflow_id,
                                                                    run_id=info.execution.run_id),
            wait_new_event=True, skip_archival=True,
            history_event_filter_type=HistoryEventFilterType.HISTORY_EVENT_FILTER_TYPE_CLOSE_EVENT),
        retry=True)
    event = history.history.events[0] if history.history.events else None
    if event is None or not event.HasField("workflow_execution_completed_event_attributes") \
            or event.workflow_execution_completed_event_attributes.new_execution_run_id:
        return await client.get_workflow_handle(info.execution.workflow_id, result_type=result_type).result()
    completed = event.workflow_execution_completed_event_attributes
    payloads = completed.result.payloads
    if getattr(client, "plain_payloads", False) and len(payloads) == 1 \
            and dict(payloads[0].metadata) == {"encoding": b"json/plain"} and hasattr(result_type, "model_validate_json"):
        # Plain JSON that no codec touched (a codec's payloads carry an encoding of their own),
        # read by a connection whose converter takes it as it is (not REWIND_REQUIRE_ENCRYPTION):
        # what the pydantic converter would return, without building the converter, whose
        # imports cost `rewind status` of a finished run a fifth of its time.
        return result_type.model_validate_json(payloads[0].data)
    from temporalio.converter import WorkflowSerializationContext

    # As the SDK's handle decodes it: the converter in the workflow's context, a single value.
    converter = client.data_converter.with_context(
        WorkflowSerializationContext(namespace=client.namespace, workflow_id=info.execution.workflow_id))
    results = await converter.decode_wrapper(completed.result, [result_type])
    if not results:
        return None
    if len(results) > 1:
        warnings.warn(f"Expected single result, got {len(results)}")
    return results[0]


# The open runs `rewind pending` asks: every running AgentWorkflow (branches and sub-agents too).
OPEN_RUNS_QUERY = f"{RUN_WORKFLOWS_QUERY} AND ExecutionStatus = 'Running'"


async def open_runs(client: Client, query: str = OPEN_RUNS_QUERY, *, page_size: int = 1000) -> list[tuple[str, str, str]]:
    """(workflow id, run id, task queue) of each workflow the visibility `query` lists, as
    `client.list_workflows(query)` pages through them."""
    return [(w.workflow_id, w.execution_run_id, w.task_queue)
            for w in await list_workflows(client, query, page_size=page_size)]


def check_limits(max_steps: int | None = None, max_cost: float | None = None, max_tokens: int | None = None) -> None:
    """Refuse budgets no run could work with (one line each, naming the option)."""
    if max_steps is not None and max_steps < 1:
        raise UsageError(f"--max-steps {max_steps} must be at least 1")
    if max_cost is not None and not max_cost > 0:
        raise UsageError(f"--max-cost {max_cost} must be a number of USD, more than 0")
    if max_tokens is not None and max_tokens < 1:
        raise UsageError(f"--max-tokens {max_tokens} must be more than 0")


def check_input(agent_input: AgentInput) -> None:
    validate_id("run", agent_input.run_id)
    validate_id("branch", agent_input.branch_id)
    if not agent_input.task.strip() and agent_input.resume is None:
        raise UsageError("the task is empty; say what the agent should do with --task")
    limits = agent_input.limits
    check_limits(limits.max_steps, limits.max_cost_usd, limits.max_tokens)


# A query to a run whose listed workers all exited on this machine still goes out (a
# worker of the same host name in another PID namespace may answer), with this bound.
GONE_QUERY_S = 0.3


def exited_here(identity: str) -> bool:
    """Whether a poller identity of the SDK's default form `PID@HOST` names this machine
    and a process that no longer exists. Temporal keeps listing a killed worker for
    about a minute; on its own machine, its end is known at once."""
    import os
    import socket

    pid, sep, host = identity.partition("@")
    if not sep or not pid.isdigit() or host != socket.gethostname():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except OSError:  # exists, owned by someone else
        return False
    return False


def query_wait_s(listed: set[str], wait_s: float) -> float:
    """How long to wait for a live answer from a queue whose workers Temporal lists as
    `listed`: `wait_s`, or GONE_QUERY_S when none is listed or every one exited here."""
    return wait_s if any(not exited_here(p) for p in listed) else min(wait_s, GONE_QUERY_S)


def no_worker_line(task_queue: str, listed: set[str], *, unanswered_s: float | None = None) -> str:
    """The one sentence for a run that no worker serves (`rewind status`, `start`, `fork`, `--wait`):
    none polls `task_queue` (`listed`, its workflow pollers, is empty), every worker Temporal
    lists is a process of this machine that has exited (Temporal lists a killed worker for
    minutes), or (`unanswered_s`) the one listed did not answer a query in that long."""
    exited = sorted(p for p in listed if exited_here(p))
    if listed and exited:
        why = (f" that answers (Temporal still lists {', '.join(exited)}: "
               + ("a process of this machine that has exited)" if len(exited) == 1 else
                  "processes of this machine that have exited)"))
    elif listed and unanswered_s is not None:
        why = (f" that answers (the one Temporal lists did not answer in {unanswered_s:g} s: it stopped, "
               "died or is stuck)")
    else:
        why = ""
    return f"no worker is polling task queue {task_queue!r}{why}; start one (`rewind worker`) and the run goes on"


async def no_worker(client: Client, task_queue: str) -> str | None:
    """`no_worker_line` when no live worker polls `task_queue` (none listed, or each one listed
    has exited on this machine); None when one does. Two plain service calls, no query."""
    listed = await pollers(client, task_queue, workflows=True)
    if listed and not all(exited_here(p) for p in listed):
        return None
    return no_worker_line(task_queue, listed)


async def pollers(client: Client, task_queue: str, *, workflows: bool = False) -> set[str]:
    """Identities of the workers polling `task_queue` lately (activity pollers, or workflow pollers).

    The plain describe call answers for the queue's root partition only (a
    worker polling another partition can stay invisible for a whole 60 s long
    poll); the enhanced one covers every partition but may lag a few seconds.
    So: the union of both.
    """
    from temporalio.api.enums.v1 import DescribeTaskQueueMode, TaskQueueKind, TaskQueueType
    from temporalio.api.taskqueue.v1 import TaskQueue
    from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest

    kind = TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW if workflows else TaskQueueType.TASK_QUEUE_TYPE_ACTIVITY
    queue = TaskQueue(name=task_queue, kind=TaskQueueKind.TASK_QUEUE_KIND_NORMAL)
    plain = await _describe(client, DescribeTaskQueueRequest(namespace=client.namespace, task_queue=queue,
                                                             task_queue_type=kind))
    found = {p.identity for p in plain.pollers}
    try:
        enhanced = await client.workflow_service.describe_task_queue(DescribeTaskQueueRequest(
            namespace=client.namespace, task_queue=queue, report_pollers=True,
            api_mode=DescribeTaskQueueMode.DESCRIBE_TASK_QUEUE_MODE_ENHANCED, task_queue_types=[kind]))
    except RPCError as exc:
        # The enhanced call fans out to every partition; under load the server can
        # cancel it ("operation was canceled"). The root partition's answer stands.
        if exc.status in _PASSING:
            return found
        raise
    for version in enhanced.versions_info.values():
        for info in version.types_info.values():
            found |= {p.identity for p in info.pollers}
    return found


_PASSING = (RPCStatusCode.CANCELLED, RPCStatusCode.DEADLINE_EXCEEDED, RPCStatusCode.UNAVAILABLE)


async def _describe(client: Client, request: Any) -> Any:
    """DescribeTaskQueue, asked again when a loaded server cancels it ("operation was canceled")."""
    for attempt in range(4):
        try:
            return await client.workflow_service.describe_task_queue(request)
        except RPCError as exc:
            if exc.status not in _PASSING or attempt == 3:
                raise
            await asyncio.sleep(0.2 * (attempt + 1))
    raise AssertionError("unreachable")


async def missing_tools(client: Client, task_queue: str, names: list[str]) -> list[str] | None:
    """The named tools no worker on `task_queue` offers; None when no worker polls the
    queue at all (nothing can be said: the run waits for workers to start)."""
    if not names or not await pollers(client, task_queue, workflows=True):
        return None
    return [name for name in dict.fromkeys(names) if not await pollers(client, tool_task_queue(task_queue, name))]


async def check_tools(client: Client, task_queue: str, names: list[str]) -> None:
    """Refuse, before anything is created, tools that no running worker has."""
    if not names:
        return
    missing = await missing_tools(client, task_queue, names)
    for _ in range(8):  # a worker that has just started may not have polled every queue yet
        if missing == []:
            return
        await asyncio.sleep(0.25)
        missing = await missing_tools(client, task_queue, missing or names)
    if missing:
        offered = await _offered_tools(client, task_queue)
        close = [f"{echo(m, 40)} (did you mean {', '.join(near)}?)" if (near := difflib.get_close_matches(m, offered))
                 else echo(m, 40) for m in missing]
        # Workers of one queue may load different tool modules; the one that answers speaks for itself.
        have = (f"a worker of the queue offers {', '.join(offered)}" if offered else
                "a worker of the queue offers no tools" if offered is not None else
                "`rewind tools` lists what a worker offers")
        raise UsageError(
            f"no worker on task queue {task_queue!r} has the tool(s) {', '.join(close)}; {have}; check the names "
            "or start a worker with --tool-modules naming the module that defines them"
        )


async def _offered_tools(client: Client, task_queue: str, wait_s: float = 10.0) -> list[str] | None:
    """The tools a worker on `task_queue` offers, sorted (what `rewind tools` lists), or None when
    none answers in `wait_s`: only to say so in the error of a tool nobody has."""
    try:
        described = await asyncio.wait_for(describe_tools(client, task_queue, []), wait_s)
    except Exception:  # noqa: BLE001 - the error names the missing tools anyway
        return None
    return sorted(spec.name for spec in described.tools)


async def describe_tools(client: Client, task_queue: str, names: list[str], *, wait_s: float = 10.0) -> DescribeToolsResponse:
    """What the workers on `task_queue` say the named tools (and declared agents) are, asked
    through a short DescribeToolsWorkflow: a worker holding each describes it."""
    import uuid

    from workflows.vocabulary.contracts import DescribeToolsRequest, DescribeToolsResponse

    if not await pollers(client, task_queue, workflows=True):
        raise UsageError(f"no worker polls task queue {task_queue!r}, so nobody can say what "
                         f"{', '.join(echo(n, 40) for n in names)} is; start a worker with the tool modules that "
                         "declare it (`rewind worker --tool-modules MODULE`)")
    return await client.execute_workflow(
        DESCRIBE_TOOLS_WORKFLOW, DescribeToolsRequest(names=names, wait_s=wait_s),
        id=f"rewind-describe-{uuid.uuid4().hex[:12]}", task_queue=task_queue, result_type=DescribeToolsResponse,
        execution_timeout=timedelta(seconds=wait_s + 60),
    )


async def declared_agent(client: Client, task_queue: str, name: str) -> AgentSpec:
    """The declaration of agent `name` (`subagent(...)` in a tools module a worker loaded)."""
    validate_id("agent", name)
    described = await describe_tools(client, task_queue, [name])
    spec = next((s for s in described.tools if s.name == name), None)
    if spec is None:
        raise UsageError(f"no worker on task queue {task_queue!r} declares an agent {name!r}; declare it with "
                         f"subagent(name={name!r}, ...) in a tools module the worker loads (--tool-modules)")
    if spec.agent is None:
        raise UsageError(f"{name!r} is a tool, not an agent: declare agents with subagent(...); start a run that uses "
                         f"the tool with `rewind start --tools {name} --task TEXT`")
    return spec.agent


def fast_task_timeout(agent_input: AgentInput) -> timedelta | None:
    """The workflow task timeout of a fast run: the worker records the results of
    local activities in history at 80% of it (it completes the task and goes on in
    the next one), so this paces how much a crash can cost. None: Temporal's default."""
    return timedelta(seconds=agent_input.fast_record_s / 0.8) if agent_input.fast else None


async def start_agent(
    client: Client, task_queue: str, agent_input: AgentInput, redact: Callable[[str], str], *,
    verify_tools: bool = True,
) -> WorkflowHandle[Any, AgentResult]:
    """Start one AgentWorkflow (a run, or a branch of one) after checking its input."""
    from checkpoint_bridge.temporal.visibility import ensure_search_attributes, start_options
    from workflows.vocabulary.contracts import AgentResult

    check_input(agent_input)
    if verify_tools:
        await check_tools(client, task_queue, agent_input.tools)
    # A secret pasted into the task or the system prompt must not reach history.
    indexed = await ensure_search_attributes(client)
    agent_input = agent_input.model_copy(update={
        "task": redact(agent_input.task), "system_prompt": redact(agent_input.system_prompt), "indexed": indexed,
    })
    try:
        return await client.start_workflow(
            PIPELINE_WORKFLOW if agent_input.pipeline is not None else AGENT_WORKFLOW,
            agent_input,
            id=workflow_id_for(agent_input.run_id, agent_input.branch_id),
            task_queue=task_queue,
            result_type=AgentResult,
            # A run id names one run forever: its checkpoints and idempotency
            # keys derive from it, so a finished run's id is never reused.
            id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE,
            task_timeout=fast_task_timeout(agent_input),
            **start_options(agent_input, indexed),
        )
    except WorkflowAlreadyStartedError as exc:
        raise RunExistsError(
            f"a run with id {agent_input.run_id!r} (branch {agent_input.branch_id!r}) already exists; choose another --run-id"
        ) from exc


__all__ = ["branch_workflows", "describe_tools", "open_runs", "OPEN_RUNS_QUERY", "declared_agent", "fast_task_timeout", "check_limits", "check_input",
           "pollers", "no_worker", "no_worker_line", "missing_tools", "check_tools", "start_agent"]
