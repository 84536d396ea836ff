"""The client API the CLI wraps: connect, start a run, read its state, fork,
roll back and compensate, each configured by `Settings`.

The operations themselves live below (checkpoint_bridge); this module hands
them what the settings say: the task queue, the payload store a fork's
conversation is written to, the redaction of a new task or prompt.
"""

from __future__ import annotations

import asyncio
import secrets
import uuid
from contextlib import asynccontextmanager
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any, AsyncIterator

from pydantic import BaseModel
from temporalio.api.enums.v1 import WorkflowExecutionStatus
from temporalio.api.failure.v1 import Failure

from checkpoint_bridge.branches import decisions
from checkpoint_bridge.temporal.runs import (
    branch_executions,
    branch_workflows,
    completed_result,
    no_worker_line,
    pollers,
    query_wait_s,
    start_agent,
)
from rewind.settings.config import Settings
from workflows.pipeline.ids import changed_call, explain_code_change
from workflows.vocabulary.summaries import summary_step
from workflows.vocabulary.errors import RunNotFoundError
from workflows.vocabulary.ids import validate_id, workflow_id_for
from workflows.vocabulary.status import AgentResult, AgentStatus, Ledger, RunLimits, RunState
from workflows.vocabulary.wire import STATUS_QUERY

if TYPE_CHECKING:
    # Imported where they are used: `rewind status` and `pending`, which answer most
    # often, need neither the SDK's Client (rewind/temporal/connect.py, `Connection`), nor
    # the branching and compensation code, nor the checkpoint store unless they read it,
    # nor the workflow contracts but a run's status (workflows/vocabulary/status.py).
    from temporalio.client import Client, WorkflowHandle

    from checkpoint_bridge.branches.branching import ForkResult, Launcher, RollbackResult
    from checkpoint_bridge.branches.compensation import SideEffect
    from checkpoint_bridge.document.schema import AgentCheckpoint
    from checkpoint_bridge.checkpoints.store import CheckpointStore
    from workflows.vocabulary.contracts import AgentInput, ApprovalRecord


async def connect(settings: Settings | None = None, runtime: Any = None, *, service: str = "rewind-cli") -> Client:
    """A Temporal client for `settings` (default: `Settings.from_env()`: the `temporal` CLI's
    profile file and TEMPORAL_* variables, rewind/settings/temporal.py); `runtime` (a temporalio
    Runtime) carries the worker's metrics endpoint. With tracing on, the client (and every
    worker built from it) traces as `service` unless OTEL_SERVICE_NAME says otherwise
    (rewind/temporal/tracing.py). A connection that fails, or a namespace that is not there or not
    this client's, is one TemporalConnectionError naming the setting to fix
    (TemporalUnreachableError when nothing answers at the address)."""
    from rewind.temporal.connect import open_connection

    return (await open_connection(Settings.from_env() if settings is None else settings, runtime,
                                  service=service)).client


async def start_run(
    client: Client, settings: Settings, agent_input: AgentInput, *, verify_tools: bool = True,
) -> WorkflowHandle[Any, AgentResult]:
    """Start a run on the settings' task queue (the task and prompt redacted first)."""
    return await start_agent(client, settings.task_queue, agent_input, settings.redactor().redact_text,
                             verify_tools=verify_tools)


@asynccontextmanager
async def launcher(settings: Settings) -> AsyncIterator[Launcher]:
    """What fork and rollback need from the settings (closes the payload store after)."""
    from activities.model.transcript import TranscriptStore
    from checkpoint_bridge.branches.branching import Launcher
    from rewind.stores import payload_store

    objects = payload_store(settings)
    try:
        yield Launcher(settings.task_queue, TranscriptStore(objects), settings.redactor().redact_text)
    finally:
        await objects.aclose()


async def fork(client: Client, settings: Settings, store: CheckpointStore, run_id: str, step: int, **options: Any) -> ForkResult:
    """`rewind fork`: a new branch from checkpoint `step` (see checkpoint_bridge.branches.branching.fork)."""
    from checkpoint_bridge.branches import branching

    async with launcher(settings) as launch:
        return await branching.fork(client, launch, store, run_id, step, **options)


async def redo(client: Client, settings: Settings, store: CheckpointStore, run_id: str, step: int, call_id: str,
               **options: Any) -> ForkResult:
    """`rewind redo`: a new branch from `step` on which only `call_id` runs again (checkpoint_bridge.branches.branching.redo)."""
    from checkpoint_bridge.branches import branching

    async with launcher(settings) as launch:
        return await branching.redo(client, launch, store, run_id, step, call_id, **options)


async def rollback(client: Client, settings: Settings, store: CheckpointStore, run_id: str, step: int,
                   **options: Any) -> RollbackResult:
    """`rewind rollback`: the branch back to `step`, continued in place (checkpoint_bridge.branches.branching.rollback)."""
    from checkpoint_bridge.branches import branching

    async with launcher(settings) as launch:
        return await branching.rollback(client, launch, store, run_id, step, **options)


async def continue_run(client: Client, settings: Settings, store: CheckpointStore, run_id: str, then: Any,
                       **options: Any) -> ForkResult:
    """A graph run invoked again on its thread: the branch's next revision from its head
    (checkpoint_bridge.branches.branching.continue_branch, `then` from `with_turn`)."""
    from checkpoint_bridge.branches import branching

    async with launcher(settings) as launch:
        return await branching.continue_branch(client, launch, store, run_id, then, **options)


async def compensate(client: Client, settings: Settings, run_id: str, branch: str, step: int,
                     effects: list[SideEffect]) -> list[dict[str, Any]]:
    """Undo side effects after `step` once each (checkpoint_bridge.branches.compensation)."""
    from checkpoint_bridge.branches.compensation import run_compensations

    return await run_compensations(client, settings.task_queue, run_id, branch, step, effects)


def _decider(by: str | None) -> str:
    if by is not None and by.strip():
        return by.strip()
    import getpass

    try:
        return getpass.getuser()
    except Exception:  # noqa: BLE001 - no user name in this environment (some containers)
        return "unknown"


async def approve(client: Client, run_id: str, tool_call_id: str, *, branch: str = "main", by: str | None = None,
                  reason: str | None = None, arguments: dict[str, Any] | None = None,
                  value: Any = None) -> ApprovalRecord:
    """`rewind approve`: let a waiting call run (with `arguments` instead, if given), or resume
    a graph's interrupt() with `value` (default: true). `by` defaults to the OS user. Raises
    DecisionRefusedError if the run cannot take it."""
    from workflows.vocabulary.contracts import ApprovalDecision

    decision = ApprovalDecision(tool_call_id=tool_call_id, verdict="approve", by=_decider(by), reason=reason,
                                arguments=arguments, value=value, decided_at=datetime.now(timezone.utc))
    return await decisions.decide(client, run_id, decision, branch=branch)


async def reject(client: Client, run_id: str, tool_call_id: str, *, reason: str, branch: str = "main",
                 by: str | None = None) -> ApprovalRecord:
    """`rewind reject`: the call does not run; the model gets the reason as its result."""
    from workflows.vocabulary.contracts import ApprovalDecision

    decision = ApprovalDecision(tool_call_id=tool_call_id, verdict="reject", by=_decider(by), reason=reason,
                                decided_at=datetime.now(timezone.utc))
    return await decisions.decide(client, run_id, decision, branch=branch)


async def pending_approvals(client: Client) -> decisions.Pending:
    """`rewind pending`: every tool call waiting for a decision, across the open runs."""
    return await decisions.pending_approvals(client)


async def agent_input(
    client: Client, settings: Settings, agent: str, task: str, *, run_id: str | None = None,
    system_prompt: str | None = None, tools: list[str] | None = None, model: str | None = None,
    limits: RunLimits | None = None, **fields: Any,
) -> AgentInput:
    """The input of a run of declared agent `agent` (`rewind start --agent NAME`): its system
    prompt, tools, model and max_steps, as a worker that loaded its declaration says, except
    what is given here. Start it with `start_run`."""
    from checkpoint_bridge.temporal.runs import declared_agent
    from workflows.vocabulary.contracts import AgentInput

    spec = await declared_agent(client, settings.task_queue, agent)
    chosen = limits or RunLimits(max_steps=spec.max_steps)
    return AgentInput(
        run_id=run_id or new_run_id(), task=task, agent=agent,
        system_prompt=system_prompt or spec.system_prompt,
        tools=list(tools) if tools is not None else list(spec.tools),
        model=model or spec.model or settings.model, limits=chosen, **fields,
    )


def pipeline_input(settings: Settings, pipeline: str, arguments: dict[str, Any] | None = None, *,
                   run_id: str | None = None, model: str | None = None, limits: RunLimits | None = None,
                   **fields: Any) -> AgentInput:
    """The input of a run of `@pipeline` `pipeline` with `arguments` (its parameters as JSON;
    the worker that runs it validates them, docs/pipelines.md). Start it with `start_run`.
    `model`: for the pipeline's model calls that name none and whose pipeline names none."""
    from workflows.vocabulary.contracts import AgentInput, PipelineRun
    from workflows.vocabulary.defaults import PIPELINE_MAX_STEPS

    arguments = dict(arguments or {})
    return AgentInput(
        run_id=run_id or new_run_id(), task=f"pipeline {pipeline}", model=model or settings.model,
        pipeline=PipelineRun(name=pipeline, arguments=arguments, seed=secrets.randbits(63)),
        limits=limits or RunLimits(max_steps=PIPELINE_MAX_STEPS), **fields,
    )


def graph_input(settings: Settings, graph: str, graph_input: dict[str, Any] | None = None, *,
                run_id: str | None = None, model: str | None = None, limits: RunLimits | None = None,
                **fields: Any) -> AgentInput:
    """The input of a run of the LangGraph graph `graph` ("module:attribute", a compiled graph a
    tools module of the worker defines) on `graph_input` (its input channels as JSON;
    docs/langgraph.md). Start it with `start_run`. `model`: every model call's, instead of the one
    its chat model names."""
    if ":" not in graph:
        raise ValueError(f"graph {graph!r}: name it module:attribute (e.g. research:graph)")
    inp = pipeline_input(settings, graph, graph_input, run_id=run_id, model=model, limits=limits, **fields)
    inp.task = f"graph {graph}"
    if model is not None:  # a graph's chat models each name their model: `model` is every call's
        assert inp.pipeline is not None
        inp.pipeline.models = {"*": model}
    return inp


def new_run_id() -> str:
    stamp = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
    return f"run-{stamp}-{uuid.uuid4().hex[:6]}"


# How long `rewind status` waits for a running run's live query before it answers
# from the newest checkpoint (a worker answers a query in milliseconds; one under
# heavy load, in well under a second).
STORE_FALLBACK_QUERY_S = 1.5


class RunView(BaseModel):
    """Everything `rewind status` shows: the live query plus what Temporal knows."""

    run_id: str
    branch_id: str = "main"
    # The one state to show: the run's own (running, completed, failed,
    # budget_exceeded, cancelled), or Temporal's for an ending the run did not
    # choose (terminated, timed_out).
    state: str = "unknown"
    workflow_status: str
    status: AgentStatus | None = None
    # Where `status` comes from: the live query, the finished run's result, or
    # the newest checkpoint in the store (no worker to answer, or history gone).
    source: str = "query"
    failure: str | None = None
    # A retrying activity (rate limit, flaky tool, dead worker) shows up here
    # before the workflow itself sees anything.
    pending: list[dict[str, Any]] = []
    # Set while the run is running and no worker polls its task queue (or none that answers).
    no_worker: str | None = None
    # The step a running model or tool call belongs to, from Temporal's history, when no
    # worker answers for the run (the newest checkpoint can be a step behind).
    live_step: int | None = None
    # The checkpoint store could not be used (the view then comes from Temporal alone).
    store_error: str | None = None
    # Where the view comes from when that is not the usual (Temporal unreachable).
    note: str | None = None
    # With a Redis hot tier (REWIND_HOT_STORE): how far the durable store is behind it
    # (`run_pending` of this run's objects, `pending` of all, the oldest's age), or why it cannot tell.
    hot_tier: dict[str, Any] | None = None
    # A pipeline run stopped because its code changed under it: the call that differs, and the fix.
    code_change: str | None = None


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


def status_from_checkpoint(cp: AgentCheckpoint, state: RunState | None = None) -> AgentStatus:
    """What a checkpoint says about its run, in the shape of the live status."""
    from checkpoint_bridge.document.schema import final_answer

    totals = Ledger.model_validate(cp.ledger["total"]) if cp.ledger and isinstance(cp.ledger.get("total"), dict) else Ledger(
        prompt_tokens=cp.prompt_tokens, completion_tokens=cp.completion_tokens,
        total_tokens=cp.llm_tokens_used, cost_usd=cp.llm_cost_usd,
    )
    # What the branch spent itself (a checkpoint before per-branch ledgers: taken as all its own).
    own = cp.ledger.get("branch") if cp.ledger else None
    branch = Ledger.model_validate(own) if isinstance(own, dict) else totals
    final = final_answer(cp)
    default_state: RunState = "failed" if cp.status == "failed" else ("completed" if final is not None else "running")
    return AgentStatus(
        run_id=cp.run_id, branch_id=cp.branch_id, state=state or default_state, step=cp.step_index,
        model=cp.model or "", ledger=totals, branch_ledger=branch,
        last_error=(cp.error_info or {}).get("reason") if cp.error_info else None, final_answer=final,
    )


async def _heartbeat_detail(client: Client, pending: Any) -> str | None:
    """The first heartbeat detail of a pending activity, when it is a short string."""
    if not pending.HasField("heartbeat_details") or not pending.heartbeat_details.payloads:
        return None
    try:
        values = await client.data_converter.decode(pending.heartbeat_details.payloads)
    except Exception:  # noqa: BLE001 - a key this client lacks: show nothing
        return None
    return values[0] if values and isinstance(values[0], str) and len(values[0]) <= 200 else None


_ENDED_BY_TEMPORAL = {"terminated", "timed_out", "canceled"}


async def run_view(
    client: Client, run_id: str, branch_id: str = "main", *, query_timeout_s: float | None = None,
    store: CheckpointStore | None = None, task_queue: str | None = None,
) -> RunView:
    """The run's state, from the live query while it runs, from its result once it
    has finished (no worker needed), and from the newest checkpoint in `store`
    when neither can answer (no worker polls, or Temporal no longer has it).

    `query_timeout_s`: how long the live query may take; by default 5 s, or
    STORE_FALLBACK_QUERY_S when `store` can answer instead. Temporal keeps listing
    a killed worker among a queue's pollers for minutes, and a query sent to it is
    never answered: with a store, `rewind status` of such a run answers from the
    newest checkpoint after a short wait instead of the whole timeout, and says that
    no worker answers (`no_worker`) with the live step from history.

    `client` may be a Connection (rewind/temporal/connect.py): a run that completed is read with
    plain service calls, and the SDK's Client is built only for one that has not."""
    if query_timeout_s is None:
        query_timeout_s = STORE_FALLBACK_QUERY_S if store is not None else 5.0
    validate_id("run", run_id)
    validate_id("branch", branch_id)
    executions = await branch_executions(client, run_id, branch_id)
    if not executions:
        view = await view_from_store(store, run_id, branch_id)
        if view is None:
            raise RunNotFoundError(f"no run {run_id!r} (branch {branch_id!r}) in Temporal; check the id and --branch")
        return view
    storage_branch, desc = executions[-1]
    workflow_status = _STATUS_NAMES.get(int(desc.workflow_execution_info.status), "unknown")
    view = RunView(run_id=run_id, branch_id=branch_id, workflow_status=workflow_status)
    if workflow_status == "completed":
        # Its result says it all: no worker to ask, no task queue to look at, and no SDK
        # Client to build (a Connection answers from the describe above and one history call).
        try:
            result = await completed_result(client, desc, AgentResult)
            view.status, view.source = result.status, "result"
        except Exception as exc:  # a result this client cannot decode (another key)
            view.failure = f"result unavailable: {exc}"
    else:
        handle = client.get_workflow_handle(workflow_id_for(run_id, storage_branch), result_type=AgentResult)
        await _ask_the_run(client, handle, desc, view, task_queue, query_timeout_s)
    if view.status is None and store is not None:
        latest = await store.load_latest(run_id, storage_branch)
        if latest is not None:
            ended = {"failed": "failed", "canceled": "cancelled"}.get(workflow_status)
            view.status, view.source = status_from_checkpoint(latest, ended), "checkpoint"  # type: ignore[arg-type]
    if view.status is not None and workflow_status not in _ENDED_BY_TEMPORAL:
        view.state = view.status.state
    else:
        view.state = {"canceled": "cancelled"}.get(workflow_status, workflow_status)
    if view.failure is not None and changed_call(view.failure) is not None:
        fork_step = await _before_call(store, run_id, storage_branch, changed_call(view.failure)[0]["position"])
        view.code_change = explain_code_change(view.failure, run_id, fork_step)
    return view


async def _before_call(store: CheckpointStore | None, run_id: str, branch: str, position: int) -> int | None:
    """The last step of the branch before a pipeline's call at `position` (every call recorded
    up to it came earlier in the code), or None when the store cannot tell."""
    from checkpoint_bridge.checkpoints.lineage import display_name, lineage_in

    if store is None:
        return None
    try:
        summaries = await store.list_checkpoints(run_id)
        line = lineage_in(summaries, display_name(branch), store.url)
        calls = await store.recorded_calls(line[-1].checkpoint_id) if line else []
    except Exception:  # noqa: BLE001 - the line says "a step before it" instead
        return None
    later = next((c.step for c in calls if c.call.get("position", -1) >= position), None)
    if later is None:
        return line[-1].step_index if line else None
    return later - 1 if later > line[0].step_index else None


async def _ask_the_run(client: Client, handle: WorkflowHandle[Any, AgentResult], desc: Any, view: RunView,
                       task_queue: str | None, query_timeout_s: float) -> None:
    """Fill `view` of a run that has not completed (`desc`: its DescribeWorkflowExecution):
    the live query when a worker answers, its pending calls while it runs (with the step
    they belong to from history when no worker answers), how it ended otherwise."""
    workflow_status = view.workflow_status
    queue = desc.execution_config.task_queue.name or task_queue
    listed = await pollers(client, queue, workflows=True) if queue else set()
    polled = bool(listed)
    if polled:
        query_timeout_s = query_wait_s(listed, query_timeout_s)

    async def query() -> bool:
        """Whether a worker answered; a query failing otherwise than for want of one is a failure."""
        try:
            view.status = await handle.query(STATUS_QUERY, result_type=AgentStatus,
                                             rpc_timeout=timedelta(seconds=query_timeout_s))
            return True
        except Exception as exc:  # the run has not run its first task yet, or the worker is busy
            if workflow_status == "running" and not _nobody_answered(exc):
                view.failure = f"live status unavailable: {exc}"
            return False

    if workflow_status == "running":
        for pa in desc.pending_activities:
            entry: dict[str, Any] = {"activity": pa.activity_type.name, "attempt": pa.attempt,
                                     "activity_id": pa.activity_id}
            detail = await _heartbeat_detail(client, pa)
            if detail:
                entry["detail"] = detail  # e.g. the tool a run_tool activity runs
            if pa.HasField("last_failure"):
                entry["last_failure"] = await _failure_message(client, pa.last_failure)
            view.pending.append(entry)
        if not polled or not await query() and view.failure is None:
            # Temporal lists a worker that stopped or died for minutes after its last poll:
            # one listed that does not answer is named as what it is, in the words `rewind runs` uses.
            view.no_worker = no_worker_line(queue, listed, unanswered_s=query_timeout_s)
            cancel_requested, summaries = await _history_facts(client, handle)
            if cancel_requested:
                view.no_worker += "; a cancellation is requested and takes effect when a worker picks the run up"
            for entry in view.pending:
                summary = summaries.get(entry["activity_id"])
                step = summary_step(summary) if summary else None
                if summary:
                    entry["summary"] = summary
                if step is not None:
                    view.live_step = max(view.live_step or step, step)
    else:
        try:
            await handle.result()
        except Exception as exc:
            cause = getattr(exc, "cause", None)
            view.failure = str(cause or exc)
        if polled:  # a worker can still answer for a closed run; else the store below
            await query()


def _nobody_answered(exc: BaseException) -> bool:
    """A query that found no worker: none polled lately, or the one listed did not answer in time."""
    from temporalio.service import RPCError, RPCStatusCode

    # The SDK reports its own rpc timeout as CANCELLED ("Timeout expired"), the server's as DEADLINE_EXCEEDED.
    return isinstance(exc, RPCError) and (exc.status in (RPCStatusCode.DEADLINE_EXCEEDED, RPCStatusCode.CANCELLED)
                                          or "no poller" in exc.message)


async def _history_facts(client: Client, handle: WorkflowHandle[Any, AgentResult]) -> tuple[bool, dict[str, str]]:
    """From a run's history (read only when no worker runs it): whether `rewind cancel`
    reached it, and each scheduled activity's summary by activity id (`step 3: search(…)`)."""
    from temporalio.api.enums.v1 import EventType

    cancel_requested, summaries = False, {}
    async for event in handle.fetch_history_events():
        if event.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CANCEL_REQUESTED:
            cancel_requested = True
        elif event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED and event.user_metadata.HasField("summary"):
            try:
                summary = (await client.data_converter.decode([event.user_metadata.summary]))[0]
            except Exception:  # noqa: BLE001 - an encrypted summary this client cannot read: none shown
                continue
            if isinstance(summary, str):
                summaries[event.activity_task_scheduled_event_attributes.activity_id] = summary
    return cancel_requested, summaries


async def run_status(client: Any, store: CheckpointStore | None, run_id: str, branch_id: str = "main", *,
                     unreachable: BaseException | None = None, temporal_address: str = "",
                     task_queue: str | None = None, query_timeout_s: float | None = None) -> RunView:
    """What `rewind status` shows (and `rewind serve`'s GET /runs/{run}): `run_view` while
    Temporal answers; with `client` None (`unreachable` says why), the newest checkpoint in
    `store`, saying so in `note`, or `unreachable` raised when the store has none either."""
    if client is not None:
        return await run_view(client, run_id, branch_id, store=store, task_queue=task_queue,
                              query_timeout_s=query_timeout_s)
    view = await view_from_store(store, run_id, branch_id)
    if view is None:
        raise unreachable or RunNotFoundError(f"no run {run_id!r} (branch {branch_id!r}) in the store")
    view.workflow_status = "unknown"
    view.note = f"Temporal is not reachable ({temporal_address}): shown from the newest checkpoint"
    return view


async def view_from_store(store: CheckpointStore | None, run_id: str, branch_id: str) -> RunView | None:
    """A run Temporal no longer knows (past the namespace's retention): its newest checkpoint."""
    if store is None:
        return None
    from checkpoint_bridge.checkpoints.lineage import revisions

    for storage in reversed(await revisions(store, run_id, branch_id)):
        latest = await store.load_latest(run_id, storage)
        if latest is not None:
            status = status_from_checkpoint(latest)
            return RunView(run_id=run_id, branch_id=branch_id, state=status.state, workflow_status="archived",
                           status=status, source="checkpoint")
    return None


async def wait_for_outcome(handle: WorkflowHandle[Any, AgentResult], poll_s: float = 0.3) -> AgentResult:
    """The run's result, or its live status once it pauses for its budget."""
    from temporalio.client import WorkflowExecutionStatus

    while True:
        desc = await handle.describe()
        if desc.status != WorkflowExecutionStatus.RUNNING:
            return await handle.result()
        try:
            status = await handle.query(STATUS_QUERY, result_type=AgentStatus, rpc_timeout=timedelta(seconds=5))
        except Exception:
            status = None
        if status is not None and status.state == "budget_exceeded":
            return AgentResult(status=status)
        await asyncio.sleep(poll_s)


__all__ = [
    "connect", "start_run", "agent_input", "run_view", "new_run_id", "wait_for_outcome", "fork", "redo", "rollback", "compensate", "continue_run",
    "launcher", "RunView", "status_from_checkpoint", "view_from_store", "workflow_id_for", "branch_workflows",
    "approve", "reject", "pending_approvals", "run_status",
]
