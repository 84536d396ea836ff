"""`rewind mirror RUN`: rebuild a run's checkpoints from its Temporal history.

The live mirror is the `mirror_step` activity (activities/record/mirror.py) that
every step ends with; this rebuilds every checkpoint of a branch workflow
from the same step records in its history, written the same way
(`CheckpointStore.save_step`), so it writes identical bytes and finds nothing
to do for a run the live mirror kept up with.
"""

from __future__ import annotations

from pydantic import BaseModel
from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from checkpoint_bridge.checkpoints.outputs import OutputStore
from checkpoint_bridge.projection.projector import chain_events, record_parts, step_records
from checkpoint_bridge.checkpoints.store import CheckpointStore
from workflows.vocabulary.errors import RunNotFoundError, TranscriptError


class MirrorReport(BaseModel):
    run_id: str
    branch_id: str
    checkpoints: int
    written: int
    already_present: int
    # False when Temporal no longer has the workflow (past the namespace's
    # retention): the stored checkpoints are then the only copy, kept as they are.
    history: bool = True


async def mirror_run(
    client: Client, store: CheckpointStore, workflow_id: str, *, run_id: str | None = None, branch_id: str | None = None,
    outputs: OutputStore | None = None,
) -> MirrorReport:
    """Write every checkpoint of one branch workflow that the store lacks (`run_id`
    and `branch_id` name it for the report when Temporal no longer has it).
    `outputs` is the payload store's tool outputs, which history names by
    reference (checkpoint_bridge/checkpoints/outputs.py).

    A branch's first step continues a checkpoint of another branch (a fork point):
    that one must be in the store already (mirror `main` first)."""
    try:
        events = await chain_events(client, workflow_id)
    except RPCError as exc:
        if exc.status != RPCStatusCode.NOT_FOUND:
            raise
        if run_id is None:
            run_id, _, branch_id = workflow_id.partition("--")
        branch = branch_id or "main"
        stored = await store.existing_steps(run_id, branch)
        if not stored:
            raise RunNotFoundError(
                f"no workflow {workflow_id!r} in Temporal and no checkpoints of it in {store.url}; check the run id"
            ) from None
        return MirrorReport(run_id=run_id, branch_id=branch, checkpoints=len(stored), written=0,
                            already_present=len(stored), history=False)
    by_step = {}
    for record in await step_records(events, client.data_converter):
        by_step.setdefault(record.step_index, record)
    if not by_step:
        return MirrorReport(run_id=workflow_id, branch_id="main", checkpoints=0, written=0, already_present=0)
    records = [by_step[step] for step in sorted(by_step)]
    written = 0
    # Every referenced tool output first: a rebuild that cannot finish writes nothing.
    if outputs is not None:
        records = [await outputs.resolve_record(record) for record in records]
    elif any(c.output_ref for record in records for c in record.new_tool_calls):
        raise TranscriptError(
            f"{workflow_id} names tool outputs stored in the payload store; rebuild it with the payload "
            "store at hand (`rewind mirror` opens REWIND_PAYLOADS)"
        )
    for record in records:
        # Verifies identical content where the checkpoint already exists.
        written += await store.save_step(record_parts(record))
    first = records[0]
    return MirrorReport(
        run_id=first.run_id, branch_id=first.branch_id, checkpoints=len(records),
        written=written, already_present=len(records) - written,
    )


async def run_branches(client: Client, store: CheckpointStore, run_id: str) -> list[str]:
    """Every branch of `run_id` that the store or Temporal knows: forks, rollback
    revisions and sub-agent runs are workflows `RUN--BRANCH`, so a store that lost
    (or never had) a branch's checkpoints still gets it rebuilt. `main` first."""
    from temporalio.service import RPCError as _RPCError

    from workflows.vocabulary.wire import AGENT_WORKFLOW, PIPELINE_WORKFLOW

    found = set(await store.branches(run_id)) | {"main"}
    prefix = f"{run_id}--"
    try:
        async for wf in client.list_workflows(f"(WorkflowType = '{AGENT_WORKFLOW}' OR WorkflowType = "
                                              f"'{PIPELINE_WORKFLOW}') AND WorkflowId STARTS_WITH '{prefix}'"):
            if wf.id.startswith(prefix):
                found.add(wf.id[len(prefix):])
    except _RPCError as exc:
        # A visibility store without STARTS_WITH: the store's branches are all there is to go on.
        if exc.status != RPCStatusCode.INVALID_ARGUMENT:
            raise
    return ["main", *sorted(found - {"main"})]


async def mirror_branches(
    client: Client, store: CheckpointStore, run_id: str, branches: list[str], *, outputs: OutputStore | None = None,
) -> list[MirrorReport]:
    """`mirror_run` for each branch, each after the branch it was forked from: a branch's
    first step continues a checkpoint of another branch, which must be stored first, so a
    branch whose rebuild fails is tried again after the others until no round gets further."""
    from workflows.vocabulary.ids import workflow_id_for

    reports: dict[str, MirrorReport] = {}
    if "main" in branches:  # the root of every other branch: its errors are the run's
        reports["main"] = await mirror_run(client, store, workflow_id_for(run_id, "main"), run_id=run_id,
                                           branch_id="main", outputs=outputs)
    left = [b for b in branches if b != "main"]
    while left:
        failed: list[tuple[str, Exception]] = []
        for branch in left:
            try:
                reports[branch] = await mirror_run(client, store, workflow_id_for(run_id, branch), run_id=run_id,
                                                   branch_id=branch, outputs=outputs)
            except Exception as exc:  # noqa: BLE001 - its fork point may come with a later branch
                failed.append((branch, exc))
        if len(failed) == len(left):
            raise failed[0][1]
        left = [branch for branch, _ in failed]
    return [reports[b] for b in branches if b in reports]
