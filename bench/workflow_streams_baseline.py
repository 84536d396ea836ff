"""The streaming benchmark's other side: one streamed model call on Temporal's own Workflow Streams.

    python -m bench.workflow_streams_baseline ADDRESS QUEUE MODEL_URL     (its worker)

`temporalio.contrib.workflow_streams` (experimental, in the temporalio SDK installed): a
workflow holds an offset-addressed log; an activity publishes to it with signals (batched:
`batch_interval`, 2 s by default, or at once with `force_flush`), a subscriber long-polls it
with updates (`poll_cooldown`, 100 ms by default, between polls that find nothing new).
The smallest workflow that streams a model call through it: `WorkflowStream()` in its init,
one activity that waits at the benchmark's gate (a file: the subscriber is attached first, as
Rewind's watchers are), then asks the scripted model to stream (the openai client, as Rewind's
model activity does) and publishes each piece of text on the topic "deltas" as it comes.
`mode`: "off" publishes nothing (the same call unstreamed to its readers: the baseline of its
history), "default" with the library's defaults, "flush" with force_flush on every delta (the
lowest latency it offers). Plain temporalio, no sandbox, as bench.bare_worker.
"""

from __future__ import annotations

import asyncio
import os
import sys
from dataclasses import dataclass
from datetime import timedelta

from temporalio import activity, workflow
from temporalio.client import Client
from temporalio.common import RetryPolicy
from temporalio.exceptions import ApplicationError
from temporalio.contrib.workflow_streams import WorkflowStream, WorkflowStreamClient
from temporalio.worker import UnsandboxedWorkflowRunner, Worker

TOPIC = "deltas"
MODES = ("off", "default", "flush")
CLOSE_S = 30.0


@dataclass
class StreamedCall:
    model: str
    gate: str  # a file: the call starts once it exists
    mode: str = "default"


class CallActivities:
    def __init__(self, model_url: str) -> None:
        import openai

        self._openai = openai.AsyncOpenAI(base_url=model_url, api_key="x", max_retries=0)

    @activity.defn(name="ws_streamed_call")
    async def streamed_call(self, call: StreamedCall) -> str:
        while not os.path.exists(call.gate):
            await asyncio.sleep(0.02)
        text: list[str] = []
        stream = await self._openai.chat.completions.create(
            model=call.model, messages=[{"role": "user", "content": "benchmark"}], stream=True,
            stream_options={"include_usage": True})
        if call.mode == "off":
            async for chunk in stream:
                text += [c.delta.content for c in chunk.choices if c.delta.content]
            return "".join(text)
        publisher = WorkflowStreamClient.from_within_activity()
        deltas = publisher.topic(TOPIC, type=dict)
        await publisher.__aenter__()  # `async with publisher`, its exit bounded below
        try:
            async for chunk in stream:
                for choice in chunk.choices:
                    if choice.delta.content:
                        text.append(choice.delta.content)
                        deltas.publish({"text": choice.delta.content, "index": len(text)},
                                       force_flush=call.mode == "flush")
        finally:
            # The exit flushes what is left and cancels the background flusher. On Python 3.11 a
            # cancel that meets the wake-up force_flush has just set is swallowed by the
            # flusher's asyncio.wait_for, and the exit then waits for it for ever: 3 of the first 4
            # force_flush runs hung here. Flushed first (then 1 in about 40 did), and bounded: a
            # hang is a failed run the benchmark counts, not a 10-minute timeout.
            try:
                await asyncio.wait_for(self._close(publisher), CLOSE_S)
            except asyncio.TimeoutError:
                raise ApplicationError(f"WorkflowStreamClient did not close within {CLOSE_S:g} s (its flusher "
                                       "swallowed the cancel)", type="PublisherHung", non_retryable=True) from None
        return "".join(text)

    @staticmethod
    async def _close(publisher: WorkflowStreamClient) -> None:
        await publisher.flush()
        await publisher.__aexit__(None, None, None)


@workflow.defn(name="WorkflowStreamsCall")
class StreamedCallWorkflow:
    @workflow.init
    def __init__(self, call: StreamedCall) -> None:
        self.stream = WorkflowStream()

    @workflow.run
    async def run(self, call: StreamedCall) -> str:
        return await workflow.execute_activity(
            "ws_streamed_call", call, start_to_close_timeout=timedelta(minutes=2),
            retry_policy=RetryPolicy(maximum_attempts=1), result_type=str)


async def main(address: str, queue: str, model_url: str) -> None:
    client = await Client.connect(address)
    acts = CallActivities(model_url)
    worker = Worker(client, task_queue=queue, workflows=[StreamedCallWorkflow], activities=[acts.streamed_call],
                    workflow_runner=UnsandboxedWorkflowRunner())
    await worker.run()


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:4]))
