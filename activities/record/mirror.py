"""The mirror activity: `mirror_steps`, one at a time per run, with the step
records that came since the last one (`mirror_step`, one record, for runs
from before batches).

A step's checkpoint is usually written by the next model call, which carries
its record (activities/record/checkpoint_writer.py); the mirror activity writes what
nothing else will soon: a run's last steps, those before a pause, and what a
carried write could not store (the store was down or slow, a parent missing).
Temporal retries it while the store is down, off the agent loop's critical
path, and `rewind status` shows the lag. `rewind mirror RUN`
(checkpoint_bridge/projection/mirror.py) rebuilds the same bytes from history
with the same fold.
"""

from __future__ import annotations

from activities.record.checkpoint_writer import CheckpointWriter
from activities.liveness.heartbeat import heartbeating
from temporalio import activity
from workflows.vocabulary.contracts import MirrorAck, MirrorBatch, StepRecord
from workflows.vocabulary.ids import checkpoint_id
from workflows.vocabulary.wire import CHECKPOINT_CONFLICT, MIRROR_STEP, MIRROR_STEPS

CONFLICT_ERROR_TYPE = CHECKPOINT_CONFLICT


class MirrorActivities:
    def __init__(self, writer: CheckpointWriter) -> None:
        self._writer = writer

    @activity.defn(name=MIRROR_STEP)
    async def mirror_step(self, record: StepRecord) -> MirrorAck:
        """One step (runs from before batches: one activity per step)."""
        async with heartbeating(f"checkpoint of step {record.step_index}"):
            await self._writer.save(record)
        return MirrorAck(checkpoint_id=checkpoint_id(record.run_id, record.branch_id, record.step_index), written=True)

    @activity.defn(name=MIRROR_STEPS)
    async def mirror_steps(self, batch: MirrorBatch) -> list[MirrorAck]:
        """The steps that piled up since the run's last write, in order. A retry after
        a partial write finds the written ones there (a no-op) and goes on."""
        acks = []
        # Beats while it writes (the workflow sets a heartbeat timeout): a worker
        # killed mid-write hands the batch to another one within seconds.
        async with heartbeating("checkpoint of step " + ", ".join(str(r.step_index) for r in batch.records)[:150]):
            for record in batch.records:
                await self._writer.save(record)
                acks.append(MirrorAck(checkpoint_id=checkpoint_id(record.run_id, record.branch_id,
                                                                  record.step_index), written=True))
        return acks
