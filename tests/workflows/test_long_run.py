"""Long runs against the real dev server: storage and history stay linear."""

from __future__ import annotations

import json
import uuid

import pytest

from temporalio.api.enums.v1 import EventType

from checkpoint_bridge.store import open_checkpoint_store
from helpers import start_agent


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
        stored = await store.stored_bytes(handle.id)
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
