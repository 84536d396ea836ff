"""Long runs against the real dev server: storage and history stay linear."""

from __future__ import annotations

import json
import uuid

import pytest


from checkpoint_bridge.checkpoints.store import open_checkpoint_store
from helpers import outputs_of, start_agent


def _long_script(model, steps: int, size: int) -> str:
    name = f"long-{uuid.uuid4().hex[:8]}"
    turns = [{"tool_calls": [{"name": "blob", "arguments": {"index": i, "size": size}}]} for i in range(steps - 1)]
    turns.append({"content": "finished"})
    model.add_script(name, turns)
    return f"script:{name}"


async def _history_bytes(handle) -> tuple[int, int]:
    total = largest = 0
    async for event in handle.fetch_history_events():
        size = event.ByteSize()
        total += size
        largest = max(largest, size)
    return total, largest


def _mirror_lag_ms(settings, run_id: str, checkpoints) -> list[float]:
    """Per step: from the step's end (workflow time) to its object on disk (file store)."""
    from pathlib import Path

    root = Path(settings.store_url[len("file://"):])
    lags = []
    for cp in checkpoints:
        path = root / "runs" / run_id / "branches" / "main" / "steps" / f"{cp.step_index:08d}.json"
        lags.append((path.stat().st_mtime - cp.created_at.timestamp()) * 1000)
    return sorted(lags)


@pytest.mark.parametrize("steps", [50, 200])
async def test_long_run_with_2kb_tool_results_stores_linearly(worker, client, settings, model, events_file, steps):
    handle = await start_agent(client, settings, "long run", model=_long_script(model, steps, 2048),
                               limits={"max_steps": steps + 5})
    result = await handle.result()
    assert result.status.state == "completed" and result.status.step == steps

    async with open_checkpoint_store(settings.store_url) as store:
        assert await store.existing_steps(handle.id, "main") == set(range(steps + 1))
        final = await store.load_latest(handle.id)
        lags = _mirror_lag_ms(settings, handle.id, [await store.load(s.checkpoint_id) for s in await store.list_checkpoints(handle.id)])
        message_bytes = len(json.dumps(final.messages).encode())
        stored = sum(map(len, (await store.raw_objects(handle.id)).values()))
    history_total, largest_event = await _history_bytes(handle)
    print(f"\n{steps} steps: messages {message_bytes} B, store {stored} B ({stored / message_bytes:.2f}x, "
          f"{stored // (steps + 1)} B/step), history {history_total} B ({history_total // steps} B/step), "
          f"largest event {largest_event} B; mirror lag p50 {lags[len(lags) // 2]:.0f} ms, max {lags[-1]:.0f} ms")
    assert stored <= 3 * message_bytes
    # History holds each message a bounded number of times (the tool result
    # in the tool's result, the next model call and the step record), not the
    # whole conversation per step, which would be ~100x the messages here.
    assert history_total <= 8 * message_bytes
    assert largest_event < 64 * 1024


async def test_continue_as_new_keeps_one_logical_run(worker, client, settings, model, events_file, tmp_path):
    from checkpoint_bridge.projection.mirror import mirror_run
    from helpers import read_events

    steps = 30
    turns = []
    for i in range(steps - 1):
        term = "same" if i in (1, 24) else f"t{i}"
        turns.append({"tool_calls": [{"name": "lookup", "arguments": {"term": term}},
                                     {"name": "blob", "arguments": {"index": i, "size": 1500}}]})
    turns.append({"content": "finished"})
    name = f"can-{uuid.uuid4().hex[:8]}"
    model.add_script(name, turns)
    handle = await start_agent(client, settings, "continue as new", model=f"script:{name}",
                               history_limit_bytes=40_000, limits={"max_steps": 100})
    result = await handle.result()
    assert result.status.state == "completed" and result.status.step == steps
    assert result.status.continued_as_new >= 3
    # The last run of the chain still carries what Temporal's UI finds the run by.
    from checkpoint_bridge.temporal.visibility import RUN_ID_KEY, STATE_KEY

    described = await handle.describe()
    assert described.typed_search_attributes.get(RUN_ID_KEY) == handle.id
    assert described.typed_search_attributes.get(STATE_KEY) == "completed"
    assert (await described.memo())["run_id"] == handle.id
    # The read-only cache crossed continue-as-new: "same" ran once.
    assert [e["term"] for e in read_events(events_file) if e["kind"] == "lookup"].count("same") == 1
    assert result.status.tool_cache_hits == 1
    async with open_checkpoint_store(settings.store_url) as store:
        summaries = await store.list_checkpoints(handle.id)
        assert [s.step_index for s in summaries] == list(range(steps + 1))
        assert all(s.parent_id == (summaries[i - 1].checkpoint_id if i else None) for i, s in enumerate(summaries))
        final = await store.load_latest(handle.id)
        assert sum(1 for m in final.messages if m["role"] == "assistant") == steps
        live = await store.raw_objects(handle.id)
    # Rebuilt from the whole continue-as-new chain of histories: the same bytes.
    async with open_checkpoint_store(f"file://{tmp_path / 'rebuilt'}") as rebuilt:
        report = await mirror_run(client, rebuilt, handle.id, outputs=outputs_of(settings))
        assert report.checkpoints == steps + 1
        assert await rebuilt.raw_objects(handle.id) == live


async def test_compressed_context_keeps_pairing_and_full_history(worker, client, settings, model, events_file):
    from activities.model.context_window import check_pairing, rebuild_view
    from activities.model.wire_format import outgoing_messages

    steps = 12
    name = _long_script(model, steps, 2000)
    handle = await start_agent(client, settings, "tight context", model=name,
                               llm={"context_tokens": 2500, "keep_last": 4})
    result = await handle.result()
    # Every request passed the scripted server's pairing check (it answers 400 otherwise).
    assert result.status.state == "completed" and result.status.step == steps
    async with open_checkpoint_store(settings.store_url) as store:
        cps = [await store.load(s.checkpoint_id) for s in await store.list_checkpoints(handle.id)]
    final = cps[-1]
    tool_results = [m["content"] for m in final.messages if m["role"] == "tool"]
    assert len(tool_results) == steps - 1 and all(len(c) == 2000 for c in tool_results)  # full history kept
    compressed = [cp for cp in cps if cp.model_view]
    assert compressed, "the context budget never triggered compression"
    requests = [r for r in model.requests() if r["status"] == 200 and r["model"] == name]
    for cp in compressed:
        view = cp.model_view
        assert view["tokens_after"] <= view["budget_tokens"] < view["tokens_before"]
        # What the model saw at that step is recorded exactly: rebuild it from the history.
        seen = requests[cp.step_index - 1]["messages"]
        before = cp.messages[: _request_length(cp)]
        assert check_pairing(seen) == []
        sent = outgoing_messages(rebuild_view(before, view["actions"]))  # the wire shape: activities/model/wire_format.py
        assert [m.get("content") for m in sent] == [m.get("content") for m in seen]


def _request_length(cp) -> int:
    """Messages sent to the model at this checkpoint's step: all but its reply and tool results."""
    last_assistant = max(i for i, m in enumerate(cp.messages) if m["role"] == "assistant")
    return last_assistant


async def test_300_steps_with_4kb_tool_outputs(worker, client, settings, model, events_file):
    steps = 300
    handle = await start_agent(client, settings, "three hundred", model=_long_script(model, steps, 4096),
                               limits={"max_steps": steps + 5})
    result = await handle.result()
    assert result.status.state == "completed" and result.status.step == steps
    histories = []
    run_id = None
    while True:
        h = client.get_workflow_handle(handle.id, run_id=run_id)
        events = [e async for e in h.fetch_history_events()]
        histories.append(events)
        run_id = events[0].workflow_execution_started_event_attributes.continued_execution_run_id or None
        if not run_id:
            break
    sizes = [sum(e.ByteSize() for e in events) for events in histories]
    largest_event = max(e.ByteSize() for events in histories for e in events)
    async with open_checkpoint_store(settings.store_url) as store:
        assert await store.existing_steps(handle.id, "main") == set(range(steps + 1))
        stored = sum(map(len, (await store.raw_objects(handle.id)).values()))
        final = await store.load_latest(handle.id)
    message_bytes = len(json.dumps(final.messages).encode())
    print(f"\n300 steps x 4 KB: {len(histories)} workflow runs, history {sum(sizes)} B in all "
          f"({sum(sizes) // steps} B/step), largest history {max(sizes)} B, largest event {largest_event} B; "
          f"store {stored} B ({stored // (steps + 1)} B/step, {stored / message_bytes:.2f}x the messages)")
    assert max(sizes) < 10 * 1024 * 1024
    assert largest_event < 256 * 1024
    assert stored <= 3 * message_bytes
