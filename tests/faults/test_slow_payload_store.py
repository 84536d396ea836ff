"""A slow payload store must not look like a dead worker to Temporal.

The model-call activity stores the step's new messages (a transcript
segment) before it calls the model, and fits a long conversation to the
context window; both can take longer than the call's heartbeat timeout on a
loaded machine or behind a slow S3. An attempt that does not beat while it
does so is timed out and retried, and every retry is as slow: the run never
gets past the step (CI saw exactly that with a 3 MB tool result). Here every
segment write is delayed by 2.5 s behind a proxy, with a 1 s heartbeat
timeout: the run must complete without a single heartbeat timeout.
"""

from __future__ import annotations

import asyncio
import uuid

import boto3
from aiohttp import web
from temporalio.api.enums.v1 import EventType

from activities.model.llm import ModelEndpoint
from activities.tools.registry import ToolRegistry
from fault_helpers import S3Proxy, add_script
from helpers import start_agent

DELAY_S = 2.5
HEARTBEAT_S = 1.0


class SlowSegmentWrites(S3Proxy):
    """Delays every PUT of a transcript segment by DELAY_S, then forwards it."""

    delayed = 0

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        if request.method == "PUT" and "/segments/" in request.path:
            self.delayed += 1
            await asyncio.sleep(DELAY_S)
        status, headers, data = await self._forward(request, body)
        return web.Response(status=status, headers=headers, body=data)


async def test_model_call_beats_while_the_transcript_store_is_slow(client, settings, model, events_file, moto_endpoint):
    from worker import build_worker

    bucket = f"slow-{uuid.uuid4().hex[:8]}"
    boto3.client("s3", endpoint_url=moto_endpoint, region_name="us-east-1").create_bucket(Bucket=bucket)
    proxy = SlowSegmentWrites(moto_endpoint)
    await proxy.start()
    settings.s3_endpoint_url = proxy.url
    settings.payload_url = f"s3://{bucket}/live"  # transcripts (and only they) behind the slow proxy
    name = add_script(model, [{"tool_calls": [{"name": "lookup", "arguments": {"term": "x"}}]}, {"content": "done"}])
    registry = ToolRegistry.from_modules(["agent_tools"])
    try:
        async with build_worker(client, settings, registry, ModelEndpoint(base_url=model.base_url, api_key="k")):
            handle = await start_agent(client, settings, "slow store", model=name,
                                       llm={"heartbeat_s": HEARTBEAT_S, "max_attempts": 3})
            result = await asyncio.wait_for(handle.result(), 120)
    finally:
        await proxy.stop()
    assert proxy.delayed >= 2  # both model calls stored their segment through the slow proxy
    assert result.status.state == "completed" and result.final_answer == "done", result.status
    timeouts = [
        e async for e in handle.fetch_history_events()
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_TIMED_OUT
    ]
    assert not timeouts, f"{len(timeouts)} activity attempt(s) timed out while the store was slow"
