"""Worker crashes (SIGKILL) in the middle of runs: nothing completed runs twice."""

from __future__ import annotations

import asyncio
import time
import uuid

from temporalio.api.enums.v1 import EventType, TimeoutType

from helpers import final_transcript, read_events, scripted, start_agent, turns_seen


async def _wait_for_event(path, kind: str, timeout_s: float = 60.0) -> dict:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for e in read_events(path):
            if e["kind"] == kind:
                return e
        await asyncio.sleep(0.05)
    raise AssertionError(f"no {kind!r} event within {timeout_s}s")



async def test_sigkill_mid_run_resumes_on_another_worker(client, settings, model, events_file, spawn_worker):
    model_name = scripted(model, [
        {"tool_calls": [{"name": "lookup", "arguments": {"term": "alpha"}}]},
        {"tool_calls": [{"name": "slow", "arguments": {"label": "long", "seconds": 4}}]},
        {"content": None, "echo_tool_results": True},
    ])
    first = spawn_worker()
    task = f"crash test {uuid.uuid4().hex[:6]}"
    handle = await start_agent(client, settings, task, model=model_name)
    await _wait_for_event(events_file, "slow_start")
    first.kill()
    killed_at = time.time()
    spawn_worker()
    result = await asyncio.wait_for(handle.result(), 120)

    assert result.status.state == "completed"
    assert "long done" in result.final_answer
    events = read_events(events_file)
    # The tool call completed before the crash is not executed again...
    assert [e["kind"] for e in events].count("lookup") == 1
    # ...nor is any completed model call: one request per turn.
    assert sorted(turns_seen(model.requests(), task)) == [0, 1, 2]
    # The interrupted call was retried (attempt 2) on the new worker.
    slow_attempts = [e["attempt"] for e in events if e["kind"] == "slow_start"]
    assert slow_attempts == [1, 2]
    resumed_at = [e["at"] for e in events if e["kind"] == "slow_start"][1]
    print(f"\nresume after SIGKILL: {resumed_at - killed_at:.2f}s until the interrupted tool ran again")
    # A heartbeat timeout, not the 120 s start-to-close timeout, noticed the dead worker.
    started = [
        e.activity_task_started_event_attributes
        async for e in handle.fetch_history_events()
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED
        and e.activity_task_started_event_attributes.attempt == 2
    ]
    assert len(started) == 1
    assert started[0].last_failure.timeout_failure_info.timeout_type == TimeoutType.TIMEOUT_TYPE_HEARTBEAT
    transcript = await final_transcript(settings, handle.id)
    ids = [m["tool_call_id"] for m in transcript if m["role"] == "tool"]
    assert len(ids) == len(set(ids)) == 2


async def test_sigkill_after_side_effect_records_it_once(client, settings, model, events_file, spawn_worker, tmp_path):
    model_name = scripted(model, [
        {"tool_calls": [{"name": "send_email", "arguments": {"to": "ceo@example.com", "body": "report"}}]},
        {"content": None, "echo_tool_results": True},
    ])
    crash = {"REWIND_TEST_CRASH_AFTER_EFFECT": "1"}
    workers = [spawn_worker(crash), spawn_worker(crash)]
    handle = await start_agent(client, settings, "side effect crash", model=model_name)
    result = await asyncio.wait_for(handle.result(), 120)

    assert result.status.state == "completed"
    assert "sent to ceo@example.com" in result.final_answer
    events = read_events(events_file)
    attempts = [e for e in events if e["kind"] == "send_email_attempt"]
    effects = [e for e in events if e["kind"] == "send_email_effect"]
    assert [a["attempt"] for a in attempts] == [1, 2]
    assert attempts[0]["pid"] != attempts[1]["pid"]  # the first worker died in the tool
    assert len({a["key"] for a in attempts}) == 1 and attempts[0]["key"].startswith("idem-")
    assert len(effects) == 1
    assert len(list((tmp_path / "test-outbox").glob("*.eml"))) == 1
    assert sum(1 for w in workers if w.process.poll() is not None) == 1
    # The checkpoint and the ledger say the call took a retry.
    from checkpoint_bridge.checkpoints.store import open_checkpoint_store

    assert result.status.ledger.tool_retries == 1 and result.status.ledger.model_retries == 0
    async with open_checkpoint_store(settings.store_url) as store:
        (record,) = (await store.load(f"{handle.id}:main:1")).tool_call_cache
    assert record.tool_name == "send_email" and record.attempts == 2


async def test_a_killed_workers_run_goes_on_without_waiting_for_its_sticky_queue(
        client, settings, model, events_file, spawn_worker, tmp_path):
    """The workflow task after the retried call goes to a live worker at once: with a
    60 s sticky timeout, waiting for the dead worker's queue would show up in history
    as a timed-out workflow task (activities/liveness/takeover.py)."""
    gates = tmp_path / "gates"
    gates.mkdir()
    model_name = scripted(model, [
        {"tool_calls": [{"name": "gate", "arguments": {"name": "open"}}]},
        {"tool_calls": [{"name": "lookup", "arguments": {"term": "after"}}]},
        {"content": "done"},
    ])
    env = {"REWIND_STICKY_TIMEOUT_S": "60", "REWIND_TEST_GATE_DIR": str(gates)}
    first = spawn_worker(env)
    handle = await start_agent(client, settings, f"sticky takeover {uuid.uuid4().hex[:6]}", model=model_name)
    await _wait_for_event(events_file, "gate_wait")
    spawn_worker(env)
    await asyncio.sleep(1.0)  # the standby polls the shared queue
    first.kill()
    killed_at = time.time()
    (gates / "open").touch()  # the retry on the standby returns at once
    result = await asyncio.wait_for(handle.result(), 120)

    assert result.status.state == "completed"
    waits = [e for e in read_events(events_file) if e["kind"] == "gate_wait"]
    assert [e["attempt"] for e in waits] == [1, 2] and waits[0]["pid"] == first.pid != waits[1]["pid"]
    after = [e async for e in handle.fetch_history_events() if e.event_time.ToDatetime().timestamp() > killed_at]
    kinds = [e.event_type for e in after]
    retried = [e.activity_task_started_event_attributes for e in after
               if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED and e.activity_task_started_event_attributes.attempt == 2]
    assert retried and retried[0].last_failure.timeout_failure_info.timeout_type == TimeoutType.TIMEOUT_TYPE_HEARTBEAT
    timed_out = [e.workflow_task_timed_out_event_attributes.timeout_type for e in after
                 if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_TIMED_OUT]
    assert timed_out == [], f"a workflow task waited for the dead worker's sticky queue: {timed_out}"
    assert EventType.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED in kinds
