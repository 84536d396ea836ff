"""Driving one run of a shape as a user would, through whatever the faults do to
Temporal and the store meanwhile: every call to either is retried until it answers.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Awaitable, Callable

from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.exceptions import WorkflowAlreadyStartedError

from checkpoint_bridge.temporal.runs import branch_workflows
from checkpoint_bridge.checkpoints.store import CheckpointStore
from rewind.client import approve, fork, reject, rollback, start_run
from rewind.settings.config import Settings
from workflows.vocabulary.contracts import AgentStatus
from workflows.vocabulary.errors import DecisionRefusedError, RunExistsError
from workflows.vocabulary.ids import workflow_id_for
from workflows.vocabulary.wire import STATUS_QUERY

from bench.soaking.shapes import FORK_STEP, FORK_WHEN, ROLLBACK_STEP, ROLLBACK_WHEN, Shape

RUN_TIMEOUT_S = 600.0
# Liveness is judged once the faults are over: however long a run took while they went on,
# it must end within RECOVERY_S of the last one (and never before RUN_TIMEOUT_S of its own).
# A run that only progresses between outages may take longer than RUN_TIMEOUT_S and still be
# right; one that is stuck does not recover once they stop.
RECOVERY_S = 300.0


@dataclass
class Outcome:
    run_id: str
    shape: str
    started: float = 0.0
    ended: float = 0.0
    heads: list[str] = field(default_factory=list)  # the branches whose workflows it waited for
    notes: list[str] = field(default_factory=list)  # what could not be done, and retries that were needed
    retries: int = 0
    # What a watcher attached from the run's start got (rewind.events: the durable events, in order, and
    # how often it had to connect again), checked against the store's replay once the run has ended.
    watched: list[Any] = field(default_factory=list)
    watch_reconnects: int = 0


async def retrying(outcome: Outcome, what: str, call: Callable[[], Awaitable[Any]], *,
                   give_up: tuple[type[BaseException], ...] = (), timeout_s: float = RUN_TIMEOUT_S) -> Any:
    """`call()` until it answers (Temporal restarting, S3 down); exceptions in `give_up` go up."""
    deadline = time.monotonic() + timeout_s
    delay = 0.3
    while True:
        try:
            return await call()
        except give_up:
            raise
        except Exception as exc:  # noqa: BLE001 - a fault of the soak; retried like a user would
            if time.monotonic() > deadline:
                raise TimeoutError(f"{what}: still failing after {timeout_s:.0f}s: {exc!r}") from exc
            outcome.retries += 1
            await asyncio.sleep(delay)
            delay = min(delay * 1.5, 3.0)


async def _stored_steps(outcome: Outcome, store: CheckpointStore, run_id: str, branch: str) -> set[int]:
    return await retrying(outcome, "list steps", lambda: store.existing_steps(run_id, branch))


async def _closed(client: Client, outcome: Outcome, workflow_id: str) -> bool:
    async def describe() -> Any:
        return await client.get_workflow_handle(workflow_id).describe()
    return (await retrying(outcome, f"describe {workflow_id}", describe)).status != WorkflowExecutionStatus.RUNNING


async def _wait_closed(client: Client, outcome: Outcome, workflow_id: str, deadline: float) -> None:
    while not await _closed(client, outcome, workflow_id):
        if time.monotonic() > deadline:
            outcome.notes.append(f"{workflow_id} still running at the driver's deadline ({RUN_TIMEOUT_S:.0f} s "
                                 f"after its start, {RECOVERY_S:.0f} s after the last fault)")
            return
        await asyncio.sleep(0.3)


async def _decide(client: Client, outcome: Outcome, shape: Shape, run_id: str, deadline: float) -> None:
    handle = client.get_workflow_handle(workflow_id_for(run_id, "main"))
    while time.monotonic() < deadline:
        try:
            status = await handle.query(STATUS_QUERY, result_type=AgentStatus, rpc_timeout=timedelta(seconds=5))
        except Exception:  # noqa: BLE001 - no worker, server restarting
            status = None
            if await _closed(client, outcome, handle.id):
                outcome.notes.append("closed before its approval was decided")
                return
        if status is not None and status.pending_approvals:
            call = status.pending_approvals[0].tool_call_id
            try:
                if shape.action == "approve":
                    await approve(client, run_id, call, by="soak", reason="seeded approval")
                else:
                    await reject(client, run_id, call, by="soak", reason="seeded rejection")
                return
            except DecisionRefusedError as exc:
                # Not confirmed (no worker took it), or taken already by an earlier try.
                if "already" in str(exc):
                    return
                outcome.retries += 1
            except Exception:  # noqa: BLE001
                outcome.retries += 1
        await asyncio.sleep(0.3)
    outcome.notes.append("approval never asked")


async def _when_stored(client: Client, outcome: Outcome, store: CheckpointStore, run_id: str, step: int,
                       deadline: float) -> bool:
    """Whether step `step` of main got stored; False when the run closed without it (it failed
    early: the outcome check reports that) or the deadline passed."""
    while time.monotonic() < deadline:
        if step in await _stored_steps(outcome, store, run_id, "main"):
            return True
        if await _closed(client, outcome, workflow_id_for(run_id, "main")) and \
                step not in await _stored_steps(outcome, store, run_id, "main"):
            outcome.notes.append(f"closed before its step {step} was stored")
            return False
        await asyncio.sleep(0.2)
    return False


async def watch(settings: Settings, client: Client, outcome: Outcome, run_id: str, deadline: float) -> None:
    """A watcher of the run's main branch from its start to its end, as an app would keep one:
    through the faults, connecting again after its last cursor whenever its reader stops."""
    from rewind.watching import events

    cursor = None
    while time.monotonic() < deadline:
        try:
            async for event in events(run_id, "main", cursor, settings=settings, client=client):
                if event.durable:
                    outcome.watched.append(event)
                    cursor = event.cursor
            return
        except asyncio.CancelledError:
            raise
        except Exception:  # noqa: BLE001 - not started yet, Temporal or the store away: connect again
            outcome.watch_reconnects += 1
            await asyncio.sleep(0.5)


async def drive(client: Client, settings: Settings, store: CheckpointStore, shape: Shape, run_id: str,
                faults_end: float = 0.0) -> Outcome:
    """Run one run of `shape`; `faults_end` (time.monotonic()): when the fault schedule ends."""
    outcome = Outcome(run_id, shape.name, started=time.time())
    watcher = asyncio.create_task(watch(settings, client, outcome, run_id,
                                        max(time.monotonic() + RUN_TIMEOUT_S, faults_end + RECOVERY_S)))
    deadline = max(time.monotonic() + RUN_TIMEOUT_S, faults_end + RECOVERY_S)
    main = workflow_id_for(run_id, "main")

    async def start() -> None:
        try:
            await start_run(client, settings, shape.agent_input(run_id), verify_tools=False)
        except WorkflowAlreadyStartedError:
            pass  # an earlier try started it, and its answer was lost
    await retrying(outcome, "start", start)
    heads = ["main"]
    if shape.action in ("approve", "reject"):
        await _decide(client, outcome, shape, run_id, deadline)
    elif shape.action == "fork" and await _when_stored(client, outcome, store, run_id, FORK_WHEN, deadline):

        async def do_fork() -> None:
            try:
                await fork(client, settings, store, run_id, FORK_STEP, branch="alt", model=f"script:soak-{shape.name}-alt")
            except RunExistsError:
                pass  # an earlier try made it
        await retrying(outcome, "fork", do_fork)
        heads.append("alt")
    elif shape.action == "rollback" and await _when_stored(client, outcome, store, run_id, ROLLBACK_WHEN, deadline):

        async def do_rollback() -> None:
            # A try whose answer was lost may have rolled back already: then Temporal has the
            # revision's workflow (the store may not have its first checkpoint yet, e.g. while
            # S3 is down: asking the store made the retry roll back the new head itself).
            if len(await branch_workflows(client, run_id, "main")) > 1:
                return
            await rollback(client, settings, store, run_id, ROLLBACK_STEP)
        await retrying(outcome, "rollback", do_rollback)
        heads = ["main.r1"]
    await _wait_closed(client, outcome, main, deadline)
    for head in heads:
        if head != "main":
            await _wait_closed(client, outcome, workflow_id_for(run_id, head), deadline)
    outcome.heads = heads
    outcome.ended = time.time()
    try:  # the main branch has ended: its watcher ends too, soon
        await asyncio.wait_for(watcher, 120.0)
    except asyncio.TimeoutError:
        outcome.notes.append(f"its watcher had not seen it end 120 s after it ended "
                             f"({len(outcome.watched)} durable events)")
    return outcome
