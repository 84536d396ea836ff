"""The mirror: writes each step's checkpoint to the store.

Live, as the `mirror_step` activity that every step ends with (off the agent
loop's critical path; Temporal retries it while the store is down). After the
fact, as `mirror_run` (`rewind mirror RUN`), which rebuilds every checkpoint
of a run from its history with the same fold, so it writes identical bytes
and finds nothing to do for a run the live mirror kept up with.
"""

from __future__ import annotations

from datetime import timedelta

from pydantic import BaseModel
from temporalio import activity
from temporalio.client import Client
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError, RPCStatusCode

from activities.redaction import Redactor
from checkpoint_bridge.projector import apply_record, project_workflow
from checkpoint_bridge.store import CheckpointStore
from workflows.contracts import MirrorAck, StepRecord
from workflows.errors import (
    CheckpointError,
    CheckpointNotFoundError,
    CorruptCheckpointError,
    RunNotFoundError,
    StoreUnavailableError,
)
from workflows.wire import CHECKPOINT_CONFLICT, MIRROR_STEP

CONFLICT_ERROR_TYPE = CHECKPOINT_CONFLICT


class MirrorActivities:
    def __init__(self, store: CheckpointStore, redactor: Redactor) -> None:
        self._store = store
        # Step records arrive redacted (the model and tool activities redact);
        # what is left to redact is the store's own error text (an S3 error
        # can quote a signed URL or a credential).
        self._redact = redactor

    def _failure(self, exc: Exception, kind: str, *, retry: bool = True) -> ApplicationError:
        # Without the cause chain: Temporal keeps only ~2 KB of a retrying
        # activity's last failure, and that text is what `rewind status` shows.
        return ApplicationError(self._redact.redact_text(str(exc))[:1500], type=kind, non_retryable=not retry)

    @activity.defn(name=MIRROR_STEP)
    async def mirror_step(self, record: StepRecord) -> MirrorAck:
        try:
            parent = await self._store.load(record.parent_id) if record.parent_id else None
        except CheckpointNotFoundError:
            # Checkpoints are written in step order, so every object can be a
            # delta of its parent: wait for the parent's mirror. Retry soon and
            # at a fixed pace, not on the exponential store backoff: after a
            # store hiccup every later step waits on this, and backing off to
            # 10 s each would let the backlog grow at every step.
            raise ApplicationError(
                f"checkpoint {record.parent_id} is not mirrored yet; step {record.step_index} waits for it",
                type="ParentNotMirrored",
                next_retry_delay=timedelta(milliseconds=250),
            ) from None
        except StoreUnavailableError as exc:
            raise self._failure(exc, "StoreUnavailable") from None
        except CorruptCheckpointError as exc:
            raise self._failure(exc, CONFLICT_ERROR_TYPE, retry=False) from None
        checkpoint = apply_record(parent, record)
        try:
            await self._store.save(checkpoint)
        except StoreUnavailableError as exc:
            raise self._failure(exc, "StoreUnavailable") from None
        except CheckpointError as exc:
            # Exists with other bytes, or not storable at all: retrying cannot help.
            raise self._failure(exc, CONFLICT_ERROR_TYPE, retry=False) from None
        return MirrorAck(checkpoint_id=checkpoint.checkpoint_id, written=True)


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
) -> MirrorReport:
    """Write every checkpoint of one branch workflow that the store lacks (`run_id`
    and `branch_id` name it for the report when Temporal no longer has it)."""
    try:
        checkpoints = await project_workflow(client, workflow_id, base_loader=store.load)
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
    if not checkpoints:
        return MirrorReport(run_id=workflow_id, branch_id="main", checkpoints=0, written=0, already_present=0)
    first = checkpoints[0]
    present = await store.existing_steps(first.run_id, first.branch_id)
    written = 0
    for cp in checkpoints:
        await store.save(cp)  # verifies identical content where it already exists
        written += cp.step_index not in present
    return MirrorReport(
        run_id=first.run_id, branch_id=first.branch_id, checkpoints=len(checkpoints),
        written=written, already_present=len(checkpoints) - written,
    )
