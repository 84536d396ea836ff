"""Writing step records to the checkpoint store, for every activity that does.

Two kinds of activity write checkpoints. The mirror activity (activities/record/mirror.py)
writes what it was given and lets Temporal retry it until the store takes it. A
model call carries the records of the steps that ended since the run's last write
(LlmRequest.checkpoints) and writes them beside its own work: a step then costs no
activity of its own. A carried write never fails the model call; it reports how
many records it wrote (in order), and the workflow hands the rest to the mirror
activity, which waits out a store that is down.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import time
from datetime import datetime, timedelta, timezone
from typing import Awaitable, TypeVar

from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities.record.redaction import Redactor
from checkpoint_bridge.events.bus import Publisher
from checkpoint_bridge.checkpoints.outputs import OutputStore
from checkpoint_bridge.checkpoints.store import CheckpointStore
from checkpoint_bridge.projection.mirror import mirror_run
from checkpoint_bridge.projection.projector import record_parts
from workflows.vocabulary.contracts import CarriedWrite, StepRecord
from workflows.vocabulary.errors import CheckpointError, CheckpointNotFoundError, StoreUnavailableError, TranscriptError
from workflows.vocabulary.events import checkpoint_event
from workflows.vocabulary.ids import parse_checkpoint_id, workflow_id_for
from workflows.vocabulary import metrics
from workflows.vocabulary.wire import CHECKPOINT_CONFLICT

log = logging.getLogger("rewind.mirror")

# A parent still missing after this many 250 ms waits (~5 s) is not late but lost (a
# Redis hot tier that lost its data before flushing, a store restored from an older
# backup): its branch is rebuilt from Temporal history, as `rewind mirror` would.
REBUILD_AFTER_ATTEMPTS = 20
# How long a model call waits for the records it carries once its own work is done. A
# store slower than that is left to the mirror activity; the run does not wait for it.
CARRIED_WRITE_TIMEOUT_S = 5.0

T = TypeVar("T")


async def written_beside(work: Awaitable[T], write: Awaitable[CarriedWrite] | None) -> tuple[T, CarriedWrite | None]:
    """An activity's `work` with the carried step records' `write` beside it: neither waits for
    the other, and both are done on return. Cancelled, the write is cancelled too; failed, the
    write ends first, and what it wrote stays written (the retry or the mirror writes the
    records again, a no-op)."""
    carried = asyncio.ensure_future(write) if write is not None else None
    try:
        if carried is not None:
            # The write first, up to its first wait for the store: awaited directly, the work
            # would run its own CPU-bound start first (a long conversation's request is built,
            # encoded and sent before its first wait), and the checkpoint would wait behind it.
            await asyncio.sleep(0)
        result = await work
    except asyncio.CancelledError:
        if carried is not None:
            carried.cancel()
        if inspect.iscoroutine(work):
            work.close()  # cancelled before it began: nothing of it ran
        raise
    except BaseException:
        if carried is not None:
            await carried
        raise
    return result, (await carried if carried is not None else None)


class CheckpointWriter:
    def __init__(self, store: CheckpointStore, redactor: Redactor, outputs: OutputStore | None = None,
                 events: Publisher | None = None) -> None:
        self._store = store
        # The run's `checkpoint` events go out here once their checkpoints are stored (docs/streaming.md).
        self._events = events
        self._outputs = outputs  # where tool outputs named by reference are (the payload store)
        # Step records arrive redacted (the model and tool activities redact);
        # what is left to redact is the store's own error text (an S3 error
        # can quote a signed URL or a credential).
        self._redact = redactor

    def _failure(self, exc: Exception, kind: str, *, retry: bool = True) -> ApplicationError:
        # Without the cause chain: Temporal keeps only ~2 KB of a retrying
        # activity's last failure, and that text is what `rewind status` shows.
        return ApplicationError(self._redact.redact_text(str(exc))[:1500], type=kind, non_retryable=not retry)

    async def _write(self, record: StepRecord) -> None:
        meter = activity.metric_meter()
        try:
            if self._outputs is not None:
                record = await self._outputs.resolve_record(record)
            # What the step added, plus one small read of the parent's object
            # (none when this worker wrote it): no work that grows with the run.
            started = time.monotonic()
            await self._store.save_step(record_parts(record))
            if self._events is not None:
                # The step's last durable event: a reader can read the checkpoint from here on.
                self._events.publish(checkpoint_event(record).model_dump(mode="json"))
            metrics.observe_ms(meter, metrics.CHECKPOINT_WRITE_MS, (time.monotonic() - started) * 1000)
            lag = datetime.now(timezone.utc) - record.created_at
            metrics.observe_ms(meter, metrics.MIRROR_LAG_MS, lag.total_seconds() * 1000)
        except (StoreUnavailableError, TranscriptError) as exc:
            metrics.count(meter, metrics.STORE_ERRORS, store="checkpoints" if isinstance(exc, StoreUnavailableError)
                          else "payloads", kind=type(exc).__name__)
            raise

    async def save(self, record: StepRecord) -> None:
        """The mirror activity's write: an error says whether Temporal should retry it."""
        try:
            await self._write(record)
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
            raise self._failure(exc, "StoreUnavailable") from None
        except CheckpointError as exc:
            # Exists with other bytes, a corrupt parent, or not storable at all: retrying cannot help.
            raise self._failure(exc, CHECKPOINT_CONFLICT, retry=False) from None

    async def save_carried(self, records: list[StepRecord]) -> CarriedWrite:
        """A model call's carried records, in order, up to the first that fails; never raises
        (what is not written goes to the mirror activity, which retries, waits for a missing
        parent and reports a conflict)."""
        written = 0
        try:
            async with asyncio.timeout(CARRIED_WRITE_TIMEOUT_S):
                for record in records:
                    await self._write(record)
                    written += 1
        except TimeoutError:
            return CarriedWrite(written=written, error=f"the checkpoint store took over {CARRIED_WRITE_TIMEOUT_S:g}s")
        except Exception as exc:  # noqa: BLE001 - any failure: the mirror activity writes the rest
            return CarriedWrite(written=written, error=self._redact.redact_text(f"{type(exc).__name__}: {exc}")[:500])
        return CarriedWrite(written=written)

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
