"""Watching a run: `rewind.events()`, what `rewind watch` and `rewind serve` read (docs/streaming.md).

    async for event in rewind.events("run-1"):           # until the run ends
        print(event.type, event.data)

Every kind of run (a loop run, a pipeline, a graph run) has the same stream; a sub-agent's
or child pipeline's events arrive in its caller's, with their `path`. `after=` resumes
after an event (its `cursor`, or a durable event's `id`): every durable event after it
comes once, in order; a call still in flight comes again from its current attempt's start.
"""

from __future__ import annotations

import contextlib
from contextlib import AsyncExitStack
from typing import Any, AsyncIterator

from checkpoint_bridge.checkpoints.lineage import is_revision_name, revision_branch, split_revision
from checkpoint_bridge.checkpoints.outputs import OutputStore
from checkpoint_bridge.events.reader import BranchReader, RunState
from checkpoint_bridge.temporal.runs import branch_executions
from rewind.client import RunNotFoundError, connect, run_view
from rewind.settings.config import Settings
from rewind.stores import checkpoint_store, events_bus, object_store
from workflows.vocabulary.events import RunEvent
from workflows.vocabulary.ids import validate_id


async def events(run_id: str, branch: str | None = None, after: str | None = None, *,
                 settings: Settings | None = None, client: Any = None, follow: bool = True) -> AsyncIterator[RunEvent]:
    """The run's events as they happen, until the branch (`main` by default) ends; each durable
    event's `cursor` is where `after=` resumes. `follow=False`: what is there now, then stop.
    Raises RunNotFoundError for a run neither Temporal nor the store knows."""
    settings = settings or Settings.from_env()
    branch = branch or "main"
    validate_id("run", run_id)
    validate_id("branch", branch)
    async with AsyncExitStack() as stack:
        store = await stack.enter_async_context(checkpoint_store(settings))
        payloads = object_store(settings, settings.payload_url)
        stack.push_async_callback(payloads.aclose)
        outputs = OutputStore(payloads)
        if client is None:
            try:
                client = await connect(settings)
            except Exception:  # noqa: BLE001 - Temporal down: the store still tells a finished run
                client = None
        stored = await store.branches(run_id)
        if client is None and not stored:
            raise RunNotFoundError(f"no run {run_id!r} in the store, and Temporal cannot be reached to look for it")
        if client is not None:
            await run_view(client, run_id, branch, store=store)  # RunNotFoundError for an unknown run
        # After a rollback or a resume the branch goes on as its newest revision (`main.r1`).
        branch = await _current_revision(client, run_id, branch, stored)

        async def state_of(branch_id: str) -> RunState | None:
            if client is None:
                return None
            view = await run_view(client, run_id, branch_id, store=store)
            status = view.status
            return RunState(
                open=view.workflow_status == "running", state=view.state or view.workflow_status,
                step=status.step if status is not None else 0,
                pending=list(status.pending_approvals) if status is not None else [],
                reason=(status.budget_reason or status.last_error or view.failure) if status is not None else view.failure,
                final_answer=status.final_answer if status is not None else None)

        async def resolve(refs: list[str]) -> dict[str, Any]:
            return {ref: await outputs.get(ref) for ref in refs}

        bus = events_bus(settings)
        stack.push_async_callback(bus.aclose)
        reader = BranchReader(run_id, branch, store=store, bus=bus, state_of=state_of, resolve_outputs=resolve,
                              after=after, follow=follow)
        async for event, cursor in reader.events():
            yield event.model_copy(update={"cursor": cursor}) if cursor is not None else event


async def _current_revision(client: Any, run_id: str, branch: str, stored: list[str]) -> str:
    if is_revision_name(branch):  # one revision, named exactly (`main.r0` is `main` itself)
        return revision_branch(*split_revision(branch))
    if client is not None:
        with contextlib.suppress(Exception):  # Temporal away: the store's newest revision
            executions = await branch_executions(client, run_id, branch)
            if executions:
                return executions[-1][0]
    revisions = [split_revision(b)[1] for b in stored if split_revision(b)[0] == branch]
    return revision_branch(branch, max(revisions, default=0))


__all__ = ["events", "RunEvent"]
