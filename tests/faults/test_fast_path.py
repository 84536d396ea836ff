"""The fast path: model calls and read-only tools as local activities.

What it keeps: the same conversation, checkpoints and tool semantics as a
regular run. What it gives up, proven here with a SIGKILL: calls whose
results were not yet recorded in history (they are recorded when the
workflow task completes, at least every `fast_record_s`) run again on the
next worker; a call recorded before the crash never does.
"""

from __future__ import annotations

import asyncio
import time
from datetime import timedelta

from temporalio.api.enums.v1 import EventType

from checkpoint_bridge.checkpoints.store import open_checkpoint_store
from fault_helpers import add_script, assert_chain, assert_same_transcript, assert_well_formed, wait_until
from helpers import final_transcript, read_events, start_agent, turns_seen

SCRIPT = [
    {"tool_calls": [{"name": "lookup", "arguments": {"term": "alpha"}}, {"name": "quick", "arguments": {"term": "a"}}]},
    {"tool_calls": [{"name": "lookup", "arguments": {"term": "beta"}}]},
    {"content": "looked both up"},
]


def _scheduled(events) -> list[str]:
    return [e.activity_task_scheduled_event_attributes.activity_type.name for e in events
            if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED]


def _is_local_activity(event) -> bool:
    # Patches are markers too; local activity results are the SDK's "core_local_activity" ones.
    return (event.event_type == EventType.EVENT_TYPE_MARKER_RECORDED
            and "local_activity" in event.marker_recorded_event_attributes.marker_name)


def _markers(events) -> int:
    return sum(1 for e in events if _is_local_activity(e))


async def test_a_fast_run_is_the_same_run_without_round_trips(worker, client, settings, model, events_file):
    name = add_script(model, SCRIPT)
    regular = await start_agent(client, settings, "two lookups", model=name)
    assert (await asyncio.wait_for(regular.result(), 60)).status.state == "completed"
    fast = await start_agent(client, settings, "two lookups", model=name, fast=True, fast_record_s=1.0)
    result = await asyncio.wait_for(fast.result(), 60)
    assert result.status.state == "completed" and result.final_answer == "looked both up"

    # The same conversation and checkpoints as the regular run.
    assert_same_transcript(await final_transcript(settings, fast.id), await final_transcript(settings, regular.id))
    async with open_checkpoint_store(settings.store_url) as store:
        await assert_chain(store, fast.id, 3)
    # No model call and no read-only tool went through the server; `quick` (fast=True)
    # was local in the regular run too, `lookup` was not.
    regular_events = [e async for e in regular.fetch_history_events()]
    fast_events = [e async for e in fast.fetch_history_events()]
    assert _scheduled(regular_events).count("call_llm") == 3 and _scheduled(regular_events).count("run_tool") == 2
    assert "call_llm" not in _scheduled(fast_events) and "run_tool" not in _scheduled(fast_events)
    assert _markers(fast_events) == 6 and _markers(regular_events) == 1  # 3 model calls + 3 tools; `quick`
    assert set(_scheduled(fast_events)) <= {"describe_tools", "mirror_steps"}
    # Recorded at least every fast_record_s: the workflow task timeout says so.
    desc = await fast.describe()
    assert desc.raw_description.execution_config.default_workflow_task_timeout.ToTimedelta() == timedelta(seconds=1.25)
    lookups = [e["term"] for e in read_events(events_file) if e["kind"] == "lookup"]
    assert sorted(lookups) == ["alpha", "alpha", "beta", "beta"]  # once per run


async def test_fast_calls_of_a_crashed_worker_rerun_only_when_unrecorded(client, settings, model, events_file, spawn_worker):
    steps = 12
    script = [{"tool_calls": [{"name": "lookup", "arguments": {"term": f"t{i}"}}]} for i in range(steps - 1)]
    name = add_script(model, [*script, {"content": "all looked up"}])
    model.inject_fault(200, count=3 * steps, delay_s=0.25)  # every model call takes 0.25 s
    task = "fast steps, then a crash"
    first = spawn_worker()
    handle = await start_agent(client, settings, task, model=name, fast=True, fast_record_s=2.5)

    async def recorded_and_done() -> tuple[int, int] | None:
        """(model calls recorded in history, model calls answered): once at least
        one step is recorded and two more answered since, not yet recorded."""
        events = [e async for e in handle.fetch_history_events()]
        recorded = _markers(events) // 2  # each step: one model call and one lookup
        done = len(turns_seen(model.requests(), task))
        return (recorded, done) if recorded >= 1 and done >= recorded + 2 else None

    recorded, done = await wait_until(recorded_and_done, "a recorded step and two unrecorded ones", 60, poll_s=0.01)
    first.kill()
    killed_at = time.time()
    standby = spawn_worker()
    result = await asyncio.wait_for(handle.result(), 120)
    assert result.status.state == "completed" and result.status.step == steps

    transcript = await final_transcript(settings, handle.id)
    assert_well_formed(transcript)
    async with open_checkpoint_store(settings.store_url) as store:
        await assert_chain(store, handle.id, steps)
    events = [e async for e in handle.fetch_history_events()]
    recorded_before_kill = sum(
        1 for e in events if _is_local_activity(e) and e.event_time.ToDatetime().timestamp() < killed_at
    ) // 2
    asked: dict[int, int] = {}
    for turn in turns_seen(model.requests(), task):
        asked[turn] = asked.get(turn, 0) + 1
    # A model call recorded before the crash was never asked again...
    assert all(asked[t] == 1 for t in range(recorded_before_kill)), (recorded_before_kill, asked)
    # ...and one answered but not recorded was: that is what the fast path gives up.
    assert done > recorded_before_kill and any(asked[t] == 2 for t in range(recorded_before_kill, done)), \
        (recorded_before_kill, done, asked)
    # Every turn was answered, and none more than twice (the crash, once).
    assert sorted(asked) == list(range(steps)) and max(asked.values()) <= 2
    print(f"\n[fast path crash] {recorded_before_kill} steps recorded before the SIGKILL, {done} answered; "
          f"asked again on the standby (pid {standby.process.pid}): "
          f"{[t for t, n in sorted(asked.items()) if n > 1]}")
