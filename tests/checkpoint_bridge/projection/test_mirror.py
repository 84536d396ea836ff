"""The history mirror: live checkpoints equal `rewind mirror`, and survive a store outage."""

from __future__ import annotations

import asyncio
import os
import time
import uuid

import boto3
import pytest
from helpers import outputs_of, start_agent
from moto.server import ThreadedMotoServer

from activities.model.llm import ModelEndpoint
from activities.tools.registry import ToolRegistry
from checkpoint_bridge.projection.mirror import mirror_run
from checkpoint_bridge.checkpoints.store import open_checkpoint_store
from rewind.client import run_view
from rewind.temporal.dev_server import free_port
from workflows.vocabulary.ids import checkpoint_id


async def _relative_objects(store, run_id: str) -> dict[str, bytes]:
    return await store.raw_objects(run_id)


async def test_live_mirror_matches_mirror_from_history(worker, client, settings, model, events_file, tmp_path):
    handle = await start_agent(client, settings, "Research these companies: Acme, Globex, Initech.")
    result = await handle.result()
    run_id = handle.id
    assert result.status.mirror_pending == 0 and result.status.mirror_error is None

    async with open_checkpoint_store(settings.store_url) as live:
        summaries = await live.list_checkpoints(run_id)
        assert [s.step_index for s in summaries] == [0, 1, 2, 3]
        assert [s.step_label for s in summaries] == ["start", "search_company x3", "save_report", "final answer"]
        assert all(s.status == "completed" for s in summaries)
        assert summaries[-1].llm_cost_usd == pytest.approx(result.status.cost_usd)
        final = await live.load(checkpoint_id(run_id, "main", 3))
        last_request = [r for r in model.requests() if r["status"] == 200][-1]
        reply = last_request["response"]["choices"][0]["message"]
        # The checkpoint keeps the conversation verbatim; what went out is its wire form.
        from activities.model.wire_format import outgoing_messages

        assert final.messages[-1] == reply
        assert outgoing_messages(final.messages[:-1]) == last_request["messages"]
        assert len(final.tool_call_cache) == 4
        assert final.llm_tokens_used == result.status.total_tokens
        live_objects = await live.raw_objects(run_id)

        # Rebuilt from history alone into an empty store: the same objects, byte for byte.
        async with open_checkpoint_store(f"file://{tmp_path / 'rebuilt'}") as rebuilt:
            report = await mirror_run(client, rebuilt, run_id, outputs=outputs_of(settings))
            assert (report.checkpoints, report.written) == (4, 4)
            assert await rebuilt.raw_objects(run_id) == live_objects

        # Mirroring again into the live store finds everything present.
        again = await mirror_run(client, live, run_id, outputs=outputs_of(settings))
        assert (again.written, again.already_present) == (0, 4)
        assert await live.raw_objects(run_id) == live_objects


@pytest.fixture
def restartable_s3(monkeypatch):
    """A moto S3 server on a fixed port that a test can stop and start again.

    moto keeps its buckets in process memory, so a restart on the same port
    is a store that was down and came back with its data.
    """
    for name, value in {
        "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1", "AWS_CONFIG_FILE": os.devnull,
        "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
    }.items():
        monkeypatch.setenv(name, value)
    port = free_port()
    endpoint = f"http://127.0.0.1:{port}"
    monkeypatch.setenv("AWS_ENDPOINT_URL", endpoint)

    class Server:
        def __init__(self) -> None:
            self.server: ThreadedMotoServer | None = None

        def start(self) -> None:
            self.server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
            self.server.start()

        def stop(self) -> None:
            if self.server is not None:
                self.server.stop()
                self.server = None

    server = Server()
    server.start()
    bucket = f"mirror-{uuid.uuid4().hex[:8]}"
    boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1").create_bucket(Bucket=bucket)
    server.bucket = bucket  # type: ignore[attr-defined]
    server.endpoint = endpoint  # type: ignore[attr-defined]
    yield server
    server.stop()


async def test_store_down_mid_run_then_mirror_catches_up(client, settings, model, events_file, restartable_s3, tmp_path):
    from worker import build_worker

    settings.store_url = f"s3://{restartable_s3.bucket}/runs-prefix"
    settings.s3_endpoint_url = restartable_s3.endpoint
    name = f"s-{uuid.uuid4().hex[:8]}"
    model.add_script(name, [
        {"tool_calls": [{"name": "lookup", "arguments": {"term": "a"}}]},
        {"tool_calls": [{"name": "slow", "arguments": {"label": "x", "seconds": 0.5}}]},
        {"tool_calls": [{"name": "lookup", "arguments": {"term": "b"}}]},
        {"tool_calls": [{"name": "slow", "arguments": {"label": "y", "seconds": 0.5}}]},
        {"content": "done"},
    ])
    registry = ToolRegistry.from_modules(["agent_tools"])
    endpoint = ModelEndpoint(base_url=model.base_url, api_key="test-key")
    async with open_checkpoint_store(settings.store_url, endpoint_url=settings.s3_endpoint_url) as store, build_worker(client, settings, registry, endpoint):
        handle = await start_agent(client, settings, "store outage", model=f"script:{name}")
        run_id = handle.id
        deadline = time.monotonic() + 60
        while 1 not in await store.existing_steps(run_id, "main"):
            assert time.monotonic() < deadline, "step 1 was never mirrored"
            await asyncio.sleep(0.05)
        restartable_s3.stop()
        # The run keeps going while the store is down, and says it is behind.
        seen_lag = None
        while time.monotonic() < deadline:
            view = await run_view(client, run_id)
            failures = [p.get("last_failure", "") for p in view.pending if p["activity"].startswith("mirror_step")]
            if view.status and view.status.step >= 4 and view.status.mirror_pending >= 2 and any(failures):
                seen_lag = view
                break
            await asyncio.sleep(0.1)
        assert seen_lag is not None, "the run did not progress while the store was down"
        failures = [p.get("last_failure", "") for p in seen_lag.pending if p["activity"].startswith("mirror_step")]
        assert any(runs_prefix_or_store_error(f) for f in failures), seen_lag.pending
        print(f"\nwhile the store was down: run at step {seen_lag.status.step}, "
              f"{seen_lag.status.mirror_pending} checkpoints pending; last error: {failures}")
        restartable_s3.start()
        result = await asyncio.wait_for(handle.result(), 90)
        assert result.status.state == "completed"
        assert result.status.mirror_pending == 0
        assert await store.existing_steps(run_id, "main") == {0, 1, 2, 3, 4, 5}
        live_objects = await store.raw_objects(run_id)
        async with open_checkpoint_store(f"file://{tmp_path / 'rebuilt'}") as rebuilt:
            await mirror_run(client, rebuilt, run_id, outputs=outputs_of(settings))
            assert await rebuilt.raw_objects(run_id) == live_objects


def runs_prefix_or_store_error(message: str) -> bool:
    return "s3://" in message or "not mirrored yet" in message
