"""The live mirror: the `mirror_step` activity that ends every step.

It writes the step's checkpoint to the store, off the agent loop's critical
path; Temporal retries it while the store is down, and `rewind status` shows
the lag. `rewind mirror RUN` (checkpoint_bridge/mirror.py) rebuilds the same
bytes from history with the same fold.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities.redaction import Redactor
from checkpoint_bridge.projector import record_parts
from checkpoint_bridge.store import CheckpointStore
from workflows.contracts import MirrorAck, StepRecord
from workflows.errors import CheckpointError, CheckpointNotFoundError, StoreUnavailableError
from workflows.ids import checkpoint_id
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
        cid = checkpoint_id(record.run_id, record.branch_id, record.step_index)
        try:
            parts = record_parts(record)
            # What the step added, plus one small read of the parent's object
            # (none when this worker wrote it): no work that grows with the run.
            await self._store.save_step(parts)
        except CheckpointNotFoundError:
            # Every object is a delta of its parent, so checkpoints are written in
            # step order: wait for the parent's mirror. Retry soon and at a fixed
            # pace, not on the exponential store backoff: after a store hiccup
            # every later step waits on this, and backing off to 10 s each would
            # let the backlog grow at every step.
            raise ApplicationError(
                f"checkpoint {record.parent_id} is not mirrored yet; step {record.step_index} waits for it",
                type="ParentNotMirrored",
                next_retry_delay=timedelta(milliseconds=250),
            ) from None
        except StoreUnavailableError as exc:
            raise self._failure(exc, "StoreUnavailable") from None
        except CheckpointError as exc:
            # Exists with other bytes, a corrupt parent, or not storable at all: retrying cannot help.
            raise self._failure(exc, CONFLICT_ERROR_TYPE, retry=False) from None
        return MirrorAck(checkpoint_id=cid, written=True)
