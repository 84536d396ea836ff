"""Issue 47, point 1: a step's checkpoint rides on the next model call.

A step used to cost three activities (the model call, the tool call, the mirror
that wrote its checkpoint). Now the step's record is carried by the next model
call, which writes it beside its own work, and the mirror activity runs only
where nothing else will run soon (here: the run's end). These tests count the
activities in a real run's history, and kill a worker right after a model call
wrote the previous step's checkpoint and before the call completed: the retried
call writes it again (a no-op) and the run's checkpoints are what history rebuilds.
"""

from __future__ import annotations

import asyncio
from collections import Counter

import uuid

import boto3
from temporalio.api.enums.v1 import EventType, PendingActivityState

from checkpoint_bridge.checkpoints.store import open_checkpoint_store
from checkpoint_bridge.projection.mirror import mirror_run
from fault_helpers import (
    SlowStepWrites,
    add_script,
    assert_chain,
    assert_well_formed,
    pending_activities,
    wait_for_event,
    wait_until,
)
from helpers import outputs_of, read_events, start_agent
from workflows.vocabulary.ids import checkpoint_id
from workflows.vocabulary.wire import CALL_LLM, MIRROR_STEP, MIRROR_STEPS, RUN_TOOL

LOOKUPS = [{"tool_calls": [{"name": "lookup", "arguments": {"term": t}}]} for t in ("alpha", "beta", "gamma", "delta")]
SCRIPT = [*LOOKUPS, {"content": "four terms looked up"}]
MIRRORS = {MIRROR_STEP, MIRROR_STEPS}


async def _scheduled(handle) -> list[str]:
    return [e.activity_task_scheduled_event_attributes.activity_type.name
            async for e in handle.fetch_history_events()
            if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED]


async def _same_as_history(client, settings, handle, tmp_path) -> None:
    """The store holds byte for byte what a rebuild from history writes (`rewind mirror`)."""
    async with open_checkpoint_store(settings.store_url) as store:
        stored = await store.raw_objects(handle.id)
    async with open_checkpoint_store(f"file://{tmp_path / 'rebuilt'}") as rebuilt:
        report = await mirror_run(client, rebuilt, handle.id, outputs=outputs_of(settings))
        assert report.checkpoints == len(SCRIPT) + 1, report
        assert await rebuilt.raw_objects(handle.id) == stored


async def test_a_step_costs_two_activities(client, settings, model, worker, tmp_path):
    handle = await start_agent(client, settings, "look up four terms", model=add_script(model, SCRIPT))
    result = await asyncio.wait_for(handle.result(), 60)
    assert result.status.state == "completed", result.status
    assert result.status.mirror_pending == 0 and result.status.mirror_error is None, result.status

    scheduled = await _scheduled(handle)
    counts = Counter(scheduled)
    assert counts[CALL_LLM] == len(SCRIPT) and counts[RUN_TOOL] == len(LOOKUPS), counts
    # Between the first model call and the last, only model and tool calls: every step's
    # checkpoint was written by the model call after it. The run's last step (its answer)
    # has no model call after it: one mirror activity at the end writes it.
    calls = [i for i, name in enumerate(scheduled) if name == CALL_LLM]
    assert not MIRRORS & set(scheduled[calls[0]:calls[-1]]), scheduled
    assert [name for name in scheduled if name in MIRRORS] == [MIRROR_STEPS], scheduled

    async with open_checkpoint_store(settings.store_url) as store:
        checkpoints = await assert_chain(store, handle.id, len(SCRIPT))
    assert_well_formed(checkpoints[-1].messages)
    await _same_as_history(client, settings, handle, tmp_path)


async def test_worker_killed_after_the_model_call_wrote_the_previous_checkpoint(
    client, settings, model, events_file, spawn_worker, tmp_path
):
    script = [{"tool_calls": [{"name": "slow", "arguments": {"label": "work", "seconds": 1}}]}, *SCRIPT[1:]]
    first = spawn_worker()
    handle = await start_agent(client, settings, "look up terms, slowly", model=add_script(model, script))
    await wait_for_event(events_file, "slow_start", run=handle.id)
    model.inject_fault(200, delay_s=20)  # the model call of step 2 hangs: the worker dies inside it

    async def step_1_stored_while_its_carrier_runs() -> bool:
        async with open_checkpoint_store(settings.store_url) as store:
            if 1 not in await store.existing_steps(handle.id, "main"):
                return False
        started = PendingActivityState.PENDING_ACTIVITY_STATE_STARTED
        return any(a == CALL_LLM and s == started for a, s, _ in await pending_activities(handle))

    await wait_until(step_1_stored_while_its_carrier_runs, "the checkpoint of step 1, written by step 2's model call", 60)
    assert not MIRRORS & set(await _scheduled(handle)), "a mirror activity wrote step 1"
    first.kill()
    spawn_worker()
    result = await asyncio.wait_for(handle.result(), 120)
    assert result.status.state == "completed", result.status
    assert result.status.mirror_pending == 0 and result.status.mirror_error is None, result.status

    # The carrying call was retried on the standby worker and wrote step 1 again: the same bytes.
    retried = [e.activity_task_started_event_attributes.attempt async for e in handle.fetch_history_events()
               if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED
               and e.activity_task_started_event_attributes.attempt > 1]
    assert retried, "the killed model call was never retried"
    async with open_checkpoint_store(settings.store_url) as store:
        checkpoints = await assert_chain(store, handle.id, len(script))
        assert checkpoints[1].checkpoint_id == checkpoint_id(handle.id, "main", 1)
    assert_well_formed(checkpoints[-1].messages)
    await _same_as_history(client, settings, handle, tmp_path)


async def test_a_pipelines_steps_ride_on_its_model_calls(client, settings, model, tmp_path):
    """A pipeline's step records ride on its next model call as the loop's do, or on its next
    read-only tool call; before the code waits for anything else (a timer here; an approval, a
    child run) the held ones go to the mirror activity. The store holds what history rebuilds."""
    from activities.model.llm import ModelEndpoint
    from activities.code.pipelines import PipelineRegistry
    from activities.tools.registry import ToolRegistry
    from rewind.client import pipeline_input, start_run
    from worker import build_worker

    rounds = 4
    name = add_script(model, {"draft": [{"content": "better"}], "final": [{"content": "done"}]})
    inp = pipeline_input(settings, "drafts", {"rounds": rounds}, model=name)
    async with build_worker(client, settings, ToolRegistry.from_modules(["agent_tools"]),
                            ModelEndpoint(base_url=model.base_url, api_key="test-key"),
                            pipelines=PipelineRegistry.from_modules(["agent_pipelines"])):
        handle = await start_run(client, settings, inp)
        result = await asyncio.wait_for(handle.result(), 60)
    assert result.status.state == "completed" and result.status.final_answer == "done", result.status
    assert result.status.mirror_pending == 0 and result.status.mirror_error is None, result.status

    scheduled = await _scheduled(handle)
    calls = [i for i, name in enumerate(scheduled) if name == CALL_LLM]
    assert len(calls) == rounds + 1, scheduled
    # The drafts carried each other's steps, and the lookup (a read-only tool) the last draft's:
    # no mirror activity up to it. The lookup's step went to the mirror before the sleep, and
    # the final call's and the result's at the end.
    tool = scheduled.index(RUN_TOOL)
    assert not MIRRORS & set(scheduled[:tool + 1]), scheduled
    assert 1 <= sum(1 for name in scheduled if name in MIRRORS) <= 3, scheduled

    steps = rounds + 3  # the start, the drafts, the lookup, the final call, the result
    async with open_checkpoint_store(settings.store_url) as store:
        assert sorted(await store.existing_steps(handle.id, "main")) == list(range(steps + 1))
        stored = await store.raw_objects(handle.id)
    async with open_checkpoint_store(f"file://{tmp_path / 'rebuilt'}") as rebuilt:
        await mirror_run(client, rebuilt, handle.id, outputs=outputs_of(settings))
        assert await rebuilt.raw_objects(handle.id) == stored


async def test_a_tool_call_beats_while_a_slow_store_takes_the_step_it_carries(
    client, settings, model, events_file, moto_endpoint, tmp_path,
):
    """A read-only tool call of a pipeline carries the model call's step and writes it beside the
    tool. When the store is slower than the tool's heartbeat timeout, the activity keeps beating
    after the tool has ended, until the write is done: Temporal must not time the attempt out
    and run the finished tool again."""
    from activities.model.llm import ModelEndpoint
    from activities.code.pipelines import PipelineRegistry
    from activities.tools.registry import ToolRegistry
    from rewind.client import pipeline_input, start_run
    from worker import build_worker

    bucket = f"carried-{uuid.uuid4().hex[:8]}"
    boto3.client("s3", endpoint_url=moto_endpoint, region_name="us-east-1").create_bucket(Bucket=bucket)
    # Step writes held 3.5 s: longer than `slow`'s 2 s heartbeat timeout, shorter than the 5 s
    # a call waits for the records it carries.
    proxy = SlowStepWrites(moto_endpoint, 3.5)
    await proxy.start()
    try:
        settings.s3_endpoint_url = proxy.url
        settings.store_url = f"s3://{bucket}/runs-slow"
        name = add_script(model, {"draft": [{"content": "a draft"}], "final": [{"content": "final"}]})
        inp = pipeline_input(settings, "draft_then_slow", {"label": "once"}, model=name)
        async with build_worker(client, settings, ToolRegistry.from_modules(["agent_tools"]),
                                ModelEndpoint(base_url=model.base_url, api_key="test-key"),
                                pipelines=PipelineRegistry.from_modules(["agent_pipelines"])):
            handle = await start_run(client, settings, inp)
            result = await asyncio.wait_for(handle.result(), 120)
    finally:
        await proxy.stop()
    assert result.status.state == "completed" and result.status.final_answer == "final", result.status
    slow = [e for e in read_events(events_file) if e.get("kind") == "slow_start" and e.get("label") == "once"]
    assert len(slow) == 1, slow  # the tool ran once: its attempt was not timed out while the write went on
    assert slow[0]["attempt"] == 1, slow
