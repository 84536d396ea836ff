"""Oversized tool outputs, lone surrogates, and a zombie attempt of a side-effecting tool."""

from __future__ import annotations

import asyncio

from temporalio.api.enums.v1 import EventType

from checkpoint_bridge.projection.projector import chain_events
from checkpoint_bridge.checkpoints.store import open_checkpoint_store
from helpers import read_events, scripted, start_agent



async def test_3mb_output_is_offloaded_and_60mb_output_is_refused(worker, client, settings, model, events_file):
    name = scripted(model, [
        {"tool_calls": [{"name": "big", "arguments": {"megabytes": 3}}]},
        {"tool_calls": [{"name": "big", "arguments": {"megabytes": 60}}]},
        {"content": "survived"},
    ])
    handle = await start_agent(client, settings, "oversized", model=name, llm={"context_tokens": 4000})
    result = await asyncio.wait_for(handle.result(), 180)
    assert result.status.state == "completed" and result.final_answer == "survived"
    largest = max(e.ByteSize() for e in await chain_events(client, handle.id))
    assert largest < 256 * 1024  # the 3 MB result is in history only by reference
    async with open_checkpoint_store(settings.store_url) as store:
        final = await store.load_latest(handle.id)
    tool_messages = [m["content"] for m in final.messages if m["role"] == "tool"]
    assert len(tool_messages[0]) == 3_000_000  # kept whole in the checkpoint
    assert "60.0 MB, over the 16.8 MB limit" in tool_messages[1]  # refused with a clear message
    # The model never got 3 MB in one request: the context was compressed for it.
    sizes = [sum(len(str(m.get("content") or "")) for m in r["messages"]) for r in model.requests()]
    assert max(sizes) < 100_000


async def test_lone_surrogates_are_scrubbed_not_wedging_the_mirror(worker, client, settings, model, events_file):
    name = scripted(model, [{"tool_calls": [{"name": "odd_text", "arguments": {}}]}, {"content": None, "echo_tool_results": True}])
    handle = await start_agent(client, settings, "surrogates \ud800 in the task", model=name)
    result = await asyncio.wait_for(handle.result(), 60)
    assert result.status.state == "completed" and result.status.mirror_error is None
    async with open_checkpoint_store(settings.store_url) as store:
        final = await store.load_latest(handle.id)
    assert final.messages[1]["content"] == "surrogates \ufffd in the task"
    assert "before \ufffd after" in final.messages[-1]["content"]


async def test_zombie_attempt_does_not_duplicate_the_side_effect(worker, client, settings, model, events_file):
    name = scripted(model, [{"tool_calls": [{"name": "charge_card", "arguments": {"cents": 500}}]},
                           {"content": None, "echo_tool_results": True}])
    handle = await start_agent(client, settings, "zombie", model=name)
    result = await asyncio.wait_for(handle.result(), 60)
    await asyncio.sleep(4.5)  # let the zombie's remote effect land
    events = read_events(events_file)
    attempts = [e for e in events if e["kind"] == "charge_attempt"]
    effects = [e for e in events if e["kind"] == "remote_effect"]
    assert [a["attempt"] for a in attempts] == [1, 2]
    assert len({a["key"] for a in attempts}) == 1  # every attempt carried the same key
    assert len(effects) == 2 and [e["applied"] for e in sorted(effects, key=lambda e: e["at"])] == [True, False]
    # The late result of the timed-out first attempt was discarded: the run saw attempt 2's.
    assert "charged 500 (attempt 2)" in result.final_answer
    timeouts = [e async for e in handle.fetch_history_events()
                if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED
                and e.activity_task_started_event_attributes.attempt == 2]
    assert timeouts and timeouts[0].activity_task_started_event_attributes.last_failure.timeout_failure_info
