"""A worker SIGKILLed while it writes a run's last checkpoint (found by the seeded soak).

The mirror activity had no heartbeat timeout, so a write whose worker died was
retried only after its 60 s start-to-close timeout, and a finished run waited
60 s for its last checkpoints: under the soak's worker kills, runs completed
with their last steps missing from the store (and forks or rollbacks of those
steps impossible until someone ran `rewind mirror`). Here the store (S3 through
a proxy) holds the write of the run's last step until the worker that sent it
is killed; a second worker must take the write over on the heartbeat timeout
and the run must end with every step stored, as a rebuild from history has it.
"""

from __future__ import annotations

import asyncio
import uuid

import boto3
from temporalio.api.enums.v1 import EventType, TimeoutType

from checkpoint_bridge.projection.mirror import mirror_run
from checkpoint_bridge.checkpoints.store import open_checkpoint_store
from fault_helpers import HoldsOneWrite, add_script, assert_chain, assert_well_formed
from helpers import outputs_of, start_agent
from workflows.vocabulary.wire import MIRROR_STEP, MIRROR_STEPS

SCRIPT = [
    {"tool_calls": [{"name": "lookup", "arguments": {"term": "alpha"}}]},
    {"tool_calls": [{"name": "lookup", "arguments": {"term": "beta"}}]},
    {"content": "both terms looked up"},
]
LAST_STEP = len(SCRIPT)
PREFIX = "killed-mirror"
MIRROR_ACTIVITIES = {MIRROR_STEP, MIRROR_STEPS}


async def test_worker_killed_writing_the_last_checkpoint(client, settings, model, spawn_worker, moto_endpoint, tmp_path):
    s3 = boto3.client("s3", endpoint_url=moto_endpoint, region_name="us-east-1")
    bucket = f"mirror-kill-{uuid.uuid4().hex[:8]}"
    s3.create_bucket(Bucket=bucket)
    proxy = HoldsOneWrite(moto_endpoint, f"/branches/main/steps/{LAST_STEP:08d}.json")
    await proxy.start()
    settings.s3_endpoint_url = proxy.url  # both workers' checkpoint store goes through the proxy
    settings.store_url = f"s3://{bucket}/{PREFIX}"
    try:
        first = spawn_worker()
        handle = await start_agent(client, settings, "look up two terms", model=add_script(model, SCRIPT))
        await asyncio.wait_for(proxy.held.wait(), 90)
        first.kill()  # in the middle of the write of the last step's checkpoint
        spawn_worker()
        result = await asyncio.wait_for(handle.result(), 180)

        assert result.status.state == "completed", result.status
        # The run waited for its record: nothing left to `rewind mirror`.
        assert result.status.mirror_pending == 0 and result.status.mirror_error is None, result.status
        assert proxy.writes >= 2, "the held write was never sent again"

        # The killed write was handed over because its heartbeat stopped, not
        # after the whole start-to-close timeout.
        retried = [
            e.activity_task_started_event_attributes.last_failure
            async for e in handle.fetch_history_events()
            if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED
            and e.activity_task_started_event_attributes.attempt > 1
            and e.activity_task_started_event_attributes.last_failure.HasField("timeout_failure_info")
        ]
        assert retried, "no mirror attempt was retried after a timeout"
        assert {f.timeout_failure_info.timeout_type for f in retried} == {TimeoutType.TIMEOUT_TYPE_HEARTBEAT}, retried
        scheduled = {
            e.activity_task_scheduled_event_attributes.activity_type.name
            async for e in handle.fetch_history_events()
            if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
            and e.activity_task_scheduled_event_attributes.heartbeat_timeout.ToSeconds() > 0
        }
        assert scheduled & MIRROR_ACTIVITIES, scheduled

        # Every step is in the store, chained, byte for byte what history rebuilds.
        async with open_checkpoint_store(settings.store_url, endpoint_url=moto_endpoint) as direct:
            checkpoints = await assert_chain(direct, handle.id, LAST_STEP)
            stored = await direct.raw_objects(handle.id)
        assert_well_formed(checkpoints[-1].messages)
        async with open_checkpoint_store(f"file://{tmp_path / 'rebuilt'}") as rebuilt:
            await mirror_run(client, rebuilt, handle.id, outputs=outputs_of(settings))
            assert await rebuilt.raw_objects(handle.id) == stored
    finally:
        proxy.release.set()
        await proxy.stop()
