"""Issue 7, item 4: a checkpoint store that fails 30% of its writes.

An HTTP proxy (fault_helpers.FlakyS3Proxy) sits between the worker and moto's
S3 server. Of the PUTs of checkpoint objects it fails 30% (500, 503, a
dropped connection; a third of those *after* S3 stored the object, so
the retry finds it there) and delays another 20% by 1-2 s. The payload store
stays a local folder, so only the checkpoint store is flaky. A 30-step run
must complete, every step 0..30 must be stored once (one S3 version per
key: nothing was overwritten), chained, and byte-identical to what
`rewind mirror` rebuilds from history into a fresh store.
"""

from __future__ import annotations

import asyncio
import time
import uuid

import boto3
from temporalio.api.enums.v1 import EventType

from activities.model.llm import ModelEndpoint
from activities.tools.registry import ToolRegistry
from checkpoint_bridge.projection.mirror import mirror_run
from checkpoint_bridge.stores import S3ObjectStore
from checkpoint_bridge.checkpoints.store import CheckpointStore, open_checkpoint_store
from fault_helpers import FlakyS3Proxy, add_script, assert_chain, assert_well_formed, percentile
from helpers import outputs_of, start_agent

STEPS = 30
SEED = 30  # its first 31 draws: 10 failures (32%) of all six kinds, 6 delays (19%); 4 + 1 in the first 10
PREFIX = "flaky"


class MirrorFellBehind(AssertionError):
    """The live mirror had not stored every step when the run completed (the known bug below)."""


async def test_store_failing_30pct_of_checkpoint_writes(client, settings, model, events_file, moto_endpoint, monkeypatch, tmp_path):
    from worker import build_worker

    s3 = boto3.client("s3", endpoint_url=moto_endpoint, region_name="us-east-1")
    bucket = f"flaky-{uuid.uuid4().hex[:8]}"
    s3.create_bucket(Bucket=bucket)
    # Versioning keeps every PUT that S3 accepted: an overwrite would show as a second version.
    s3.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})

    proxy = FlakyS3Proxy(moto_endpoint, seed=SEED, fail_rate=0.3, delay_rate=0.2, delay_s=(1.0, 2.0))
    await proxy.start()
    settings.s3_endpoint_url = proxy.url  # the worker's S3 store goes through the proxy
    settings.store_url = f"s3://{bucket}/{PREFIX}"
    assert settings.payload_url.startswith("file://")  # only the checkpoint store is flaky

    turns = [{"tool_calls": [{"name": "lookup", "arguments": {"term": f"term-{i}"}}]} for i in range(STEPS - 1)]
    model_name = add_script(model, [*turns, {"content": "looked everything up"}])
    registry = ToolRegistry.from_modules(["agent_tools"])
    endpoint = ModelEndpoint(base_url=model.base_url, api_key="test-key")
    direct = CheckpointStore(S3ObjectStore(bucket, PREFIX, endpoint_url=moto_endpoint))  # around the proxy
    try:
        async with build_worker(client, settings, registry, endpoint):
            started = time.time()
            handle = await start_agent(client, settings, "thirty lookups through a flaky store", model=model_name)
            result = await asyncio.wait_for(handle.result(), 240)
            took = time.time() - started
        run_id = handle.id
        assert result.status.state == "completed", result.status
        assert result.status.step == STEPS
        stats = proxy.stats

        # The faults really happened, of every kind.
        refused = sum(codes.count(412) for codes in stats.upstream_status.values())
        assert stats.failed >= 3 and stats.delayed >= 1, stats  # the seed's first 10 draws guarantee both
        assert stats.dropped_after + stats.failed_after >= 1, stats  # writes that succeeded, then looked failed
        assert refused >= 1, "no retried write ever met its own earlier success (If-None-Match refusal)"

        # Whatever the store holds was written once (one S3 version per key:
        # no retry overwrote anything) and is exactly what `rewind mirror`
        # rebuilds from history. Packs aside: they are copies, which a newer
        # pack's writer deletes (and a write retried after that may make again).
        stored = await direct.raw_objects(run_id)
        versions: dict[str, int] = {}
        for page in s3.get_paginator("list_object_versions").paginate(Bucket=bucket, Prefix=f"{PREFIX}/runs/{run_id}/"):
            for v in page.get("Versions", []):
                if "/packs/" not in v["Key"]:
                    versions[v["Key"]] = versions.get(v["Key"], 0) + 1
            assert not [m for m in page.get("DeleteMarkers", []) if "/packs/" not in m["Key"]]
        assert len(versions) == len([k for k in stored if "/packs/" not in k]) and set(versions.values()) <= {1}, versions
        async with open_checkpoint_store(f"file://{tmp_path / 'rebuilt'}") as rebuilt:
            report = await mirror_run(client, rebuilt, run_id, outputs=outputs_of(settings))
            assert report.written == STEPS + 1
            from_history = await rebuilt.raw_objects(run_id)
        assert {k: from_history[k] for k in stored if "/packs/" not in k} == {k: v for k, v in stored.items() if "/packs/" not in k}
        # Each pack the run needs (what one writer leaves) is there, with that writer's bytes.
        assert all(stored.get(k) == v for k, v in from_history.items() if "/packs/" in k)

        # Mirror lag: when S3 first held each step vs the step's created_at.
        created = {r.step_index: r.created_at.timestamp() for r in await _records(client, run_id)}
        lags, missing = [], []
        for step in range(STEPS + 1):
            path = f"/{bucket}/{PREFIX}/runs/{run_id}/branches/main/steps/{step:08d}.json"
            if path in stats.first_stored:
                lags.append(stats.first_stored[path] - created[step])
            else:
                missing.append(step)
        assert lags and min(lags) > -0.5, lags  # sanity: no object before its step existed
        print(
            f"\n[flaky store] {STEPS}-step run completed in {took:.1f}s; proxy saw {stats.writes} checkpoint PUTs: "
            f"failed {stats.failed} ({stats.failed_500}x500, {stats.failed_503}x503, {stats.dropped_before} dropped before "
            f"the write, {stats.dropped_after} dropped after it, {stats.failed_after} 500 after it), delayed {stats.delayed}, "
            f"{refused} retries refused by If-None-Match; mirror lag over the {len(lags)} mirrored steps: "
            f"p50 {percentile(lags, 50):.2f}s, max {max(lags):.2f}s; per step: "
            + " ".join(f"{lag:.1f}" for lag in lags)
            + f"; not mirrored when the run ended: {missing or 'none'} ({result.status.mirror_error})"
        )

        # No mirror_step gave up (a conflict is non-retryable: a write retried
        # after a success that looked like a failure must not be one).
        gave_up = [
            e.activity_task_failed_event_attributes.failure.message
            async for e in handle.fetch_history_events()
            if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_FAILED
        ]
        assert not gave_up, gave_up

        # The live mirror kept up: every step 0..30 stored by the time the run completed, chained.
        if result.status.mirror_pending or result.status.mirror_error or missing:
            raise MirrorFellBehind(
                f"{result.status.mirror_pending} checkpoints still unmirrored when the run completed "
                f"(steps {missing}): {result.status.mirror_error}"
            )
        checkpoints = await assert_chain(direct, run_id, STEPS)
        assert_well_formed(checkpoints[-1].messages)
        assert stored == from_history
    finally:
        await direct.aclose()
        await proxy.stop()


async def _records(client, run_id: str):
    from checkpoint_bridge.projection.projector import chain_events, step_records

    return await step_records(await chain_events(client, run_id), client.data_converter)
