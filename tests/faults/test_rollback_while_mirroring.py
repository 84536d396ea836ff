"""A rollback that stops a run while its last checkpoint is still to be written (found by the seeded soak).

Seed 466088: a run had finished its loop and waited for its last step's
checkpoint when a rollback cancelled it. The run ended as cancelled at once;
the mirror activity of that step, scheduled and not yet done, was abandoned,
and the step stayed only in history (`rewind mirror` rebuilt a checkpoint the
store never had). Here the worker writing that checkpoint is killed (its
write held by an S3 proxy) and the rollback comes while the write waits to be
taken over: the stopped run must still write it before it ends.
"""

from __future__ import annotations

import asyncio
import uuid

import boto3
from temporalio.api.enums.v1 import EventType
from temporalio.client import WorkflowExecutionStatus

from checkpoint_bridge.projection.mirror import mirror_run
from checkpoint_bridge.checkpoints.store import open_checkpoint_store
from fault_helpers import HoldsOneWrite, add_script, wait_until
from helpers import outputs_of, start_agent
from rewind import rollback
from workflows.vocabulary.contracts import AgentStatus
from workflows.vocabulary.wire import STATUS_QUERY

SCRIPT = [
    {"tool_calls": [{"name": "lookup", "arguments": {"term": "alpha"}}]},
    {"tool_calls": [{"name": "lookup", "arguments": {"term": "beta"}}]},
    {"content": "both terms looked up"},
]
LAST_STEP = len(SCRIPT)


async def _cancel_requested(handle) -> bool:  # type: ignore[no-untyped-def]
    return any([e.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CANCEL_REQUESTED
                async for e in handle.fetch_history_events()])


async def test_a_rollback_while_the_last_checkpoint_is_unwritten_keeps_it(
        client, settings, model, spawn_worker, moto_endpoint, tmp_path):
    s3 = boto3.client("s3", endpoint_url=moto_endpoint, region_name="us-east-1")
    bucket = f"rollback-mirror-{uuid.uuid4().hex[:8]}"
    s3.create_bucket(Bucket=bucket)
    proxy = HoldsOneWrite(moto_endpoint, f"/branches/main/steps/{LAST_STEP:08d}.json")
    await proxy.start()
    settings.s3_endpoint_url = proxy.url
    settings.store_url = f"s3://{bucket}/rolled"
    try:
        first = spawn_worker()
        handle = await start_agent(client, settings, "look up two terms", model=add_script(model, SCRIPT))
        await asyncio.wait_for(proxy.held.wait(), 90)
        # The run has finished its loop and waits for this write; its worker dies in it.
        first.kill()
        async with open_checkpoint_store(settings.store_url, endpoint_url=proxy.url) as store:
            rolling = asyncio.create_task(rollback(client, settings, store, handle.id, 1))
            await wait_until(lambda: _cancel_requested(handle), "the rollback's cancellation", 60)
            # Only now a worker takes the cancellation (and, with it, the write's retry).
            spawn_worker()
            result = await asyncio.wait_for(rolling, 120)
            assert result.stopped_workflow == handle.id
            assert (await handle.describe()).status == WorkflowExecutionStatus.CANCELED
            outcome = await asyncio.wait_for(result.continued.handle.result(), 120)
            assert outcome.status.state == "completed" and outcome.status.branch_id == "main.r1"

            # Every step the stopped run recorded is stored, as history rebuilds it,
            # and the rollback's markers hide the steps after 1 from the branch's line.
            stored = await store.raw_objects(handle.id)
            statuses = {(s.branch_id, s.step_index): s.status for s in await store.list_checkpoints(handle.id)}
        assert all(statuses.get(("main", step)) == "invalidated" for step in range(2, LAST_STEP + 1)), statuses
        async with open_checkpoint_store(f"file://{tmp_path / 'rebuilt'}") as rebuilt:
            await mirror_run(client, rebuilt, handle.id, outputs=outputs_of(settings))
            expected = await rebuilt.raw_objects(handle.id)
        assert f"runs/{handle.id}/branches/main/steps/{LAST_STEP:08d}.json" in expected
        assert {k: stored.get(k) for k in expected} == expected
        # The stopped run says nothing is left to `rewind mirror`.
        status = await handle.query(STATUS_QUERY, result_type=AgentStatus)
        assert status.state == "cancelled" and status.mirror_pending == 0 and status.mirror_error is None, status
    finally:
        proxy.release.set()
        await proxy.stop()
