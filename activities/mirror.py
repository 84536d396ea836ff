"""The live mirror: the `mirror_steps` activity, one at a time per run, with
the step records that came since the last one (`mirror_step`, one record,
for runs from before batches).

It writes the steps' checkpoints to the store, in order, off the agent
loop's critical path; Temporal retries it while the store is down, and
`rewind status` shows the lag. `rewind mirror RUN` (checkpoint_bridge/projection/mirror.py) rebuilds the same
bytes from history with the same fold.
"""

from __future__ import annotations

import time
from datetime import datetime, timedelta, timezone

import logging

from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities.heartbeat import heartbeating
from activities.redaction import Redactor
from checkpoint_bridge.projection.mirror import mirror_run
from checkpoint_bridge.checkpoints.outputs import OutputStore
from checkpoint_bridge.projection.projector import record_parts
from checkpoint_bridge.checkpoints.store import CheckpointStore
from workflows.contracts import MirrorAck, MirrorBatch, StepRecord
from workflows.errors import CheckpointError, CheckpointNotFoundError, StoreUnavailableError, TranscriptError
from workflows.ids import checkpoint_id, parse_checkpoint_id, workflow_id_for
from workflows import metrics
from workflows.wire import CHECKPOINT_CONFLICT, MIRROR_STEP, MIRROR_STEPS

CONFLICT_ERROR_TYPE = CHECKPOINT_CONFLICT

log = logging.getLogger("rewind.mirror")

# A parent still missing after this many 250 ms waits (~5 s) is not late but lost (a
# Redis hot tier that lost its data before flushing, a store restored from an older
# backup): its branch is rebuilt from Temporal history, as `rewind mirror` would.
REBUILD_AFTER_ATTEMPTS = 20


class MirrorActivities:
    def __init__(self, store: CheckpointStore, redactor: Redactor, outputs: OutputStore | None = None) -> None:
        self._store = store
        self._outputs = outputs  # where tool outputs named by reference are (the payload store)
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
        """One step (runs from before batches: one activity per step)."""
        async with heartbeating(f"checkpoint of step {record.step_index}"):
            await self._save(record)
        return MirrorAck(checkpoint_id=checkpoint_id(record.run_id, record.branch_id, record.step_index), written=True)

    @activity.defn(name=MIRROR_STEPS)
    async def mirror_steps(self, batch: MirrorBatch) -> list[MirrorAck]:
        """The steps that piled up since the run's last mirror, in order. A retry after
        a partial write finds the written ones there (a no-op) and goes on."""
        acks = []
        # Beats while it writes (the workflow sets a heartbeat timeout): a worker
        # killed mid-write hands the batch to another one within seconds.
        async with heartbeating("checkpoint of step " + ", ".join(str(r.step_index) for r in batch.records)[:150]):
            for record in batch.records:
                await self._save(record)
                acks.append(MirrorAck(checkpoint_id=checkpoint_id(record.run_id, record.branch_id,
                                                                  record.step_index), written=True))
        return acks

    async def _save(self, record: StepRecord) -> None:
        meter = activity.metric_meter()
        try:
            if self._outputs is not None:
                record = await self._outputs.resolve_record(record)
            # What the step added, plus one small read of the parent's object
            # (none when this worker wrote it): no work that grows with the run.
            started = time.monotonic()
            await self._store.save_step(record_parts(record))
            metrics.observe_ms(meter, metrics.CHECKPOINT_WRITE_MS, (time.monotonic() - started) * 1000)
            lag = datetime.now(timezone.utc) - record.created_at
            metrics.observe_ms(meter, metrics.MIRROR_LAG_MS, lag.total_seconds() * 1000)
        except CheckpointNotFoundError:
            # Every object is a delta of its parent, so checkpoints are written in
            # step order: wait for the parent's mirror (the previous run of a
            # continued run, or another branch's fork point). Retry soon and at a
            # fixed pace, not on the exponential store backoff.
            if record.parent_id and activity.info().attempt % REBUILD_AFTER_ATTEMPTS == 0:
                await self._rebuild_parent(record.parent_id)
            raise ApplicationError(
                f"checkpoint {record.parent_id} is not mirrored yet; step {record.step_index} waits for it",
                type="ParentNotMirrored",
                next_retry_delay=timedelta(milliseconds=250),
            ) from None
        except (StoreUnavailableError, TranscriptError) as exc:
            # The checkpoint store or the payload store (a referenced tool output): retried.
            metrics.count(meter, metrics.STORE_ERRORS, store="checkpoints" if isinstance(exc, StoreUnavailableError)
                          else "payloads", kind=type(exc).__name__)
            raise self._failure(exc, "StoreUnavailable") from None
        except CheckpointError as exc:
            # Exists with other bytes, a corrupt parent, or not storable at all: retrying cannot help.
            raise self._failure(exc, CONFLICT_ERROR_TYPE, retry=False) from None

    async def _rebuild_parent(self, parent_id: str) -> None:
        """Write the parent's branch again from its history (what the store lacks; identical bytes)."""
        run_id, branch_id, _ = parse_checkpoint_id(parent_id)
        try:
            report = await mirror_run(activity.client(), self._store, workflow_id_for(run_id, branch_id),
                                      run_id=run_id, branch_id=branch_id, outputs=self._outputs)
        except Exception as exc:  # noqa: BLE001 - the wait goes on; the next rebuild may get further
            log.warning("checkpoint %s is missing from %s and could not be rebuilt from history yet: %s",
                        parent_id, self._store.url, self._redact.redact_text(str(exc))[:500])
            return
        if report.written:
            log.warning("checkpoint %s was missing from %s: rebuilt %d checkpoint(s) of run %s branch %s from "
                        "Temporal history", parent_id, self._store.url, report.written, run_id, branch_id)
